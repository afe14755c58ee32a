//! The watcher registry: every watcher of every kind, in one `Vec`.
//!
//! Like a slab, with one difference that matters on the dispatch path: a
//! free slot holds a real (vacant) [`Entry`] whose generation is 0, which no
//! handle carries. Looking up a handle is therefore one bounds check and
//! one generation compare, and indexing with a trusted index (from a
//! pending entry, an fd's watcher list or the timer heap, which only ever
//! name live watchers) is one bounds check, with no vacant/occupied
//! discriminant to test.

//!
//! Generations are unique in the whole process, not only in one loop: each
//! loop draws blocks of 2^32 generations from a process-wide counter, so a
//! handle of one loop never matches a watcher of another, at the cost of
//! one atomic operation per 2^32 watchers created. The block a generation
//! came from tells a foreign handle from a stale one, for the error.

use std::ops::{Index, IndexMut};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::pending::NOT_PENDING;
use crate::slot_list::{Link, LinkStore};
use crate::watcher::{Entry, Kind};
use crate::Ready;

/// The generation of a free slot; live watchers never have it (block 0 is
/// never handed out).
pub(crate) const VACANT: u64 = 0;

/// Generations per block: the low 32 bits count within a block.
const BLOCK_BITS: u32 = 32;

/// The next block of generations, for any loop of the process.
static NEXT_BLOCK: AtomicU64 = AtomicU64::new(1);

fn new_block() -> u64 {
    NEXT_BLOCK.fetch_add(1, Ordering::Relaxed)
}

pub(crate) struct Registry<'s, S> {
    entries: Vec<Entry<'s, S>>,
    /// Free slots, reused last-freed first.
    free: Vec<u32>,
    /// The next generation to hand out.
    next_gen: u64,
    /// Every block this registry has drawn generations from (one, unless
    /// it created more than 2^32 watchers).
    blocks: Vec<u64>,
}

impl<'s, S> Default for Registry<'s, S> {
    fn default() -> Self {
        let block = new_block();
        Registry {
            entries: Vec::new(),
            free: Vec::new(),
            next_gen: (block << BLOCK_BITS) | 1,
            blocks: vec![block],
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
        link: Link::UNLINKED,
        kind: Kind::Idle,
    }
}

impl<'s, S> Registry<'s, S> {
    /// Number of live watchers.
    pub fn len(&self) -> usize {
        self.entries.len() - self.free.len()
    }

    /// A generation no watcher of any loop in this process has had.
    pub fn new_generation(&mut self) -> u64 {
        let gen = self.next_gen;
        if gen as u32 == u32::MAX {
            // The block is used up (2^32 - 1 watchers): take another.
            let block = new_block();
            self.blocks.push(block);
            self.next_gen = (block << BLOCK_BITS) | 1;
        } else {
            self.next_gen += 1;
        }
        gen
    }

    /// Whether `gen` was handed out by this registry (a handle that does
    /// not match its slot is then stale, else it belongs to another loop).
    pub fn issued(&self, gen: u64) -> bool {
        self.blocks.contains(&(gen >> BLOCK_BITS))
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

    /// The live watcher at `idx` with generation `gen`, or, if there is
    /// none, whether `gen` was issued here (see [`Registry::issued`]): one
    /// bounds check and one compare on the way to a live entry.
    #[inline]
    pub fn get_live_mut(&mut self, idx: u32, gen: u64) -> Result<&mut Entry<'s, S>, bool> {
        match self.entries.get_mut(idx as usize) {
            Some(e) if e.gen == gen => Ok(e),
            _ => Err(self.blocks.contains(&(gen >> BLOCK_BITS))),
        }
    }

    /// Mutable [`Registry::get`].
    #[inline]
    pub fn get_mut(&mut self, idx: u32) -> Option<&mut Entry<'s, S>> {
        self.entries.get_mut(idx as usize)
    }
}

impl<S> LinkStore for Registry<'_, S> {
    #[inline]
    fn link(&self, idx: u32) -> Link {
        self.entries[idx as usize].link
    }
    #[inline]
    fn link_mut(&mut self, idx: u32) -> &mut Link {
        &mut self.entries[idx as usize].link
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

    #[test]
    fn generations_are_unique_across_registries_and_blocks() {
        let mut a: Registry<()> = Registry::default();
        let mut b: Registry<()> = Registry::default();
        let (ga, gb) = (a.new_generation(), b.new_generation());
        assert_ne!(ga, gb);
        assert!(a.issued(ga) && !a.issued(gb) && b.issued(gb) && !b.issued(ga));
        assert!(!a.issued(VACANT));
        // The end of a block moves on to a fresh one, still ours.
        a.next_gen |= u32::MAX as u64;
        let last = a.new_generation();
        let next = a.new_generation();
        assert!(a.issued(last) && a.issued(next) && next >> 32 != last >> 32);
        assert_eq!(a.blocks.len(), 2);
    }
}
