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

use crate::Interest;

/// [`Anfd::single`] when the fd has no watcher or more than one.
pub(crate) const NOT_SINGLE: u32 = u32::MAX;

pub(crate) struct Anfd {
    /// Slab indices of the active io watchers on this fd, in start order.
    /// Changed only through the methods below, which keep `single` in step.
    watchers: Vec<u32>,
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
}

impl Default for Anfd {
    fn default() -> Self {
        Anfd {
            watchers: Vec::new(),
            single: NOT_SINGLE,
            registered: Interest::NONE,
            changed: false,
            oneshot: false,
        }
    }
}

impl Anfd {
    /// The active watchers, in start order.
    #[inline]
    pub fn watchers(&self) -> &[u32] {
        &self.watchers
    }

    /// Adds an active watcher at the end.
    pub fn push_watcher(&mut self, idx: u32) {
        self.watchers.push(idx);
        self.sync_single();
    }

    /// Removes a watcher, if it is there.
    pub fn remove_watcher(&mut self, idx: u32) {
        if let Some(pos) = self.watchers.iter().position(|&w| w == idx) {
            self.watchers.remove(pos);
        }
        self.sync_single();
    }

    /// Moves every watcher out, leaving none.
    pub fn take_watchers(&mut self) -> Vec<u32> {
        self.single = NOT_SINGLE;
        std::mem::take(&mut self.watchers)
    }

    /// Gives back an emptied list's allocation, if no watcher was added
    /// meanwhile.
    pub fn recycle_watchers(&mut self, mut list: Vec<u32>) {
        list.clear();
        if self.watchers.is_empty() {
            self.watchers = list;
        }
    }

    fn sync_single(&mut self) {
        self.single = match self.watchers[..] {
            [only] => only,
            _ => NOT_SINGLE,
        };
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
