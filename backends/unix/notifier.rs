//! What a Unix backend embeds to provide signals, child exits and
//! wake-ups: [`Wakeup`] (its hub slot and wake fd, the signals it watches,
//! its waker) and, for backends without `EVFILT_PROC`, [`Notifier`]
//! (a `Wakeup` plus the list of watched children, its place in the
//! process-wide table of them, wall-clock step reports and path change
//! hints). The backend only puts their internal fds in its
//! kernel set ([`InternalFds`]), never reports them to the loop, and routes
//! their readiness back here.

use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use super::children::{self, Added, Children};
use super::clock_steps::ClockSteps;
use super::hub::{self, Slot};
use super::path_hints::PathHints;
use crate::backend::{Notices, SignalSet, Wake};
use crate::Spawned;

/// A backend's kernel set, as the notifier sees it: where its internal
/// fds (the wake fd, pidfds) are watched for readability.
pub(crate) trait InternalFds {
    /// Watches `fd` for readability.
    fn add(&mut self, fd: RawFd) -> io::Result<()>;
    /// Stops watching `fd` (it is about to be closed, or belongs to a
    /// kernel set being replaced); never fails.
    fn remove(&mut self, fd: RawFd);
    /// One more than the largest fd the set can hold, if it has such a
    /// limit (select: `FD_SETSIZE`): the notifier asks for its wake fd
    /// below it, and watches a child whose pidfd is not through
    /// `SIGCHLD` instead.
    fn fd_limit(&self) -> Option<RawFd> {
        None
    }
}

pub(crate) const SIGCHLD_BIT: u64 = 1 << (libc::SIGCHLD - 1);

/// A backend's hub slot, claimed when first needed, and what it watches.
#[derive(Debug)]
pub(crate) struct Wakeup {
    backend: &'static str,
    slot: Option<&'static Slot>,
    /// The slot's read end, while it is in the kernel set.
    registered: Option<RawFd>,
    /// The signals the loop watches.
    user: u64,
    /// The signals the backend itself watches (`SIGCHLD` for children
    /// without pidfds).
    internal: u64,
    /// The waker handed out, if any (one per backend).
    waker: Option<Arc<SlotWaker>>,
}

impl Wakeup {
    pub(crate) fn new(backend: &'static str) -> Wakeup {
        Wakeup {
            backend,
            slot: None,
            registered: None,
            user: 0,
            internal: 0,
            waker: None,
        }
    }

