//! The child component: active child watchers listed per process id, and
//! the exit each one was told of.
//!
//! The backend reaps a watched child when it exits and reports it once
//! (other loops watching the same pid are told by their own backends:
//! backends/unix/children.rs); every watcher of that pid is then stopped
//! and queued with the exit, whatever its status, `ExitStatus::Unknown`
//! (reaped by someone else) included, so that no watcher waits for ever.

use std::collections::HashMap;

use crate::pending::PendingQueues;
use crate::registry::Registry;
use crate::slot_list::{Slot, SlotList};
use crate::{ChildExit, Ready};

#[derive(Default)]
pub(crate) struct Children {
    /// The active watchers of each watched pid, in start order.
    by_pid: HashMap<u32, SlotList>,
    /// The exit each watcher was last told of (what its callback reads).
    exits: HashMap<Slot, ChildExit>,
}

impl Children {
    /// Whether the backend watches a child for this loop.
    pub fn any(&self) -> bool {
        !self.by_pid.is_empty()
    }

    /// Whether the backend already watches `pid` for this loop.
    pub fn is_watched(&self, pid: u32) -> bool {
        self.by_pid.contains_key(&pid)
    }

    pub fn add<C>(&mut self, registry: &mut Registry<C>, slot: Slot, pid: u32) {
        self.by_pid.entry(pid).or_default().push(registry, slot);
    }

    /// Removes a watcher; true if it was the last of its pid (the caller
    /// then tells the backend to stop watching it).
    pub fn remove<C>(&mut self, registry: &mut Registry<C>, slot: Slot, pid: u32) -> bool {
        let Some(list) = self.by_pid.get_mut(&pid) else {
            return false;
        };
        list.remove(registry, slot);
        let last = list.is_empty();
        if last {
            self.by_pid.remove(&pid);
        }
        last
    }

    /// A watched child exited (the backend reaped it and forgot it): its
    /// watchers are stopped and queued, each with the exit.
    pub fn exited<C>(
        &mut self,
        exit: ChildExit,
        registry: &mut Registry<C>,
        pending: &mut PendingQueues,
    ) {
        let Some(mut list) = self.by_pid.remove(&exit.pid) else {
            return;
        };
        list.drain(registry, |registry, slot| {
            registry.deactivate(slot);
            self.exits.insert(slot, exit);
            registry.queue(pending, slot, Ready::EMPTY);
        });
    }

    /// The exit watcher `slot` was told of, if any.
    pub fn exit_of(&self, slot: Slot) -> Option<ChildExit> {
        self.exits.get(&slot).copied()
    }

    /// A watcher was removed: forget what it was told.
    pub fn forget(&mut self, slot: Slot) {
        self.exits.remove(&slot);
    }

    /// After `fork()`: the watched children are the parent's. Returns the
    /// watchers to stop (the backend has forgotten the pids).
    pub fn take_all(&mut self) -> Vec<SlotList> {
        self.by_pid.drain().map(|(_, list)| list).collect()
    }
}
