//! An emulated `kqueue(2)` / `kevent(2)` for Linux, so that the kqueue
//! backend (`kqueue.rs`, unchanged) runs here: its unit tests, its
//! doctests, the conformance suite and the fork test. Compiled only with
//! the `emulated-kqueue` feature on Linux; never part of a normal build.
//!
//! It reproduces the interface of `<sys/event.h>` (the FreeBSD 11 and
//! macOS layout of `struct kevent`, the BSD values of the constants) and
//! the semantics that FreeBSD's `kqueue(2)` man page gives the parts the
//! backend uses (Debian's `freebsd-manpages` package has it), on top of
//! epoll:
//!
//! - Each kqueue is an epoll instance (the descriptor `kqueue()` returns)
//!   that watches two inner epoll instances, one per filter, because a
//!   kqueue keys its filters ("knotes") by (fd, filter) while an epoll
//!   instance holds one registration per file. `EVFILT_READ` is `EPOLLIN |
//!   EPOLLRDHUP` in the read instance, `EVFILT_WRITE` `EPOLLOUT` in the
//!   write one; `EV_CLEAR` is `EPOLLET`; `EV_ONESHOT` is `EPOLLONESHOT`,
//!   and the knote is deleted when it is reported, as the kernel does.
//! - The changelist is applied in order before waiting. A change that
//!   fails is reported as an `EV_ERROR` record (`data` is the errno, the
//!   change's other fields are copied, `flags` is overwritten as FreeBSD
//!   does) while there is room in the eventlist; when there is none, the
//!   call fails with that errno and the rest of the changelist is not
//!   applied. A call that reported any change errors returns them at once,
//!   without waiting or collecting events.
//! - A change on a descriptor that is not open fails with `EBADF` (and the
//!   knotes the emulation still holds for it are forgotten: the kernel
//!   drops a descriptor's knotes when it is closed). `EV_DELETE` of a
//!   filter that does not exist fails with `ENOENT`; `EV_ADD` on an
//!   existing one updates its `udata` but not its `EV_CLEAR` /
//!   `EV_ONESHOT` flags.
//! - `EV_EOF` is set on the read filter when the peer hung up or shut down
//!   its writing side (`EPOLLRDHUP`, `EPOLLHUP`), on the write filter when
//!   the reader is gone (`EPOLLHUP`, `EPOLLERR`). A pending socket error
//!   (`EPOLLERR`) puts a nonzero `fflags` next to `EV_EOF`: `EIO`, not the
//!   real errno, because reading `SO_ERROR` on Linux would clear the error
//!   that the next `read` must see.
//! - A wait interrupted by a signal fails with `EINTR` after the changes
//!   were applied. The timeout is rounded up to whole milliseconds.
//! - A kqueue is not inherited by a child process: there, every `kevent`
//!   call on it fails with `EBADF` (the real kernel closes it in the child).
//! - `EVFILT_PROC` with `NOTE_EXIT` ("the process has exited; the exit
//!   status will be stored in data"): the ident is a pid, watched through a
//!   pidfd (`pidfd_open`) in a third inner epoll instance, so any process
//!   the caller can see, child or not. A pid that does not exist fails with
//!   `ESRCH`; an exited, unreaped child (a zombie) fires at once, as
//!   FreeBSD's filter does. The event carries `NOTE_EXIT` in `fflags` and,
//!   as FreeBSD's `filt_proc` sets them (the man page does not say),
//!   `EV_EOF | EV_ONESHOT` in `flags`: the knote is deleted once reported.
//!   For a child of the caller `data` is its status in `wait(2)`'s format,
//!   read without reaping it (`waitid(.., WNOWAIT)`); 0 for another
//!   process. Other `NOTE_*` events are refused (`EINVAL`).
//! - `EVFILT_VNODE` ("takes a file descriptor as the identifier and the
//!   events to watch for in `fflags`, and returns when one or more of the
//!   requested events occurs on the descriptor"; "on return, `fflags`
//!   contains the events which triggered the filter"): the file the
//!   descriptor names is watched by an inotify instance of the kqueue's
//!   (made with its first vnode knote, in the outer instance) through
//!   `/proc/self/fd/N`, which reaches the inode whatever its path is now.
//!   inotify's events become `NOTE_DELETE`, `NOTE_WRITE`, `NOTE_EXTEND`,
//!   `NOTE_ATTRIB`, `NOTE_LINK`, `NOTE_RENAME` and `NOTE_REVOKE` as the man
//!   page describes them for files and directories (the mapping is at
//!   `notes`); notes accumulate until the knote is reported, and are
//!   cleared then with `EV_CLEAR` (or the knote deleted with
//!   `EV_ONESHOT`); without either the knote stays active, as FreeBSD's
//!   filter does. A knote belongs to the file it was registered for:
//!   closing the descriptor drops it. Known gaps: `NOTE_OPEN`,
//!   `NOTE_CLOSE`, `NOTE_CLOSE_WRITE` and `NOTE_READ` never fire;
//!   removing a watched *directory* is not seen while the knote's
//!   descriptor holds it (inotify reports nothing until the last
//!   descriptor closes), where a kernel posts `NOTE_DELETE`; an inotify
//!   queue overflow (a kqueue loses nothing) is reported as
//!   `NOTE_WRITE | NOTE_ATTRIB` on every knote that asked for them.
//!
//! Not emulated (the backend does not use them): filters other than
//! these four, `EV_DISABLE` and `EV_DISPATCH`; the `data` of a read or
//! write event is always 0 (no byte counts). Regular files are refused by
//! epoll (`EPERM`) for the read and write filters, where a kqueue accepts
//! them; the backend refuses them before they get here.
//!
//! What this cannot show is whether a real kernel behaves as the man page
//! says: it tests the backend's logic (changelist batching, error records,
//! one-shot siblings, the merging of two filters' reports, the path hints'
//! use of vnode filters), not a kernel.
#![allow(unsafe_code, non_camel_case_types)]

use std::collections::HashMap;
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::unix::path_hints::inotify;

/// `uintptr_t`, the type of `kevent::ident`.
pub type uintptr_t = usize;

/// `struct kevent` as FreeBSD 11 and macOS lay it out.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct kevent {
    /// The identifier: here always a file descriptor.
    pub ident: uintptr_t,
    /// `EVFILT_READ` or `EVFILT_WRITE`.
    pub filter: i16,
    /// `EV_*` flags: the action of a change, the state of an event.
    pub flags: u16,
    /// Filter-specific flags; here, a socket error next to `EV_EOF`.
    pub fflags: u32,
    /// Filter-specific data; here, the errno of an `EV_ERROR` record.
    pub data: isize,
    /// Opaque user data, returned with every event of the filter.
    pub udata: *mut libc::c_void,
}