    /// The slot, claimed and its read end in the kernel set. A slot
    /// claimed here whose read end the set refuses (a select backend's,
    /// while no fd below `FD_SETSIZE` is free) is given back at once, so
    /// that the next call claims again (and gets a usable fd once one is
    /// free).
    pub(crate) fn ensure(&mut self, set: &mut impl InternalFds) -> io::Result<&'static Slot> {
        let (slot, claimed) = match self.slot {
            Some(slot) => (slot, false),
            None => {
                let slot = hub::claim_within(set.fd_limit()).map_err(|err| {
                    io::Error::new(
                        err.kind(),
                        format!(
                            "the {} backend cannot create its wake fd: {err}",
                            self.backend
                        ),
                    )
                })?;
                self.slot = Some(slot);
                (slot, true)
            }
        };
        if self.registered.is_none() {
            if let Err(err) = set.add(slot.read_fd()) {
                if claimed {
                    // Nothing uses it yet (the waker and the signal
                    // watches come after this call).
                    self.slot = None;
                    hub::release(slot);
                }
                return Err(err);
            }
            self.registered = Some(slot.read_fd());
        }
        Ok(slot)
    }

    /// Whether `fd` is the wake fd in the kernel set.
    pub(crate) fn is_wake_fd(&self, fd: RawFd) -> bool {
        self.registered == Some(fd)
    }

    /// The wake fd in the kernel set, if any.
    pub(crate) fn wake_fd(&self) -> Option<RawFd> {
        self.registered
    }

    /// The wake fd was reported readable: empty it.
    pub(crate) fn drain(&self) {
        if let Some(fd) = self.registered {
            super::wake::drain(fd);
        }
    }

    /// Makes the next wait return (there is news to deliver after it).
    pub(crate) fn poke(&self) {
        if let Some(slot) = self.slot {
            slot.poke();
        }
    }

    pub(crate) fn watch_signal(
        &mut self,
        signal: i32,
        set: &mut impl InternalFds,
    ) -> io::Result<()> {
        let bit = self.bit(signal)?;
        self.watch_bit(signal, bit, set)?;
        self.user |= bit;
        Ok(())
    }

    pub(crate) fn unwatch_signal(&mut self, signal: i32) {
        let Some(bit) = hub::bit(signal) else { return };
        if self.user & bit != 0 {
            self.user &= !bit;
            self.unwatch_bit(signal, bit);
        }
    }

    /// `SIGCHLD` for the backend's own use.
    pub(crate) fn watch_sigchld(&mut self, set: &mut impl InternalFds) -> io::Result<()> {
        self.watch_bit(libc::SIGCHLD, SIGCHLD_BIT, set)?;
        self.internal |= SIGCHLD_BIT;
        Ok(())
    }

    pub(crate) fn unwatch_sigchld(&mut self) {
        if self.internal & SIGCHLD_BIT != 0 {
            self.internal &= !SIGCHLD_BIT;
            self.unwatch_bit(libc::SIGCHLD, SIGCHLD_BIT);
        }
    }

    fn bit(&self, signal: i32) -> io::Result<u64> {
        hub::bit(signal).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "the {} backend cannot watch signal {signal}: not a signal number (1 to 64)",
                    self.backend
                ),
            )
        })
    }

    fn watch_bit(&mut self, signal: i32, bit: u64, set: &mut impl InternalFds) -> io::Result<()> {
        let slot = self.ensure(set)?;
        if (self.user | self.internal) & bit == 0 {
            hub::watch(slot, signal).map_err(|err| {
                io::Error::new(err.kind(), format!("the {} backend: {err}", self.backend))
            })?;
        }
        Ok(())
    }

    fn unwatch_bit(&mut self, signal: i32, bit: u64) {
        if let Some(slot) = self.slot {
            if (self.user | self.internal) & bit == 0 {
                hub::unwatch(slot, signal);
            }
        }
    }

    pub(crate) fn waker(&mut self, set: &mut impl InternalFds) -> io::Result<Arc<dyn Wake>> {
        let slot = self.ensure(set)?;
        let waker = self.waker.get_or_insert_with(|| {
            Arc::new(SlotWaker {
                slot,
                generation: slot.generation(),
            })
        });
        Ok(waker.clone())
    }

    /// Moves the loop's signals and the waker's use into `notices`;
    /// returns every signal bit that arrived (the backend's own included).
    pub(crate) fn take(&mut self, notices: &mut Notices) -> u64 {
        let Some(slot) = self.slot else { return 0 };
        let bits = slot.take_pending();
        notices.signals |= SignalSet::from_bits(bits & self.user);
        if slot.take_woke() {
            notices.woken = true;
        }
        bits
    }

    /// After `fork()` in the child (or a plain re-creation of the kernel
    /// set): the wake fd, the child's own, goes into the new set; every
    /// signal is forgotten (the loop watches its own again).
    pub(crate) fn reinit(&mut self, set: &mut impl InternalFds) -> io::Result<()> {
        let Some(slot) = self.slot else { return Ok(()) };
        if let Some(fd) = self.registered.take() {
            set.remove(fd);
        }
        self.user = 0;
        self.internal = 0;
        hub::reinit(slot)?;
        self.ensure(set).map(|_| ())
    }
}

impl Drop for Wakeup {
    fn drop(&mut self) {
        if let Some(slot) = self.slot {
            hub::release(slot);
        }
    }
}

/// What [`Wakeup::waker`] hands out: the slot and its owner's generation,
/// so that it stays harmless after the backend is gone (the slot and its
/// fd live on) and wakes the child's loop after a fork (the child's slot
/// has the child's fd).
#[derive(Debug)]
struct SlotWaker {
    slot: &'static Slot,
    generation: u64,
}

impl Wake for SlotWaker {
    fn wake(&self) {
        self.slot.wake(self.generation);
    }
}

