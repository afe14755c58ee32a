//! Hints that a watched path may have changed, for the loop's stat
//! watchers ([`Backend::watch_path`](crate::backend::Backend::watch_path)): the
//! loop then looks at the path at once instead of at its next polling
//! interval. A hint is only a hint: a spurious one costs a `stat`, a
//! missing one a polling interval.
//!
//! - **Linux, Android**: one inotify instance per backend (created with
//!   the first watched path, closed with the last), an internal fd of the
//!   backend's kernel set. Each path is watched itself and through the
//!   directory that holds it, with [`MASK`]: the file's own watch sees
//!   writes and attribute changes through any of its names; the
//!   directory's sees the name being created, deleted or renamed over (a
//!   save by rename), and the file's changes under that name.
//!   - A watch descriptor belongs to an inode, not to a path: several
//!     tokens may share one (two watchers of one file, the files of one
//!     directory). An event names the tokens of its descriptor; one
//!     reported by a directory for a name (a child) names only the tokens
//!     whose last component is that name, so that changes of siblings
//!     wake no one.
//!   - When the name is created, deleted or renamed (or the file's watch
//!     goes: `IN_IGNORED`, `IN_DELETE_SELF`, `IN_MOVE_SELF`), the token's
//!     watches are resolved again from its path after the batch of
//!     events: a re-created file gets a watch of its own again.
//!   - A path that does not exist is watched through its directory only.
//!     If that does not exist either (never made yet, or removed with the
//!     file), the nearest directory above it that exists is watched for
//!     the name of the next component down: when that entry is created
//!     or renamed into place, the token's watches are resolved again (one
//!     level further down, or the directory and its file at once) and the
//!     token is hinted at. So a directory removed and made again gets its
//!     watches back, however many levels went. (A path component that
//!     cannot be walked, such as `..`, ends the search: polling only.)
//!   - `IN_Q_OVERFLOW` (events were lost) hints at every token and
//!     resolves every watch again.
//!   - After `fork()` the instance is shared with the parent (its events
//!     would go to whichever process reads first): `reinit` closes the
//!     child's descriptor of it (never `inotify_rm_watch`, which would
//!     remove the parent's watches), makes a new one and adds every watch
//!     again, and hints at every token (what happened in between is lost).
//!   - Limits: `fs.inotify.max_user_instances` (often 128 per user) and
//!     `max_user_watches`. When the instance cannot be made or a watch
//!     added for lack of them, `watch` fails and the watcher polls.
//! - **Elsewhere**: no hints from here (`watch` refuses, and stat
//!   watchers poll); the kqueue backend has its own (`EVFILT_VNODE`, in
//!   `backends/kqueue/vnode.rs`).
#![allow(unsafe_code)]

pub(crate) use sys::PathHints;

cfg_if::cfg_if! {
    if #[cfg(any(target_os = "linux", target_os = "android"))] {
        use linux as sys;
    } else {
        use other as sys;
    }
}

/// What a watch asks inotify for: the path's content, attributes and the
/// entries of a directory (for the name), and the watched inode itself
/// going away or being renamed.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(crate) const MASK: u32 = libc::IN_MODIFY
    | libc::IN_ATTRIB
    | libc::IN_CLOSE_WRITE
    | libc::IN_MOVED_FROM
    | libc::IN_MOVED_TO
    | libc::IN_CREATE
    | libc::IN_DELETE
    | libc::IN_DELETE_SELF
    | libc::IN_MOVE_SELF;

