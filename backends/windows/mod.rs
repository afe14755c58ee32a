//! What the Windows backends (`iocp`, `select`) share: Winsock start-up and
//! the socket check, and the [`Notifier`] each embeds for console events,
//! child exits and cross-thread wake-ups.
//!
//! - `console`: the process-wide console control handler
//!   (`SetConsoleCtrlHandler`) and the per-backend slots it records
//!   events in: Windows' stand-in for signals;
//! - `children`: child exits, through a wait on each watched process's
//!   handle (`RegisterWaitForSingleObject`);
//! - `afd`: the AFD driver's poll request (`IOCTL_AFD_POLL`), what the
//!   `iocp` backend polls sockets with;
//! - `notifier`: what a backend embeds to use them, given the backend's
//!   own way to end its wait from another thread (a [`Wake`]).
//!
//! [`Wake`]: crate::backend::Wake
#![allow(unsafe_code)]

pub(crate) mod afd;
pub(crate) mod children;
pub(crate) mod console;
pub(crate) mod notifier;
pub(crate) mod sockets;

pub(crate) use notifier::Notifier;