/// A [`Wakeup`], the watched children (and the backend's place in the
/// process-wide table of them), the clock-step timer and the path hints:
/// everything but fd readiness, for the epoll, poll and select backends.
/// The wake fd is in the kernel set while children are watched: whoever
/// reaps one of them (this backend, or another loop's that watches it
/// too) pokes it.
#[derive(Debug)]
pub(crate) struct Notifier {
    pub(crate) wakeup: Wakeup,
    children: Children,
    /// A child watched through `SIGCHLD` had exited before `watch_child`:
    /// the next `take_notices` reaps without waiting for a `SIGCHLD`.
    scan_due: bool,
    /// Any child has just come to be watched: the next `take_notices`
    /// reaps those that exited before, without waiting for a `SIGCHLD`.
    any_due: bool,
    /// Wall-clock steps (a timerfd on Linux).
    clock: ClockSteps,
    /// Path change hints (inotify on Linux).
    paths: PathHints,
}

impl Notifier {
    pub(crate) fn new(backend: &'static str) -> Notifier {
        Notifier {
            wakeup: Wakeup::new(backend),
            children: Children::default(),
            scan_due: false,
            any_due: false,
            clock: ClockSteps::default(),
            paths: PathHints::new(backend),
        }
    }

    /// For tests: child exits through `SIGCHLD` even where pidfds work.
    pub(crate) fn force_sigchld_fallback(&mut self) {
        self.children.force_sigchld();
    }