/// The inotify system calls and the decoding of what a read returns
/// (shared with the emulated kqueue's `EVFILT_VNODE`).
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(crate) mod inotify {
    use std::ffi::CString;
    use std::io;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::os::unix::ffi::OsStrExt;
    use std::path::Path;

    /// The size of `struct inotify_event` without its name.
    const HEADER: usize = 16;

    /// A new instance, non-blocking and close-on-exec.
    pub(crate) fn init() -> io::Result<OwnedFd> {
        // SAFETY: plain system call with a flags argument.
        let fd = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just created and is owned by no one else.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    /// `inotify_add_watch(fd, path, mask)`: the watch descriptor (the
    /// existing one if the inode is watched already).
    pub(crate) fn add_watch(fd: &OwnedFd, path: &Path, mask: u32) -> io::Result<i32> {
        let Ok(c) = CString::new(path.as_os_str().as_bytes()) else {
            // A NUL inside: no file has that name.
            return Err(io::Error::from_raw_os_error(libc::ENOENT));
        };
        // SAFETY: `c` is a NUL-terminated string that outlives the call;
        // `fd` is an open inotify instance.
        let wd = unsafe { libc::inotify_add_watch(fd.as_raw_fd(), c.as_ptr(), mask) };
        if wd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(wd)
    }

    /// `inotify_rm_watch(fd, wd)`; a descriptor the kernel already dropped
    /// (`EINVAL`: its inode is gone) is fine.
    pub(crate) fn rm_watch(fd: &OwnedFd, wd: i32) {
        // SAFETY: plain system call with integer arguments on an open
        // instance.
        unsafe { libc::inotify_rm_watch(fd.as_raw_fd(), wd) };
    }

    /// One `read` into `buf`: how many bytes, 0 when nothing is queued.
    pub(crate) fn read(fd: &OwnedFd, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            // SAFETY: `buf` has room for `buf.len()` bytes; `fd` is open
            // and non-blocking.
            let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            if n >= 0 {
                return Ok(n as usize);
            }
            let err = io::Error::last_os_error();
            match err.kind() {
                io::ErrorKind::Interrupted => continue,
                io::ErrorKind::WouldBlock => return Ok(0),
                _ => return Err(err),
            }
        }
    }

    /// Room for many events per read (the kernel needs at least one
    /// header and `NAME_MAX + 1` bytes).
    pub(crate) const BUF: usize = 16 * 1024;

    /// One `struct inotify_event`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub(crate) struct Event<'a> {
        pub(crate) wd: i32,
        pub(crate) mask: u32,
        pub(crate) cookie: u32,
        /// The name of the child a directory's event is about, without
        /// its NUL padding; empty for an event about the watched inode.
        pub(crate) name: &'a [u8],
    }

    /// The events in what one read returned, in order. A truncated
    /// record at the end (the kernel never writes one) ends the list.
    pub(crate) fn events(buf: &[u8]) -> impl Iterator<Item = Event<'_>> {
        let mut rest = buf;
        std::iter::from_fn(move || {
            let header = rest.get(..HEADER)?;
            let word = |i: usize| {
                let mut w = [0u8; 4];
                w.copy_from_slice(&header[i..i + 4]);
                w
            };
            let len = u32::from_ne_bytes(word(12)) as usize;
            let padded = rest.get(HEADER..HEADER.checked_add(len)?)?;
            let name = match padded.iter().position(|&b| b == 0) {
                Some(end) => &padded[..end],
                None => padded,
            };
            let event = Event {
                wd: i32::from_ne_bytes(word(0)),
                mask: u32::from_ne_bytes(word(4)),
                cookie: u32::from_ne_bytes(word(8)),
                name,
            };
            rest = &rest[HEADER + len..];
            Some(event)
        })
    }

    /// Encodes an event as the kernel does (for tests).
    #[cfg(test)]
    pub(crate) fn encode(out: &mut Vec<u8>, wd: i32, mask: u32, cookie: u32, name: &[u8]) {
        let len = if name.is_empty() {
            0
        } else {
            (name.len() + 1).next_multiple_of(HEADER)
        };
        out.extend_from_slice(&wd.to_ne_bytes());
        out.extend_from_slice(&mask.to_ne_bytes());
        out.extend_from_slice(&cookie.to_ne_bytes());
        out.extend_from_slice(&(len as u32).to_ne_bytes());
        out.extend_from_slice(name);
        out.resize(out.len() + len - name.len(), 0);
    }
}

#[cfg(any(target_os = "linux", target_os = "android"))]
mod linux {
    use std::collections::HashMap;
    use std::io;
    use std::os::fd::{AsRawFd, OwnedFd, RawFd};
    use std::os::unix::ffi::OsStrExt;
    use std::path::{Path, PathBuf};

    use super::inotify::{self, Event};
    use super::MASK;
    use crate::backend::InternalFds;

    /// What one token watches.
    #[derive(Debug)]
    struct Watch {
        path: PathBuf,
        /// The directory holding the path, and the path's last component
        /// (none for `/` and paths ending in `..`).
        parent: Option<(PathBuf, Vec<u8>)>,
        /// The path's own watch descriptor (its inode's), if it exists.
        file: Option<i32>,
        /// The directory's, if it exists.
        dir: Option<i32>,
        /// While the directory does not exist: the nearest directory above
        /// it that does (its watch descriptor), for the entry named
        /// `above_name`, the next component down towards the path.
        above: Option<i32>,
        above_name: Vec<u8>,
    }

    /// The tokens one watch descriptor serves.
    #[derive(Debug, Default)]
    struct Users {
        /// Tokens whose path is this inode.
        as_file: Vec<u64>,
        /// Tokens whose path is in this directory.
        as_dir: Vec<u64>,
        /// Tokens whose missing directory is somewhere below this one.
        as_above: Vec<u64>,
    }

    impl Users {
        fn is_empty(&self) -> bool {
            self.as_file.is_empty() && self.as_dir.is_empty() && self.as_above.is_empty()
        }

