//! Child processes: the process-wide table of watched children, the
//! checks and the reaping every Unix backend shares, and the watch list of
//! the epoll, poll and select backends (kqueue has `EVFILT_PROC` instead,
//! and keeps its own list of filters).
//!
//! Only watched pids are ever reaped, never `waitpid(-1)` (another part of
//! the program may be waiting for its own children), unless the loop asks
//! for every child (a watcher of any child, libev's pid 0): see "Any
//! child" below.
//!
//! # How a backend notices an exit
//!
//! - Linux: one `pidfd_open(pid)` per child, an internal fd in the
//!   backend's kernel set; readable once the child has exited, when
//!   `waitid(P_PIDFD, ..)` reaps it.
//! - Where pidfds are not available (`ENOSYS` on kernels before 5.3, `EPERM`
//!   under some seccomp filters; every other Unix), or when a test forces
//!   it: `SIGCHLD` through the hub (an internal watch, not reported to the
//!   loop unless it watches `SIGCHLD` itself), and on each arrival a
//!   `waitpid(pid, WNOHANG)` for each watched pid (and one at `watch_child`,
//!   for a child that has already exited).
//! - kqueue: an `EVFILT_PROC` filter with `NOTE_EXIT` (`backends/kqueue.rs`).
//!
//! # One child, many loops: the table
//!
//! A child's status can be read once, by whoever reaps it, and any number
//! of backends (one per loop, in any threads) may watch one pid. So the
//! backends of a process reap through one table ([`Member`] is a
//! backend's place in it), keyed by pid:
//!
//! - `watch_child` checks that the pid is an unreaped child and joins its
//!   entry ([`Member::join`]), both under the table's lock, so that no reap
//!   by another backend comes between the two.
//! - Whichever member notices the exit first reaps the child under the
//!   same lock ([`Member::reap`]: `waitid(P_PIDFD)` or `waitpid(pid,
//!   WNOHANG)`, neither of which blocks), removes the entry, and delivers
//!   the [`ChildExit`] to the inbox of every member, poking the wake fd of
//!   each other member through its hub slot, so that a loop blocked in
//!   another thread wakes up and takes it. A member that notices the exit
//!   later finds no entry: its exit is in its inbox already. Each child is
//!   reaped once; each backend that watched it reports it once.
//! - kqueue reaps with a blocking `waitpid` (its note may come a moment
//!   before the zombie can be reaped), which must not hold the lock: it
//!   claims the entry first ([`Member::claim`]; the other members then
//!   leave it alone, and a backend that joins meanwhile is told too),
//!   reaps, and delivers ([`Member::publish`]).
//! - Reaped elsewhere: when the reap finds that the pid is no child of
//!   ours any more (`ECHILD`: `std::process::Child::wait`, a `waitpid` of
//!   the program's, `SIGCHLD` ignored so that the kernel reaped it), the
//!   status is gone. The members are told so, with
//!   [`ExitStatus::Unknown`], rather than left waiting for ever.
//! - `unwatch_child` leaves the entry, the child left unreaped (an exit
//!   delivered but not yet taken is dropped: the loop no longer asks); the
//!   last member out removes it. A backend dropped (or re-initialised)
//!   leaves every entry.
//!
//! # Any child
//!
//! A backend that watches any child joins the table's list of such
//! members ([`Member::join_any`]) and watches `SIGCHLD`; on each arrival
//! (and once when it starts, for children that exited before) it reaps
//! every child that has exited, `waitpid(-1, WNOHANG)` until none is left,
//! under the table's lock ([`Member::reap_any`]). Each exit goes to the
//! members of the child's entry, if some backend watches it by pid (the
//! entry is removed, as after any reap), and to every any-child member,
//! each once. Conversely every exit that any member reaps (or learns was
//! reaped elsewhere) goes to the any-child members too: they hear of every
//! child. The one reap outside the lock, kqueue's claimed one, cannot be
//! kept from `waitpid(-1)`: if `reap_any` takes a claimed child, it leaves
//! the status in the entry ([`Entry::found`]), and the claimer publishes it
//! instead of the `ECHILD` its own reap then gets.
//!
//! [`Member::spawn`] starts a child under the lock and joins its entry in
//! the same hold, so that no `reap_any` can take it before it is watched.
//! [`Member::signal`] sends a signal with `kill(2)` under the lock, after
//! checking that the child is still unreaped (the pid then cannot have
//! been reused); a backend with the child's pidfd signals through it
//! instead (`pidfd_send_signal`).
//!
//! Locking: one `Mutex` for the table, never touched by a signal handler
//! (the hub's handler only writes wake fds), held only for changes of the
//! table and system calls that do not block (`waitid` / `waitpid` with
//! `WNOHANG`, `kill`, a `write` to an eventfd or a pipe), and across the
//! `fork` and `exec` of [`Member::spawn`]. Each member's inbox has
//! a lock of its own, taken inside the table's (a delivery, a leave) or
//! alone (its backend taking its exits), never the other way round. The
//! hub's lock is never taken while the table's is held.
//!
//! Fork: the table records the process its entries belong to, and a
//! forked child that takes the lock finds its parent's pid there and
//! starts with an empty table: the parent's children are not the child's,
//! and the parent's backends are not there to be told. As with the hub, a
//! `fork` while another thread holds the lock leaves the child's copy
//! locked; a child that then watches a child process waits for ever.
#![allow(unsafe_code)]

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use super::hub::Slot;
use crate::backend::ChildExit;
use crate::backend::InternalFds;
use crate::ExitStatus;