/// The read filter.
pub const EVFILT_READ: i16 = -1;
/// The write filter.
pub const EVFILT_WRITE: i16 = -2;
/// The vnode filter (ident: a descriptor of a file or directory).
pub const EVFILT_VNODE: i16 = -4;
/// The process filter (ident: a pid).
pub const EVFILT_PROC: i16 = -5;
/// `EVFILT_VNODE`: `unlink()` was called on the file.
pub const NOTE_DELETE: u32 = 0x0001;
/// `EVFILT_VNODE`: a write occurred on the file (for a directory: an
/// entry was added or removed).
pub const NOTE_WRITE: u32 = 0x0002;
/// `EVFILT_VNODE`: the file was extended (for a directory: an entry was
/// added or removed by a rename to or from another directory).
pub const NOTE_EXTEND: u32 = 0x0004;
/// `EVFILT_VNODE`: the file's attributes changed.
pub const NOTE_ATTRIB: u32 = 0x0008;
/// `EVFILT_VNODE`: the link count changed (for a directory: a
/// subdirectory was created or removed).
pub const NOTE_LINK: u32 = 0x0010;
/// `EVFILT_VNODE`: the file was renamed.
pub const NOTE_RENAME: u32 = 0x0020;
/// `EVFILT_VNODE`: access to the file was revoked (its file system was
/// unmounted).
pub const NOTE_REVOKE: u32 = 0x0040;
/// `EVFILT_PROC`: the process has exited.
pub const NOTE_EXIT: u32 = 0x8000_0000;
/// Add the filter (or update an existing one).
pub const EV_ADD: u16 = 0x0001;
/// Delete the filter.
pub const EV_DELETE: u16 = 0x0002;
/// Enable the filter (implied by `EV_ADD` here).
pub const EV_ENABLE: u16 = 0x0004;
/// Delete the filter after its first event.
pub const EV_ONESHOT: u16 = 0x0010;
/// Reset the filter's state when its event is retrieved (edge).
pub const EV_CLEAR: u16 = 0x0020;
/// Report every change as an `EV_ERROR` record (`data` 0 on success).
pub const EV_RECEIPT: u16 = 0x0040;
/// The change failed (or a receipt): `data` holds the errno.
pub const EV_ERROR: u16 = 0x4000;
/// End of file: the peer hung up.
pub const EV_EOF: u16 = 0x8000;

/// One filter the emulation holds.
#[derive(Debug, Clone, Copy)]
struct Knote {
    udata: usize,
    /// `EV_CLEAR` and `EV_ONESHOT`, as registered.
    mode: u16,
    /// Tells this knote's epoll registration from a stale one under the
    /// same number (see [`Queue::collect`]).
    serial: u32,
    /// The file registered: a knote belongs to it, not to the number.
    file: FileId,
}

/// A file's identity (`st_dev`, `st_ino`).
type FileId = (u64, u64);

/// The identity of the file `fd` names, if it is open.
fn file_id(fd: RawFd) -> Option<FileId> {
    fstat(fd).map(|st| (st.st_dev, st.st_ino))
}

/// `fstat(fd)`, if it is open.
fn fstat(fd: RawFd) -> Option<libc::stat> {
    let mut st = MaybeUninit::<libc::stat>::uninit();
    // SAFETY: fstat writes a `stat` to the pointer on success.
    if unsafe { libc::fstat(fd, st.as_mut_ptr()) } < 0 {
        return None;
    }
    // SAFETY: initialised by the successful fstat.
    Some(unsafe { st.assume_init() })
}

/// One kqueue: the descriptor `kqueue()` returned is `outer`.
#[derive(Debug)]
struct Queue {
    /// The process that created it (a kqueue is not inherited).
    owner: u32,
    /// The descriptor `kqueue()` returned (owned by the caller).
    outer: RawFd,
    /// The inner epoll instances, for `EVFILT_READ`, `EVFILT_WRITE` and
    /// `EVFILT_PROC` (whose pidfds are registered under the pid).
    read: OwnedFd,
    write: OwnedFd,
    procs: OwnedFd,
    knotes: HashMap<(RawFd, i16), Knote>,
    /// The pidfd of each `EVFILT_PROC` knote, by pid.
    pidfds: HashMap<RawFd, OwnedFd>,
    /// The serial of the next registration.
    next_serial: u32,
    /// `epoll_wait`'s buffer, reused.
    scratch: Vec<libc::epoll_event>,
    /// `EVFILT_VNODE` knotes by descriptor, and what feeds them: an
    /// inotify instance (in the outer epoll instance), made with the first
    /// and closed with the last (instances are few: 128 per user).
    vnodes: HashMap<RawFd, Vnode>,
    inotify: Option<OwnedFd>,
    /// The descriptors whose knotes each inotify watch serves.
    by_wd: HashMap<i32, Vec<RawFd>>,
    /// What inotify reads land in.
    inotify_buf: Vec<u8>,
}

/// One `EVFILT_VNODE` knote.
#[derive(Debug, Clone, Copy)]
struct Vnode {
    udata: usize,
    /// `EV_CLEAR` and `EV_ONESHOT`, as registered.
    mode: u16,
    /// The notes asked for (`fflags` of the registration).
    sfflags: u32,
    /// The notes that happened since the knote was last reported (only
    /// those asked for), which make it active.
    fflags: u32,
    /// The inotify watch of the file (-1 once inotify dropped it).
    wd: i32,
    /// The file registered: a knote belongs to it, not to the number.
    file: FileId,
    is_dir: bool,
    /// The size and link count last seen, to tell `NOTE_EXTEND` and
    /// `NOTE_DELETE` / `NOTE_LINK` from plain writes and attributes.
    size: i64,
    links: libc::nlink_t,
}

/// Every kqueue of the process, by descriptor. An entry outlives the
/// descriptor (a `Drop` would need the caller's help); a new `kqueue()`
/// that gets the same number replaces it.
static QUEUES: Mutex<Option<HashMap<RawFd, Queue>>> = Mutex::new(None);

fn queues() -> MutexGuard<'static, Option<HashMap<RawFd, Queue>>> {
    // A panic elsewhere while holding the lock leaves the map usable.
    QUEUES.lock().unwrap_or_else(|p| p.into_inner())
}

fn set_errno(errno: i32) {
    // SAFETY: `__errno_location` returns the calling thread's errno slot.
    unsafe { *libc::__errno_location() = errno };
}

