//! Path change hints for the kqueue backend: `EVFILT_VNODE` filters on
//! descriptors of the watched paths and of the directories holding them.
//!
//! - A path is watched through a descriptor of its file (`O_RDONLY`;
//!   `O_EVTONLY` on macOS and iOS, which does not keep a volume from being
//!   unmounted), non-blocking (a FIFO must not block the open) and
//!   close-on-exec, and through one of its directory, each with
//!   `EV_CLEAR` and [`NOTES`]. Only regular files and directories are
//!   opened (opening a device can have effects); anything else is left to
//!   polling.
//! - A path whose directory does not exist (never made yet, or removed
//!   with the file) is watched through the nearest directory above it
//!   that exists: when that directory's filter fires, the backend looks
//!   whether the missing directory is there now (one `stat` per such
//!   token) and if so hints at the token and watches the directory and
//!   the file again (or, a level at a time, the next directory up that
//!   exists). So a directory removed and made again gets its filters
//!   back, however many levels went.
//! - A descriptor belongs to an inode, identified by `(st_dev, st_ino)`:
//!   watchers of one file, and the files of one directory, share one
//!   descriptor and one filter.
//! - An event of a file's filter hints at the tokens of that file. A
//!   directory's filter cannot say which name changed (`NOTE_WRITE`: an
//!   entry was added or removed; `NOTE_EXTEND`: by a rename; `NOTE_LINK`:
//!   a subdirectory), so for each token in the directory the backend looks
//!   at what its path names now (one `stat`): a token is hinted at only if
//!   its path names another file than the one it watches (created,
//!   deleted, renamed over), and then watches the new one. A sibling's
//!   creation or removal thus wakes no one, as with inotify's names; a
//!   sibling's writes do not reach the directory's filter at all.
//! - When a file's filter reports `NOTE_DELETE`, `NOTE_RENAME` or
//!   `NOTE_REVOKE`, or a directory's does, the path is looked at again the
//!   same way (the file may have been replaced; the directory re-created).
//!   A path found missing has its directory looked at too (a directory
//!   removed while a descriptor holds it may post nothing until the
//!   descriptor closes).
//! - After `fork()` the kqueue is gone in the child but the descriptors
//!   are inherited: `reinit` registers them with the new kqueue (a
//!   filter, unlike an inotify instance, is not shared with the parent's
//!   kqueue), and hints at every token.

use std::collections::HashMap;
use std::fs::OpenOptions;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use super::{apply_now, sys, zeroed_kevent, UD_VNODE};

/// What each filter asks for.
pub(super) const NOTES: u32 = sys::NOTE_WRITE
    | sys::NOTE_EXTEND
    | sys::NOTE_ATTRIB
    | sys::NOTE_DELETE
    | sys::NOTE_RENAME
    | sys::NOTE_LINK
    | sys::NOTE_REVOKE;

/// Notes after which a path may no longer name the file its filter
/// watches.
const GONE: u32 = sys::NOTE_DELETE | sys::NOTE_RENAME | sys::NOTE_REVOKE;

cfg_if::cfg_if! {
    if #[cfg(any(target_os = "macos", target_os = "ios"))] {
        /// Open for events only.
        const OPEN_FLAGS: i32 = libc::O_EVTONLY | libc::O_NONBLOCK;
    } else {
        const OPEN_FLAGS: i32 = libc::O_NONBLOCK;
    }
}

/// A file's identity.
type Id = (u64, u64);

/// One watched inode: its descriptor (with a filter on it) and who uses it.
#[derive(Debug)]
struct Node {
    fd: OwnedFd,
    /// Tokens whose path is this file.
    as_file: Vec<u64>,
    /// Tokens whose path is in this directory.
    as_dir: Vec<u64>,
    /// Tokens whose missing directory is somewhere below this one.
    as_above: Vec<u64>,
}

impl Node {
    fn list(&mut self, role: Role) -> &mut Vec<u64> {
        match role {
            Role::File => &mut self.as_file,
            Role::Dir => &mut self.as_dir,
            Role::Above => &mut self.as_above,
        }
    }

    fn unused(&self) -> bool {
        self.as_file.is_empty() && self.as_dir.is_empty() && self.as_above.is_empty()
    }
}