/// Checks that `pid` is an unreaped child of this process, without reaping
/// it, and returns it as a `pid_t`.
pub(crate) fn check_child(backend: &str, pid: u32) -> io::Result<libc::pid_t> {
    let refuse = |err: io::Error| {
        io::Error::new(
            err.kind(),
            format!(
                "the {backend} backend cannot watch pid {pid}: it is not an unreaped child \
                 of this process ({err})"
            ),
        )
    };
    let id = match libc::pid_t::try_from(pid) {
        Ok(id) if id > 0 => id,
        _ => return Err(refuse(io::Error::from_raw_os_error(libc::ESRCH))),
    };
    peek(id).map(|_| id).map_err(refuse)
}

/// Whether child `pid` has exited (or is no child of ours any more), left
/// unreaped.
pub(crate) fn has_exited(pid: libc::pid_t) -> bool {
    peek(pid).unwrap_or(true)
}

/// `waitid(P_PID, pid, WEXITED | WNOHANG | WNOWAIT)`: whether the child has
/// exited, without reaping it; `ECHILD` if it is not an unreaped child.
fn peek(pid: libc::pid_t) -> io::Result<bool> {
    loop {
        // SAFETY: all-zero is a valid siginfo_t, which waitid fills in.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: `info` is writable; the flags only inspect the child.
        let r = unsafe {
            libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
            )
        };
        if r == 0 {
            // SAFETY: filled by waitid, or left zero if the child runs.
            return Ok(unsafe { info.si_pid() } != 0);
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

/// The status `waitpid` reported.
pub(crate) fn exit_status(status: libc::c_int) -> ExitStatus {
    if libc::WIFSIGNALED(status) {
        ExitStatus::Signaled {
            signal: libc::WTERMSIG(status),
            core_dumped: libc::WCOREDUMP(status),
        }
    } else {
        ExitStatus::Exited(libc::WEXITSTATUS(status))
    }
}

/// `waitpid(pid)`, with `WNOHANG` unless `block`: `None` if it is still
/// running.
pub(crate) fn reap(pid: libc::pid_t, block: bool) -> io::Result<Option<ExitStatus>> {
    let flags = if block { 0 } else { libc::WNOHANG };
    loop {
        let mut status = 0;
        // SAFETY: `status` is writable; only this pid is waited for.
        let r = unsafe { libc::waitpid(pid, &mut status, flags) };
        if r > 0 {
            return Ok(Some(exit_status(status)));
        }
        if r == 0 {
            return Ok(None);
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

/// What a reap found: `None` while the child runs. An error means that it
/// is no child of ours any more (`ECHILD`: reaped by someone else), and its
/// status is gone: [`ExitStatus::Unknown`].
fn found(pid: libc::pid_t, result: io::Result<Option<ExitStatus>>) -> Option<ExitStatus> {
    match result {
        Ok(found) => found,
        Err(err) => {
            tracing::debug!(pid, %err, "a watched child was reaped elsewhere: status unknown");
            Some(ExitStatus::Unknown)
        }
    }
}

/// The process-wide table; see the module documentation.
struct Table {
    /// The process whose entries these are.
    owner: libc::pid_t,
    entries: HashMap<libc::pid_t, Entry>,
    /// The members that watch any child (see "Any child").
    any: Vec<Link>,
}

/// The backends watching one child.
#[derive(Default)]
struct Entry {
    /// A member has claimed the reap ([`Member::claim`]) and reaps outside
    /// the lock; the others leave the child alone.
    reaping: bool,
    /// The status a [`Member::reap_any`] took while the reap was claimed:
    /// the claimer publishes it.
    found: Option<ExitStatus>,
    members: Vec<Link>,
}

impl Entry {
    fn has(&self, inbox: &Arc<Inbox>) -> bool {
        self.members.iter().any(|l| Arc::ptr_eq(&l.inbox, inbox))
    }
}

/// A member of an entry: where its exit goes, and how to wake it.
struct Link {
    inbox: Arc<Inbox>,
    /// The member's hub slot, and the generation of its claim: a slot that
    /// has changed hands since is not poked ([`Slot::poke_for`]).
    slot: &'static Slot,
    generation: u64,
}

static TABLE: Mutex<Option<Table>> = Mutex::new(None);

/// Runs `f` on the table, under its lock; the table of a forked child
/// starts empty.
fn with_table<R>(f: impl FnOnce(&mut Table) -> R) -> R {
    // Each change leaves the table consistent, so a poisoned lock (a
    // panic elsewhere while it was held) is still usable.
    let mut guard = TABLE.lock().unwrap_or_else(|e| e.into_inner());
    let me = std::process::id() as libc::pid_t;
    let table = guard.get_or_insert_with(|| Table::new(me));
    table.adopt(me);
    f(table)
}

impl Table {
    fn new(owner: libc::pid_t) -> Table {
        Table {
            owner,
            entries: HashMap::new(),
            any: Vec::new(),
        }
    }

    /// The table as process `me` sees it: empty if its entries are
    /// another process's (the parent's, in a forked child).
    fn adopt(&mut self, me: libc::pid_t) {
        if self.owner != me {
            self.entries.clear();
            self.any.clear();
            self.owner = me;
        }
    }
}

/// Hands `exit` to every member of `entry` (removed from the table) and
/// every member of `any` (the table's any-child members), each once, and
/// wakes each but `reaper`, which takes its own after the reap.
fn deliver(any: &[Link], entry: Entry, exit: ChildExit, reaper: &Arc<Inbox>) {
    let tell = |link: &Link| {
        link.inbox.push(exit);
        if !Arc::ptr_eq(&link.inbox, reaper) {
            link.slot.poke_for(link.generation);
        }
    };
    entry.members.iter().for_each(tell);
    any.iter().filter(|a| !entry.has(&a.inbox)).for_each(tell);
}

/// The exits delivered to one backend, not yet taken.
#[derive(Debug, Default)]
struct Inbox {
    /// Whether `exits` may hold something: what the backend looks at
    /// after each poll, without taking the lock.
    mail: AtomicBool,
    exits: Mutex<Vec<ChildExit>>,
}

impl Inbox {
    fn lock(&self) -> MutexGuard<'_, Vec<ChildExit>> {
        self.exits.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn push(&self, exit: ChildExit) {
        let mut exits = self.lock();
        exits.push(exit);
        self.mail.store(true, Ordering::Release);
    }

    /// Whether an exit of `pid` waits here.
    fn holds(&self, pid: u32) -> bool {
        self.mail.load(Ordering::Acquire) && self.lock().iter().any(|e| e.pid == pid)
    }
}

/// What [`Member::join`] joined.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Joined {
    pub(crate) pid: libc::pid_t,
    /// Another member is reaping the child right now: its exit comes
    /// without looking (the child may be gone already, so that a pidfd or
    /// a filter could no longer be made for it).
    pub(crate) reaping: bool,
}

/// What [`Member::reap`] did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Reaped {
    /// The child runs: nothing happened.
    Running,
    /// The child has exited and is reaped (by this call, or before it by
    /// another member, or being reaped by one right now): its exit is, or
    /// will be, in the inbox of every member.
    Done,
}

/// A backend's place in the table: its inbox, and which children it
/// watches there. Dropping it leaves every entry.
#[derive(Debug, Default)]
pub(crate) struct Member {
    inbox: Arc<Inbox>,
    /// Whether it ever joined an entry (a backend that never watched a
    /// child never takes the table's lock).
    joined: bool,
    /// Whether it is in the table's list of any-child members.
    any: bool,
}

impl Member {
    /// Checks that `pid` is an unreaped child of this process (or one that
    /// another member is reaping right now) and joins its entry: from here
    /// on, whoever reaps it hands this backend its exit and pokes `slot`
    /// (this backend's, whose wake fd is in its kernel set).
    pub(crate) fn join(
        &mut self,
        backend: &str,
        pid: u32,
        slot: &'static Slot,
    ) -> io::Result<Joined> {
        self.joined = true;
        with_table(|t| {
            let id = libc::pid_t::try_from(pid).ok();
            // A member already ([`Member::spawn`]): nothing to check.
            if let Some((&id, e)) = id.and_then(|id| t.entries.get_key_value(&id)) {
                if e.has(&self.inbox) {
                    return Ok(Joined {
                        pid: id,
                        reaping: e.reaping,
                    });
                }
            }
            // Reaped (by a watcher of any child, say) and delivered here,
            // not yet taken: its exit comes without looking.
            if let Some(id) = id.filter(|_| self.inbox.holds(pid)) {
                return Ok(Joined {
                    pid: id,
                    reaping: true,
                });
            }
            let claimed = id.filter(|id| t.entries.get(id).is_some_and(|e| e.reaping));
            let id = match claimed {
                Some(id) => id,
                None => check_child(backend, pid)?,
            };
            let entry = t.entries.entry(id).or_default();
            if !entry.has(&self.inbox) {
                entry.members.push(Link {
                    inbox: self.inbox.clone(),
                    slot,
                    generation: slot.generation(),
                });
            }
            Ok(Joined {
                pid: id,
                reaping: claimed.is_some(),
            })
        })
    }

    /// Leaves the entry of `pid`, leaving the child unreaped; an exit of it
    /// delivered but not yet taken is dropped.
    pub(crate) fn leave(&self, pid: libc::pid_t) {
        with_table(|t| {
            if let Some(entry) = t.entries.get_mut(&pid) {
                entry
                    .members
                    .retain(|l| !Arc::ptr_eq(&l.inbox, &self.inbox));
                if entry.members.is_empty() {
                    t.entries.remove(&pid);
                }
            }
            // Under the table's lock: no delivery can come in between. (A
            // member that watches any child still wants it.)
            let mut exits = self.inbox.lock();
            exits.retain(|e| self.any || e.pid != pid as u32);
            if exits.is_empty() {
                self.inbox.mail.store(false, Ordering::Relaxed);
            }
        });
    }

    /// The child `pid` may have exited: reaps it (through `pidfd` if the
    /// backend has one) unless another member has or is doing so, and
    /// delivers its exit to every member. Never blocks.
    pub(crate) fn reap(&self, pid: libc::pid_t, pidfd: Option<RawFd>) -> Reaped {
        with_table(|t| {
            match t.entries.get(&pid) {
                Some(entry) if !entry.reaping && entry.has(&self.inbox) => {}
                // Reaped and delivered already, or being reaped by another
                // member, which will deliver.
                _ => return Reaped::Done,
            }
            let result = match pidfd.map(pidfd_reap) {
                // Linux 5.3 has pidfds, but `waitid` takes them from 5.4.
                Some(Err(err)) if err.raw_os_error() == Some(libc::EINVAL) => reap(pid, false),
                Some(result) => result,
                None => reap(pid, false),
            };
            let Some(status) = found(pid, result) else {
                return Reaped::Running;
            };
            if let Some(entry) = t.entries.remove(&pid) {
                let exit = ChildExit {
                    pid: pid as u32,
                    status,
                };
                deliver(&t.any, entry, exit, &self.inbox);
            }
            Reaped::Done
        })
    }

    /// Whether exits wait in the inbox.
    pub(crate) fn has_mail(&self) -> bool {
        self.inbox.mail.load(Ordering::Acquire)
    }

    /// Moves the exits delivered to this backend into `out`.
    pub(crate) fn take(&self, out: &mut Vec<ChildExit>) {
        if !self.has_mail() {
            return;
        }
        let mut exits = self.inbox.lock();
        self.inbox.mail.store(false, Ordering::Relaxed);
        out.append(&mut exits);
    }

    /// Leaves every entry (the children unreaped) and drops every exit not
    /// yet taken: after `fork` (in the child, whose table has forgotten the
    /// parent's entries anyway) or when the backend goes.
    pub(crate) fn leave_all(&mut self) {
        if !self.joined {
            return;
        }
        self.any = false;
        with_table(|t| {
            t.any.retain(|l| !Arc::ptr_eq(&l.inbox, &self.inbox));
            t.entries.retain(|_, entry| {
                entry
                    .members
                    .retain(|l| !Arc::ptr_eq(&l.inbox, &self.inbox));
                !entry.members.is_empty()
            });
            self.inbox.lock().clear();
            self.inbox.mail.store(false, Ordering::Relaxed);
        });
    }
}

/// Any child, spawning, signalling (see "Any child" in the module
/// documentation).
impl Member {
    /// Joins the table's any-child members: from here on, every exit that
    /// a member reaps, or that [`Member::reap_any`] finds, is delivered to
    /// this backend too, and `slot` poked. The caller watches `SIGCHLD`
    /// and calls [`Member::reap_any`] after each arrival.
    pub(crate) fn join_any(&mut self, slot: &'static Slot) {
        self.joined = true;
        if self.any {
            return;
        }
        self.any = true;
        with_table(|t| {
            t.any.push(Link {
                inbox: self.inbox.clone(),
                slot,
                generation: slot.generation(),
            })
        });
    }

    /// Leaves the any-child members (exits already delivered stay, to be
    /// taken: the loop's watchers of their pids may want them).
    pub(crate) fn leave_any(&mut self) {
        if !std::mem::take(&mut self.any) {
            return;
        }
        with_table(|t| t.any.retain(|l| !Arc::ptr_eq(&l.inbox, &self.inbox)));
    }

    /// Whether the child `pid`, whose entry this member joined, has been
    /// reaped since (its entry gone: the exit was delivered here).
    pub(crate) fn delivered(&self, pid: libc::pid_t) -> bool {
        with_table(|t| !t.entries.get(&pid).is_some_and(|e| e.has(&self.inbox)))
    }

    /// Whether this member watches any child.
    pub(crate) fn watches_any(&self) -> bool {
        self.any
    }

    /// Reaps every child of the process that has exited
    /// (`waitpid(-1, WNOHANG)` until there is none), under the table's
    /// lock, and delivers each exit to the members of its entry, if any,
    /// and to every any-child member. Never blocks.
    pub(crate) fn reap_any(&self) {
        if !self.any {
            return;
        }
        with_table(|t| loop {
            let mut status = 0;
            // SAFETY: `status` is writable; WNOHANG: never blocks.
            let r = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
            if r < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            // 0: children run, none has exited; ECHILD: no children.
            if r <= 0 {
                return;
            }
            let exit = ChildExit {
                pid: r as u32,
                status: exit_status(status),
            };
            match t.entries.get_mut(&r) {
                // kqueue reaps it outside the lock, and gets ECHILD now:
                // it publishes this status instead.
                Some(entry) if entry.reaping => entry.found = Some(exit.status),
                Some(_) => {
                    if let Some(entry) = t.entries.remove(&r) {
                        deliver(&t.any, entry, exit, &self.inbox);
                    }
                }
                None => deliver(&t.any, Entry::default(), exit, &self.inbox),
            }
        })
    }

    /// Starts `command` and joins the new child's entry, both under the
    /// table's lock, so that no [`Member::reap_any`] can take the child
    /// before it is watched (the caller then watches it as usual, and
    /// [`Member::join`] finds it a member already). If the caller fails
    /// to watch it after all, it [`Member::leave`]s.
    pub(crate) fn spawn(
        &mut self,
        command: &mut Command,
        slot: &'static Slot,
    ) -> io::Result<std::process::Child> {
        self.joined = true;
        with_table(|t| {
            let child = command.spawn()?;
            t.entries
                .entry(child.id() as libc::pid_t)
                .or_default()
                .members
                .push(Link {
                    inbox: self.inbox.clone(),
                    slot,
                    generation: slot.generation(),
                });
            Ok(child)
        })
    }

    /// Sends `signal` to `pid` with `kill(2)` if this member watches it
    /// and it is still an unreaped child (running, or a zombie), checked
    /// under the table's lock, so that no loop of the process can reap it
    /// (and the pid be reused) before the signal is sent. `NotFound` if it
    /// has been reaped or is not watched here.
    pub(crate) fn signal(&self, pid: libc::pid_t, signal: i32) -> io::Result<()> {
        with_table(|t| {
            let watched = t
                .entries
                .get(&pid)
                .is_some_and(|e| !e.reaping && e.has(&self.inbox));
            // `peek` fails (ECHILD) once someone else has reaped it.
            if !watched || peek(pid).is_err() {
                return Err(gone(pid));
            }
            // SAFETY: plain system call with integer arguments; `pid` is an
            // unreaped child of ours, so it names that child.
            if unsafe { libc::kill(pid, signal) } < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        })
    }
}

/// The error of a signal to a child that has been reaped.
fn gone(pid: libc::pid_t) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("child {pid} has exited and been reaped"),
    )
}

// Only kqueue reaps outside the lock.
#[cfg_attr(
    not(any(
        feature = "emulated-kqueue",
        target_os = "macos",
        target_os = "ios",
        target_os = "freebsd",
        target_os = "netbsd",
        target_os = "openbsd",
        target_os = "dragonfly"
    )),
    allow(dead_code)
)]
impl Member {
    /// Takes on the reap of `pid`, which has exited, to do it outside the
    /// lock (a blocking `waitpid`), then [`Member::publish`]; false if
    /// another member has reaped it or is reaping it (it will deliver).
    pub(crate) fn claim(&self, pid: libc::pid_t) -> bool {
        with_table(|t| match t.entries.get_mut(&pid) {
            Some(entry) if !entry.reaping && entry.has(&self.inbox) => {
                entry.reaping = true;
                true
            }
            _ => false,
        })
    }