        fn list(&mut self, role: Role) -> &mut Vec<u64> {
            match role {
                Role::File => &mut self.as_file,
                Role::Dir => &mut self.as_dir,
                Role::Above => &mut self.as_above,
            }
        }
    }

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Role {
        File,
        Dir,
        Above,
    }

    impl Watch {
        fn held(&mut self, role: Role) -> &mut Option<i32> {
            match role {
                Role::File => &mut self.file,
                Role::Dir => &mut self.dir,
                Role::Above => &mut self.above,
            }
        }
    }

    /// A backend's path hints through inotify (see the module header).
    #[derive(Debug)]
    pub(crate) struct PathHints {
        backend: &'static str,
        /// The instance, in the kernel set, while some path is watched.
        inotify: Option<OwnedFd>,
        watches: HashMap<u64, Watch>,
        wds: HashMap<i32, Users>,
        /// Tokens hinted at and not yet taken.
        hinted: Vec<u64>,
        /// Tokens whose watches to resolve again after a batch (reused).
        refresh: Vec<u64>,
        /// What reads land in (allocated with the instance).
        buf: Vec<u8>,
    }

    /// Whether a failure to watch a path means "nothing to watch there"
    /// (polling covers it) rather than a failure of the mechanism.
    fn absent(err: &io::Error) -> bool {
        matches!(
            err.raw_os_error(),
            Some(libc::ENOENT | libc::ENOTDIR | libc::EACCES | libc::ELOOP | libc::ENAMETOOLONG)
        )
    }

