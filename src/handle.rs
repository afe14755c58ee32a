//! What a handle is: a watcher's slot and generation ([`Key`]), behind the
//! [`Handle`] trait that every kind's handle type implements (each is
//! defined, with the macro below, in its kind's file under `watchers/`).
//!
//! A handle does not own its watcher (the loop does); it is a small `Copy`
//! value. Generations are unique in the process (registry.rs), so a handle
//! whose watcher was removed, or that belongs to another loop, matches no
//! entry and is refused.

use crate::slot_list::Slot;

/// Slot and generation of a watcher. Not exported: handles are opaque
/// outside the crate.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Key {
    pub(crate) slot: Slot,
    pub(crate) gen: u64,
}

impl std::fmt::Debug for Key {
    /// Shows the generation's low half, its serial number in the loop that
    /// made it: the high half names that loop's block (registry.rs), the
    /// same for every handle of the loop, and would only differ from run
    /// to run.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Key")
            .field("idx", &self.slot.index())
            .field("gen", &(self.gen as u32))
            .finish()
    }
}

pub(crate) mod sealed {
    pub trait Sealed {
        /// Whether this is an io handle: operations on io watchers first
        /// materialise a direct dispatch batch (direct_batch.rs).
        const IO: bool;
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
/// use evloop::{Handle, Loop, Sim};
/// fn describe(lp: &Loop, h: impl Handle) -> String {
///     format!("{} active={}", h.kind(), lp.is_active(h).unwrap())
/// }
/// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
/// let idle = lp.idle(|_, _, _| {}).unwrap();
/// assert_eq!(describe(&lp, idle), "idle active=true");
/// ```
pub trait Handle: sealed::Sealed + Copy + std::fmt::Debug {
    /// The kind of watcher: "io", "timer", "idle", "prepare" or "check".
    fn kind(&self) -> &'static str;
}

/// Defines a kind's handle type: `handle!(doc, Name, "kind", is_io)`.
macro_rules! handle {
    ($(#[$doc:meta])* $name:ident, $kind:literal, $io:literal) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
        pub struct $name(pub(crate) $crate::handle::Key);
        impl $crate::handle::sealed::Sealed for $name {
            const IO: bool = $io;
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