    /// Delivers what the reap of a claimed `pid` found (a reap that failed
    /// because someone else reaped the child: see [`found`]).
    pub(crate) fn publish(&self, pid: libc::pid_t, result: io::Result<Option<ExitStatus>>) {
        with_table(|t| {
            let entry = t.entries.remove(&pid);
            // A `reap_any` took it first, and left its status here.
            let status = match (&result, entry.as_ref().and_then(|e| e.found)) {
                (Err(_), Some(status)) => status,
                _ => found(pid, result).unwrap_or(ExitStatus::Unknown),
            };
            let exit = ChildExit {
                pid: pid as u32,
                status,
            };
            match entry {
                Some(entry) => deliver(&t.any, entry, exit, &self.inbox),
                // Not expected (the claim keeps the entry); never lost.
                None => self.inbox.push(exit),
            }
        })
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        self.leave_all();
    }
}

/// How a backend of [`Children`] watches one child.
#[derive(Debug)]
enum How {
    /// A pidfd in the kernel set, readable once the child has exited.
    Pidfd(OwnedFd),
    /// Looked for after each `SIGCHLD`.
    Sigchld,
    /// It has exited and is reaped (by this backend or another), or being
    /// reaped by another: its exit comes through the inbox.
    Exited,
}

/// One watched child.
#[derive(Debug)]
struct Child {
    pid: libc::pid_t,
    how: How,
}