    /// Every internal fd the kernel set must hold.
    pub(crate) fn internal_fds(&self) -> impl Iterator<Item = RawFd> + '_ {
        self.wakeup
            .wake_fd()
            .into_iter()
            .chain(self.clock.fd())
            .chain(self.paths.fd())
            .chain(self.children.pidfds())
    }

    pub(crate) fn watch_child(&mut self, pid: u32, set: &mut impl InternalFds) -> io::Result<()> {
        let backend = self.wakeup.backend;
        // Whoever reaps the child, this backend or another loop's, pokes
        // the wake fd: it must be in the kernel set.
        let slot = self.wakeup.ensure(set)?;
        let (pid, mut added) = self.children.add(backend, pid, slot)?;
        if let Added::Pidfd(fd) = added {
            if set.fd_limit().is_some_and(|limit| fd >= limit) {
                // A pidfd the set cannot hold (select, past FD_SETSIZE):
                // this child's exit comes through SIGCHLD instead.
                tracing::trace!(pid, fd, "pidfd beyond the backend's fds: SIGCHLD instead");
                self.children.use_sigchld_for(pid);
                added = Added::Sigchld;
            }
        }
        match added {
            Added::Already | Added::Exited => {}
            Added::Pidfd(fd) => {
                // An exited child's pidfd is readable at once: the next
                // wait returns and reaps it.
                if let Err(err) = set.add(fd) {
                    self.children.remove(pid);
                    return Err(err);
                }
            }
            Added::Sigchld => {
                if let Err(err) = self.wakeup.watch_sigchld(set) {
                    self.children.remove(pid);
                    self.settle_sigchld();
                    return Err(err);
                }
                // Checked after SIGCHLD is watched: an exit before that
                // brought no SIGCHLD of ours, an exit after it does.
                if children::has_exited(pid) {
                    // Reaped by the next `take_notices`, after a wait that
                    // must not block. (Not here: `unwatch_child` must be
                    // able to leave it unreaped.)
                    self.scan_due = true;
                    self.wakeup.poke();
                }
            }
        }
        Ok(())
    }

    pub(crate) fn unwatch_child(&mut self, pid: u32, set: &mut impl InternalFds) {
        let Ok(pid) = libc::pid_t::try_from(pid) else {
            return;
        };
        if let Some(pidfd) = self.children.remove(pid) {
            if let Some(fd) = pidfd {
                set.remove(fd.as_raw_fd());
            }
            self.settle_sigchld();
        }
    }

    /// Stops the internal `SIGCHLD` watch once no child needs it.
    fn settle_sigchld(&mut self) {
        if !self.children.uses_sigchld() && !self.children.watches_any() {
            self.wakeup.unwatch_sigchld();
        }
    }

    /// Starts reaping and reporting every child (`unix/children.rs`, "Any
    /// child"): `SIGCHLD` is watched, and each arrival reaps what exited.
    pub(crate) fn watch_any_child(&mut self, set: &mut impl InternalFds) -> io::Result<()> {
        if self.children.watches_any() {
            return Ok(());
        }
        let slot = self.wakeup.ensure(set)?;
        self.wakeup.watch_sigchld(set)?;
        self.children.join_any(slot);
        // Children that exited before: reaped by the next `take_notices`,
        // after a wait that must not block.
        self.any_due = true;
        self.wakeup.poke();
        Ok(())
    }

    pub(crate) fn unwatch_any_child(&mut self) {
        self.children.leave_any();
        self.any_due = false;
        self.settle_sigchld();
    }

    /// Sends `signal` to the watched child `pid` unless it has been reaped
    /// (`Children::signal`).
    pub(crate) fn signal_child(&mut self, pid: u32, signal: i32) -> io::Result<()> {
        self.children.signal(pid, signal)
    }

    /// Spawns `command` and watches the child, with no moment in between
    /// at which a loop of the process could reap it (`Member::spawn`).
    pub(crate) fn spawn_child(
        &mut self,
        command: &mut Command,
        set: &mut impl InternalFds,
    ) -> io::Result<Spawned> {
        let slot = self.wakeup.ensure(set)?;
        let mut child = self.children.spawn(command, slot)?;
        let pid = child.id();
        if let Err(err) = self.watch_child(pid, set) {
            self.children.abandon(pid);
            let _ = child.kill();
            let _ = child.wait();
            return Err(err);
        }
        Ok(Spawned::from_std(child))
    }

    /// An internal fd was reported readable.
    pub(crate) fn ready(&mut self, fd: RawFd, set: &mut impl InternalFds) {
        if self.wakeup.is_wake_fd(fd) {
            self.wakeup.drain();
        } else if self.clock.fd() == Some(fd) {
            self.clock.ready();
        } else if self.paths.fd() == Some(fd) {
            self.paths.ready();
        } else if let Some(pidfd) = self.children.pidfd_ready(fd) {
            set.remove(pidfd.as_raw_fd());
        }
    }

    /// Moves what was noticed into `notices`: the loop's signals, the
    /// waker's use, the exits of watched children (reaped by this backend
    /// or by another that watched them too; their pidfds leave `set`),
    /// clock steps, path hints.
    pub(crate) fn take_notices(&mut self, notices: &mut Notices, set: &mut impl InternalFds) {
        let bits = self.wakeup.take(notices);
        let any_due = std::mem::take(&mut self.any_due);
        if self.children.watches_any() && (any_due || bits & SIGCHLD_BIT != 0) {
            self.children.reap_any();
        }
        let due = std::mem::take(&mut self.scan_due);
        let scan = (due || bits & SIGCHLD_BIT != 0) && self.children.uses_sigchld();
        if scan {
            self.children.scan();
        }
        if self.children.take_exits(&mut notices.exits, set) || scan {
            self.settle_sigchld();
        }
        notices.clock_stepped |= self.clock.take();
        self.paths.take(&mut notices.paths);
    }

    /// After `fork()` in the child, once the backend has its new kernel
    /// set: the children are the parent's (their pidfds closed here), the
    /// signals forgotten, the wake fd the child's own. Clock steps and
    /// paths stay watched (the loop does not ask again), each through a
    /// new timer and inotify instance of the child's own.
    pub(crate) fn reinit(&mut self, set: &mut impl InternalFds) -> io::Result<()> {
        for fd in self.children.pidfds() {
            set.remove(fd);
        }
        self.children.clear();
        self.scan_due = false;
        self.any_due = false;
        self.wakeup.reinit(set)?;
        self.clock.reinit(set)?;
        self.paths.reinit(set)
    }

    /// Starts reporting wall-clock steps; false where the platform has no
    /// way (see `clock_steps.rs`).
    pub(crate) fn watch_clock_steps(&mut self, set: &mut impl InternalFds) -> bool {
        self.clock.watch(set)
    }

    pub(crate) fn unwatch_clock_steps(&mut self, set: &mut impl InternalFds) {
        self.clock.unwatch(set);
    }

    /// Starts hinting at changes of `path` with `token` (see
    /// `path_hints.rs`).
    pub(crate) fn watch_path(
        &mut self,
        path: &Path,
        token: u64,
        set: &mut impl InternalFds,
    ) -> io::Result<()> {
        self.paths.watch(path, token, set)
    }

    pub(crate) fn unwatch_path(&mut self, token: u64, set: &mut impl InternalFds) {
        self.paths.unwatch(token, set);
    }

    pub(crate) fn watch_signal(
        &mut self,
        signal: i32,
        set: &mut impl InternalFds,
    ) -> io::Result<()> {
        self.wakeup.watch_signal(signal, set)
    }

    pub(crate) fn unwatch_signal(&mut self, signal: i32) {
        self.wakeup.unwatch_signal(signal);
    }

    pub(crate) fn waker(&mut self, set: &mut impl InternalFds) -> io::Result<Arc<dyn Wake>> {
        self.wakeup.waker(set)
    }
}

