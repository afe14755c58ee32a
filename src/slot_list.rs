//! Watcher slots, and ordered lists of them with O(1) push and removal.
//!
//! A [`Slot`] is where a watcher lives in the registry. The idle, prepare
//! and check watchers of a loop, and the io watchers of one fd, are kept
//! in start order, and any one of them can be stopped at any time: each
//! list is threaded through a [`Link`] in the watcher's registry entry (a
//! watcher is in at most one list at a time, the one of its kind, priority
//! or fd, while it is active), so push and removal are O(1) wherever the
//! watcher sits.

use std::num::NonZeroU32;

/// Where a watcher lives in the registry: its index there, never 0 (the
/// registry keeps index 0 vacant), so that `Option<Slot>` takes four bytes
/// and "no slot" needs no sentinel, at no cost per use.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Slot(NonZeroU32);

impl Slot {
    /// The slot of registry index `index` (not 0).
    #[inline]
    pub fn new(index: usize) -> Slot {
        u32::try_from(index)
            .ok()
            .and_then(NonZeroU32::new)
            .map(Slot)
            .expect("a slot index is in 1..2^32")
    }

    /// The registry index.
    #[inline(always)]
    pub fn index(self) -> usize {
        self.0.get() as usize
    }
}

impl std::fmt::Debug for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.index())
    }
}

/// A watcher's place in the list it is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(crate) struct Link {
    pub prev: Option<Slot>,
    pub next: Option<Slot>,
}

/// Where the links live (the registry's entries).
pub(crate) trait LinkStore {
    fn link(&self, slot: Slot) -> Link;
    fn link_mut(&mut self, slot: Slot) -> &mut Link;
}

/// A list of slots in push order.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct SlotList {
    head: Option<Slot>,
    tail: Option<Slot>,
    len: u32,
}

impl SlotList {
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The first slot, if any.
    #[inline]
    pub fn first(&self) -> Option<Slot> {
        self.head
    }

    /// The only slot, when the list holds exactly one.
    #[inline]
    pub fn only(&self) -> Option<Slot> {
        if self.len == 1 {
            self.head
        } else {
            None
        }
    }

    /// Appends `slot`, which must not be in any list.
    pub fn push(&mut self, store: &mut (impl LinkStore + ?Sized), slot: Slot) {
        debug_assert_eq!(store.link(slot), Link::default(), "{slot:?} is in a list");
        *store.link_mut(slot) = Link {
            prev: self.tail,
            next: None,
        };
        match self.tail {
            None => self.head = Some(slot),
            Some(t) => store.link_mut(t).next = Some(slot),
        }
        self.tail = Some(slot);
        self.len += 1;
    }

    /// Unlinks `slot`, which must be in this list.
    pub fn remove(&mut self, store: &mut (impl LinkStore + ?Sized), slot: Slot) {
        let Link { prev, next } = std::mem::take(store.link_mut(slot));
        match prev {
            None => self.head = next,
            Some(p) => store.link_mut(p).next = next,
        }
        match next {
            None => self.tail = prev,
            Some(n) => store.link_mut(n).prev = prev,
        }
        self.len -= 1;
    }

    /// The slots in order.
    #[inline]
    pub fn iter<'a, L: LinkStore + ?Sized>(&self, store: &'a L) -> Iter<'a, L> {
        Iter {
            store,
            cur: self.head,
        }
    }

    /// Calls `f` on every slot in order. The slot after the current one is
    /// read before `f` runs, so `f` may unlink the current slot (and only
    /// that one).
    pub fn for_each<L: LinkStore + ?Sized>(&self, store: &mut L, mut f: impl FnMut(&mut L, Slot)) {
        let mut cur = self.head;
        while let Some(slot) = cur {
            cur = store.link(slot).next;
            f(store, slot);
        }
    }

    /// Empties the list, calling `f` on each slot once it is unlinked.
    pub fn drain<L: LinkStore + ?Sized>(&mut self, store: &mut L, mut f: impl FnMut(&mut L, Slot)) {
        let mut cur = self.head.take();
        self.tail = None;
        self.len = 0;
        while let Some(slot) = cur {
            cur = std::mem::take(store.link_mut(slot)).next;
            f(store, slot);
        }
    }
}

/// [`SlotList::iter`].
pub(crate) struct Iter<'a, L: ?Sized> {
    store: &'a L,
    cur: Option<Slot>,
}

impl<L: LinkStore + ?Sized> Iterator for Iter<'_, L> {
    type Item = Slot;
    #[inline]
    fn next(&mut self) -> Option<Slot> {
        let cur = self.cur?;
        self.cur = self.store.link(cur).next;
        Some(cur)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Links(Vec<Link>);
    impl LinkStore for Links {
        fn link(&self, slot: Slot) -> Link {
            self.0[slot.index() - 1]
        }
        fn link_mut(&mut self, slot: Slot) -> &mut Link {
            &mut self.0[slot.index() - 1]
        }
    }

    fn s(i: usize) -> Slot {
        Slot::new(i + 1)
    }

    fn order(l: &SlotList, store: &Links) -> Vec<usize> {
        l.iter(store).map(|s| s.index() - 1).collect()
    }

    #[test]
    fn push_remove_anywhere_keeps_order() {
        let mut st = Links(vec![Link::default(); 8]);
        let mut l = SlotList::default();
        for i in [3, 1, 4, 5, 2] {
            l.push(&mut st, s(i));
        }
        assert_eq!(order(&l, &st), [3, 1, 4, 5, 2]);
        l.remove(&mut st, s(3)); // head
        l.remove(&mut st, s(5)); // middle
        l.remove(&mut st, s(2)); // tail
        assert_eq!((order(&l, &st), l.len), (vec![1, 4], 2));
        l.push(&mut st, s(3));
        assert_eq!(order(&l, &st), [1, 4, 3]);
        assert_eq!(l.only(), None);
        l.remove(&mut st, s(1));
        l.remove(&mut st, s(4));
        assert_eq!((l.only(), l.first()), (Some(s(3)), Some(s(3))));
        l.remove(&mut st, s(3));
        assert!(l.is_empty() && l.first().is_none());
        assert!(st.0.iter().all(|&k| k == Link::default()));
    }

    #[test]
    fn for_each_may_unlink_the_current_slot_and_drain_unlinks_all() {
        let mut st = Links(vec![Link::default(); 6]);
        let mut l = SlotList::default();
        for i in 0..6 {
            l.push(&mut st, s(i));
        }
        let mut seen = vec![];
        let mut list = l;
        l.for_each(&mut st, |st, slot| {
            seen.push(slot.index() - 1);
            if (slot.index() - 1) % 2 == 0 {
                list.remove(st, slot);
            }
        });
        assert_eq!(seen, [0, 1, 2, 3, 4, 5]);
        assert_eq!(order(&list, &st), [1, 3, 5]);
        let mut drained = vec![];
        list.drain(&mut st, |st, slot| {
            assert_eq!(st.link(slot), Link::default());
            drained.push(slot.index() - 1);
        });
        assert_eq!(drained, [1, 3, 5]);
        assert!(list.is_empty() && st.0.iter().all(|&k| k == Link::default()));
    }

    #[test]
    fn an_optional_slot_is_four_bytes() {
        assert_eq!(std::mem::size_of::<Option<Slot>>(), 4);
        assert_eq!(Slot::new(1).index(), 1);
        assert_eq!(Slot::new(u32::MAX as usize).index(), u32::MAX as usize);
    }
}