#[derive(Debug)]
struct Watch {
    path: PathBuf,
    /// The directory holding the path (none for `/`).
    dir_path: Option<PathBuf>,
    /// The node of the path's file, if it has one.
    file: Option<Id>,
    /// The node of the directory.
    dir: Option<Id>,
    /// While the directory does not exist: the node of the nearest
    /// directory above it that does.
    above: Option<Id>,
    /// What the path named at the last look (of any type: a FIFO has no
    /// node, yet its removal is a change).
    seen: Option<Id>,
    /// What the directory's path named at the last look.
    dir_seen: Option<Id>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    File,
    Dir,
    Above,
}

impl Watch {
    fn held(&mut self, role: Role) -> &mut Option<Id> {
        match role {
            Role::File => &mut self.file,
            Role::Dir => &mut self.dir,
            Role::Above => &mut self.above,
        }
    }
}

/// The backend's watched paths and their filters.
#[derive(Debug, Default)]
pub(super) struct Vnodes {
    watches: HashMap<u64, Watch>,
    nodes: HashMap<Id, Node>,
    by_fd: HashMap<RawFd, Id>,
    hinted: Vec<u64>,
    /// Scratch list of tokens to look at again (kept for its capacity).
    recheck: Vec<u64>,
}

/// What `path` names now (following symbolic links), if anything.
fn identity(path: &Path) -> Option<Id> {
    let m = std::fs::metadata(path).ok()?;
    Some((m.dev(), m.ino()))
}

/// The directory holding `path`.
fn dir_of(path: &Path) -> Option<PathBuf> {
    path.file_name()?;
    Some(match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    })
}

/// The nearest directory above `missing` that exists, and what it names;
/// `None` at a component that cannot be walked (`..`, the root, `.`).
fn nearest_existing(missing: &Path) -> Option<(PathBuf, Id)> {
    let mut below = missing.to_path_buf();
    loop {
        let up = dir_of(&below)?;
        if let Some(id) = identity(&up) {
            return Some((up, id));
        }
        below = up;
    }
}

/// Whether a failure to open means "nothing to watch there".
fn absent(err: &io::Error) -> bool {
    !matches!(
        err.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOMEM)
    )
}

/// A registration (`EV_ADD`) or removal of the filter on `fd`.
fn record(fd: RawFd, flags: super::EvFlags) -> sys::kevent {
    let mut kev = zeroed_kevent();
    kev.ident = fd as sys::uintptr_t;
    kev.filter = sys::EVFILT_VNODE;
    kev.flags = flags;
    kev.fflags = NOTES;
    kev.udata = UD_VNODE as _;
    kev
}

fn register(kq: RawFd, fd: RawFd) -> io::Result<()> {
    apply_now(
        kq,
        &record(fd, sys::EV_ADD | sys::EV_ENABLE | sys::EV_CLEAR),
    )
}

impl Vnodes {
    /// Starts hinting at changes of `path` with `token` (replacing what
    /// it watched before).
    pub(super) fn watch(&mut self, kq: RawFd, path: &Path, token: u64) -> io::Result<()> {
        if self.watches.contains_key(&token) {
            self.unwatch(kq, token);
        }
        self.watches.insert(
            token,
            Watch {
                path: path.to_path_buf(),
                dir_path: dir_of(path),
                file: None,
                dir: None,
                above: None,
                seen: None,
                dir_seen: None,
            },
        );
        if let Err(err) = self.resolve(kq, token, true) {
            self.unwatch(kq, token);
            return Err(io::Error::new(
                err.kind(),
                format!(
                    "the kqueue backend cannot hint at changes of {}: {err}",
                    path.display()
                ),
            ));
        }
        Ok(())
    }

    /// Stops hinting for `token`.
    pub(super) fn unwatch(&mut self, kq: RawFd, token: u64) {
        if self.watches.contains_key(&token) {
            self.detach(kq, token, Role::File);
            self.detach(kq, token, Role::Dir);
            self.detach(kq, token, Role::Above);
            self.watches.remove(&token);
        }
        self.hinted.retain(|&t| t != token);
    }

