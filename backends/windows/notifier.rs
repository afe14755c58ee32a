//! What a Windows backend embeds to provide console events (its signals),
//! child exits and cross-thread wake-ups: [`Notifier`]. The backend gives
//! it the one thing only it knows: how to end its wait from another thread
//! (a completion posted to its port, a byte sent to a socket in its select
//! set). Each source records what happened here, then wakes the backend;
//! the backend returns from its wait, and the loop takes the notices.

use std::io;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::children::Children;
use super::console::Console;
use crate::backend::{Notices, SignalSet, Wake};
use crate::Spawned;

/// The waker handed to the loop (async watchers): records that it was
/// used, so that the loop sees [`Notices::woken`], then wakes.
struct UserWaker {
    used: AtomicBool,
    wake: Arc<dyn Wake>,
}

impl Wake for UserWaker {
    fn wake(&self) {
        self.used.store(true, Ordering::Release);
        self.wake.wake();
    }
}

/// Console events, children and the waker of one backend.
pub(crate) struct Notifier {
    console: Option<Console>,
    children: Children,
    user: Arc<UserWaker>,
    wake: Arc<dyn Wake>,
}

impl Notifier {
    /// A notifier that ends the backend's wait with `wake`.
    pub(crate) fn new(wake: Arc<dyn Wake>) -> Notifier {
        Notifier {
            console: None,
            children: Children::new(wake.clone()),
            user: Arc::new(UserWaker {
                used: AtomicBool::new(false),
                wake: wake.clone(),
            }),
            wake,
        }
    }

    /// Starts recording console event `signal`.
    pub(crate) fn watch_signal(&mut self, signal: i32) -> io::Result<()> {
        let wake = &self.wake;
        self.console
            .get_or_insert_with(|| Console::new(wake.clone()))
            .watch(signal)
    }

    /// Stops recording console event `signal`.
    pub(crate) fn unwatch_signal(&mut self, signal: i32) {
        if let Some(console) = &self.console {
            console.unwatch(signal);
        }
    }

    /// Starts waiting for process `pid`.
    pub(crate) fn watch_child(&mut self, pid: u32) -> io::Result<()> {
        self.children.watch(pid)
    }

    /// Stops waiting for process `pid`.
    pub(crate) fn unwatch_child(&mut self, pid: u32) {
        self.children.unwatch(pid);
    }

    /// Terminates (or checks) process `pid`.
    pub(crate) fn signal_child(&mut self, pid: u32, signal: i32) -> io::Result<()> {
        self.children.signal(pid, signal)
    }

    /// Starts `command` and waits for it: watched while `std`'s handle
    /// still holds the process, so the pid cannot name another one.
    pub(crate) fn spawn_child(&mut self, command: &mut Command) -> io::Result<Spawned> {
        let mut child = command.spawn()?;
        if let Err(err) = self.children.watch(child.id()) {
            let _ = child.kill();
            let _ = child.wait();
            return Err(err);
        }
        Ok(Spawned::from_std(child))
    }

    /// The waker for the loop's async watchers.
    pub(crate) fn waker(&mut self) -> Arc<dyn Wake> {
        self.user.clone()
    }

    /// Moves what happened since the last take into `notices`.
    pub(crate) fn take_notices(&mut self, notices: &mut Notices) {
        if let Some(console) = &self.console {
            let arrived = console.take();
            if arrived != 0 {
                notices.signals |= SignalSet::from_bits(arrived);
            }
        }
        self.children.take(&mut notices.exits);
        if self.user.used.swap(false, Ordering::AcqRel) {
            notices.woken = true;
        }
    }
}

/// The [`Backend`](crate::backend::Backend) methods a Windows backend
/// delegates to its [`Notifier`] (the field named `$notifier`): signals
/// (console events), children, the waker and the notices.
macro_rules! notifier_hooks {
    ($notifier:ident) => {
        fn watch_signal(&mut self, signal: i32) -> std::io::Result<()> {
            self.$notifier.watch_signal(signal)
        }

        fn unwatch_signal(&mut self, signal: i32) {
            self.$notifier.unwatch_signal(signal);
        }

        fn watch_child(&mut self, pid: u32) -> std::io::Result<()> {
            self.$notifier.watch_child(pid)
        }

        fn unwatch_child(&mut self, pid: u32) {
            self.$notifier.unwatch_child(pid);
        }

        fn signal_child(&mut self, pid: u32, signal: i32) -> std::io::Result<()> {
            self.$notifier.signal_child(pid, signal)
        }

        fn spawn_child(
            &mut self,
            command: &mut std::process::Command,
        ) -> std::io::Result<$crate::Spawned> {
            self.$notifier.spawn_child(command)
        }

        fn waker(&mut self) -> std::io::Result<std::sync::Arc<dyn $crate::backend::Wake>> {
            Ok(self.$notifier.waker())
        }

        fn take_notices(&mut self, notices: &mut $crate::backend::Notices) {
            self.$notifier.take_notices(notices);
        }
    };
}
pub(crate) use notifier_hooks;
