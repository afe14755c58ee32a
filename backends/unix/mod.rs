//! Signals, child exits and wake-ups for Unix backends, the crate's own
//! and those of other crates: what the crate's epoll, io_uring, poll and
//! select backends embed, public so that a backend written elsewhere gets
//! the same guarantees (one signal hub per process, the previous
//! disposition restored, one table of children per process, wake-ups
//! that end a blocked wait).
//!
//! - [`Notifier`]: everything but fd readiness (signals, the waker,
//!   children, clock steps, path hints), for a backend whose kernel set
//!   takes fds;
//! - [`Wakeup`]: signals and the waker only, for a backend with its own
//!   child mechanism (the child table's member API, which the crate's
//!   kqueue backend uses for `EVFILT_PROC`, is not public);
//! - [`InternalFds`]: how the backend lends them its kernel set;
//! - [`notifier_hooks!`](crate::notifier_hooks): writes the backend's
//!   hooks that forward to its `Notifier`.
//!
//! (Inside: `hub`, the process-wide signal hub and the per-backend slots
//! its handler writes to; `wake`, the wake fd (an eventfd, or a pipe);
//! `children`, the process-wide table of watched children (pidfds on
//! Linux, `SIGCHLD` elsewhere); `clock_steps`, wall-clock step reports (a
//! `CLOCK_REALTIME` timerfd on Linux); `path_hints`, inotify on Linux.
//! docs/porting.md, "Signals, children and wake-ups", has the contract.)
//!
//! A backend of another crate, whole: the loop's fds through the crate's
//! poll backend (any readiness mechanism does), the notifier's fds in the
//! same set but never reported to the loop.
//!
//! ```
//! use evloop::backend::{Backend, Capabilities, PollEvent, PollStatus};
//! use evloop::backends::poll::Poll;
//! use evloop::backends::unix::{InternalFds, Notifier};
//! use evloop::{Async, Child, Interest, Loop, RunMode};
//! use std::io;
//! use std::os::fd::RawFd;
//! use std::time::Duration;
//!
//! /// The kernel set: the readiness mechanism, and which of its fds are
//! /// the notifier's.
//! struct Set { poll: Poll, internal: Vec<RawFd> }
//!
//! impl InternalFds for Set {
//!     fn add(&mut self, fd: RawFd) -> io::Result<()> {
//!         self.poll.modify(fd, Interest::NONE, Interest::READABLE)?;
//!         self.internal.push(fd);
//!         Ok(())
//!     }
//!     fn remove(&mut self, fd: RawFd) {
//!         let _ = self.poll.modify(fd, Interest::READABLE, Interest::NONE);
//!         self.internal.retain(|&f| f != fd);
//!     }
//! }
//!
//! struct Mine { set: Set, notifier: Notifier, ready: Vec<RawFd> }
//!
//! impl Backend for Mine {
//!     fn name(&self) -> &'static str { "mine" }
//!     fn capabilities(&self) -> Capabilities { self.set.poll.capabilities() }
//!     fn check_fd(&self, fd: RawFd) -> io::Result<()> { self.set.poll.check_fd(fd) }
//!     fn modify(&mut self, fd: RawFd, old: Interest, new: Interest) -> io::Result<()> {
//!         self.set.poll.modify(fd, old, new)
//!     }
//!     fn poll(&mut self, timeout: Option<Duration>, events: &mut Vec<PollEvent>)
//!         -> io::Result<PollStatus>
//!     {
//!         let first = events.len();
//!         let status = self.set.poll.poll(timeout, events)?;
//!         // The notifier's fds are never the loop's: taken out of the
//!         // report, routed to the notifier after it.
//!         let internal = &self.set.internal;
//!         let ready = &mut self.ready;
//!         let mut i = first;
//!         while i < events.len() {
//!             if internal.contains(&events[i].fd) {
//!                 ready.push(events.swap_remove(i).fd);
//!             } else {
//!                 i += 1;
//!             }
//!         }
//!         for fd in self.ready.drain(..) {
//!             self.notifier.ready(fd, &mut self.set);
//!         }
//!         Ok(status)
//!     }
//!     fn now(&mut self) -> Duration { self.set.poll.now() }
//!
//!     // Signals, children, the waker, notices, clock steps, path hints.
//!     evloop::notifier_hooks!(s => s.notifier, &mut s.set);
//!
//!     fn reinit(&mut self) -> io::Result<()> {
//!         self.set.poll.reinit()?; // the set first, then the notifier
//!         self.notifier.reinit(&mut self.set)
//!     }
//! }
//!
//! let mine = Mine {
//!     set: Set { poll: Poll::new(), internal: Vec::new() },
//!     notifier: Notifier::new("mine"),
//!     ready: Vec::new(),
//! };
//! let mut lp: Loop<Option<evloop::ExitStatus>> = Loop::with_backend(mine);
//! // A child's exit, reported with its status...
//! let mut cmd = std::process::Command::new("sh");
//! cmd.args(["-c", "exit 7"]);
//! Child::spawn(&mut lp, &mut cmd, |_, got, ev| *got = ev.status)?;
//! // ...and a wake-up from another thread, under a watchdog.
//! let (_, sender) = Async::new(&mut lp, |_, _, _| {})?;
//! let _ = std::thread::spawn(move || sender.send());
//! lp.timer(Duration::from_secs(30), Duration::ZERO, |_, _, _| panic!("nothing came"))?;
//! let mut got = None;
//! while got.is_none() {
//!     lp.run(RunMode::Once, &mut got)?;
//! }
//! assert_eq!(got, Some(evloop::ExitStatus::Exited(7)));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![allow(unsafe_code)]

pub(crate) mod children;
pub(crate) mod clock_steps;
pub(crate) mod hub;
pub(crate) mod notifier;
pub(crate) mod path_hints;
mod wake;

pub use notifier::{InternalFds, Notifier, Wakeup};

// The clock, the deadline and the "never pollable" check are public, for
// backends outside the crate too: `backends/util.rs`.
pub(crate) use super::util::Pollable;