    /// Makes `token`'s filters match what its path (and, with `dir`, its
    /// directory, or the nearest directory above that exists) names now.
    /// Fails only for a lack of descriptors or memory.
    fn resolve(&mut self, kq: RawFd, token: u64, dir: bool) -> io::Result<()> {
        let Some(w) = self.watches.get(&token) else {
            return Ok(());
        };
        let (path, dir_path) = (w.path.clone(), w.dir_path.clone());
        let seen = identity(&path);
        let file = match seen {
            Some(_) => self.open(kq, &path)?,
            None => None,
        };
        self.set_role(kq, token, Role::File, file);
        let dir_seen = match (&dir_path, dir) {
            (Some(d), true) => {
                let seen = identity(d);
                let node = match seen {
                    Some(_) => self.open(kq, d)?,
                    None => None,
                };
                self.set_role(kq, token, Role::Dir, node);
                let above = match seen {
                    None => self.nearest_above(kq, d)?,
                    Some(_) => None,
                };
                self.set_role(kq, token, Role::Above, above);
                Some(seen)
            }
            _ => None,
        };
        if let Some(w) = self.watches.get_mut(&token) {
            w.seen = seen;
            if let Some(d) = dir_seen {
                w.dir_seen = d;
            }
        }
        Ok(())
    }

    /// The node of the nearest directory above `missing` that exists (with
    /// a filter on it); `None` at a component that cannot be walked (`..`,
    /// the root, `.`), or if what exists there cannot be watched.
    fn nearest_above(&mut self, kq: RawFd, missing: &Path) -> io::Result<Option<Id>> {
        match nearest_existing(missing) {
            Some((up, _)) => self.open(kq, &up),
            None => Ok(None),
        }
    }

    /// The identity of what `path` names, with a filter on it: the
    /// existing one, or a new descriptor and filter.
    fn open(&mut self, kq: RawFd, path: &Path) -> io::Result<Option<Id>> {
        let Ok(m) = std::fs::metadata(path) else {
            return Ok(None);
        };
        if !(m.is_file() || m.is_dir()) {
            return Ok(None); // a FIFO, a device: polling only
        }
        if self.nodes.contains_key(&(m.dev(), m.ino())) {
            return Ok(Some((m.dev(), m.ino())));
        }
        let file = match OpenOptions::new()
            .read(true)
            .custom_flags(OPEN_FLAGS)
            .open(path)
        {
            Ok(f) => f,
            Err(err) if absent(&err) => return Ok(None),
            Err(err) => return Err(err),
        };
        // What was opened, which may differ from what was looked at.
        let Ok(m) = file.metadata() else {
            return Ok(None);
        };
        if !(m.is_file() || m.is_dir()) {
            return Ok(None);
        }
        let id = (m.dev(), m.ino());
        if self.nodes.contains_key(&id) {
            return Ok(Some(id));
        }
        let fd = OwnedFd::from(file);
        if let Err(err) = register(kq, fd.as_raw_fd()) {
            tracing::debug!(path = %path.display(), %err, "EVFILT_VNODE refused: polling only");
            return Ok(None);
        }
        self.by_fd.insert(fd.as_raw_fd(), id);
        self.nodes.insert(
            id,
            Node {
                fd,
                as_file: Vec::new(),
                as_dir: Vec::new(),
                as_above: Vec::new(),
            },
        );
        Ok(Some(id))
    }

    /// `token` now watches `id` (or nothing) in `role`.
    fn set_role(&mut self, kq: RawFd, token: u64, role: Role, id: Option<Id>) {
        let Some(w) = self.watches.get_mut(&token) else {
            return;
        };
        if *w.held(role) == id {
            return;
        }
        if let Some(new) = id.and_then(|id| self.nodes.get_mut(&id)) {
            new.list(role).push(token);
        }
        // After attaching: a node shared by both never closes in between.
        self.detach(kq, token, role);
        if let Some(w) = self.watches.get_mut(&token) {
            *w.held(role) = id;
        }
    }

    /// `token` stops using its node in `role`; a node left unused loses
    /// its filter and is closed.
    fn detach(&mut self, kq: RawFd, token: u64, role: Role) {
        let Some(w) = self.watches.get_mut(&token) else {
            return;
        };
        let Some(id) = w.held(role).take() else {
            return;
        };
        let Some(node) = self.nodes.get_mut(&id) else {
            return;
        };
        let list = node.list(role);
        if let Some(i) = list.iter().position(|&t| t == token) {
            list.remove(i);
        }
        if node.unused() {
            let fd = node.fd.as_raw_fd();
            // Closing the descriptor drops the filter too; deleting it
            // first says so explicitly.
            let _ = apply_now(kq, &record(fd, sys::EV_DELETE));
            self.by_fd.remove(&fd);
            self.nodes.remove(&id);
        }
    }