    /// The directory holding `path` and its last component.
    fn parent_of(path: &Path) -> Option<(PathBuf, Vec<u8>)> {
        let name = path.file_name()?;
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        };
        Some((dir, name.as_bytes().to_vec()))
    }

    impl PathHints {
        pub(crate) fn new(backend: &'static str) -> PathHints {
            PathHints {
                backend,
                inotify: None,
                watches: HashMap::new(),
                wds: HashMap::new(),
                hinted: Vec::new(),
                refresh: Vec::new(),
                buf: Vec::new(),
            }
        }

        /// The instance's fd, while some path is watched.
        pub(crate) fn fd(&self) -> Option<RawFd> {
            self.inotify.as_ref().map(AsRawFd::as_raw_fd)
        }

        /// Starts hinting at changes of `path` with `token` (replacing what
        /// `token` watched before).
        pub(crate) fn watch(
            &mut self,
            path: &Path,
            token: u64,
            set: &mut dyn InternalFds,
        ) -> io::Result<()> {
            if self.watches.contains_key(&token) {
                self.forget(token);
            }
            if self.inotify.is_none() {
                let made = inotify::init().and_then(|fd| {
                    set.add(fd.as_raw_fd())?;
                    Ok(fd)
                });
                let fd = made.map_err(|err| {
                    io::Error::new(
                        err.kind(),
                        format!(
                            "the {} backend cannot hint at changes of {}: no inotify \
                             instance ({err})",
                            self.backend,
                            path.display()
                        ),
                    )
                })?;
                self.inotify = Some(fd);
                self.buf.resize(inotify::BUF, 0);
            }
            self.watches.insert(
                token,
                Watch {
                    path: path.to_path_buf(),
                    parent: parent_of(path),
                    file: None,
                    dir: None,
                    above: None,
                    above_name: Vec::new(),
                },
            );
            if let Err(err) = self.resolve(token, true) {
                self.unwatch(token, set);
                return Err(io::Error::new(
                    err.kind(),
                    format!(
                        "the {} backend cannot hint at changes of {}: {err}",
                        self.backend,
                        path.display()
                    ),
                ));
            }
            Ok(())
        }

        /// Stops hinting for `token`; the instance goes with the last one.
        pub(crate) fn unwatch(&mut self, token: u64, set: &mut dyn InternalFds) {
            self.forget(token);
            self.hinted.retain(|&t| t != token);
            if self.watches.is_empty() {
                if let Some(fd) = self.inotify.take() {
                    set.remove(fd.as_raw_fd());
                }
                self.wds.clear();
                self.hinted.clear();
            }
        }

        /// Drops `token` and its share of its watch descriptors.
        fn forget(&mut self, token: u64) {
            if self.watches.contains_key(&token) {
                self.detach(token, Role::File);
                self.detach(token, Role::Dir);
                self.detach(token, Role::Above);
                self.watches.remove(&token);
            }
        }

        /// Makes `token`'s watches match what its path (and its directory,
        /// if `dir` too, or the nearest directory above that exists) names
        /// now. Fails only for a failure of inotify itself (out of watches,
        /// memory); what does not exist is left unwatched.
        fn resolve(&mut self, token: u64, dir: bool) -> io::Result<()> {
            let Some(w) = self.watches.get(&token) else {
                return Ok(());
            };
            let file_path = w.path.clone();
            let dir_path = w.parent.as_ref().map(|(d, _)| d.clone());
            let file = self.add_watch(&file_path)?;
            self.set_role(token, Role::File, file);
            if dir {
                let d = match &dir_path {
                    Some(d) => self.add_watch(d)?,
                    None => None,
                };
                self.set_role(token, Role::Dir, d);
                let above = match (&dir_path, d) {
                    (Some(missing), None) => self.nearest_above(missing)?,
                    _ => None,
                };
                let wd = above.as_ref().map(|(wd, _)| *wd);
                self.set_role(token, Role::Above, wd);
                if let (Some((_, name)), Some(w)) = (above, self.watches.get_mut(&token)) {
                    w.above_name = name;
                }
            }
            Ok(())
        }

        /// The watch descriptor of the nearest directory above `missing`
        /// that exists, and the name of the entry below it towards
        /// `missing`; `None` at a component that cannot be walked (`..`,
        /// the root, `.`).
        fn nearest_above(&self, missing: &Path) -> io::Result<Option<(i32, Vec<u8>)>> {
            let mut below = missing.to_path_buf();
            loop {
                let Some((up, name)) = parent_of(&below) else {
                    return Ok(None);
                };
                if let Some(wd) = self.add_watch(&up)? {
                    return Ok(Some((wd, name)));
                }
                below = up;
            }
        }

        /// The watch descriptor of `path`'s inode, if it exists.
        fn add_watch(&self, path: &Path) -> io::Result<Option<i32>> {
            let Some(fd) = &self.inotify else {
                return Ok(None);
            };
            match inotify::add_watch(fd, path, MASK) {
                Ok(wd) => Ok(Some(wd)),
                Err(err) if absent(&err) => Ok(None),
                Err(err) => Err(err),
            }
        }

        /// `token` now watches `wd` (or nothing) in `role`.
        fn set_role(&mut self, token: u64, role: Role, wd: Option<i32>) {
            let Some(w) = self.watches.get_mut(&token) else {
                return;
            };
            if *w.held(role) == wd {
                return;
            }
            self.detach(token, role);
            let Some(wd) = wd else { return };
            self.wds.entry(wd).or_default().list(role).push(token);
            if let Some(w) = self.watches.get_mut(&token) {
                *w.held(role) = Some(wd);
            }
        }

        /// `token` stops watching its descriptor in `role`; a descriptor
        /// left without users is removed from the instance.
        fn detach(&mut self, token: u64, role: Role) {
            let Some(w) = self.watches.get_mut(&token) else {
                return;
            };
            let Some(wd) = w.held(role).take() else {
                return;
            };
            let Some(users) = self.wds.get_mut(&wd) else {
                return;
            };
            users.list(role).retain(|&t| t != token);
            if users.is_empty() {
                self.wds.remove(&wd);
                if let Some(fd) = &self.inotify {
                    inotify::rm_watch(fd, wd);
                }
            }
        }

        /// The instance was reported readable: reads every queued event,
        /// notes the tokens they hint at, and resolves the watches that
        /// may name another inode now.
        pub(crate) fn ready(&mut self) {
            let Some(fd) = &self.inotify else { return };
            let mut overflow = false;
            loop {
                let n = match inotify::read(fd, &mut self.buf) {
                    Ok(0) => break,
                    Ok(n) => n,
                    Err(err) => {
                        tracing::debug!(%err, "reading the inotify instance failed");
                        break;
                    }
                };
                for event in inotify::events(&self.buf[..n]) {
                    overflow |= route(
                        &event,
                        &mut self.wds,
                        &mut self.watches,
                        &mut self.hinted,
                        &mut self.refresh,
                    );
                }
            }
            if overflow {
                self.hinted.extend(self.watches.keys());
                self.refresh.clear();
                self.refresh.extend(self.watches.keys());
            }
            let mut refresh = std::mem::take(&mut self.refresh);
            refresh.sort_unstable();
            refresh.dedup();
            for &token in &refresh {
                if let Err(err) = self.resolve(token, true) {
                    tracing::debug!(token, %err, "a path's watch could not be added again");
                }
            }
            refresh.clear();
            self.refresh = refresh;
        }

        /// Moves the tokens hinted at since the last call into `out`, each
        /// once.
        pub(crate) fn take(&mut self, out: &mut Vec<u64>) {
            if self.hinted.is_empty() {
                return;
            }
            self.hinted.sort_unstable();
            self.hinted.dedup();
            out.append(&mut self.hinted);
        }

        /// After `fork()`, once the backend has its new kernel set: a new
        /// instance, every watch added again, every token hinted at.
        pub(crate) fn reinit(&mut self, set: &mut dyn InternalFds) -> io::Result<()> {
            let Some(old) = self.inotify.take() else {
                return Ok(());
            };
            // Closing the child's descriptor leaves the parent's watches
            // alone (inotify_rm_watch would remove them).
            set.remove(old.as_raw_fd());
            drop(old);
            self.wds.clear();
            for w in self.watches.values_mut() {
                w.file = None;
                w.dir = None;
                w.above = None;
            }
            let fd = inotify::init()?;
            set.add(fd.as_raw_fd())?;
            self.inotify = Some(fd);
            let tokens: Vec<u64> = self.watches.keys().copied().collect();
            for &token in &tokens {
                if let Err(err) = self.resolve(token, true) {
                    tracing::debug!(token, %err, "a path's watch could not be added again");
                }
            }
            self.hinted.clear();
            self.hinted.extend(tokens);
            Ok(())
        }

        /// What `token` watches above its missing directory (for tests).
        #[cfg(test)]
        fn above_of(&self, token: u64) -> Option<(i32, Vec<u8>)> {
            let w = &self.watches[&token];
            w.above.map(|wd| (wd, w.above_name.clone()))
        }

        /// The watch descriptors of `token` (for tests).
        #[cfg(test)]
        fn wds_of(&self, token: u64) -> (Option<i32>, Option<i32>) {
            let w = &self.watches[&token];
            (w.file, w.dir)
        }
    }

    /// Notes what one event hints at: its descriptor's tokens (for a
    /// directory's event about a child, only those of that name), and the
    /// tokens whose watches to resolve again. True for a queue overflow.
    fn route(
        event: &Event<'_>,
        wds: &mut HashMap<i32, Users>,
        watches: &mut HashMap<u64, Watch>,
        hinted: &mut Vec<u64>,
        refresh: &mut Vec<u64>,
    ) -> bool {
        if event.mask & libc::IN_Q_OVERFLOW != 0 {
            return true;
        }
        if event.mask & libc::IN_IGNORED != 0 {
            // The watch is gone (its inode deleted, its file system
            // unmounted, or removed by us): its tokens lose it.
            let Some(users) = wds.remove(&event.wd) else {
                return false;
            };
            for &t in &users.as_file {
                if let Some(w) = watches.get_mut(&t) {
                    if w.file == Some(event.wd) {
                        w.file = None;
                    }
                }
            }
            for &t in &users.as_dir {
                if let Some(w) = watches.get_mut(&t) {
                    if w.dir == Some(event.wd) {
                        w.dir = None;
                    }
                }
            }
            for &t in &users.as_above {
                if let Some(w) = watches.get_mut(&t) {
                    if w.above == Some(event.wd) {
                        w.above = None;
                    }
                }
            }
            hinted.extend(users.as_file.iter().chain(&users.as_dir));
            refresh.extend(
                users
                    .as_file
                    .iter()
                    .chain(&users.as_dir)
                    .chain(&users.as_above),
            );
            return false;
        }
        let Some(users) = wds.get(&event.wd) else {
            return false;
        };
        const GONE: u32 = libc::IN_DELETE_SELF | libc::IN_MOVE_SELF;
        const ENTRY: u32 =
            libc::IN_CREATE | libc::IN_DELETE | libc::IN_MOVED_FROM | libc::IN_MOVED_TO;
        hinted.extend_from_slice(&users.as_file);
        if event.mask & GONE != 0 {
            refresh.extend_from_slice(&users.as_file);
        }
        if event.name.is_empty() {
            // About the directory itself: the paths through it may have
            // changed (moved, deleted, made unreadable).
            hinted.extend_from_slice(&users.as_dir);
            if event.mask & GONE != 0 {
                refresh.extend_from_slice(&users.as_dir);
                // Look further up for the missing directory's ancestor.
                refresh.extend_from_slice(&users.as_above);
            }
        } else {
            for &t in &users.as_dir {
                let named = watches
                    .get(&t)
                    .and_then(|w| w.parent.as_ref())
                    .is_some_and(|(_, name)| name.as_slice() == event.name);
                if named {
                    hinted.push(t);
                    if event.mask & ENTRY != 0 {
                        refresh.push(t);
                    }
                }
            }
            if event.mask & ENTRY != 0 {
                // The next directory down towards a missing one came (or
                // went): watch from there, or the path itself if it is
                // all back (and then look: the file may be there too).
                for &t in &users.as_above {
                    let named = watches
                        .get(&t)
                        .is_some_and(|w| w.above_name.as_slice() == event.name);
                    if named {
                        hinted.push(t);
                        refresh.push(t);
                    }
                }
            }
        }
        false
    }

    #[cfg(test)]
    mod tests {
        use super::super::inotify::encode;
        use super::*;

        /// A kernel set that records what it holds.
        #[derive(Default)]
        struct Recorder(Vec<RawFd>);

        impl InternalFds for Recorder {
            fn add(&mut self, fd: RawFd) -> io::Result<()> {
                self.0.push(fd);
                Ok(())
            }
            fn remove(&mut self, fd: RawFd) {
                self.0.retain(|&f| f != fd);
            }
        }

        /// A directory of its own under the temporary directory, removed
        /// on drop.
        struct TempDir(PathBuf);

        impl TempDir {
            fn new(what: &str) -> TempDir {
                static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
                let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let dir = std::env::temp_dir()
                    .join(format!("evloop-hints-{what}-{}-{n}", std::process::id()));
                std::fs::create_dir_all(&dir).unwrap();
                TempDir(dir)
            }
        }

        impl Drop for TempDir {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }

        fn taken(h: &mut PathHints) -> Vec<u64> {
            h.ready();
            let mut out = Vec::new();
            h.take(&mut out);
            out
        }

        #[test]
        fn decoding_events() {
            let mut buf = Vec::new();
            encode(&mut buf, 3, libc::IN_MODIFY, 0, b"");
            encode(&mut buf, 4, libc::IN_CREATE | libc::IN_ISDIR, 0, b"sub");
            encode(&mut buf, 4, libc::IN_MOVED_TO, 77, b"exactly-fifteen");
            encode(&mut buf, -1, libc::IN_Q_OVERFLOW, 0, b"");
            let got: Vec<Event<'_>> = inotify::events(&buf).collect();
            assert_eq!(got.len(), 4);
            assert_eq!(
                (got[0].wd, got[0].mask, got[0].name),
                (3, libc::IN_MODIFY, &b""[..])
            );
            assert_eq!(got[1].name, b"sub");
            assert_eq!((got[2].cookie, got[2].name), (77, &b"exactly-fifteen"[..]));
            assert_eq!((got[3].wd, got[3].mask), (-1, libc::IN_Q_OVERFLOW));
            // A truncated record ends the list.
            assert_eq!(inotify::events(&buf[..buf.len() - 1]).count(), 3);
            assert_eq!(inotify::events(&buf[..20]).count(), 1);
        }

        /// The routing alone, on made-up events: names filter a
        /// directory's events, entries and lost watches ask for a
        /// resolution, an overflow says so.
        #[test]
        fn routing_events_to_tokens() {
            let mut watches = HashMap::new();
            let mut wds: HashMap<i32, Users> = HashMap::new();
            for (token, name) in [(1, "a"), (2, "b"), (3, "a")] {
                watches.insert(
                    token,
                    Watch {
                        path: PathBuf::from(format!("/d/{name}")),
                        parent: parent_of(Path::new(&format!("/d/{name}"))),
                        file: Some(10 + token as i32),
                        dir: Some(5),
                        above: None,
                        above_name: Vec::new(),
                    },
                );
                wds.entry(5).or_default().as_dir.push(token);
                wds.entry(10 + token as i32)
                    .or_default()
                    .as_file
                    .push(token);
            }
            type Maps = (HashMap<i32, Users>, HashMap<u64, Watch>);
            fn run(m: &mut Maps, mask: u32, wd: i32, name: &[u8]) -> (bool, Vec<u64>, Vec<u64>) {
                let (mut hinted, mut refresh) = (Vec::new(), Vec::new());
                let event = Event {
                    wd,
                    mask,
                    cookie: 0,
                    name,
                };
                let overflow = route(&event, &mut m.0, &mut m.1, &mut hinted, &mut refresh);
                (overflow, hinted, refresh)
            }
            let m = &mut (wds, watches);
            assert_eq!(
                run(m, libc::IN_MODIFY, 5, b"a"),
                (false, vec![1, 3], vec![])
            );
            assert_eq!(
                run(m, libc::IN_MODIFY, 5, b"c"),
                (false, vec![], vec![]),
                "a sibling"
            );
            assert_eq!(run(m, libc::IN_CREATE, 5, b"b"), (false, vec![2], vec![2]));
            assert_eq!(run(m, libc::IN_ATTRIB, 12, b""), (false, vec![2], vec![]));
            assert_eq!(
                run(m, libc::IN_DELETE_SELF, 12, b""),
                (false, vec![2], vec![2])
            );
            let all = (false, vec![1, 2, 3], vec![1, 2, 3]);
            assert_eq!(run(m, libc::IN_MOVE_SELF, 5, b""), all);
            assert_eq!(run(m, libc::IN_IGNORED, 11, b""), (false, vec![1], vec![1]));
            assert_eq!(m.1[&1].file, None, "the lost watch is forgotten");
            assert_eq!(
                run(m, libc::IN_MODIFY, 11, b""),
                (false, vec![], vec![]),
                "gone"
            );
            assert_eq!(run(m, libc::IN_Q_OVERFLOW, -1, b""), (true, vec![], vec![]));
        }

        #[test]
        fn a_file_and_its_directory_share_descriptors() {
            let dir = TempDir::new("share");
            let (a, b) = (dir.0.join("a"), dir.0.join("b"));
            std::fs::write(&a, "a").unwrap();
            std::fs::write(&b, "b").unwrap();
            let mut set = Recorder::default();
            let mut h = PathHints::new("test");
            h.watch(&a, 1, &mut set).unwrap();
            h.watch(&a, 2, &mut set).unwrap();
            h.watch(&b, 3, &mut set).unwrap();
            assert_eq!(set.0, [h.fd().unwrap()], "one instance");
            let (fa1, d1) = h.wds_of(1);
            assert_eq!(h.wds_of(2), (fa1, d1), "one inode, one descriptor");
            let (fb, d3) = h.wds_of(3);
            assert!(fa1.is_some() && fb.is_some() && fa1 != fb);
            assert_eq!(d1, d3, "one directory");
            assert_eq!(h.wds.len(), 3);
            std::fs::write(&b, "bb").unwrap();
            assert_eq!(taken(&mut h), [3], "a's watchers are not told");
            h.unwatch(3, &mut set);
            assert_eq!(h.wds.len(), 2, "b's descriptor went");
            h.unwatch(1, &mut set);
            assert_eq!(h.wds.len(), 2, "2 still uses a's and the directory's");
            h.unwatch(2, &mut set);
            assert!(h.wds.is_empty() && h.fd().is_none() && set.0.is_empty());
        }

        #[test]
        fn a_recreated_file_gets_its_own_watch_again() {
            let dir = TempDir::new("recreate");
            let (f, other) = (dir.0.join("f"), TempDir::new("recreate-link"));
            let mut set = Recorder::default();
            let mut h = PathHints::new("test");
            h.watch(&f, 7, &mut set).unwrap();
            assert!(
                matches!(h.wds_of(7), (None, Some(_))),
                "missing: its directory only"
            );
            std::fs::write(&f, "x").unwrap();
            assert_eq!(taken(&mut h), [7]);
            assert!(h.wds_of(7).0.is_some(), "watched itself once created");
            // Changes through a name in another directory reach only the
            // file's own watch.
            let link = other.0.join("g");
            std::fs::hard_link(&f, &link).unwrap();
            assert_eq!(taken(&mut h), [7], "link count");
            std::fs::write(&link, "through the link").unwrap();
            assert_eq!(taken(&mut h), [7], "written");
            std::fs::remove_file(&f).unwrap();
            assert_eq!(taken(&mut h), [7]);
            assert_eq!(
                h.wds_of(7).0,
                None,
                "the name is gone: so is the file's watch"
            );
            std::fs::write(&link, "unseen").unwrap();
            assert_eq!(taken(&mut h), [] as [u64; 0], "no longer the path's file");
        }

        /// A directory removed with its file is watched for through the
        /// directory above it, level by level, and the path gets its own
        /// watches back when it is all there again.
        #[test]
        fn a_removed_directory_is_watched_for_from_above() {
            let root = TempDir::new("above");
            let (a, b) = (root.0.join("a"), root.0.join("a/b"));
            let f = b.join("f");
            std::fs::create_dir_all(&b).unwrap();
            std::fs::write(&f, "x").unwrap();
            let mut set = Recorder::default();
            let mut h = PathHints::new("test");
            h.watch(&f, 1, &mut set).unwrap();
            assert!(matches!(h.wds_of(1), (Some(_), Some(_))));
            assert_eq!(h.above_of(1), None);
            std::fs::remove_dir_all(&a).unwrap();
            assert_eq!(taken(&mut h), [1]);
            assert_eq!(h.wds_of(1), (None, None));
            let (wd, name) = h.above_of(1).expect("watched from the root");
            assert_eq!(name, b"a");
            std::fs::write(root.0.join("sibling"), "s").unwrap();
            assert_eq!(taken(&mut h), [] as [u64; 0], "another name");
            std::fs::create_dir(&a).unwrap();
            assert_eq!(taken(&mut h), [1], "a step closer");
            let (wd_a, name) = h.above_of(1).expect("watched from a");
            assert!(wd_a != wd && name == b"b");
            assert!(!h.wds.contains_key(&wd), "the root's watch went");
            std::fs::create_dir(&b).unwrap();
            assert_eq!(taken(&mut h), [1]);
            assert_eq!(h.above_of(1), None);
            assert!(
                matches!(h.wds_of(1), (None, Some(_))),
                "the directory again"
            );
            std::fs::write(&f, "y").unwrap();
            assert_eq!(taken(&mut h), [1]);
            assert!(matches!(h.wds_of(1), (Some(_), Some(_))), "and the file");
            // All at once: made before the hints are read.
            std::fs::remove_dir_all(&a).unwrap();
            std::fs::create_dir_all(&b).unwrap();
            std::fs::write(&f, "z").unwrap();
            assert_eq!(taken(&mut h), [1]);
            assert!(matches!(h.wds_of(1), (Some(_), Some(_))), "the new ones");
            assert_eq!(h.above_of(1), None);
            h.unwatch(1, &mut set);
            assert!(h.wds.is_empty() && set.0.is_empty());
        }

        #[test]
        fn a_missing_directory_is_watched_for_from_above() {
            let mut set = Recorder::default();
            let mut h = PathHints::new("test");
            let p = std::env::temp_dir().join("evloop-no-such-dir-at-all/x");
            h.watch(&p, 1, &mut set).unwrap();
            assert_eq!(h.wds_of(1), (None, None));
            let (_, name) = h.above_of(1).expect("the temporary directory");
            assert_eq!(name, b"evloop-no-such-dir-at-all");
            assert_eq!(taken(&mut h), [] as [u64; 0]);
            h.unwatch(1, &mut set);
            assert!(set.0.is_empty());
        }

        #[test]
        fn reinit_makes_a_new_instance_with_every_watch() {
            let dir = TempDir::new("reinit");
            let f = dir.0.join("f");
            std::fs::write(&f, "x").unwrap();
            let mut set = Recorder::default();
            let mut h = PathHints::new("test");
            h.watch(&f, 1, &mut set).unwrap();
            let before = h.fd().unwrap();
            // SAFETY: keeps the old instance open (and its number taken).
            let keep = unsafe { libc::dup(before) };
            assert!(keep >= 0);
            h.reinit(&mut set).unwrap();
            let after = h.fd().unwrap();
            assert_eq!(set.0, [after]);
            let same = crate::backends::unix::clock_steps::tests::same_file(keep, after);
            assert_ne!(same, Some(true), "a new instance");
            assert_eq!(taken(&mut h), [1], "everything may have changed meanwhile");
            std::fs::write(&f, "y").unwrap();
            assert_eq!(taken(&mut h), [1]);
            // The old instance still has its watches (as the parent's would).
            let mut buf = vec![0u8; inotify::BUF];
            // SAFETY: `keep` is an open inotify instance owned here.
            let old = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(keep) };
            assert!(
                inotify::read(&old, &mut buf).unwrap() > 0,
                "not removed by the child"
            );
        }

        #[test]
        fn an_overflow_hints_at_everyone() {
            let dir = TempDir::new("overflow");
            let f = dir.0.join("f");
            std::fs::write(&f, "x").unwrap();
            let mut set = Recorder::default();
            let mut h = PathHints::new("test");
            h.watch(&f, 1, &mut set).unwrap();
            let queued: usize = std::fs::read_to_string("/proc/sys/fs/inotify/max_queued_events")
                .ok()
                .and_then(|s| s.trim().parse().ok())
                .unwrap_or(16384);
            if queued > 100_000 {
                return; // too many to overflow quickly
            }
            // Siblings only, each a different name (identical consecutive
            // events would be merged): without the overflow, no hint.
            for i in 0..queued + 10 {
                std::fs::File::create(dir.0.join(format!("s{i}"))).unwrap();
            }
            assert_eq!(taken(&mut h), [1]);
            assert!(
                h.wds_of(1).0.is_some() && h.wds_of(1).1.is_some(),
                "watches resolved again"
            );
        }
    }
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
mod other {
    use std::io;
    use std::os::fd::RawFd;
    use std::path::Path;

    use crate::backend::InternalFds;

    /// No path hints on this platform (see the module header).
    #[derive(Debug)]
    pub(crate) struct PathHints {
        backend: &'static str,
    }

    impl PathHints {
        pub(crate) fn new(backend: &'static str) -> PathHints {
            PathHints { backend }
        }

        pub(crate) fn fd(&self) -> Option<RawFd> {
            None
        }

        pub(crate) fn watch(
            &mut self,
            _path: &Path,
            _token: u64,
            _set: &mut dyn InternalFds,
        ) -> io::Result<()> {
            Err(crate::backend::unsupported(
                self.backend,
                "path change hints on this system",
            ))
        }

        pub(crate) fn unwatch(&mut self, _token: u64, _set: &mut dyn InternalFds) {}

        pub(crate) fn ready(&mut self) {}

        pub(crate) fn take(&mut self, _out: &mut Vec<u64>) {}

        pub(crate) fn reinit(&mut self, _set: &mut dyn InternalFds) -> io::Result<()> {
            Ok(())
        }
    }
}