/// A new epoll instance, with `flags` (`EPOLL_CLOEXEC` or 0).
fn epoll_create(flags: libc::c_int) -> io::Result<OwnedFd> {
    // SAFETY: plain system call with a flags argument.
    let fd = unsafe { libc::epoll_create1(flags) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by epoll_create1 and is owned by no one.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `epoll_ctl` for `fd`, tagged with `serial`, returning the errno on
/// failure.
fn ctl(ep: RawFd, op: libc::c_int, fd: RawFd, events: u32, serial: u32) -> Result<(), i32> {
    let mut ev = libc::epoll_event {
        events,
        u64: (serial as u64) << 32 | fd as u32 as u64,
    };
    // SAFETY: `ev` is a valid epoll_event for the duration of the call
    // (ignored for EPOLL_CTL_DEL); `ep` and `fd` are plain integers the
    // kernel checks.
    if unsafe { libc::epoll_ctl(ep, op, fd, &mut ev) } < 0 {
        return Err(io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO));
    }
    Ok(())
}

fn is_open(fd: RawFd) -> bool {
    // SAFETY: F_GETFD on any integer: the kernel answers EBADF if it is not
    // an open descriptor.
    unsafe { libc::fcntl(fd, libc::F_GETFD) >= 0 }
}

/// `kqueue()`: a new, empty kqueue, or -1 with `errno`.
///
/// # Safety
///
/// None needed; `unsafe` only to match `libc::kqueue`'s signature.
pub unsafe fn kqueue() -> libc::c_int {
    let made = (|| -> io::Result<(OwnedFd, Queue)> {
        // Like a kqueue, not close-on-exec unless the caller says so.
        let outer = epoll_create(0)?;
        let read = epoll_create(libc::EPOLL_CLOEXEC)?;
        let write = epoll_create(libc::EPOLL_CLOEXEC)?;
        let procs = epoll_create(libc::EPOLL_CLOEXEC)?;
        for inner in [&read, &write, &procs] {
            let fd = inner.as_raw_fd();
            ctl(
                outer.as_raw_fd(),
                libc::EPOLL_CTL_ADD,
                fd,
                libc::EPOLLIN as u32,
                0,
            )
            .map_err(io::Error::from_raw_os_error)?;
        }
        let queue = Queue {
            owner: std::process::id(),
            outer: outer.as_raw_fd(),
            read,
            write,
            procs,
            knotes: HashMap::new(),
            pidfds: HashMap::new(),
            next_serial: 0,
            scratch: Vec::new(),
            vnodes: HashMap::new(),
            inotify: None,
            by_wd: HashMap::new(),
            inotify_buf: Vec::new(),
        };
        Ok((outer, queue))
    })();
    match made {
        Ok((outer, queue)) => {
            let fd = outer.as_raw_fd();
            std::mem::forget(outer); // the caller owns the descriptor now
            queues().get_or_insert_with(HashMap::new).insert(fd, queue);
            fd
        }
        Err(e) => {
            set_errno(e.raw_os_error().unwrap_or(libc::EIO));
            -1
        }
    }
}

impl Queue {
    fn inner(&self, filter: i16) -> RawFd {
        if filter == EVFILT_READ {
            self.read.as_raw_fd()
        } else {
            self.write.as_raw_fd()
        }
    }

    /// Applies one `EVFILT_PROC` change.
    fn apply_proc(&mut self, change: &kevent) -> Result<(), i32> {
        let Ok(pid) = libc::pid_t::try_from(change.ident) else {
            return Err(libc::ESRCH);
        };
        let key = (pid, EVFILT_PROC);
        let udata = change.udata as usize;
        if change.flags & EV_DELETE != 0 {
            self.knotes.remove(&key).ok_or(libc::ENOENT)?;
            // Closing the pidfd takes it out of the inner instance.
            self.pidfds.remove(&pid);
            return Ok(());
        }
        if change.flags & EV_ADD == 0 {
            return Err(libc::EINVAL);
        }
        if change.fflags != NOTE_EXIT {
            return Err(libc::EINVAL); // the other notes are not emulated
        }
        if let Some(knote) = self.knotes.get_mut(&key) {
            knote.udata = udata;
            return Ok(());
        }
        if pid <= 0 {
            return Err(libc::ESRCH);
        }
        // SAFETY: plain system call with integer arguments.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        if fd < 0 {
            return Err(io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::ESRCH));
        }
        // SAFETY: a new descriptor, owned by nobody else.
        let pidfd = unsafe { OwnedFd::from_raw_fd(fd as RawFd) };
        let serial = self.next_serial;
        self.next_serial = serial.wrapping_add(1);
        // Registered under the pid, which `collect_procs` reads back.
        let data = (serial as u64) << 32 | pid as u32 as u64;
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: data,
        };
        // SAFETY: `ev` is valid for the call; both descriptors are open.
        if unsafe {
            libc::epoll_ctl(
                self.procs.as_raw_fd(),
                libc::EPOLL_CTL_ADD,
                pidfd.as_raw_fd(),
                &mut ev,
            )
        } < 0
        {
            return Err(io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::ENOMEM));
        }
        let knote = Knote {
            udata,
            mode: EV_ONESHOT,
            serial,
            file: (0, 0),
        };
        self.knotes.insert(key, knote);
        self.pidfds.insert(pid, pidfd);
        Ok(())
    }

    /// Applies one `EVFILT_VNODE` change. The knote's file is watched by
    /// inotify through `/proc/self/fd/N`, which names the open file (its
    /// inode) whatever its path is now.
    fn apply_vnode(&mut self, change: &kevent) -> Result<(), i32> {
        let Ok(fd) = RawFd::try_from(change.ident) else {
            return Err(libc::EBADF);
        };
        let Some(st) = fstat(fd) else {
            self.drop_vnode(fd);
            return Err(libc::EBADF);
        };
        let file = (st.st_dev, st.st_ino);
        if self.vnodes.get(&fd).is_some_and(|v| v.file != file) {
            // The number was closed (dropping the knote) and reused.
            self.drop_vnode(fd);
        }
        if change.flags & EV_DELETE != 0 {
            return if self.drop_vnode(fd) {
                Ok(())
            } else {
                Err(libc::ENOENT)
            };
        }
        if change.flags & EV_ADD == 0 {
            return Err(libc::EINVAL);
        }
        if let Some(v) = self.vnodes.get_mut(&fd) {
            // An existing knote takes the new notes and udata, not a mode.
            v.udata = change.udata as usize;
            v.sfflags = change.fflags;
            return Ok(());
        }
        let inotify = match &self.inotify {
            Some(fd) => fd,
            None => {
                let made = inotify::init().map_err(|e| e.raw_os_error().unwrap_or(libc::ENOMEM))?;
                ctl(
                    self.outer,
                    libc::EPOLL_CTL_ADD,
                    made.as_raw_fd(),
                    libc::EPOLLIN as u32,
                    0,
                )?;
                self.inotify_buf.resize(inotify::BUF, 0);
                self.inotify.insert(made)
            }
        };
        let proc_path = PathBuf::from(format!("/proc/self/fd/{fd}"));
        let wd = match inotify::add_watch(inotify, &proc_path, VNODE_MASK) {
            Ok(wd) => wd,
            Err(e) => {
                let errno = e.raw_os_error().unwrap_or(libc::EINVAL);
                if self.vnodes.is_empty() {
                    self.inotify = None;
                }
                return Err(errno);
            }
        };
        self.vnodes.insert(
            fd,
            Vnode {
                udata: change.udata as usize,
                mode: change.flags & (EV_CLEAR | EV_ONESHOT),
                sfflags: change.fflags,
                fflags: 0,
                wd,
                file,
                is_dir: st.st_mode & libc::S_IFMT == libc::S_IFDIR,
                size: st.st_size,
                links: st.st_nlink,
            },
        );
        self.by_wd.entry(wd).or_default().push(fd);
        Ok(())
    }

    /// Forgets the vnode knote of `fd`, if any (its inotify watch goes with
    /// the last knote using it, the instance with the last knote).
    fn drop_vnode(&mut self, fd: RawFd) -> bool {
        let Some(v) = self.vnodes.remove(&fd) else {
            return false;
        };
        if let Some(fds) = self.by_wd.get_mut(&v.wd) {
            fds.retain(|&f| f != fd);
            if fds.is_empty() {
                self.by_wd.remove(&v.wd);
                if let Some(ino) = &self.inotify {
                    inotify::rm_watch(ino, v.wd);
                }
            }
        }
        if self.vnodes.is_empty() {
            // Closing it takes it out of the outer instance.
            self.inotify = None;
            self.by_wd.clear();
        }
        true
    }

    /// Whether a vnode knote is active (notes pending): the wait must not
    /// block.
    fn vnode_active(&self) -> bool {
        self.vnodes.values().any(|v| v.fflags != 0)
    }

    /// Turns what inotify queued into the vnode knotes' notes, then moves
    /// the active knotes into `out` while it has room.
    fn collect_vnodes(&mut self, out: &mut Out<'_>) {
        if let Some(ino) = &self.inotify {
            let mut stale = Vec::new();
            loop {
                let n = match inotify::read(ino, &mut self.inotify_buf) {
                    Ok(n) if n > 0 => n,
                    _ => break,
                };
                let batch = &self.inotify_buf[..n];
                // A rename within one directory shows as a pair with one
                // cookie on one watch: it adds or removes no entry there.
                let mut moves: HashMap<(i32, u32), u32> = HashMap::new();
                for e in inotify::events(batch) {
                    if e.mask & (libc::IN_MOVED_FROM | libc::IN_MOVED_TO) != 0 {
                        *moves.entry((e.wd, e.cookie)).or_default() |= e.mask;
                    }
                }
                for e in inotify::events(batch) {
                    if e.mask & libc::IN_Q_OVERFLOW != 0 {
                        // Events were lost; a kqueue loses none. Say that
                        // something happened to each (not what: deletion
                        // and renaming are not claimed).
                        for v in self.vnodes.values_mut() {
                            v.fflags |= v.sfflags & (NOTE_WRITE | NOTE_ATTRIB);
                        }
                        continue;
                    }
                    let Some(fds) = self.by_wd.get(&e.wd) else {
                        continue;
                    };
                    let within = moves.get(&(e.wd, e.cookie)).is_some_and(|&m| {
                        m & (libc::IN_MOVED_FROM | libc::IN_MOVED_TO)
                            == libc::IN_MOVED_FROM | libc::IN_MOVED_TO
                    });
                    for &fd in fds {
                        let Some(v) = self.vnodes.get_mut(&fd) else {
                            continue;
                        };
                        let Some(st) = fstat(fd).filter(|st| (st.st_dev, st.st_ino) == v.file)
                        else {
                            // Closed (the kernel would have dropped the
                            // knote then), perhaps reused.
                            stale.push(fd);
                            continue;
                        };
                        v.fflags |= v.sfflags & notes(&e, within, v, &st);
                    }
                    if e.mask & libc::IN_IGNORED != 0 {
                        for &fd in fds {
                            if let Some(v) = self.vnodes.get_mut(&fd) {
                                v.wd = -1;
                            }
                        }
                        self.by_wd.remove(&e.wd);
                    }
                }
            }
            for fd in stale {
                self.drop_vnode(fd);
            }
        }
        let active: Vec<RawFd> = self
            .vnodes
            .iter()
            .filter(|(_, v)| v.fflags != 0)
            .map(|(&fd, _)| fd)
            .collect();
        for fd in active {
            if out.room() == 0 {
                return;
            }
            let Some(v) = self.vnodes.get_mut(&fd) else {
                continue;
            };
            out.push(kevent {
                ident: fd as uintptr_t,
                filter: EVFILT_VNODE,
                flags: EV_ADD | v.mode,
                fflags: v.fflags,
                data: 0,
                udata: v.udata as *mut libc::c_void,
            });
            // Without EV_CLEAR the notes stay, and the knote active, as
            // FreeBSD's filter keeps them.
            if v.mode & (EV_CLEAR | EV_ONESHOT) != 0 {
                v.fflags = 0;
            }
            if v.mode & EV_ONESHOT != 0 {
                self.drop_vnode(fd);
            }
        }
    }

    /// Moves the exits of watched processes into `out` while it has room.
    fn collect_procs(&mut self, out: &mut Out<'_>) {
        let room = out.room();
        if room == 0 {
            return;
        }
        if self.scratch.len() < room {
            self.scratch
                .resize(room, libc::epoll_event { events: 0, u64: 0 });
        }
        // SAFETY: `scratch` holds at least `room` writable epoll_events;
        // zero timeout.
        let n = unsafe {
            libc::epoll_wait(
                self.procs.as_raw_fd(),
                self.scratch.as_mut_ptr(),
                room.min(libc::c_int::MAX as usize) as libc::c_int,
                0,
            )
        };
        for i in 0..n.max(0) as usize {
            let data = self.scratch[i].u64;
            let (pid, serial) = (data as u32 as libc::pid_t, (data >> 32) as u32);
            let key = (pid, EVFILT_PROC);
            let knote = match self.knotes.get(&key) {
                Some(k) if k.serial == serial => *k,
                _ => continue,
            };
            let pidfd = self.pidfds.remove(&pid);
            self.knotes.remove(&key);
            out.push(kevent {
                ident: pid as uintptr_t,
                filter: EVFILT_PROC,
                flags: EV_ADD | EV_EOF | EV_ONESHOT,
                fflags: NOTE_EXIT,
                data: pidfd.map_or(0, |fd| wait_status(fd.as_raw_fd())),
                udata: knote.udata as *mut libc::c_void,
            });
        }
    }

    /// Applies one change; `Err(errno)` if it fails.
    fn apply(&mut self, change: &kevent) -> Result<(), i32> {
        let filter = change.filter;
        if filter == EVFILT_PROC {
            return self.apply_proc(change);
        }
        if filter == EVFILT_VNODE {
            return self.apply_vnode(change);
        }
        if filter != EVFILT_READ && filter != EVFILT_WRITE {
            return Err(libc::EINVAL);
        }
        let Ok(fd) = RawFd::try_from(change.ident) else {
            return Err(libc::EBADF);
        };
        if !is_open(fd) {
            // Closing a descriptor drops its knotes (not a process's that
            // has the same number).
            self.knotes
                .retain(|&(f, filter), _| f != fd || filter == EVFILT_PROC);
            self.drop_vnode(fd);
            return Err(libc::EBADF);
        }
        let inner = self.inner(filter);
        let key = (fd, filter);
        let udata = change.udata as usize;
        if change.flags & EV_DELETE != 0 {
            let Some(_) = self.knotes.remove(&key) else {
                return Err(libc::ENOENT);
            };
            // ENOENT: the file was closed (dropping the knote) and the
            // number reused since.
            return ctl(inner, libc::EPOLL_CTL_DEL, fd, 0, 0);
        }
        if change.flags & EV_ADD == 0 {
            // EV_ENABLE / EV_DISABLE alone: not used by the backend.
            return Err(libc::EINVAL);
        }
        if let Some(knote) = self.knotes.get_mut(&key) {
            // An existing filter keeps its mode; MOD re-arms it.
            knote.udata = udata;
            let mode = knote.mode;
            let serial = knote.serial;
            match ctl(
                inner,
                libc::EPOLL_CTL_MOD,
                fd,
                epoll_events(filter, mode),
                serial,
            ) {
                Err(libc::ENOENT) => {
                    // The file behind the number changed: the old knote
                    // died with it, this is a new one.
                    self.knotes.remove(&key);
                }
                other => return other,
            }
        }
        let mode = change.flags & (EV_CLEAR | EV_ONESHOT);
        let events = epoll_events(filter, mode);
        let serial = self.next_serial;
        self.next_serial = serial.wrapping_add(1);
        let file = file_id(fd).ok_or(libc::EBADF)?;
        ctl(inner, libc::EPOLL_CTL_ADD, fd, events, serial)?;
        let knote = Knote {
            udata,
            mode,
            serial,
            file,
        };
        self.knotes.insert(key, knote);
        Ok(())
    }

    /// Moves the ready events of one filter into `out` while it has room.
    fn collect(&mut self, filter: i16, out: &mut Out<'_>) {
        let room = out.room();
        if room == 0 {
            return;
        }
        if self.scratch.len() < room {
            self.scratch
                .resize(room, libc::epoll_event { events: 0, u64: 0 });
        }
        // SAFETY: `scratch` holds at least `room` writable epoll_events;
        // zero timeout.
        let n = unsafe {
            libc::epoll_wait(
                self.inner(filter),
                self.scratch.as_mut_ptr(),
                room.min(libc::c_int::MAX as usize) as libc::c_int,
                0,
            )
        };
        let mut stale = false;
        for i in 0..n.max(0) as usize {
            let (bits, data) = (self.scratch[i].events as libc::c_int, self.scratch[i].u64);
            let (fd, serial) = (data as u32 as RawFd, (data >> 32) as u32);
            let knote = match self.knotes.get(&(fd, filter)) {
                Some(k) if k.serial == serial && file_id(fd) == Some(k.file) => *k,
                // The registration of a file whose number was closed while
                // another descriptor kept the file open: the kernel would
                // have dropped the knote at the close, epoll keeps the
                // registration (and may report it under a number that now
                // names another file).
                _ => {
                    stale = true;
                    continue;
                }
            };
            let eof = if filter == EVFILT_READ {
                bits & (libc::EPOLLRDHUP | libc::EPOLLHUP | libc::EPOLLERR) != 0
            } else {
                bits & (libc::EPOLLHUP | libc::EPOLLERR) != 0
            };
            let mut flags = EV_ADD | knote.mode;
            let mut fflags = 0;
            if eof {
                flags |= EV_EOF;
                if bits & libc::EPOLLERR != 0 {
                    fflags = libc::EIO as u32;
                }
            }
            out.push(kevent {
                ident: fd as uintptr_t,
                filter,
                flags,
                fflags,
                data: 0,
                udata: knote.udata as *mut libc::c_void,
            });
            if knote.mode & EV_ONESHOT != 0 {
                self.knotes.remove(&(fd, filter));
                let _ = ctl(self.inner(filter), libc::EPOLL_CTL_DEL, fd, 0, 0);
            }
        }
        if stale {
            self.rebuild(filter);
        }
    }

    /// Replaces the inner epoll instance of `filter` by a new one holding
    /// only the live knotes' registrations: the only way to drop a stale
    /// registration, whose file no descriptor of ours names any more. (A
    /// live `EV_CLEAR` knote whose fd is ready reports one extra event.)
    fn rebuild(&mut self, filter: i16) {
        let Ok(fresh) = epoll_create(libc::EPOLL_CLOEXEC) else {
            return; // out of descriptors: the stale events stay filtered out
        };
        let mut dead = Vec::new();
        for (&(fd, f), knote) in &self.knotes {
            if f == filter && file_id(fd) != Some(knote.file) {
                // Closed since (and perhaps reused): the kernel dropped it.
                dead.push((fd, f));
            } else if f == filter {
                let events = epoll_events(filter, knote.mode);
                let added = ctl(
                    fresh.as_raw_fd(),
                    libc::EPOLL_CTL_ADD,
                    fd,
                    events,
                    knote.serial,
                );
                if added.is_err() {
                    dead.push((fd, f));
                }
            }
        }
        for key in dead {
            self.knotes.remove(&key);
        }
        let outer = self.outer;
        let fresh_fd = fresh.as_raw_fd();
        if ctl(
            outer,
            libc::EPOLL_CTL_ADD,
            fresh_fd,
            libc::EPOLLIN as u32,
            0,
        )
        .is_ok()
        {
            // Dropping the old instance closes it, which removes it from
            // the outer one.
            if filter == EVFILT_READ {
                self.read = fresh;
            } else {
                self.write = fresh;
            }
        }
    }
}

