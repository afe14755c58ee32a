//! What a handle is: a watcher's slot, the version of that slot and the
//! loop that made it ([`Key`]), behind the [`Handle`] trait that every
//! kind's handle type implements (each is defined, with the macro below,
//! in its kind's file under `watchers/`).
//!
//! A handle does not own its watcher (the loop does); it is a small `Copy`
//! value, 12 bytes. A slot's version changes when its watcher is removed
//! (registry.rs), so a handle whose watcher was removed matches nothing,
//! even once the slot holds another watcher; the loop's id, unique in the
//! process, refuses a handle of another loop.

use crate::slot_list::Slot;

/// Slot, version and loop of a watcher. Not exported: handles are opaque
/// outside the crate.
#[derive(Clone, Copy, Eq)]
pub struct Key {
    pub(crate) slot: Slot,
    /// The slot's version when the watcher was made (registry.rs).
    pub(crate) version: u32,
    /// The id of the loop that made it.
    pub(crate) owner: u32,
}

impl Key {
    /// The version and the loop's id as one value, which two compares of
    /// keys need instead of three.
    #[inline(always)]
    pub(crate) fn stamp(self) -> u64 {
        (self.owner as u64) << 32 | self.version as u64
    }
}

impl PartialEq for Key {
    #[inline(always)]
    fn eq(&self, other: &Key) -> bool {
        self.slot == other.slot && self.stamp() == other.stamp()
    }
}

/// Consistent with `eq`: equal keys have equal slots and stamps.
impl std::hash::Hash for Key {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.slot.hash(state);
        self.stamp().hash(state);
    }
}

impl std::fmt::Debug for Key {
    /// Shows the slot and its version; the loop's id would only differ
    /// from run to run.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Key")
            .field("idx", &self.slot.index())
            .field("version", &self.version)
            .finish()
    }
}

pub(crate) mod sealed {
    pub trait Sealed {
        /// Whether this is an io handle: operations on io watchers first
        /// materialise a direct dispatch batch (direct_batch.rs).
        const IO: bool;
        /// Whether this is a timer handle: the generic operations take the
        /// timers' fast paths (watchers/timer.rs).
        const TIMER: bool = false;
        fn key(&self) -> super::Key;
        fn from_key(key: super::Key) -> Self;
    }
}

/// A handle to a watcher of any kind: what [`Loop::start`], [`Loop::stop`],
/// [`Loop::remove`], [`Loop::set_priority`] and the other generic watcher
/// operations take.
///
/// Handles are small `Copy` values; they do not own the watcher (the loop
/// does). Implemented by [`Io`], [`Timer`], [`Idle`], [`Prepare`], [`Check`].
///
/// [`Loop::start`]: crate::Loop::start
/// [`Loop::stop`]: crate::Loop::stop
/// [`Loop::remove`]: crate::Loop::remove
/// [`Loop::set_priority`]: crate::Loop::set_priority
/// [`Io`]: crate::Io
/// [`Timer`]: crate::Timer
/// [`Idle`]: crate::Idle
/// [`Prepare`]: crate::Prepare
/// [`Check`]: crate::Check
///
/// ```
/// use evloop::{Handle, Idle, Loop, Sim};
/// fn describe(lp: &Loop, h: impl Handle) -> String {
///     format!("{} active={}", h.kind(), lp.is_active(h).unwrap())
/// }
/// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
/// let idle = Idle::new(&mut lp, |_, _, _| {}).unwrap();
/// assert_eq!(describe(&lp, idle), "idle active=true");
/// ```
pub trait Handle: sealed::Sealed + Copy + std::fmt::Debug {
    /// The kind of watcher: "io", "timer", "idle", "prepare" or "check".
    fn kind(&self) -> &'static str;
}

/// Defines a kind's handle type: `handle!(doc, Name, "kind", is_io)`, or
/// `handle!(doc, Name, "kind", is_io, is_timer)`.
macro_rules! handle {
    ($(#[$doc:meta])* $name:ident, $kind:literal, $io:literal) => {
        $crate::handle::handle!($(#[$doc])* $name, $kind, $io, false);
    };
    ($(#[$doc:meta])* $name:ident, $kind:literal, $io:literal, $timer:literal) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
        pub struct $name(pub(crate) $crate::handle::Key);
        impl $crate::handle::sealed::Sealed for $name {
            const IO: bool = $io;
            const TIMER: bool = $timer;
            fn key(&self) -> $crate::handle::Key {
                self.0
            }
            fn from_key(key: $crate::handle::Key) -> $name {
                $name(key)
            }
        }
        impl $crate::Handle for $name {
            fn kind(&self) -> &'static str {
                $kind
            }
        }
    };
}
pub(crate) use handle;
