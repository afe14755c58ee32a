//! Ordered lists of watcher slots with O(1) push and O(1) removal.
//!
//! The idle, prepare and check watchers of a loop, and the io watchers of
//! one fd, are kept in start order, and any one of them can be stopped at
//! any time. A `Vec` with a linear search made stopping N watchers cost
//! O(N^2) (100,000 idle watchers took seconds). Instead each list is
//! threaded through a [`Link`] stored in the watcher's registry entry: a
//! watcher is in at most one list at a time (the one of its kind, priority
//! or fd, while it is active), so one link per watcher is enough.

/// Marks the end of a list (no slot).
pub(crate) const NIL: u32 = u32::MAX;

/// A watcher's place in the list it is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Link {
    pub prev: u32,
    pub next: u32,
}

impl Link {
    pub const UNLINKED: Link = Link {
        prev: NIL,
        next: NIL,
    };
}

/// Where the links live (the registry's entries).
pub(crate) trait LinkStore {
    fn link(&self, idx: u32) -> Link;
    fn link_mut(&mut self, idx: u32) -> &mut Link;
}

/// A list of slots in push order.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SlotList {
    head: u32,
    tail: u32,
    len: u32,
}

impl Default for SlotList {
    fn default() -> Self {
        SlotList {
            head: NIL,
            tail: NIL,
            len: 0,
        }
    }
}

impl SlotList {
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The first slot, if any.
    #[inline]
    pub fn first(&self) -> Option<u32> {
        (self.head != NIL).then_some(self.head)
    }

    /// The only slot, when the list holds exactly one.
    #[inline]
    pub fn only(&self) -> Option<u32> {
        (self.len == 1).then_some(self.head)
    }

    /// Appends `idx`, which must not be in any list.
    pub fn push(&mut self, store: &mut impl LinkStore, idx: u32) {
        debug_assert_eq!(store.link(idx), Link::UNLINKED, "slot {idx} is in a list");
        *store.link_mut(idx) = Link {
            prev: self.tail,
            next: NIL,
        };
        match self.tail {
            NIL => self.head = idx,
            t => store.link_mut(t).next = idx,
        }
        self.tail = idx;
        self.len += 1;
    }

    /// Unlinks `idx`, which must be in this list.
    pub fn remove(&mut self, store: &mut impl LinkStore, idx: u32) {
        let Link { prev, next } = std::mem::replace(store.link_mut(idx), Link::UNLINKED);
        match prev {
            NIL => self.head = next,
            p => store.link_mut(p).next = next,
        }
        match next {
            NIL => self.tail = prev,
            n => store.link_mut(n).prev = prev,
        }
        self.len -= 1;
    }

    /// The slot after `idx` (which is in a list).
    #[inline]
    pub fn next(store: &impl LinkStore, idx: u32) -> Option<u32> {
        let n = store.link(idx).next;
        (n != NIL).then_some(n)
    }

    /// The slots in order.
    #[inline]
    pub fn iter<'a, L: LinkStore>(&self, store: &'a L) -> Iter<'a, L> {
        Iter {
            store,
            cur: self.head,
        }
    }

    /// Calls `f` on every slot in order. The slot after the current one is
    /// read before `f` runs, so `f` may unlink the current slot (and only
    /// that one).
    pub fn for_each<L: LinkStore>(&self, store: &mut L, mut f: impl FnMut(&mut L, u32)) {
        let mut cur = self.head;
        while cur != NIL {
            let next = store.link(cur).next;
            f(store, cur);
            cur = next;
        }
    }

    /// Every slot in order, collected (tests only).
    #[cfg(test)]
    pub fn to_vec(self, store: &impl LinkStore) -> Vec<u32> {
        self.iter(store).collect()
    }
}

/// [`SlotList::iter`].
pub(crate) struct Iter<'a, L> {
    store: &'a L,
    cur: u32,
}

impl<L: LinkStore> Iterator for Iter<'_, L> {
    type Item = u32;
    #[inline]
    fn next(&mut self) -> Option<u32> {
        let cur = self.cur;
        if cur == NIL {
            return None;
        }
        self.cur = self.store.link(cur).next;
        Some(cur)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Links(Vec<Link>);
    impl LinkStore for Links {
        fn link(&self, idx: u32) -> Link {
            self.0[idx as usize]
        }
        fn link_mut(&mut self, idx: u32) -> &mut Link {
            &mut self.0[idx as usize]
        }
    }

    #[test]
    fn push_remove_anywhere_keeps_order() {
        let mut s = Links(vec![Link::UNLINKED; 8]);
        let mut l = SlotList::default();
        for i in [3, 1, 4, 5, 2] {
            l.push(&mut s, i);
        }
        assert_eq!(l.to_vec(&s), [3, 1, 4, 5, 2]);
        l.remove(&mut s, 3); // head
        l.remove(&mut s, 5); // middle
        l.remove(&mut s, 2); // tail
        assert_eq!((l.to_vec(&s), l.len), (vec![1, 4], 2));
        l.push(&mut s, 3);
        assert_eq!(l.to_vec(&s), [1, 4, 3]);
        assert_eq!(l.only(), None);
        l.remove(&mut s, 1);
        l.remove(&mut s, 4);
        assert_eq!((l.only(), l.first()), (Some(3), Some(3)));
        l.remove(&mut s, 3);
        assert!(l.is_empty() && l.first().is_none());
        assert!(s.0.iter().all(|&k| k == Link::UNLINKED));
    }

    #[test]
    fn for_each_may_unlink_the_current_slot() {
        let mut s = Links(vec![Link::UNLINKED; 6]);
        let mut l = SlotList::default();
        for i in 0..6 {
            l.push(&mut s, i);
        }
        let mut seen = vec![];
        let mut list = l;
        l.for_each(&mut s, |s, i| {
            seen.push(i);
            if i % 2 == 0 {
                list.remove(s, i);
            }
        });
        assert_eq!(seen, [0, 1, 2, 3, 4, 5]);
        assert_eq!(list.to_vec(&s), [1, 3, 5]);
    }
}
