//! The signal component: active signal watchers listed per signal, and the
//! signals the backend has been asked to watch for this loop.
//!
//! Asking the backend can fail, and activation cannot, so the loop asks
//! when a watcher is about to start ([`Signals::needs_watch`]) and tells
//! it when the last watcher of a signal stops ([`Signals::remove`]).

use crate::slot_list::{LinkStore, Slot, SlotList};
use crate::SignalSet;

pub(crate) struct Signals {
    /// Index `s`: the active watchers of signal `s`, in start order.
    lists: Vec<SlotList>,
    /// The signals the backend watches for this loop.
    watched: SignalSet,
}

impl Default for Signals {
    fn default() -> Self {
        Signals {
            lists: vec![SlotList::default(); 65],
            watched: SignalSet::EMPTY,
        }
    }
}

impl Signals {
    /// Whether the backend must be asked to watch `signal` before a
    /// watcher of it starts.
    pub fn needs_watch(&self, signal: i32) -> bool {
        !self.watched.contains(signal)
    }

    /// The backend now watches `signal`.
    pub fn watching(&mut self, signal: i32) {
        self.watched.insert(signal);
    }

    /// The signals the backend watches for this loop.
    pub fn watched(&self) -> SignalSet {
        self.watched
    }

    /// After `fork()`: the backend watches nothing any more.
    pub fn forget_watched(&mut self) -> SignalSet {
        self.watched.take()
    }

    pub fn add(&mut self, links: &mut impl LinkStore, slot: Slot, signal: i32) {
        self.lists[signal as usize].push(links, slot);
    }

    /// Removes a watcher; true if it was the last of its signal (the
    /// caller then tells the backend, which no longer watches it).
    pub fn remove(&mut self, links: &mut impl LinkStore, slot: Slot, signal: i32) -> bool {
        let list = &mut self.lists[signal as usize];
        list.remove(links, slot);
        let last = list.is_empty();
        if last {
            let mut still = SignalSet::EMPTY;
            for s in self.watched.iter().filter(|&s| s != signal) {
                still.insert(s);
            }
            self.watched = still;
        }
        last
    }

    /// The active watchers of `signal`.
    pub fn list(&self, signal: i32) -> SlotList {
        self.lists[signal as usize]
    }
}