    /// The filter on `fd` reported `fflags`.
    pub(super) fn fired(&mut self, kq: RawFd, fd: RawFd, fflags: u32) {
        let Some(&id) = self.by_fd.get(&fd) else {
            return;
        };
        let Some(node) = self.nodes.get(&id) else {
            return;
        };
        self.hinted.extend_from_slice(&node.as_file);
        let mut recheck = std::mem::take(&mut self.recheck);
        if fflags & GONE != 0 {
            recheck.extend_from_slice(&node.as_file);
        }
        if fflags & (GONE | sys::NOTE_ATTRIB) != 0 {
            // The directory itself moved, went or changed its permissions:
            // every path through it may resolve differently.
            self.hinted.extend_from_slice(&node.as_dir);
        }
        recheck.extend_from_slice(&node.as_dir);
        recheck.sort_unstable();
        recheck.dedup();
        for &token in &recheck {
            self.recheck_token(kq, token, fflags & GONE != 0);
        }
        recheck.clear();
        // Tokens waiting below this directory for theirs to come back.
        if let Some(node) = self.nodes.get(&id) {
            recheck.extend_from_slice(&node.as_above);
        }
        for &token in &recheck {
            self.recheck_above(kq, token, fflags & GONE != 0);
        }
        recheck.clear();
        self.recheck = recheck;
    }

    /// The directory above `token`'s missing one fired: if the missing
    /// directory is there now, hints at the token and watches it (and its
    /// file); if a directory between them was made, or the one above went
    /// (`gone`), watches the nearest one that exists now.
    fn recheck_above(&mut self, kq: RawFd, token: u64, gone: bool) {
        let Some(w) = self.watches.get(&token) else {
            return;
        };
        let Some(d) = &w.dir_path else { return };
        let back = identity(d) != w.dir_seen;
        let closer = !back && nearest_existing(d).map(|(_, id)| id) != w.above;
        if back {
            self.hinted.push(token);
        }
        if back || closer || gone {
            if let Err(err) = self.resolve(kq, token, true) {
                tracing::debug!(token, %err, "a path's filter could not be added again");
            }
        }
    }

    /// Looks at what `token`'s path (and its directory) names now: if it
    /// is not what the token watches, hints at the token and watches the
    /// new file.
    fn recheck_token(&mut self, kq: RawFd, token: u64, dir_too: bool) {
        let Some(w) = self.watches.get(&token) else {
            return;
        };
        let now = identity(&w.path);
        let file_moved = now != w.seen;
        // A missing file may have gone with its directory.
        let dir_moved = (dir_too || now.is_none())
            && match &w.dir_path {
                Some(d) => identity(d) != w.dir_seen,
                None => false,
            };
        if !(file_moved || dir_moved) {
            return;
        }
        self.hinted.push(token);
        if let Err(err) = self.resolve(kq, token, dir_moved) {
            tracing::debug!(token, %err, "a path's filter could not be added again");
        }
    }

    /// Moves the tokens hinted at since the last call into `out`, each
    /// once.
    pub(super) fn take(&mut self, out: &mut Vec<u64>) {
        if self.hinted.is_empty() {
            return;
        }
        self.hinted.sort_unstable();
        self.hinted.dedup();
        out.append(&mut self.hinted);
    }

    /// After `fork()`, with the new kqueue `kq`: every descriptor gets its
    /// filter again; every token is hinted at.
    pub(super) fn reinit(&mut self, kq: RawFd) {
        let mut lost = Vec::new();
        for (&id, node) in &self.nodes {
            if let Err(err) = register(kq, node.fd.as_raw_fd()) {
                tracing::debug!(%err, "EVFILT_VNODE refused after fork: polling only");
                lost.push(id);
            }
        }
        for id in lost {
            if let Some(node) = self.nodes.remove(&id) {
                self.by_fd.remove(&node.fd.as_raw_fd());
                for w in self.watches.values_mut() {
                    if w.file == Some(id) {
                        w.file = None;
                    }
                    if w.dir == Some(id) {
                        w.dir = None;
                    }
                    if w.above == Some(id) {
                        w.above = None;
                    }
                }
            }
        }
        self.hinted.clear();
        self.hinted.extend(self.watches.keys());
    }

    /// Deletes every filter (the kqueue is about to close).
    pub(super) fn release(&mut self, kq: RawFd) {
        for node in self.nodes.values() {
            let _ = apply_now(kq, &record(node.fd.as_raw_fd(), sys::EV_DELETE));
        }
        self.nodes.clear();
        self.by_fd.clear();
        self.watches.clear();
    }

    /// How many descriptors are open (for tests).
    #[cfg(test)]
    pub(super) fn open_nodes(&self) -> usize {
        self.nodes.len()
    }
}
