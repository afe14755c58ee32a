//! Per-fd state (libev's `anfds`) and the list of fds changed since the
//! last poll (libev's `fdchanges`).
//!
//! Starting, stopping or re-targeting an io watcher only marks its fd as
//! changed. Before polling, [`FdTable::take_changes`] hands the loop each
//! changed fd once; the loop computes the union of the fd's active watchers'
//! interests and calls the backend only if it differs from what the backend
//! was last told. Many start/stop calls on one fd in one iteration therefore
//! cost at most one backend call, and none when they cancel out.

use std::os::fd::RawFd;

use crate::slot_list::{LinkStore, SlotList};
use crate::{Interest, Trigger};

/// [`Anfd::single`] when the fd has no watcher or more than one.
pub(crate) const NOT_SINGLE: u32 = u32::MAX;

pub(crate) struct Anfd {
    /// The active io watchers on this fd, in start order. Changed only
    /// through the methods below, which keep `single` and `trigger` in step.
    watchers: SlotList,
    /// The only watcher, when there is exactly one (the common case, which
    /// dispatch handles without walking the list); else [`NOT_SINGLE`].
    pub single: u32,
    /// What the backend was last told for this fd.
    pub registered: Interest,
    /// Whether the fd is already in the change list.
    pub changed: bool,
    /// Whether its watchers are one-shot (all watchers on an fd share one
    /// trigger mode), so that dispatch can test the fd, not each watcher.
    pub oneshot: bool,
    /// The trigger mode its watchers share (meaningful while it has any).
    trigger: Trigger,
}

impl Default for Anfd {
    fn default() -> Self {
        Anfd {
            watchers: SlotList::default(),
            single: NOT_SINGLE,
            registered: Interest::NONE,
            changed: false,
            oneshot: false,
            trigger: Trigger::Level,
        }
    }
}

impl Anfd {
    /// The active watchers, in start order.
    #[inline]
    pub fn watchers(&self) -> SlotList {
        self.watchers
    }

    /// The trigger mode of its active watchers, if it has any.
    pub fn trigger(&self) -> Option<Trigger> {
        (!self.watchers.is_empty()).then_some(self.trigger)
    }

    /// Adds an active watcher with trigger mode `trigger` at the end.
    pub fn push_watcher(&mut self, links: &mut impl LinkStore, idx: u32, trigger: Trigger) {
        self.watchers.push(links, idx);
        self.set_trigger(trigger);
        self.sync_single();
    }

    /// Removes an active watcher.
    pub fn remove_watcher(&mut self, links: &mut impl LinkStore, idx: u32) {
        self.watchers.remove(links, idx);
        self.sync_single();
    }

    /// The watchers' shared trigger mode changed (`set_interest`).
    pub fn set_trigger(&mut self, trigger: Trigger) {
        self.trigger = trigger;
        self.oneshot = trigger == Trigger::Oneshot;
    }

    /// Empties the list, calling `f` on each watcher (already unlinked).
    pub fn drain_watchers<L: LinkStore>(&mut self, links: &mut L, mut f: impl FnMut(&mut L, u32)) {
        let list = std::mem::take(&mut self.watchers);
        self.single = NOT_SINGLE;
        let mut all = list;
        list.for_each(links, |links, idx| {
            all.remove(links, idx);
            f(links, idx);
        });
    }

    fn sync_single(&mut self) {
        self.single = self.watchers.only().unwrap_or(NOT_SINGLE);
    }
}

#[derive(Default)]
pub(crate) struct FdTable {
    fds: Vec<Anfd>,
    changes: Vec<RawFd>,
}

impl FdTable {
    /// The state of `fd`, created on first use.
    pub fn get_mut(&mut self, fd: RawFd) -> &mut Anfd {
        let i = fd as usize;
        if i >= self.fds.len() {
            self.fds.resize_with(i + 1, Anfd::default);
        }
        &mut self.fds[i]
    }

    /// The state of `fd`, if it was ever used.
    #[inline]
    pub fn get(&self, fd: RawFd) -> Option<&Anfd> {
        self.fds.get(fd as usize)
    }

    /// Marks `fd` as needing a backend update before the next poll.
    pub fn mark_changed(&mut self, fd: RawFd) {
        let anfd = self.get_mut(fd);
        if !anfd.changed {
            anfd.changed = true;
            self.changes.push(fd);
        }
    }

    /// Moves the change list out (the caller gives it back with
    /// [`FdTable::restore_changes`] to keep its capacity).
    pub fn take_changes(&mut self) -> Vec<RawFd> {
        std::mem::take(&mut self.changes)
    }

    /// Returns the (emptied) change list buffer.
    pub fn restore_changes(&mut self, mut buf: Vec<RawFd>) {
        buf.clear();
        if self.changes.is_empty() {
            self.changes = buf;
        } else {
            // Changes made while reifying (a kill) stay queued.
            self.changes.append(&mut buf);
        }
    }

    /// Whether any fd is waiting for a backend update.
    pub fn has_changes(&self) -> bool {
        !self.changes.is_empty()
    }

    /// Every fd the backend currently knows about.
    pub fn registered_fds(&self) -> impl Iterator<Item = RawFd> + '_ {
        self.fds
            .iter()
            .enumerate()
            .filter(|(_, a)| a.registered != Interest::NONE)
            .map(|(fd, _)| fd as RawFd)
    }
}
