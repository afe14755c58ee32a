//! What the Unix backends share besides the public helpers of
//! `backends/util.rs` (the clock, the deadline of a wait, the check that an
//! fd can be watched at all): signals, child exits, wake-ups, wall-clock
//! steps and path hints, in the submodules:
//!
//! - `hub`: the process-wide signal hub and the per-backend slots its
//!   handler writes to;
//! - `wake`: the wake fd (an eventfd, or a pipe);
//! - `children`: reaping watched children (pidfds on Linux, `SIGCHLD`
//!   elsewhere), through one table for the whole process, so that a child
//!   watched by several backends is reaped once and reported by each;
//! - `clock_steps`: wall-clock step reports (a `CLOCK_REALTIME` timerfd
//!   on Linux, nothing elsewhere);
//! - `path_hints`: path change hints for stat watchers (inotify on Linux,
//!   nothing elsewhere);
//! - `notifier`: what a backend embeds to use them ([`Notifier`],
//!   [`Wakeup`]), with [`InternalFds`], how it lends them its kernel set.
#![allow(unsafe_code)]

pub(crate) mod children;
pub(crate) mod clock_steps;
pub(crate) mod hub;
pub(crate) mod notifier;
pub(crate) mod path_hints;
mod wake;

pub(crate) use notifier::{notifier_hooks, InternalFds, Notifier};

// The clock, the deadline and the "never pollable" check are public, for
// backends outside the crate too: `backends/util.rs`.
pub(crate) use super::util::{check_pollable, refuse_files};
