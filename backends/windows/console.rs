//! Console control events, Windows' stand-in for signals: one handler for
//! the process (`SetConsoleCtrlHandler`), installed while some backend
//! watches an event and removed when the last one stops (so that Ctrl-C
//! ends the program again, as it did before), and one [`Slot`] per
//! backend that the handler records events in before it wakes that
//! backend.
//!
//! The handler runs in a thread the system creates for it, not in an
//! interrupt context: it may lock and call a backend's [`Wake`].

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use windows_sys::core::BOOL;
use windows_sys::Win32::System::Console::{
    SetConsoleCtrlHandler, CTRL_BREAK_EVENT, CTRL_CLOSE_EVENT, CTRL_C_EVENT, CTRL_LOGOFF_EVENT,
    CTRL_SHUTDOWN_EVENT,
};

use crate::backend::Wake;
use crate::Signal;

/// One backend's share of the console events: what it watches, what
/// arrived since it last looked, and how to end its wait.
pub(crate) struct Slot {
    /// Bit `n - 1` for each watched event numbered `n` (a `Signal`).
    watched: AtomicU64,
    /// The same bits, for the events that arrived and were not taken.
    arrived: AtomicU64,
    wake: Arc<dyn Wake>,
}

impl Slot {
    /// The events that arrived since the last take.
    pub(crate) fn take(&self) -> u64 {
        self.arrived.swap(0, Ordering::AcqRel)
    }
}

/// The slots of the process, and whether the handler is installed.
struct Hub {
    slots: Vec<Arc<Slot>>,
    installed: bool,
}

static HUB: Mutex<Hub> = Mutex::new(Hub {
    slots: Vec::new(),
    installed: false,
});

fn hub() -> std::sync::MutexGuard<'static, Hub> {
    // A panic while the lock was held left nothing half-done that matters.
    HUB.lock().unwrap_or_else(|e| e.into_inner())
}

/// The signal number evloop gives a console event (libuv's numbering).
fn signal_of(ctrl: u32) -> Option<i32> {
    Some(match ctrl {
        CTRL_C_EVENT => Signal::INT,
        CTRL_BREAK_EVENT => Signal::BREAK,
        CTRL_CLOSE_EVENT => Signal::HUP,
        CTRL_LOGOFF_EVENT => Signal::LOGOFF,
        CTRL_SHUTDOWN_EVENT => Signal::SHUTDOWN,
        _ => return None,
    })
}

fn bit(signal: i32) -> u64 {
    1 << (signal - 1)
}

/// The process's handler: records the event in every slot that watches
/// it and wakes those backends. Returns TRUE (handled) if any did, FALSE
/// otherwise, so that the next handler, or the default (ending the
/// process), sees it.
unsafe extern "system" fn handler(ctrl: u32) -> BOOL {
    let Some(signal) = signal_of(ctrl) else {
        return 0;
    };
    let mut handled = false;
    for slot in hub().slots.iter() {
        if slot.watched.load(Ordering::Acquire) & bit(signal) != 0 {
            slot.arrived.fetch_or(bit(signal), Ordering::AcqRel);
            slot.wake.wake();
            handled = true;
        }
    }
    if handled && signal != Signal::INT && signal != Signal::BREAK {
        // Close, logoff and shutdown end the process when the handler
        // returns: give the loops a moment to run their callbacks (the
        // system allows about five seconds for a close).
        let until = Instant::now() + Duration::from_secs(4);
        while Instant::now() < until
            && hub()
                .slots
                .iter()
                .any(|s| s.arrived.load(Ordering::Acquire) & bit(signal) != 0)
        {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    BOOL::from(handled)
}

/// Installs or removes the handler so that it is installed exactly while
/// some slot watches an event.
fn settle(hub: &mut Hub) -> io::Result<()> {
    let wanted = hub
        .slots
        .iter()
        .any(|s| s.watched.load(Ordering::Acquire) != 0);
    if wanted != hub.installed {
        // SAFETY: `handler` is a valid handler routine for the whole life
        // of the process (a plain function); adding and removing it are
        // paired by `installed`.
        if unsafe { SetConsoleCtrlHandler(Some(handler), BOOL::from(wanted)) } == 0 {
            return Err(io::Error::last_os_error());
        }
        hub.installed = wanted;
    }
    Ok(())
}

/// A backend's claim on the hub: watches and unwatches events, and gives
/// its slot back when dropped.
pub(crate) struct Console {
    slot: Arc<Slot>,
}

impl Console {
    /// A slot that wakes the backend with `wake`.
    pub(crate) fn new(wake: Arc<dyn Wake>) -> Console {
        let slot = Arc::new(Slot {
            watched: AtomicU64::new(0),
            arrived: AtomicU64::new(0),
            wake,
        });
        hub().slots.push(slot.clone());
        Console { slot }
    }

    /// Starts recording `signal` (one of the console events; the loop
    /// checked the number).
    pub(crate) fn watch(&self, signal: i32) -> io::Result<()> {
        let mut hub = hub();
        let before = self.slot.watched.fetch_or(bit(signal), Ordering::AcqRel);
        settle(&mut hub).inspect_err(|_| {
            self.slot.watched.store(before, Ordering::Release);
        })
    }

    /// Stops recording `signal`; the handler goes when no slot watches
    /// anything.
    pub(crate) fn unwatch(&self, signal: i32) {
        let mut hub = hub();
        self.slot.watched.fetch_and(!bit(signal), Ordering::AcqRel);
        self.slot.arrived.fetch_and(!bit(signal), Ordering::AcqRel);
        // Removing a handler that is installed does not fail.
        let _ = settle(&mut hub);
    }

    /// The watched events that arrived since the last take.
    pub(crate) fn take(&self) -> u64 {
        self.slot.take() & self.slot.watched.load(Ordering::Acquire)
    }
}

impl Drop for Console {
    fn drop(&mut self) {
        let mut hub = hub();
        self.slot.watched.store(0, Ordering::Release);
        hub.slots.retain(|s| !Arc::ptr_eq(s, &self.slot));
        let _ = settle(&mut hub);
    }
}