/// What inotify is asked to report for a vnode knote's file.
const VNODE_MASK: u32 = libc::IN_MODIFY
    | libc::IN_ATTRIB
    | libc::IN_MOVE_SELF
    | libc::IN_DELETE_SELF
    | libc::IN_CREATE
    | libc::IN_DELETE
    | libc::IN_MOVED_FROM
    | libc::IN_MOVED_TO;

/// The notes one inotify event means for the knote `v` (whose file `st`
/// describes now), following the man page and FreeBSD's VOP hooks:
///
/// - about the file itself: a write is `NOTE_WRITE`, with `NOTE_EXTEND`
///   if it grew; an attribute change is `NOTE_ATTRIB`, unless the link
///   count fell (an unlink, or a rename over it: `NOTE_DELETE`; inotify
///   says `IN_DELETE_SELF` only once no descriptor holds the file, and the
///   knote's own does) or rose (`NOTE_LINK`); a rename is `NOTE_RENAME`,
///   an unmount `NOTE_REVOKE`;
/// - about an entry of a directory: created or removed is `NOTE_WRITE`
///   (and `NOTE_LINK` for a subdirectory); renamed to or from another
///   directory adds `NOTE_EXTEND` (a rename within it does not). Changes
///   of the entries' own content or attributes are not the directory's.
fn notes(e: &inotify::Event<'_>, within: bool, v: &mut Vnode, st: &libc::stat) -> u32 {
    let mut n = 0;
    if e.name.is_empty() {
        if e.mask & libc::IN_MODIFY != 0 {
            n |= NOTE_WRITE;
            if st.st_size > v.size {
                n |= NOTE_EXTEND;
            }
        }
        if e.mask & libc::IN_ATTRIB != 0 {
            let links = st.st_nlink;
            n |= match links.cmp(&v.links) {
                std::cmp::Ordering::Less => NOTE_DELETE,
                std::cmp::Ordering::Greater => NOTE_LINK,
                std::cmp::Ordering::Equal => NOTE_ATTRIB,
            };
            v.links = links;
        }
        if e.mask & libc::IN_MOVE_SELF != 0 {
            n |= NOTE_RENAME;
        }
        if e.mask & libc::IN_DELETE_SELF != 0 {
            n |= NOTE_DELETE;
        }
        if e.mask & libc::IN_UNMOUNT != 0 {
            n |= NOTE_REVOKE;
        }
        v.size = st.st_size;
    } else if v.is_dir {
        let subdir = e.mask & libc::IN_ISDIR != 0;
        if e.mask & (libc::IN_CREATE | libc::IN_DELETE) != 0 {
            n |= NOTE_WRITE;
            if subdir {
                n |= NOTE_LINK;
            }
        }
        if e.mask & (libc::IN_MOVED_FROM | libc::IN_MOVED_TO) != 0 {
            n |= NOTE_WRITE;
            if !within {
                n |= NOTE_EXTEND;
                if subdir {
                    n |= NOTE_LINK;
                }
            }
        }
    }
    n
}