/// What [`Children::add`] did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Added {
    /// Watched already.
    Already,
    /// Being reaped by another backend that watches it too: its exit comes
    /// without looking.
    Exited,
    /// A pidfd to register in the kernel set.
    Pidfd(RawFd),
    /// Watched through `SIGCHLD`: the caller watches it for the list.
    Sigchld,
}

/// The watched children of a backend without `EVFILT_PROC`, and its place
/// in the table. Lookups are linear: a backend watches few children, and
/// each is looked up once or twice.
#[derive(Debug, Default)]
pub(crate) struct Children {
    /// Never try pidfds (forced, or the kernel refused them once).
    sigchld_only: bool,
    watched: Vec<Child>,
    member: Member,
}

impl Children {
    /// For tests: watch through `SIGCHLD` even where pidfds work.
    pub(crate) fn force_sigchld(&mut self) {
        self.sigchld_only = true;
    }

    /// Whether some child is watched through `SIGCHLD`.
    pub(crate) fn uses_sigchld(&self) -> bool {
        self.watched.iter().any(|c| matches!(c.how, How::Sigchld))
    }

    /// The pidfds to keep in the kernel set.
    pub(crate) fn pidfds(&self) -> impl Iterator<Item = RawFd> + '_ {
        self.watched.iter().filter_map(|c| match &c.how {
            How::Pidfd(fd) => Some(fd.as_raw_fd()),
            _ => None,
        })
    }

    /// Starts watching `pid`, which must be an unreaped child (see
    /// [`Member::join`]; `slot` is the backend's), with a pidfd if the
    /// kernel has them.
    pub(crate) fn add(
        &mut self,
        backend: &str,
        pid: u32,
        slot: &'static Slot,
    ) -> io::Result<(libc::pid_t, Added)> {
        if let Some(c) = self.watched.iter().find(|c| c.pid as u32 == pid) {
            return Ok((c.pid, Added::Already));
        }
        let Joined { pid, reaping } = self.member.join(backend, pid, slot)?;
        if reaping {
            self.watched.push(Child {
                pid,
                how: How::Exited,
            });
            return Ok((pid, Added::Exited));
        }
        let how = if self.sigchld_only {
            How::Sigchld
        } else {
            match pidfd_open(pid) {
                Ok(fd) => How::Pidfd(fd),
                Err(err)
                    if matches!(err.raw_os_error(), Some(libc::ENOSYS) | Some(libc::EPERM)) =>
                {
                    tracing::debug!(%err, "no pidfds: child exits through SIGCHLD");
                    self.sigchld_only = true;
                    How::Sigchld
                }
                // Reaped since the join (by a watcher of any child, or
                // another loop's of this pid): its exit is in the inbox.
                Err(err)
                    if err.raw_os_error() == Some(libc::ESRCH) && self.member.delivered(pid) =>
                {
                    How::Exited
                }
                Err(err) => {
                    self.member.leave(pid);
                    return Err(io::Error::new(
                        err.kind(),
                        format!(
                            "the {backend} backend cannot watch pid {pid}: pidfd_open failed ({err})"
                        ),
                    ));
                }
            }
        };
        let added = match &how {
            How::Pidfd(fd) => Added::Pidfd(fd.as_raw_fd()),
            How::Sigchld => Added::Sigchld,
            How::Exited => Added::Exited,
        };
        self.watched.push(Child { pid, how });
        Ok((pid, added))
    }

    /// Watches `pid` (watched with a pidfd just now) through `SIGCHLD`
    /// instead, its pidfd closed: for a backend that cannot hold the
    /// pidfd's number in its kernel set (select, past `FD_SETSIZE`).
    pub(crate) fn use_sigchld_for(&mut self, pid: libc::pid_t) {
        if let Some(c) = self.watched.iter_mut().find(|c| c.pid == pid) {
            if matches!(c.how, How::Pidfd(_)) {
                c.how = How::Sigchld;
            }
        }
    }

    /// Stops watching `pid` without reaping it; its pidfd, if it is still
    /// in the kernel set, is returned for the caller to take out (and
    /// close). An exit of it not yet taken is dropped: the loop no longer
    /// asks.
    pub(crate) fn remove(&mut self, pid: libc::pid_t) -> Option<Option<OwnedFd>> {
        let i = self.watched.iter().position(|c| c.pid == pid)?;
        self.member.leave(pid);
        match self.watched.swap_remove(i).how {
            How::Pidfd(fd) => Some(Some(fd)),
            _ => Some(None),
        }
    }

    /// After a `SIGCHLD`: reaps every child watched through it that has
    /// exited (unless another backend did).
    pub(crate) fn scan(&mut self) {
        let member = &self.member;
        for c in &mut self.watched {
            if matches!(c.how, How::Sigchld) && member.reap(c.pid, None) == Reaped::Done {
                c.how = How::Exited;
            }
        }
    }

    /// A pidfd of the list is readable: reaps its child (unless another
    /// backend did). Returns the pidfd if the child has exited (for the
    /// caller to take out of the kernel set); `None` if `fd` is not one of
    /// the list's, or the child has not exited after all.
    pub(crate) fn pidfd_ready(&mut self, fd: RawFd) -> Option<OwnedFd> {
        let c = self
            .watched
            .iter_mut()
            .find(|c| matches!(&c.how, How::Pidfd(p) if p.as_raw_fd() == fd))?;
        if self.member.reap(c.pid, Some(fd)) == Reaped::Running {
            return None;
        }
        match std::mem::replace(&mut c.how, How::Exited) {
            How::Pidfd(pidfd) => Some(pidfd),
            _ => None,
        }
    }

    /// Moves the exits delivered to this backend (reaped by it or by
    /// another) into `out`, and forgets their children: a pidfd still in
    /// the kernel set (another backend reaped the child first) is taken
    /// out of `set` and closed. True if there were any.
    pub(crate) fn take_exits(
        &mut self,
        out: &mut Vec<ChildExit>,
        set: &mut dyn InternalFds,
    ) -> bool {
        let from = out.len();
        self.member.take(out);
        for exit in &out[from..] {
            let Some(i) = self.watched.iter().position(|c| c.pid as u32 == exit.pid) else {
                continue;
            };
            if let How::Pidfd(fd) = self.watched.swap_remove(i).how {
                set.remove(fd.as_raw_fd());
            }
        }
        out.len() > from
    }

    /// Starts watching any child (see [`Member::join_any`]; the caller
    /// watches `SIGCHLD`).
    pub(crate) fn join_any(&mut self, slot: &'static Slot) {
        self.member.join_any(slot);
    }

    /// Stops watching any child.
    pub(crate) fn leave_any(&mut self) {
        self.member.leave_any();
    }

    /// Whether any child is watched.
    pub(crate) fn watches_any(&self) -> bool {
        self.member.watches_any()
    }

    /// After a `SIGCHLD`, while watching any child: reaps every child that
    /// has exited ([`Member::reap_any`]).
    pub(crate) fn reap_any(&self) {
        self.member.reap_any();
    }

    /// Starts `command` as a watched child's entry ([`Member::spawn`]); the
    /// caller then watches it with [`Children::add`], or
    /// [`Children::abandon`]s it.
    pub(crate) fn spawn(
        &mut self,
        command: &mut Command,
        slot: &'static Slot,
    ) -> io::Result<std::process::Child> {
        self.member.spawn(command, slot)
    }

    /// A spawned child that could not be watched after all: its entry is
    /// left, the child unreaped (the caller kills and reaps it).
    pub(crate) fn abandon(&mut self, pid: u32) {
        if let Ok(pid) = libc::pid_t::try_from(pid) {
            if self.remove(pid).is_none() {
                self.member.leave(pid);
            }
        }
    }

    /// Sends `signal` to the watched child `pid`, only if it is unreaped:
    /// through its pidfd where it has one (which cannot name another
    /// process, whoever reaped the child), else [`Member::signal`].
    /// `NotFound` if it has been reaped or is not watched here.
    pub(crate) fn signal(&self, pid: u32, signal: i32) -> io::Result<()> {
        let Some(c) = self.watched.iter().find(|c| c.pid as u32 == pid) else {
            return Err(gone(pid as libc::pid_t));
        };
        match &c.how {
            How::Pidfd(fd) => match pidfd_send_signal(fd.as_raw_fd(), signal) {
                Err(err) if err.raw_os_error() == Some(libc::ESRCH) => Err(gone(c.pid)),
                Err(err) if err.raw_os_error() == Some(libc::ENOSYS) => {
                    self.member.signal(c.pid, signal)
                }
                sent => sent,
            },
            How::Sigchld => self.member.signal(c.pid, signal),
            How::Exited => Err(gone(c.pid)),
        }
    }

    /// Forgets every child (after `fork`: they are the parent's), closing
    /// their pidfds, and any exit not yet taken.
    pub(crate) fn clear(&mut self) {
        self.watched.clear();
        self.member.leave_all();
    }
}