/// The [`Backend`](crate::backend::Backend) hooks a backend with an embedded
/// [`Notifier`] hands to it (signals, children: by pid, any, spawned,
/// signalled; the waker, notices, clock steps, path hints), written once: inside the backend's `impl Backend`,
/// `notifier_hooks!(s => s.notifier, <its kernel set, from s>)`, where `s`
/// names `&mut self`.
macro_rules! notifier_hooks {
    ($s:ident => $s2:ident . $notifier:ident, $set:expr) => {
        fn watch_signal(&mut self, signal: i32) -> std::io::Result<()> {
            let $s = self;
            $s2.$notifier.watch_signal(signal, $set)
        }

        fn unwatch_signal(&mut self, signal: i32) {
            self.$notifier.unwatch_signal(signal);
        }

        fn watch_child(&mut self, pid: u32) -> std::io::Result<()> {
            let $s = self;
            $s2.$notifier.watch_child(pid, $set)
        }

        fn unwatch_child(&mut self, pid: u32) {
            let $s = self;
            $s2.$notifier.unwatch_child(pid, $set);
        }

        fn watch_any_child(&mut self) -> std::io::Result<()> {
            let $s = self;
            $s2.$notifier.watch_any_child($set)
        }

        fn unwatch_any_child(&mut self) {
            self.$notifier.unwatch_any_child();
        }

        fn signal_child(&mut self, pid: u32, signal: i32) -> std::io::Result<()> {
            self.$notifier.signal_child(pid, signal)
        }

        fn spawn_child(
            &mut self,
            command: &mut std::process::Command,
        ) -> std::io::Result<$crate::Spawned> {
            let $s = self;
            $s2.$notifier.spawn_child(command, $set)
        }

        fn waker(&mut self) -> std::io::Result<std::sync::Arc<dyn $crate::backend::Wake>> {
            let $s = self;
            $s2.$notifier.waker($set)
        }

        fn take_notices(&mut self, notices: &mut $crate::backend::Notices) {
            let $s = self;
            $s2.$notifier.take_notices(notices, $set);
        }

        fn watch_clock_steps(&mut self) -> bool {
            let $s = self;
            $s2.$notifier.watch_clock_steps($set)
        }

        fn unwatch_clock_steps(&mut self) {
            let $s = self;
            $s2.$notifier.unwatch_clock_steps($set);
        }

        fn watch_path(&mut self, path: &std::path::Path, token: u64) -> std::io::Result<()> {
            let $s = self;
            $s2.$notifier.watch_path(path, token, $set)
        }

        fn unwatch_path(&mut self, token: u64) {
            let $s = self;
            $s2.$notifier.unwatch_path(token, $set);
        }
    };
}
pub(crate) use notifier_hooks;

#[cfg(test)]
mod tests {
    use super::*;

    /// A kernel set that refuses every fd (as select refuses a wake fd
    /// numbered 1024 or more) until told otherwise.
    struct Refusing {
        refuse: bool,
        held: Vec<RawFd>,
    }

    impl InternalFds for Refusing {
        fn add(&mut self, fd: RawFd) -> io::Result<()> {
            if self.refuse {
                return Err(io::Error::new(io::ErrorKind::InvalidInput, "refused"));
            }
            self.held.push(fd);
            Ok(())
        }
        fn remove(&mut self, fd: RawFd) {
            self.held.retain(|&f| f != fd);
        }
    }

    #[test]
    fn a_slot_whose_wake_fd_the_set_refuses_is_not_kept() {
        let mut set = Refusing {
            refuse: true,
            held: Vec::new(),
        };
        let mut w = Wakeup::new("test");
        assert!(w.ensure(&mut set).is_err());
        assert!(w.slot.is_none() && w.wake_fd().is_none(), "given back");
        assert!(w.waker(&mut set).is_err());
        assert!(w.watch_signal(libc::SIGWINCH, &mut set).is_err());
        assert_eq!(w.user, 0);
        set.refuse = false;
        let slot = w.ensure(&mut set).unwrap();
        assert_eq!(set.held, [slot.read_fd()]);
        assert!(w.waker(&mut set).is_ok());
    }
}
