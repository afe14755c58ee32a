//! The direct-dispatch rule as a type. While a direct batch is open
//! (direct_batch.rs), io events wait in the poll results instead of the
//! pending queues; an operation on an fd-backed watcher that the batch
//! could tell from queued events (feed, set_priority, set_interest,
//! set_callback, is_pending...) must materialise the batch first.
//! [`Settled`] is the proof: the registry hands out a watcher by handle
//! for a change only against one ([`Registry::lookup_mut`]), and the only
//! way to make one is [`Settled::for_handle`], which materialises the
//! batch for an io handle. A new operation cannot forget.
//!
//! [`Registry::lookup_mut`]: crate::registry::Registry::lookup_mut

use crate::Handle;

/// Proof that no direct batch can tell a change to the watcher a handle
/// of type `H` names from queued events (see the module).
pub(crate) struct Settled(());

/// What holds the direct batch (the loop).
pub(crate) trait Batch {
    fn is_open(&self) -> bool;
    fn materialise(&mut self);
}

impl Settled {
    /// For a handle of type `H`: an io handle's batch is materialised
    /// (other kinds' watchers never wait in one).
    #[inline(always)]
    pub fn for_handle<H: Handle>(batch: &mut impl Batch) -> Settled {
        if H::IO && batch.is_open() {
            batch.materialise();
        }
        Settled(())
    }

    /// For the registry's unit tests, which have no loop.
    #[cfg(test)]
    pub fn for_tests() -> Settled {
        Settled(())
    }
}
