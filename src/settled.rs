//! The direct-dispatch rule as a type. While a direct batch is open
//! (direct_batch.rs), io events wait in the poll results instead of the
//! pending queues; an operation on an fd-backed watcher that the batch
//! could tell from queued events (feed, set_priority, set_interest,
//! set_callback, is_pending...) must materialise the batch first.
//! [`Settled`] is the proof: the registry hands out a watcher by handle
//! for a change only against one ([`Registry::lookup_mut`]), and the only
//! way to make one is [`Settled::for_handle`], which materialises the
//! batch for an io handle (or [`Settled::for_start`], which keeps it when
//! the watcher's fd was read already). A new operation cannot forget.
//!
//! [`Registry::lookup_mut`]: crate::registry::Registry::lookup_mut

use crate::{Handle, RawFd};

/// Proof that no direct batch can tell a change to the watcher a handle
/// of type `H` names from queued events (see the module).
pub(crate) struct Settled(());

/// What holds the direct batch (the loop).
pub(crate) trait Batch {
    /// Whether a batch is open, or the disarm of a one-shot watcher whose
    /// callback runs from one is deferred (`Loop::settle_disarm`):
    /// materialising settles that too.
    fn is_open(&self) -> bool;
    /// Whether the batch has already read the result for `fd`, if the
    /// poll reported it: a backend reports each fd at most once per poll,
    /// so the unread results then hold nothing for it.
    fn has_read(&self, fd: RawFd) -> bool;
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

    /// For starting a watcher that watches `fd` (if any), with a handle of
    /// type `H`: as [`Settled::for_handle`], except that the batch stays
    /// open when it has read `fd`'s result already. Starting the watcher
    /// then changes nothing the rest of the batch would do or stand for,
    /// which is what keeps a one-shot watcher re-armed from its own
    /// callback on the direct path.
    #[inline(always)]
    pub fn for_start<H: Handle>(batch: &mut impl Batch, fd: Option<RawFd>) -> Settled {
        if H::IO && batch.is_open() && !fd.is_some_and(|fd| batch.has_read(fd)) {
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
