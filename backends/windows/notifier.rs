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
use crate::backend::{InternalFds, NoticeService, Notices, SignalSet, Wake};
use crate::{RawFd, Spawned};

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
    /// The backend's name, for errors.
    backend: &'static str,
    console: Option<Console>,
    children: Children,
    user: Arc<UserWaker>,
    wake: Arc<dyn Wake>,
}

impl Notifier {
    /// A notifier of the backend `backend` that ends its wait with `wake`.
    pub(crate) fn new(backend: &'static str, wake: Arc<dyn Wake>) -> Notifier {
        Notifier {
            backend,
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

/// The backend's own service ([`Backend::notices`](crate::backend::Backend::notices)):
/// Windows has no fds for the loop to watch these on, so the backend
/// offers them, through its port or its select set.
impl NoticeService for Notifier {
    fn service_name(&self) -> &'static str {
        self.backend
    }

    fn check_fd(&mut self, fd: RawFd) -> io::Result<()> {
        super::sockets::check_socket(self.backend, fd)
    }

    fn watch_signal(&mut self, signal: i32, _: &mut dyn InternalFds) -> io::Result<()> {
        Notifier::watch_signal(self, signal)
    }

    fn unwatch_signal(&mut self, signal: i32) {
        Notifier::unwatch_signal(self, signal);
    }

    fn watch_child(&mut self, pid: u32, _: &mut dyn InternalFds) -> io::Result<()> {
        Notifier::watch_child(self, pid)
    }

    fn unwatch_child(&mut self, pid: u32, _: &mut dyn InternalFds) {
        Notifier::unwatch_child(self, pid);
    }

    fn signal_child(&mut self, pid: u32, signal: i32) -> io::Result<()> {
        Notifier::signal_child(self, pid, signal)
    }

    fn spawn_child(
        &mut self,
        command: &mut Command,
        _: &mut dyn InternalFds,
    ) -> io::Result<Spawned> {
        Notifier::spawn_child(self, command)
    }

    fn waker(&mut self, _: &mut dyn InternalFds) -> io::Result<Arc<dyn Wake>> {
        Ok(Notifier::waker(self))
    }

    fn take_notices(&mut self, notices: &mut Notices, _: &mut dyn InternalFds) {
        Notifier::take_notices(self, notices);
    }
}
