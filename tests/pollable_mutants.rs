//! The kit's pollable-fd checks (`evloop::conformance::pollable`) catch
//! broken backends: each wrapper here breaks one part of the pollable-fd
//! contract around the epoll backend, and the check for it must fail
//! saying why; the wrapper with no bug, and the lazy one done right,
//! pass every check. (About 10 s: three of the bugs are caught by the
//! check's watchdog, in parallel.)
#![cfg(target_os = "linux")]

use std::io::{self, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::Duration;

use evloop::backend::{
    Backend, Capabilities, InternalFds, NoticeService, Notices, PollEvent, PollStatus, Wake,
};
use evloop::backends::epoll::Epoll;
use evloop::backends::WithServices;
use evloop::conformance::{pollable, Outcome};
use evloop::Interest;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Bug {
    /// None: the wrapper as it should be.
    Fine,
    /// Gives a descriptor that is not its epoll set (an empty one).
    WrongFd,
    /// Gives a descriptor that is always readable.
    AlwaysReadable,
    /// Queues its changes for its next wait, and does not expose them.
    LazyChanges,
    /// Queues its changes too, and submits them in `expose_changes`.
    LazyDoneRight,
    /// Its wake-up is not among what its fd watches.
    WakeOutside,
    /// Refuses its fd after `reinit`.
    LostAfterReinit,
}

struct Broken {
    /// Epoll, with the services the loop would give it (here, so that
    /// the waker can be broken).
    inner: WithServices<'static>,
    bug: Bug,
    /// `LazyChanges`, `LazyDoneRight`: the modifies not made yet.
    queued: Vec<(RawFd, Interest, Interest)>,
    /// `WrongFd`: an empty epoll set; `AlwaysReadable`: a socket with
    /// unread data (its peer kept in `kept`).
    other: Option<OwnedFd>,
    kept: Option<UnixStream>,
    reinitialised: bool,
}

/// A wake-up that wakes nothing the loop's fd watches.
struct Elsewhere(UnixStream);

impl Wake for Elsewhere {
    fn wake(&self) {
        let _ = (&self.0).write(b"w");
    }
}

fn open(bug: Bug) -> io::Result<Box<dyn Backend>> {
    let mut b = Broken {
        inner: WithServices::new(Box::new(Epoll::new()?)),
        bug,
        queued: Vec::new(),
        other: None,
        kept: None,
        reinitialised: false,
    };
    match bug {
        Bug::WrongFd => b.other = Some(Epoll::new()?.pollable_fd()?.try_clone_to_owned()?),
        Bug::AlwaysReadable => {
            let (a, mut peer) = UnixStream::pair()?;
            peer.write_all(b"never read")?;
            b.other = Some(a.into());
            b.kept = Some(peer);
        }
        _ => {}
    }
    Ok(Box::new(b))
}

impl Broken {
    fn apply_queued(&mut self) -> io::Result<()> {
        for (fd, old, new) in std::mem::take(&mut self.queued) {
            self.inner.modify(fd, old, new)?;
        }
        Ok(())
    }
}

impl Backend for Broken {
    fn name(&self) -> &'static str {
        "broken"
    }
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
    fn modify(&mut self, fd: RawFd, old: Interest, new: Interest) -> io::Result<()> {
        // A forget is made at once (the removal rule); the rest waits.
        if matches!(self.bug, Bug::LazyChanges | Bug::LazyDoneRight) && !new.is_empty() {
            self.queued.push((fd, old, new));
            return Ok(());
        }
        self.apply_queued()?;
        self.inner.modify(fd, old, new)
    }
    fn poll(&mut self, t: Option<Duration>, ev: &mut Vec<PollEvent>) -> io::Result<PollStatus> {
        self.apply_queued()?;
        self.inner.poll(t, ev)
    }
    fn now(&mut self) -> Duration {
        self.inner.now()
    }
    fn reinit(&mut self) -> io::Result<()> {
        self.reinitialised = true;
        Backend::reinit(&mut self.inner)
    }
    fn pollable_fd(&self) -> io::Result<BorrowedFd<'_>> {
        match (self.bug, &self.other) {
            (Bug::WrongFd | Bug::AlwaysReadable, Some(fd)) => Ok(fd.as_fd()),
            (Bug::LostAfterReinit, _) if self.reinitialised => Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "gone after reinit",
            )),
            _ => self.inner.pollable_fd(),
        }
    }
    fn expose_changes(&mut self) -> io::Result<bool> {
        if self.bug == Bug::LazyDoneRight {
            self.apply_queued()?;
        }
        self.inner.expose_changes()
    }
    fn notices(&mut self) -> Option<&mut dyn NoticeService> {
        Some(self)
    }
}

/// The services the pollable checks use, the waker broken for
/// `WakeOutside`.
impl NoticeService for Broken {
    fn check_fd(&mut self, fd: RawFd) -> io::Result<()> {
        self.inner.check_fd(fd)
    }
    fn waker(&mut self, fds: &mut dyn InternalFds) -> io::Result<Arc<dyn Wake>> {
        let real = self.inner.waker(fds)?;
        if self.bug == Bug::WakeOutside {
            let (a, b) = UnixStream::pair()?;
            self.kept = Some(b);
            return Ok(Arc::new(Elsewhere(a)));
        }
        Ok(real)
    }
    fn take_notices(&mut self, notices: &mut Notices, fds: &mut dyn InternalFds) {
        self.inner.take_notices(notices, fds);
    }
    fn reinit(&mut self, fds: &mut dyn InternalFds) -> io::Result<()> {
        NoticeService::reinit(&mut self.inner, fds)
    }
}

#[test]
fn each_broken_pollable_fd_fails_its_check() {
    let cases: [(Bug, evloop::backends::Factory, &str, &str); 5] = [
        (
            Bug::WrongFd,
            || open(Bug::WrongFd),
            "pollable/readable_when_ready",
            "was not readable",
        ),
        (
            Bug::AlwaysReadable,
            || open(Bug::AlwaysReadable),
            "pollable/readable_when_ready",
            "stayed readable through three runs",
        ),
        (
            Bug::LazyChanges,
            || open(Bug::LazyChanges),
            "pollable/readable_when_ready",
            "expose_changes",
        ),
        (
            Bug::WakeOutside,
            || open(Bug::WakeOutside),
            "pollable/woken_by_send",
            "did not make the pollable fd readable",
        ),
        (
            Bug::LostAfterReinit,
            || open(Bug::LostAfterReinit),
            "pollable/kept_after_reinit",
            "refuses the pollable fd",
        ),
    ];
    // The wrapper itself, and the lazy one that exposes its changes, pass
    // every check.
    for fine in [|| open(Bug::Fine), || open(Bug::LazyDoneRight)] {
        for r in pollable::check_all_pollable_loop("broken", fine) {
            r.outcome.assert_passed();
        }
    }
    // At once: three of them are caught by the check's 10 s watchdog.
    let threads: Vec<_> = cases
        .into_iter()
        .map(|(bug, open, check, said)| {
            std::thread::spawn(
                move || match pollable::check_pollable_loop(check, "broken", open) {
                    Outcome::Failed(why) => assert!(why.contains(said), "{bug:?}, {check}: {why}"),
                    other => panic!("{check} did not catch {bug:?}: {other:?}"),
                },
            )
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}
