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

use evloop::backend::{Backend, Capabilities, Notices, PollEvent, PollStatus, Wake};
use evloop::backends::poll::Poll;
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
    inner: Poll,
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
    fn check_fd(&self, fd: RawFd) -> io::Result<()> {
        self.inner.check_fd(fd)
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
    fn watch_signal(&mut self, signal: i32) -> io::Result<()> {
        if self.bug == Bug::IgnoresSignals {
            return Ok(());
        }
        self.inner.watch_signal(signal)
    }
    fn unwatch_signal(&mut self, signal: i32) {
        if self.bug != Bug::KeepsHandler {
            self.inner.unwatch_signal(signal);
        }
    }
    fn watch_child(&mut self, pid: u32) -> io::Result<()> {
        self.inner.watch_child(pid)
    }
    fn unwatch_child(&mut self, pid: u32) {
        self.inner.unwatch_child(pid);
    }
    fn watch_any_child(&mut self) -> io::Result<()> {
        self.inner.watch_any_child()
    }
    fn unwatch_any_child(&mut self) {
        self.inner.unwatch_any_child();
    }
    fn signal_child(&mut self, pid: u32, signal: i32) -> io::Result<()> {
        self.inner.signal_child(pid, signal)
    }
    fn spawn_child(&mut self, command: &mut Command) -> io::Result<Spawned> {
        self.inner.spawn_child(command)
    }
    fn waker(&mut self) -> io::Result<Arc<dyn Wake>> {
        let real = self.inner.waker()?;
        if self.bug == Bug::DeadWaker {
            return Ok(Arc::new(Nothing));
        }
        Ok(real)
    }
    fn take_notices(&mut self, notices: &mut Notices) {
        self.inner.take_notices(notices);
        if self.bug == Bug::DropsExits {
            notices.exits.clear();
        }
    }
    fn watch_clock_steps(&mut self) -> bool {
        self.inner.watch_clock_steps()
    }
    fn unwatch_clock_steps(&mut self) {
        self.inner.unwatch_clock_steps();
    }
    fn watch_path(&mut self, path: &Path, token: u64) -> io::Result<()> {
        self.inner.watch_path(path, token)
    }
    fn unwatch_path(&mut self, token: u64) {
        self.inner.unwatch_path(token);
    }
    fn reinit(&mut self) -> io::Result<()> {
        if self.bug == Bug::NoReinit {
            return Ok(());
        }
        self.inner.reinit()
    }
}

fn open(bug: Bug) -> io::Result<Box<dyn Backend>> {
    Ok(Box::new(Broken {
        inner: Poll::new(),
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