cfg_if::cfg_if! {
    if #[cfg(any(target_os = "linux", target_os = "android"))] {
        /// `pidfd_open(pid, 0)` (close-on-exec by definition).
        fn pidfd_open(pid: libc::pid_t) -> io::Result<OwnedFd> {
            use std::os::fd::FromRawFd;
            // SAFETY: plain system call with integer arguments.
            let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
            if fd < 0 {
                return Err(io::Error::last_os_error());
            }
            // SAFETY: a new descriptor, owned by nobody else.
            Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
        }

        /// `pidfd_send_signal(fd, signal, NULL, 0)`: `ESRCH` once the child
        /// has been reaped (the pidfd never names another process).
        fn pidfd_send_signal(fd: RawFd, signal: i32) -> io::Result<()> {
            // SAFETY: a pidfd we own, a signal number, no siginfo (NULL:
            // as `kill` would fill it), no flags.
            let r = unsafe {
                libc::syscall(
                    libc::SYS_pidfd_send_signal,
                    fd,
                    signal,
                    std::ptr::null::<libc::siginfo_t>(),
                    0,
                )
            };
            if r < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        }

        /// `waitid(P_PIDFD, fd, WEXITED | WNOHANG)`: `None` if the child is
        /// still running.
        fn pidfd_reap(fd: RawFd) -> io::Result<Option<ExitStatus>> {
            loop {
                // SAFETY: all-zero is a valid siginfo_t, which waitid fills.
                let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
                // SAFETY: `info` is writable; `fd` is a pidfd we own.
                let r = unsafe {
                    libc::waitid(libc::P_PIDFD, fd as libc::id_t, &mut info, libc::WEXITED | libc::WNOHANG)
                };
                if r < 0 {
                    let err = io::Error::last_os_error();
                    if err.kind() == io::ErrorKind::Interrupted {
                        continue;
                    }
                    return Err(err);
                }
                // SAFETY: waitid filled `info` for a child event (or left it
                // zero: no child has changed state).
                let (pid, status) = unsafe { (info.si_pid(), info.si_status()) };
                if pid == 0 {
                    return Ok(None);
                }
                return Ok(Some(match info.si_code {
                    libc::CLD_KILLED => ExitStatus::Signaled { signal: status, core_dumped: false },
                    libc::CLD_DUMPED => ExitStatus::Signaled { signal: status, core_dumped: true },
                    _ => ExitStatus::Exited(status),
                }));
            }
        }
    } else {
        /// No pidfds here: every child is watched through `SIGCHLD`.
        fn pidfd_open(_pid: libc::pid_t) -> io::Result<OwnedFd> {
            Err(io::Error::from_raw_os_error(libc::ENOSYS))
        }

        fn pidfd_reap(_fd: RawFd) -> io::Result<Option<ExitStatus>> {
            Err(io::Error::from_raw_os_error(libc::ENOSYS))
        }

        fn pidfd_send_signal(_fd: RawFd, _signal: i32) -> io::Result<()> {
            Err(io::Error::from_raw_os_error(libc::ENOSYS))
        }
    }
}

