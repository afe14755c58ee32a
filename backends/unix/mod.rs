//! Signals, child exits, wake-ups, wall-clock steps and path hints on
//! Unix: the OS services ([`NoticeService`](crate::backend::NoticeService))
//! that the loop composes with any readiness backend, libev's way. The
//! loop owns a [`Notifier`]; its internal fds (the wake fd; on Linux
//! pidfds, the clock-step timerfd and the inotify instance) go to the
//! backend through its ordinary `modify`, are marked internal in the
//! loop's fd table, and their readiness is routed back to the notifier
//! after each poll, never to a watcher. A backend therefore provides none
//! of this itself (the kqueue backend offers its own service, with
//! `EVFILT_PROC` and `EVFILT_VNODE`, and embeds a [`Wakeup`] for signals
//! and its waker).
//!
//! - [`Notifier`]: everything but fd readiness, with the guarantees the
//!   crate promises (one signal hub per process, the previous disposition
//!   restored, one table of children per process, wake-ups that end a
//!   blocked wait);
//! - [`Wakeup`]: signals and the waker only;
//! - [`InternalFds`]: where their fds go.
//!
//! (Inside: `hub`, the process-wide signal hub and the per-backend slots
//! its handler writes to; `wake`, the wake fd (an eventfd, or a pipe);
//! `children`, the process-wide table of watched children (pidfds on
//! Linux, `SIGCHLD` elsewhere); `clock_steps`, wall-clock step reports (a
//! `CLOCK_REALTIME` timerfd on Linux); `path_hints`, inotify on Linux.
//! docs/porting.md, "Signals, children and wake-ups", has the contract.)
//!
//! A loop on a backend that implements only the readiness methods still
//! has signals, children and wake-ups:
//!
//! ```
//! use evloop::backends::poll::Poll;
//! use evloop::{Async, Child, Loop, RunMode};
//! use std::time::Duration;
//!
//! let mut lp: Loop<Option<evloop::ExitStatus>> = Loop::with_backend(Poll::new());
//! let mut cmd = std::process::Command::new("sh");
//! cmd.args(["-c", "exit 7"]);
//! Child::spawn(&mut lp, &mut cmd, |_, got, ev| *got = ev.status)?;
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

pub use crate::backend::InternalFds;
pub use notifier::{Notifier, Wakeup};