/// The exit status of the exited process behind `pidfd`, in `wait(2)`'s
/// format, if it is the caller's child (not reaped: `WNOWAIT`); 0 if not.
fn wait_status(pidfd: RawFd) -> isize {
    // SAFETY: all-zero is a valid siginfo_t, which waitid fills.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: `info` is writable; `pidfd` is open.
    let r = unsafe {
        libc::waitid(
            libc::P_PIDFD,
            pidfd as libc::id_t,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        )
    };
    // SAFETY: filled by waitid (or left zero).
    let status = unsafe { info.si_status() };
    if r < 0 {
        return 0;
    }
    (match info.si_code {
        libc::CLD_EXITED => (status & 0xff) << 8,
        libc::CLD_KILLED => status & 0x7f,
        libc::CLD_DUMPED => (status & 0x7f) | 0x80,
        _ => 0,
    }) as isize
}

/// The epoll events that stand for `filter` in `mode` (`EV_CLEAR`,
/// `EV_ONESHOT`).
fn epoll_events(filter: i16, mode: u16) -> u32 {
    let mut ev = if filter == EVFILT_READ {
        libc::EPOLLIN | libc::EPOLLRDHUP
    } else {
        libc::EPOLLOUT
    };
    if mode & EV_CLEAR != 0 {
        ev |= libc::EPOLLET;
    }
    if mode & EV_ONESHOT != 0 {
        ev |= libc::EPOLLONESHOT;
    }
    ev as u32
}