#[cfg(test)]
// Most of the children spawned here are reaped by the table, not by std.
#[allow(clippy::zombie_processes)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn statuses() {
        // The encodings of wait(2) on Linux and the BSDs alike.
        assert_eq!(exit_status(3 << 8), ExitStatus::Exited(3));
        assert_eq!(
            exit_status(libc::SIGKILL),
            ExitStatus::Signaled {
                signal: libc::SIGKILL,
                core_dumped: false
            }
        );
        assert_eq!(
            exit_status(libc::SIGABRT | 0x80),
            ExitStatus::Signaled {
                signal: libc::SIGABRT,
                core_dumped: true
            }
        );
    }

    #[test]
    fn only_unreaped_children_pass() {
        let mut child = Command::new("true").spawn().unwrap();
        let pid = child.id();
        assert_eq!(check_child("t", pid).unwrap(), pid as libc::pid_t);
        child.wait().unwrap();
        let err = check_child("t", pid).unwrap_err().to_string();
        assert!(err.contains("not an unreaped child"), "{err}");
        assert!(err.contains(&format!("os error {}", libc::ECHILD)), "{err}");
        assert!(check_child("t", std::process::id()).is_err(), "ourselves");
        assert!(check_child("t", 0).is_err() && check_child("t", u32::MAX).is_err());
    }

    /// Waits (without reaping: `WNOWAIT`) until `pid` has exited.
    fn wait_exited(pid: u32) {
        // SAFETY: `info` is written by waitid; the child is left unreaped.
        unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            let r = libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOWAIT,
            );
            assert_eq!(r, 0, "waitid: {}", io::Error::last_os_error());
        }
    }

    /// A child blocked reading its stdin, which exits with `code` once
    /// the test drops its stdin.
    fn held(code: i32) -> std::process::Child {
        Command::new("sh")
            .args(["-c", &format!("read _; exit {code}")])
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    }

    /// Whether the wake fd of `slot` has been written to.
    fn poked(slot: &Slot) -> bool {
        let mut p = libc::pollfd {
            fd: slot.read_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, zero timeout.
        unsafe { libc::poll(&mut p, 1, 0) == 1 }
    }

    fn slot() -> &'static Slot {
        super::super::hub::claim().unwrap()
    }

    fn exits(member: &Member) -> Vec<ChildExit> {
        let mut out = Vec::new();
        member.take(&mut out);
        out
    }

    #[test]
    fn the_first_reaper_hands_the_exit_to_every_member_and_wakes_the_others() {
        let (sa, sb) = (slot(), slot());
        let (mut a, mut b) = (Member::default(), Member::default());
        let mut child = held(4);
        let pid = a.join("t", child.id(), sa).unwrap().pid;
        assert_eq!(b.join("t", child.id(), sb).unwrap().pid, pid);
        assert_eq!(a.reap(pid, None), Reaped::Running);
        drop(child.stdin.take());
        wait_exited(child.id());
        assert_eq!(a.reap(pid, None), Reaped::Done);
        let exit = ChildExit {
            pid: child.id(),
            status: ExitStatus::Exited(4),
        };
        assert!(poked(sb), "b is woken");
        assert!(!poked(sa), "the reaper takes its own");
        assert!(a.has_mail() && b.has_mail());
        assert_eq!((exits(&a), exits(&b)), (vec![exit], vec![exit]));
        assert!(!a.has_mail() && !b.has_mail());
        // b looks later: nothing is reaped twice, nothing told twice.
        assert_eq!(b.reap(pid, None), Reaped::Done);
        assert_eq!(exits(&b), []);
        assert!(child.try_wait().is_err(), "reaped once, by a");
        // Reaped: nobody can join it any more.
        assert!(b.join("t", child.id(), sb).is_err());
        for s in [sa, sb] {
            super::super::hub::release(s);
        }
    }

    #[test]
    fn a_child_reaped_elsewhere_is_told_as_unknown() {
        let sa = slot();
        let mut a = Member::default();
        let mut child = held(2);
        let pid = a.join("t", child.id(), sa).unwrap().pid;
        drop(child.stdin.take());
        assert_eq!(child.wait().unwrap().code(), Some(2), "std reaps it");
        assert_eq!(a.reap(pid, None), Reaped::Done);
        assert_eq!(
            exits(&a),
            [ChildExit {
                pid: child.id(),
                status: ExitStatus::Unknown
            }]
        );
        super::super::hub::release(sa);
    }

    #[test]
    fn a_claimed_reap_keeps_the_others_off_and_tells_late_joiners() {
        let (sa, sb, sc) = (slot(), slot(), slot());
        let (mut a, mut b, mut c) = (Member::default(), Member::default(), Member::default());
        let mut child = held(6);
        let pid = a.join("t", child.id(), sa).unwrap().pid;
        b.join("t", child.id(), sb).unwrap();
        drop(child.stdin.take());
        wait_exited(child.id());
        assert!(a.claim(pid));
        assert!(!b.claim(pid) && !a.claim(pid), "one claim");
        assert_eq!(b.reap(pid, None), Reaped::Done, "left to a");
        // The reap done (outside the lock), before a publishes it: c may
        // still join, and is told.
        let result = reap(pid, true);
        let joined = c.join("t", child.id(), sc).unwrap();
        assert_eq!(
            joined,
            Joined { pid, reaping: true },
            "its exit comes without looking"
        );
        a.publish(pid, result);
        let exit = ChildExit {
            pid: child.id(),
            status: ExitStatus::Exited(6),
        };
        for m in [&a, &b, &c] {
            assert_eq!(exits(m), [exit]);
        }
        assert!(poked(sb) && poked(sc) && !poked(sa));
        for s in [sa, sb, sc] {
            super::super::hub::release(s);
        }
    }

    #[test]
    fn leaving_leaves_the_child_unreaped_and_drops_an_untaken_exit() {
        let (sa, sb) = (slot(), slot());
        let (mut a, mut b) = (Member::default(), Member::default());
        let mut child = held(3);
        let pid = a.join("t", child.id(), sa).unwrap().pid;
        b.join("t", child.id(), sb).unwrap();
        drop(child.stdin.take());
        wait_exited(child.id());
        // a leaves: b still reaps and is told; a is not.
        a.leave(pid);
        assert_eq!(b.reap(pid, None), Reaped::Done);
        assert_eq!(exits(&a), []);
        assert_eq!(exits(&b).len(), 1);
        // Delivered, then left before it was taken: dropped.
        let mut other = held(5);
        let pid = a.join("t", other.id(), sa).unwrap().pid;
        b.join("t", other.id(), sb).unwrap();
        drop(other.stdin.take());
        wait_exited(other.id());
        assert_eq!(b.reap(pid, None), Reaped::Done);
        a.leave(pid);
        assert_eq!(exits(&a), []);
        // A member dropped leaves every entry; the last one out removes
        // it, the child unreaped.
        let mut third = held(7);
        let pid = a.join("t", third.id(), sa).unwrap().pid;
        b.join("t", third.id(), sb).unwrap();
        drop(b);
        a.leave(pid);
        assert!(with_table(|t| !t.entries.contains_key(&pid)));
        drop(third.stdin.take());
        assert_eq!(third.wait().unwrap().code(), Some(7), "left unreaped");
        for s in [sa, sb] {
            super::super::hub::release(s);
        }
    }

    #[test]
    fn a_forked_child_sees_none_of_its_parents_entries() {
        let mut t = Table::new(100);
        t.entries.insert(42, Entry::default());
        t.adopt(100);
        assert_eq!(t.entries.len(), 1, "the same process");
        t.adopt(101);
        assert!(t.entries.is_empty() && t.owner == 101, "a forked child");
    }

    #[test]
    fn the_sigchld_list_reaps_only_its_children() {
        struct NoSet;
        impl InternalFds for NoSet {
            fn add(&mut self, _: RawFd) -> io::Result<()> {
                Ok(())
            }
            fn remove(&mut self, _: RawFd) {}
        }
        let sa = slot();
        let mut list = Children::default();
        list.force_sigchld();
        let mine = Command::new("true").spawn().unwrap();
        let mut other = Command::new("true").spawn().unwrap();
        let (pid, added) = list.add("t", mine.id(), sa).unwrap();
        assert_eq!(added, Added::Sigchld);
        assert_eq!(list.add("t", mine.id(), sa).unwrap(), (pid, Added::Already));
        assert!(list.uses_sigchld());
        wait_exited(mine.id());
        wait_exited(other.id());
        list.scan();
        let mut exits = Vec::new();
        list.take_exits(&mut exits, &mut NoSet);
        assert_eq!(
            exits,
            [ChildExit {
                pid: mine.id(),
                status: ExitStatus::Exited(0)
            }]
        );
        assert!(!list.uses_sigchld());
        // The other child was left to its owner.
        assert!(other.wait().unwrap().success());
        drop(list);
        super::super::hub::release(sa);
    }
}
