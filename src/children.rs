//! The child component: active child watchers listed per process id, the
//! watchers of any child, and the exits each one was told of.
//!
//! The backend reaps a watched child when it exits and reports it once
//! (other loops watching the same pid are told by their own backends:
//! backends/unix/children.rs); every watcher of that pid is then stopped
//! and queued with the exit, whatever its status, `ExitStatus::Unknown`
//! (reaped by someone else) included, so that no watcher waits for ever.
//!
//! A watcher of any child (libev's pid 0) stays active: each exit the
//! backend reports is appended to its backlog and the watcher queued
//! (after the watchers of that pid); its callback takes one exit per call
//! ([`Children::next_exit`]) and is queued again while more wait, so that
//! two children exiting in one iteration are two calls, never one.

use std::collections::{HashMap, VecDeque};

use crate::pending::PendingQueues;
use crate::registry::Registry;
use crate::slot_list::{Slot, SlotList};
use crate::{ChildExit, Ready};

#[derive(Default)]
pub(crate) struct Children {
    /// The active watchers of each watched pid, in start order.
    by_pid: HashMap<u32, SlotList>,
    /// The active watchers of any child, in start order.
    any: SlotList,
    /// The exit each watcher was last told of (what its callback reads).
    exits: HashMap<Slot, ChildExit>,
    /// The exits an any-child watcher has yet to be called for, oldest
    /// first (only while it is active).
    backlog: HashMap<Slot, VecDeque<ChildExit>>,
}

impl Children {
    /// Whether the backend watches a child, or any child, for this loop.
    pub fn any(&self) -> bool {
        !self.by_pid.is_empty() || !self.any.is_empty()
    }

    /// Whether the backend already watches `pid` for this loop.
    pub fn is_watched(&self, pid: u32) -> bool {
        self.by_pid.contains_key(&pid)
    }

    /// Whether the backend watches any child for this loop.
    pub fn watches_any(&self) -> bool {
        !self.any.is_empty()
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

    pub fn add_any<C>(&mut self, registry: &mut Registry<C>, slot: Slot) {
        self.any.push(registry, slot);
    }

    /// Removes an any-child watcher, dropping the exits it was not yet
    /// called for; true if it was the last (the caller then tells the
    /// backend).
    pub fn remove_any<C>(&mut self, registry: &mut Registry<C>, slot: Slot) -> bool {
        self.any.remove(registry, slot);
        self.backlog.remove(&slot);
        self.any.is_empty()
    }

    /// A child exited (the backend reaped it, or was told of it): the
    /// watchers of its pid are stopped and queued, each with the exit;
    /// then every any-child watcher gets it in its backlog and is queued.
    pub fn exited<C>(
        &mut self,
        exit: ChildExit,
        registry: &mut Registry<C>,
        pending: &mut PendingQueues,
    ) {
        if let Some(mut list) = self.by_pid.remove(&exit.pid) {
            list.drain(registry, |registry, slot| {
                registry.deactivate(slot);
                self.exits.insert(slot, exit);
                registry.queue(pending, slot, Ready::EMPTY);
            });
        }
        let backlog = &mut self.backlog;
        self.any.for_each(registry, |registry, slot| {
            backlog.entry(slot).or_default().push_back(exit);
            registry.queue(pending, slot, Ready::EMPTY);
        });
    }

    /// For an any-child watcher about to be called: its oldest exit not
    /// yet told becomes the one it is told of (and is returned), and true
    /// if more wait after it (the caller queues it again).
    pub fn next_exit(&mut self, slot: Slot) -> (Option<ChildExit>, bool) {
        let Some(backlog) = self.backlog.get_mut(&slot) else {
            return (None, false);
        };
        let Some(exit) = backlog.pop_front() else {
            return (None, false);
        };
        let more = !backlog.is_empty();
        if !more {
            self.backlog.remove(&slot);
        }
        self.exits.insert(slot, exit);
        (Some(exit), more)
    }

    /// The exit watcher `slot` was told of, if any.
    pub fn exit_of(&self, slot: Slot) -> Option<ChildExit> {
        self.exits.get(&slot).copied()
    }

    /// A watcher was removed: forget what it was told.
    pub fn forget(&mut self, slot: Slot) {
        self.exits.remove(&slot);
        self.backlog.remove(&slot);
    }

    /// After `fork()`: the watched children are the parent's. Returns the
    /// watchers of pids to stop (the backend has forgotten the pids); the
    /// any-child watchers stay, their backlogs (the parent's children)
    /// dropped.
    pub fn take_all(&mut self) -> Vec<SlotList> {
        self.backlog.clear();
        self.by_pid.drain().map(|(_, list)| list).collect()
    }

    /// The active any-child watchers.
    pub fn any_list(&self) -> SlotList {
        self.any
    }
}
