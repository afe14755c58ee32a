//! The kit's notifier checks (`evloop::conformance::notices`) catch broken
//! backends: each wrapper here breaks one guarantee of the notifier around
//! the poll backend, and the check for it must fail (the others are not
//! asserted). One test: the fork check forks, and refuses to while other
//! test threads run. (About 40 s: four of the bugs are caught by a
//! check's watchdog.)
#![cfg(unix)]

use std::io;
use std::os::fd::RawFd;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use evloop::backend::{
    Backend, Capabilities, InternalFds, NoticeService, Notices, PollEvent, PollStatus, Wake,
};
use evloop::backends::poll::Poll;
use evloop::backends::WithServices;
use evloop::conformance::{notices, Outcome};
use evloop::{Interest, Spawned};

#[derive(Clone, Copy, Debug, PartialEq)]
enum Bug {
    /// `watch_signal` says yes and watches nothing.
    IgnoresSignals,
    /// `unwatch_signal` does nothing: the hub's handler stays installed.
    KeepsHandler,
    /// The waker wakes nothing.
    DeadWaker,
    /// Child exits never reach the loop.
    DropsExits,
    /// `reinit` keeps the parent's wake fd (and forgets nothing).
    NoReinit,
}

struct Broken {
    inner: WithServices<'static>,
    bug: Bug,
}

struct Nothing;

impl Wake for Nothing {
    fn wake(&self) {}
}

impl Backend for Broken {
    fn name(&self) -> &'static str {
        "broken"
    }
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
    fn modify(&mut self, fd: RawFd, old: Interest, new: Interest) -> io::Result<()> {
        self.inner.modify(fd, old, new)
    }
    fn poll(&mut self, t: Option<Duration>, ev: &mut Vec<PollEvent>) -> io::Result<PollStatus> {
        self.inner.poll(t, ev)
    }
    fn now(&mut self) -> Duration {
        self.inner.now()
    }
    fn reinit(&mut self) -> io::Result<()> {
        Backend::reinit(&mut self.inner)
    }
    fn notices(&mut self) -> Option<&mut dyn NoticeService> {
        Some(self)
    }
}

/// The poll backend's services (the Unix notifier, composed with it as
/// the loop would), with one guarantee broken.
impl NoticeService for Broken {
    fn check_fd(&mut self, fd: RawFd) -> io::Result<()> {
        self.inner.check_fd(fd)
    }
    fn watch_signal(&mut self, signal: i32, fds: &mut dyn InternalFds) -> io::Result<()> {
        if self.bug == Bug::IgnoresSignals {
            return Ok(());
        }
        self.inner.watch_signal(signal, fds)
    }
    fn unwatch_signal(&mut self, signal: i32) {
        if self.bug != Bug::KeepsHandler {
            self.inner.unwatch_signal(signal);
        }
    }
    fn watch_child(&mut self, pid: u32, fds: &mut dyn InternalFds) -> io::Result<()> {
        self.inner.watch_child(pid, fds)
    }
    fn unwatch_child(&mut self, pid: u32, fds: &mut dyn InternalFds) {
        self.inner.unwatch_child(pid, fds);
    }
    fn watch_any_child(&mut self, fds: &mut dyn InternalFds) -> io::Result<()> {
        self.inner.watch_any_child(fds)
    }
    fn unwatch_any_child(&mut self) {
        self.inner.unwatch_any_child();
    }
    fn signal_child(&mut self, pid: u32, signal: i32) -> io::Result<()> {
        self.inner.signal_child(pid, signal)
    }
    fn spawn_child(
        &mut self,
        command: &mut Command,
        fds: &mut dyn InternalFds,
    ) -> io::Result<Spawned> {
        self.inner.spawn_child(command, fds)
    }
    fn waker(&mut self, fds: &mut dyn InternalFds) -> io::Result<Arc<dyn Wake>> {
        let real = self.inner.waker(fds)?;
        if self.bug == Bug::DeadWaker {
            return Ok(Arc::new(Nothing));
        }
        Ok(real)
    }
    fn ready(&mut self, fd: RawFd, fds: &mut dyn InternalFds) {
        self.inner.ready(fd, fds);
    }
    fn take_notices(&mut self, notices: &mut Notices, fds: &mut dyn InternalFds) {
        self.inner.take_notices(notices, fds);
        if self.bug == Bug::DropsExits {
            notices.exits.clear();
        }
    }
    fn watch_clock_steps(&mut self, fds: &mut dyn InternalFds) -> bool {
        self.inner.watch_clock_steps(fds)
    }
    fn unwatch_clock_steps(&mut self, fds: &mut dyn InternalFds) {
        self.inner.unwatch_clock_steps(fds);
    }
    fn watch_path(&mut self, path: &Path, token: u64, fds: &mut dyn InternalFds) -> io::Result<()> {
        self.inner.watch_path(path, token, fds)
    }
    fn unwatch_path(&mut self, token: u64, fds: &mut dyn InternalFds) {
        self.inner.unwatch_path(token, fds);
    }
    fn reinit(&mut self, fds: &mut dyn InternalFds) -> io::Result<()> {
        if self.bug == Bug::NoReinit {
            return Ok(());
        }
        NoticeService::reinit(&mut self.inner, fds)
    }
}

fn open(bug: Bug) -> io::Result<Box<dyn Backend>> {
    Ok(Box::new(Broken {
        inner: WithServices::new(Box::new(Poll::new())),
        bug,
    }))
}

#[test]
fn each_broken_notifier_fails_its_check() {
    let cases: [(Bug, evloop::backends::Factory, &str, &str); 5] = [
        (
            Bug::IgnoresSignals,
            || open(Bug::IgnoresSignals),
            "notices/signal_delivery",
            "did not come",
        ),
        (
            Bug::KeepsHandler,
            || open(Bug::KeepsHandler),
            "notices/signal_disposition_restored",
            "is not back",
        ),
        (
            Bug::DeadWaker,
            || open(Bug::DeadWaker),
            "notices/wake_from_another_thread",
            "did not come",
        ),
        (
            Bug::DropsExits,
            || open(Bug::DropsExits),
            "notices/child_two_loops_one_child",
            "did not come",
        ),
        (
            Bug::NoReinit,
            || open(Bug::NoReinit),
            "notices/fork_reinit",
            "after reinit",
        ),
    ];
    // The wrapper itself passes every check.
    let fine: evloop::backends::Factory = || Ok(Box::new(Poll::new()));
    for r in notices::check_all_notices("poll", fine) {
        r.outcome.assert_passed();
    }
    for (bug, open, check, said) in cases {
        match notices::check_notice(check, "broken", open) {
            Outcome::Failed(why) => assert!(why.contains(said), "{bug:?}, {check}: {why}"),
            other => panic!("{check} did not catch {bug:?}: {other:?}"),
        }
    }
}
