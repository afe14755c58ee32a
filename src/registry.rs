//! The watcher registry: every watcher of every kind, in one `Vec`.
//!
//! Like a slab, with one difference that matters on the dispatch path: a
//! free slot holds a real (vacant) [`Entry`] whose generation is 0, which no
//! handle carries. Looking up a handle is therefore one bounds check and
//! one generation compare, and indexing with a trusted index (from a
//! pending entry, an fd's watcher list or the timer heap, which only ever
//! name live watchers) is one bounds check, with no vacant/occupied
//! discriminant to test.

use std::ops::{Index, IndexMut};

use crate::pending::NOT_PENDING;
use crate::watcher::{Entry, Kind};
use crate::Ready;

/// The generation of a free slot; live watchers get 1, 2, 3, ...
pub(crate) const VACANT: u64 = 0;

pub(crate) struct Registry<'s, S> {
    entries: Vec<Entry<'s, S>>,
    /// Free slots, reused last-freed first.
    free: Vec<u32>,
}

impl<'s, S> Default for Registry<'s, S> {
    fn default() -> Self {
        Registry {
            entries: Vec::new(),
            free: Vec::new(),
        }
    }
}

fn vacant<'s, S>() -> Entry<'s, S> {
    Entry {
        gen: VACANT,
        queue: 0,
        active: false,
        keepalive: false,
        pending: NOT_PENDING,
        io_mask: Ready::EMPTY,
        deferred: None,
        cb: None,
        kind: Kind::Idle,
    }
}

impl<'s, S> Registry<'s, S> {
    /// Number of live watchers.
    pub fn len(&self) -> usize {
        self.entries.len() - self.free.len()
    }

    /// Stores a new watcher (whose generation is not [`VACANT`]) and returns
    /// its index.
    pub fn insert(&mut self, entry: Entry<'s, S>) -> u32 {
        debug_assert_ne!(entry.gen, VACANT);
        match self.free.pop() {
            Some(idx) => {
                self.entries[idx as usize] = entry;
                idx
            }
            None => {
                let idx = u32::try_from(self.entries.len()).expect("more than 2^32 watchers");
                self.entries.push(entry);
                idx
            }
        }
    }

    /// Takes the live watcher at `idx` out, freeing its slot.
    pub fn remove(&mut self, idx: u32) -> Entry<'s, S> {
        let entry = std::mem::replace(&mut self.entries[idx as usize], vacant());
        debug_assert_ne!(entry.gen, VACANT, "removing a free slot");
        self.free.push(idx);
        entry
    }

    /// The entry at `idx`, live or vacant (compare its generation).
    #[inline]
    pub fn get(&self, idx: u32) -> Option<&Entry<'s, S>> {
        self.entries.get(idx as usize)
    }

    /// Mutable [`Registry::get`].
    #[inline]
    pub fn get_mut(&mut self, idx: u32) -> Option<&mut Entry<'s, S>> {
        self.entries.get_mut(idx as usize)
    }
}

impl<'s, S> Index<u32> for Registry<'s, S> {
    type Output = Entry<'s, S>;
    #[inline]
    fn index(&self, idx: u32) -> &Entry<'s, S> {
        &self.entries[idx as usize]
    }
}

impl<'s, S> IndexMut<u32> for Registry<'s, S> {
    #[inline]
    fn index_mut(&mut self, idx: u32) -> &mut Entry<'s, S> {
        &mut self.entries[idx as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn live(gen: u64) -> Entry<'static, ()> {
        Entry { gen, ..vacant() }
    }

    #[test]
    fn slots_are_reused_last_freed_first_and_free_slots_read_as_vacant() {
        let mut r: Registry<()> = Registry::default();
        assert_eq!(
            (r.insert(live(1)), r.insert(live(2)), r.insert(live(3))),
            (0, 1, 2)
        );
        assert_eq!(r.remove(0).gen, 1);
        assert_eq!(r.remove(2).gen, 3);
        assert_eq!(r.len(), 1);
        assert_eq!(r.get(2).map(|e| e.gen), Some(VACANT));
        assert!(r.get(3).is_none());
        assert_eq!(r.insert(live(4)), 2);
        assert_eq!(r.insert(live(5)), 0);
        assert_eq!((r[0].gen, r[1].gen, r[2].gen, r.len()), (5, 2, 4, 3));
    }
}