/// The caller's eventlist, filled from the front.
struct Out<'a> {
    slots: &'a mut [MaybeUninit<kevent>],
    len: usize,
}

impl Out<'_> {
    fn room(&self) -> usize {
        self.slots.len() - self.len
    }

    fn push(&mut self, record: kevent) {
        self.slots[self.len].write(record);
        self.len += 1;
    }
}

/// The kqueue `kq` of this process, or `EBADF`.
fn queue_of(map: &mut Option<HashMap<RawFd, Queue>>, kq: RawFd) -> Result<&mut Queue, i32> {
    match map.as_mut().and_then(|m| m.get_mut(&kq)) {
        Some(queue) if queue.owner == std::process::id() && is_open(kq) => Ok(queue),
        _ => Err(libc::EBADF),
    }
}

/// `kevent()`: applies `changelist`, then (if no change failed) waits up to
/// `timeout` (null: forever) for events, and returns how many records it
/// wrote to `eventlist`, or -1 with `errno`.
///
/// # Safety
///
/// As for `kevent(2)`: `changelist` points to `nchanges` readable records,
/// `eventlist` to room for `nevents` writable ones, `timeout` is null or
/// points to a valid `timespec`.
pub unsafe fn kevent(
    kq: libc::c_int,
    changelist: *const kevent,
    nchanges: libc::c_int,
    eventlist: *mut kevent,
    nevents: libc::c_int,
    timeout: *const libc::timespec,
) -> libc::c_int {
    if nchanges < 0 || nevents < 0 {
        set_errno(libc::EINVAL);
        return -1;
    }
    let changes: &[kevent] = if nchanges == 0 {
        &[]
    } else {
        // SAFETY: the caller guarantees `nchanges` readable records.
        unsafe { std::slice::from_raw_parts(changelist, nchanges as usize) }
    };
    let slots: &mut [MaybeUninit<kevent>] = if nevents == 0 {
        &mut []
    } else {
        // SAFETY: the caller guarantees room for `nevents` records, which
        // are only written (MaybeUninit: they need not be initialised).
        unsafe { std::slice::from_raw_parts_mut(eventlist.cast(), nevents as usize) }
    };
    let mut out = Out { slots, len: 0 };
    let deadline = if timeout.is_null() {
        None
    } else {
        // SAFETY: the caller guarantees a valid timespec.
        let ts = unsafe { *timeout };
        let wait = Duration::new(
            ts.tv_sec.max(0) as u64,
            ts.tv_nsec.clamp(0, 999_999_999) as u32,
        );
        Some(Instant::now() + wait)
    };
    let result = (|| -> Result<usize, i32> {
        let mut guard = queues();
        let queue = queue_of(&mut guard, kq)?;
        let mut errors = 0;
        for change in changes {
            let result = queue.apply(change);
            if result.is_ok() && change.flags & EV_RECEIPT == 0 {
                continue;
            }
            let errno = result.err().unwrap_or(0);
            if out.room() == 0 {
                // No room for the record: the rest of the changelist is not
                // processed, and the call fails with the error (a receipt
                // of a success has none: FreeBSD then returns early without
                // one).
                return if errno == 0 { Ok(out.len) } else { Err(errno) };
            }
            out.push(kevent {
                flags: EV_ERROR,
                data: errno as isize,
                ..*change
            });
            errors += 1;
        }
        if errors > 0 || out.room() == 0 {
            return Ok(out.len);
        }
        // Active vnode knotes (notes kept without EV_CLEAR) end the wait.
        let mut active = queue.vnode_active();
        drop(guard);
        loop {
            let ms = match deadline {
                _ if std::mem::take(&mut active) => 0,
                None => -1,
                Some(at) => {
                    let left = at.saturating_duration_since(Instant::now());
                    left.as_nanos()
                        .div_ceil(1_000_000)
                        .min(libc::c_int::MAX as u128) as libc::c_int
                }
            };
            let mut ready = [libc::epoll_event { events: 0, u64: 0 }; 4];
            // Outside the lock, so that other threads' kqueues go on.
            // SAFETY: `ready` holds 4 writable epoll_events.
            let n = unsafe { libc::epoll_wait(kq, ready.as_mut_ptr(), 4, ms) };
            if n < 0 {
                // EINTR included: the changes are applied.
                return Err(io::Error::last_os_error()
                    .raw_os_error()
                    .unwrap_or(libc::EIO));
            }
            let mut guard = queues();
            let queue = queue_of(&mut guard, kq)?;
            queue.collect(EVFILT_READ, &mut out);
            queue.collect(EVFILT_WRITE, &mut out);
            queue.collect_procs(&mut out);
            queue.collect_vnodes(&mut out);
            // An inner instance can look ready and then yield nothing (a
            // one-shot knote deleted meanwhile): a kernel would go on
            // waiting.
            if out.len > 0 || ms == 0 {
                return Ok(out.len);
            }
        }
    })();
    match result {
        Ok(n) => n as libc::c_int,
        Err(errno) => {
            set_errno(errno);
            -1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::net::UnixStream;
    use std::ptr;

    fn change(fd: RawFd, filter: i16, flags: u16) -> kevent {
        kevent {
            ident: fd as uintptr_t,
            filter,
            flags,
            fflags: 0,
            data: 0,
            udata: 7 as *mut libc::c_void,
        }
    }

    /// One `kevent` call with room for `room` records and a `ms` timeout:
    /// its result and the records.
    fn call(kq: RawFd, changes: &[kevent], room: usize, ms: i64) -> (i32, Vec<kevent>) {
        let mut out = vec![change(-1, 0, 0); room];
        let ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: ms * 1_000_000,
        };
        // SAFETY: the slices' lengths are the counts passed.
        let n = unsafe {
            kevent(
                kq,
                changes.as_ptr(),
                changes.len() as i32,
                out.as_mut_ptr(),
                room as i32,
                &ts,
            )
        };
        out.truncate(n.max(0) as usize);
        (n, out)
    }

    fn new_kqueue() -> OwnedFd {
        // SAFETY: no arguments; the result is checked and then owned.
        let fd = unsafe { kqueue() };
        assert!(fd >= 0);
        // SAFETY: a fresh descriptor nobody else owns.
        unsafe { OwnedFd::from_raw_fd(fd) }
    }

    fn errno() -> i32 {
        io::Error::last_os_error().raw_os_error().unwrap()
    }

    #[test]
    fn refused_changes_come_back_as_error_records_without_waiting() {
        let kq = new_kqueue();
        let (a, _b) = UnixStream::pair().unwrap();
        let fd = a.as_raw_fd();
        let changes = [
            change(fd, EVFILT_READ, EV_DELETE),   // no such knote: ENOENT
            change(fd, EVFILT_WRITE, EV_ADD),     // fine, and writable
            change(999_999, EVFILT_READ, EV_ADD), // not open: EBADF
        ];
        let (n, out) = call(kq.as_raw_fd(), &changes, 8, 1000);
        assert_eq!(n, 2, "only the errors, no events");
        assert_eq!(
            (out[0].flags, out[0].data),
            (EV_ERROR, libc::ENOENT as isize)
        );
        assert_eq!(
            (out[1].flags, out[1].data),
            (EV_ERROR, libc::EBADF as isize)
        );
        assert_eq!((out[1].ident, out[1].udata as usize), (999_999, 7));
        // The valid change was applied: the next call reports it.
        let (n, out) = call(kq.as_raw_fd(), &[], 8, 1000);
        assert_eq!(
            (n, out[0].filter, out[0].udata as usize),
            (1, EVFILT_WRITE, 7)
        );
    }

    #[test]
    fn an_error_without_room_fails_the_call_and_stops_the_changelist() {
        let kq = new_kqueue();
        let (a, _b) = UnixStream::pair().unwrap();
        let changes = [
            change(999_999, EVFILT_READ, EV_ADD),
            change(a.as_raw_fd(), EVFILT_WRITE, EV_ADD),
        ];
        let (n, _) = call(kq.as_raw_fd(), &changes, 0, 0);
        assert_eq!((n, errno()), (-1, libc::EBADF));
        // The second change was not applied.
        let (n, _) = call(kq.as_raw_fd(), &[], 8, 0);
        assert_eq!(n, 0);
    }

    #[test]
    fn oneshot_knotes_are_deleted_when_reported() {
        let kq = new_kqueue();
        let (a, _b) = UnixStream::pair().unwrap();
        let fd = a.as_raw_fd();
        let add = change(fd, EVFILT_WRITE, EV_ADD | EV_ONESHOT);
        let (n, out) = call(kq.as_raw_fd(), &[add], 8, 1000);
        assert_eq!((n, out[0].flags & EV_ONESHOT), (1, EV_ONESHOT));
        assert_eq!(call(kq.as_raw_fd(), &[], 8, 0).0, 0);
        let del = change(fd, EVFILT_WRITE, EV_DELETE);
        let (n, out) = call(kq.as_raw_fd(), &[del], 8, 0);
        assert_eq!((n, out[0].data), (1, libc::ENOENT as isize));
    }

    #[test]
    fn clear_reports_new_data_only() {
        let kq = new_kqueue();
        let (a, mut b) = UnixStream::pair().unwrap();
        let add = change(a.as_raw_fd(), EVFILT_READ, EV_ADD | EV_CLEAR);
        b.write_all(b"x").unwrap();
        assert_eq!(call(kq.as_raw_fd(), &[add], 8, 1000).0, 1);
        assert_eq!(call(kq.as_raw_fd(), &[], 8, 0).0, 0);
        b.write_all(b"y").unwrap();
        assert_eq!(call(kq.as_raw_fd(), &[], 8, 1000).0, 1);
    }

    #[test]
    fn eof_and_a_closed_descriptor_drops_its_knotes() {
        let kq = new_kqueue();
        let (a, b) = UnixStream::pair().unwrap();
        let keep = a.try_clone().unwrap(); // keeps the file open
        let fd = a.as_raw_fd();
        let add = change(fd, EVFILT_READ, EV_ADD);
        assert_eq!(call(kq.as_raw_fd(), &[add], 8, 0).0, 0);
        drop(b);
        let (n, out) = call(kq.as_raw_fd(), &[], 8, 1000);
        assert_eq!((n, out[0].flags & EV_EOF), (1, EV_EOF));
        // Closing the number drops the knote, though the file stays open
        // (and keeps reporting EOF to epoll): nothing more is reported.
        drop(a);
        let (n, _) = call(kq.as_raw_fd(), &[], 8, 20);
        assert_eq!(n, 0);
        drop(keep);
    }

    fn proc_change(pid: u32, flags: u16) -> kevent {
        kevent {
            fflags: NOTE_EXIT,
            ..change(pid as RawFd, EVFILT_PROC, flags)
        }
    }

    #[test]
    fn proc_exit_fires_once_with_the_status_and_does_not_reap() {
        let kq = new_kqueue();
        let child = std::process::Command::new("sh")
            .args(["-c", "exit 9"])
            .spawn()
            .unwrap();
        let pid = child.id();
        let (n, out) = call(kq.as_raw_fd(), &[proc_change(pid, EV_ADD)], 8, 5000);
        assert_eq!(n, 1);
        let ev = out[0];
        assert_eq!(
            (ev.ident, ev.filter, ev.fflags),
            (pid as usize, EVFILT_PROC, NOTE_EXIT)
        );
        assert_eq!(ev.flags & (EV_EOF | EV_ONESHOT), EV_EOF | EV_ONESHOT);
        assert_eq!((ev.data, ev.udata as usize), (9 << 8, 7), "wait(2) status");
        // Deleted once reported.
        let (n, out) = call(kq.as_raw_fd(), &[proc_change(pid, EV_DELETE)], 8, 0);
        assert_eq!((n, out[0].data), (1, libc::ENOENT as isize));
        // A zombie fires at once (still unreaped: the filter only looks).
        let (n, out) = call(kq.as_raw_fd(), &[proc_change(pid, EV_ADD)], 8, 5000);
        assert_eq!((n, out[0].data), (1, 9 << 8));
        let mut child = child;
        assert_eq!(child.wait().unwrap().code(), Some(9));
        // Reaped: no such process any more.
        let (n, out) = call(kq.as_raw_fd(), &[proc_change(pid, EV_ADD)], 8, 0);
        assert_eq!(
            (n, out[0].flags, out[0].data),
            (1, EV_ERROR, libc::ESRCH as isize)
        );
        let other = kevent {
            fflags: 0x4000_0000, // NOTE_FORK: not emulated
            ..proc_change(std::process::id(), EV_ADD)
        };
        assert_eq!(
            call(kq.as_raw_fd(), &[other], 8, 0).1[0].data,
            libc::EINVAL as isize
        );
    }

    /// A directory of its own under the temporary directory, removed on
    /// drop.
    struct TempDir(std::path::PathBuf);

    impl TempDir {
        fn new(what: &str) -> TempDir {
            let dir = std::env::temp_dir().join(format!(
                "evloop-vnode-{what}-{}-{:?}",
                std::process::id(),
                std::thread::current().id()
            ));
            std::fs::create_dir_all(&dir).unwrap();
            TempDir(dir)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn vnode_change(fd: RawFd, flags: u16) -> kevent {
        kevent {
            fflags: NOTE_DELETE
                | NOTE_WRITE
                | NOTE_EXTEND
                | NOTE_ATTRIB
                | NOTE_LINK
                | NOTE_RENAME
                | NOTE_REVOKE,
            ..change(fd, EVFILT_VNODE, flags)
        }
    }

    /// The notes of the next report of `fd`'s vnode knote (0: none within
    /// `ms`).
    fn notes_of(kq: RawFd, fd: RawFd, ms: i64) -> u32 {
        let (n, out) = call(kq, &[], 8, ms);
        assert!(n >= 0, "kevent: {}", io::Error::last_os_error());
        out.iter()
            .filter(|e| e.filter == EVFILT_VNODE && e.ident == fd as uintptr_t)
            .fold(0, |acc, e| acc | e.fflags)
    }

    #[test]
    fn vnode_notes_of_a_file() {
        let kq = new_kqueue();
        let dir = TempDir::new("file");
        let (path, other) = (dir.0.join("f"), dir.0.join("g"));
        std::fs::write(&path, "x").unwrap();
        let file = std::fs::File::open(&path).unwrap();
        let fd = file.as_raw_fd();
        let (n, _) = call(kq.as_raw_fd(), &[vnode_change(fd, EV_ADD | EV_CLEAR)], 8, 0);
        assert_eq!(n, 0);
        let q = kq.as_raw_fd();
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        f.write_all(b"more").unwrap();
        assert_eq!(notes_of(q, fd, 1000), NOTE_WRITE | NOTE_EXTEND, "grown");
        assert_eq!(notes_of(q, fd, 0), 0, "EV_CLEAR: reported once");
        f.set_len(1).unwrap();
        assert_eq!(notes_of(q, fd, 1000), NOTE_WRITE, "shrunk: not extended");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(notes_of(q, fd, 1000), NOTE_ATTRIB);
        std::fs::hard_link(&path, &other).unwrap();
        assert_eq!(notes_of(q, fd, 1000), NOTE_LINK);
        std::fs::remove_file(&other).unwrap();
        assert_eq!(
            notes_of(q, fd, 1000),
            NOTE_DELETE,
            "unlink() of one of its names"
        );
        let moved = dir.0.join("moved");
        std::fs::rename(&path, &moved).unwrap();
        assert_eq!(notes_of(q, fd, 1000), NOTE_RENAME);
        std::fs::write(&path, "a new file").unwrap();
        std::fs::rename(&path, &moved).unwrap();
        assert_eq!(notes_of(q, fd, 1000), NOTE_DELETE, "renamed over");
        // Notes not asked for are not reported.
        let only_rename = kevent {
            fflags: NOTE_RENAME,
            ..change(fd, EVFILT_VNODE, EV_ADD)
        };
        assert_eq!(call(q, &[only_rename], 8, 0).0, 0);
        f.write_all(b"unseen").unwrap();
        assert_eq!(notes_of(q, fd, 50), 0);
        // Closing the descriptor drops the knote.
        drop(file);
        drop(f);
        let (n, out) = call(q, &[vnode_change(fd, EV_DELETE)], 8, 0);
        assert_eq!((n, out[0].data), (1, libc::EBADF as isize));
    }

    #[test]
    fn vnode_notes_of_a_directory() {
        let kq = new_kqueue();
        let (dir, elsewhere) = (TempDir::new("dir"), TempDir::new("elsewhere"));
        std::fs::write(dir.0.join("child"), "x").unwrap();
        let d = std::fs::File::open(&dir.0).unwrap();
        let fd = d.as_raw_fd();
        let q = kq.as_raw_fd();
        assert_eq!(call(q, &[vnode_change(fd, EV_ADD | EV_CLEAR)], 8, 0).0, 0);
        std::fs::write(dir.0.join("child"), "changed").unwrap();
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::Permissions::from_mode(0o600);
        std::fs::set_permissions(dir.0.join("child"), mode).unwrap();
        assert_eq!(
            notes_of(q, fd, 50),
            0,
            "an entry's content and attributes are its own"
        );
        std::fs::write(dir.0.join("new"), "x").unwrap();
        assert_eq!(notes_of(q, fd, 1000), NOTE_WRITE, "an entry added");
        std::fs::create_dir(dir.0.join("sub")).unwrap();
        assert_eq!(
            notes_of(q, fd, 1000),
            NOTE_WRITE | NOTE_LINK,
            "a subdirectory"
        );
        std::fs::rename(dir.0.join("new"), dir.0.join("renamed")).unwrap();
        assert_eq!(
            notes_of(q, fd, 1000),
            NOTE_WRITE,
            "renamed within: no NOTE_EXTEND"
        );
        std::fs::rename(dir.0.join("renamed"), elsewhere.0.join("gone")).unwrap();
        assert_eq!(
            notes_of(q, fd, 1000),
            NOTE_WRITE | NOTE_EXTEND,
            "renamed away"
        );
        std::fs::remove_file(dir.0.join("child")).unwrap();
        assert_eq!(notes_of(q, fd, 1000), NOTE_WRITE, "an entry removed");
        let (n, _) = call(q, &[vnode_change(fd, EV_DELETE)], 8, 0);
        assert_eq!(n, 0);
        let (n, out) = call(q, &[vnode_change(fd, EV_DELETE)], 8, 0);
        assert_eq!((n, out[0].data), (1, libc::ENOENT as isize));
    }

    #[test]
    fn vnode_without_clear_stays_active() {
        let kq = new_kqueue();
        let dir = TempDir::new("level");
        let path = dir.0.join("f");
        std::fs::write(&path, "x").unwrap();
        let file = std::fs::File::open(&path).unwrap();
        let (fd, q) = (file.as_raw_fd(), kq.as_raw_fd());
        assert_eq!(call(q, &[vnode_change(fd, EV_ADD)], 8, 0).0, 0);
        assert_eq!(notes_of(q, fd, 20), 0, "nothing happened yet");
        std::fs::write(&path, "y").unwrap();
        assert_eq!(notes_of(q, fd, 1000) & NOTE_WRITE, NOTE_WRITE);
        // A minute's timeout, so that "without waiting" does not depend
        // on how fast the machine is: a wait would take the whole minute.
        let t = Instant::now();
        assert_eq!(
            notes_of(q, fd, 60_000) & NOTE_WRITE,
            NOTE_WRITE,
            "still active"
        );
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "and reported without waiting"
        );
        let once = kevent {
            fflags: NOTE_WRITE,
            ..change(fd, EVFILT_VNODE, EV_DELETE)
        };
        assert_eq!(call(q, &[once], 8, 0).0, 0);
        let oneshot = kevent {
            fflags: NOTE_ATTRIB,
            ..change(fd, EVFILT_VNODE, EV_ADD | EV_ONESHOT)
        };
        assert_eq!(call(q, &[oneshot], 8, 0).0, 0);
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::Permissions::from_mode(0o600);
        std::fs::set_permissions(&path, mode).unwrap();
        assert_eq!(notes_of(q, fd, 1000), NOTE_ATTRIB);
        let (n, out) = call(q, &[vnode_change(fd, EV_DELETE)], 8, 0);
        assert_eq!(
            (n, out[0].data),
            (1, libc::ENOENT as isize),
            "one-shot: deleted"
        );
    }

    #[test]
    fn not_inherited_by_a_child_and_null_timeout_waits() {
        let kq = new_kqueue();
        let (a, _b) = UnixStream::pair().unwrap();
        let add = change(a.as_raw_fd(), EVFILT_WRITE, EV_ADD);
        let mut out = [change(-1, 0, 0); 2];
        // SAFETY: one change, room for two records, a null timeout
        // (forever: the knote is ready at once).
        let n = unsafe { kevent(kq.as_raw_fd(), &add, 1, out.as_mut_ptr(), 2, ptr::null()) };
        assert_eq!(n, 1);
        let mut guard = queues();
        guard
            .as_mut()
            .unwrap()
            .get_mut(&kq.as_raw_fd())
            .unwrap()
            .owner += 1;
        drop(guard);
        assert_eq!(
            (call(kq.as_raw_fd(), &[], 2, 0).0, errno()),
            (-1, libc::EBADF)
        );
    }
}
