//! The stat component: watched paths, what each was last seen as, and
//! when each is looked at next.
//!
//! A stat watcher is correct on its own by polling: its path is looked at
//! every interval (a heap of monotonic times, like the timers'). Where the
//! backend can hint at changes (inotify, kqueue's `EVFILT_VNODE`), it
//! reports the watcher's token and the path is looked at at once. A change
//! is any difference in the attributes, nanoseconds of the modification
//! time included (libev compares whole seconds and misses quick edits).

use std::collections::HashMap;
use std::path::Path;
use std::rc::Rc;
use std::time::Duration;

use crate::pending::{PendingQueues, Priority};
use crate::registry::Registry;
use crate::slot_list::Slot;
use crate::timer_heap::TimerHeap;
use crate::timers::{from_ns, to_ns};
use crate::{FileStat, Ready};

/// The interval when none is given (libev's).
pub(crate) const DEFAULT_INTERVAL: Duration = Duration::from_secs(5);
/// The shortest interval (libev's): polling faster costs more than it finds.
pub(crate) const MIN_INTERVAL: Duration = Duration::from_millis(100);

pub(crate) struct Watched {
    /// Shared with the watcher's callback, which hands it to the user in
    /// each `StatEvent` (`watchers/stat.rs`).
    pub path: Rc<Path>,
    interval: u64,
    /// What the last look before the current one saw.
    pub previous: FileStat,
    /// What the last look saw.
    pub current: FileStat,
    /// Reported by the backend's hints.
    token: u64,
}

#[derive(Default)]
pub(crate) struct Stats {
    heap: TimerHeap,
    watched: HashMap<Slot, Watched>,
    by_token: HashMap<u64, Slot>,
    next_token: u64,
    active: usize,
    /// Hinted tokens not yet looked at, and a scratch list of due
    /// watchers (both kept for their capacity).
    hints: Vec<u64>,
    due: Vec<Slot>,
}

impl Stats {
    /// A new stat watcher in `slot`; returns its token for the backend's
    /// hints. The interval is clamped ([`DEFAULT_INTERVAL`] for zero, at
    /// least [`MIN_INTERVAL`]).
    pub fn configure(&mut self, slot: Slot, path: Rc<Path>, interval: Duration) -> u64 {
        let interval = match interval {
            Duration::ZERO => DEFAULT_INTERVAL,
            i => i.max(MIN_INTERVAL),
        };
        self.next_token += 1;
        let token = self.next_token;
        self.heap.configure(slot, 0, 0);
        self.watched.insert(
            slot,
            Watched {
                path,
                interval: to_ns(interval),
                previous: FileStat::MISSING,
                current: FileStat::MISSING,
                token,
            },
        );
        self.by_token.insert(token, slot);
        token
    }

    pub fn get(&self, slot: Slot) -> Option<&Watched> {
        self.watched.get(&slot)
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.active == 0
    }

    /// The watcher starts at `now` seeing its path as `seen` (the baseline
    /// later looks are compared with).
    pub fn start(&mut self, slot: Slot, now: u64, seen: FileStat) {
        let Some(w) = self.watched.get_mut(&slot) else {
            return;
        };
        w.current = seen;
        w.previous = seen;
        self.heap.arm(slot, now.saturating_add(w.interval));
        self.active += 1;
    }

    pub fn stop(&mut self, slot: Slot) {
        self.heap.remove(slot);
        self.active -= 1;
    }

    /// The watcher was removed; its token, for the backend.
    pub fn forget(&mut self, slot: Slot) -> Option<u64> {
        self.heap.discard(slot);
        let w = self.watched.remove(&slot)?;
        self.by_token.remove(&w.token);
        Some(w.token)
    }

    /// The token of the watcher in `slot`.
    pub fn token(&self, slot: Slot) -> Option<u64> {
        self.watched.get(&slot).map(|w| w.token)
    }

    /// The watcher a hint names, if it is active.
    pub fn hinted(&self, token: u64) -> Option<Slot> {
        self.by_token
            .get(&token)
            .copied()
            .filter(|&s| self.heap.contains(s))
    }

    /// The backend hinted that these watchers' paths may have changed.
    pub fn hint(&mut self, tokens: &[u64]) {
        self.hints.extend_from_slice(tokens);
    }

    /// The active watchers to look at now: those hinted at, then those due
    /// at `now`, each once. The caller gives the list back
    /// ([`Stats::done_looking`]).
    pub fn take_due(&mut self, now: u64) -> Vec<Slot> {
        let mut out = std::mem::take(&mut self.due);
        let hints = std::mem::take(&mut self.hints);
        for &token in &hints {
            if let Some(slot) = self.hinted(token) {
                if !out.contains(&slot) {
                    out.push(slot);
                }
            }
        }
        self.hints = hints;
        self.hints.clear();
        self.due_at(now, &mut out);
        out
    }

    /// Gives the list of [`Stats::take_due`] back.
    pub fn done_looking(&mut self, mut list: Vec<Slot>) {
        list.clear();
        self.due = list;
    }

    /// The active watchers due for a look at `now`.
    fn due_at(&mut self, now: u64, out: &mut Vec<Slot>) {
        while self.heap.earliest_bound().is_some_and(|at| at <= now) {
            let Some(top) = self.heap.peek() else { break };
            if top.at > now {
                break;
            }
            if !out.contains(&top.slot) {
                out.push(top.slot);
            }
            // Looked at now: next look an interval on (a hint may come
            // sooner).
            self.reschedule(top.slot, now);
        }
    }

    fn reschedule(&mut self, slot: Slot, now: u64) {
        let Some(w) = self.watched.get(&slot) else {
            return;
        };
        self.heap.arm(slot, now.saturating_add(w.interval));
    }

    /// The path of watcher `slot` looks like `seen` now (at `now`): if that
    /// differs from the last look, the watcher is queued (its callback
    /// reads both), and looked at again an interval later.
    pub fn looked<C>(
        &mut self,
        slot: Slot,
        seen: FileStat,
        now: u64,
        registry: &mut Registry<C>,
        pending: &mut PendingQueues,
    ) -> Option<Priority> {
        let w = self.watched.get_mut(&slot)?;
        if seen == w.current {
            return None;
        }
        w.previous = std::mem::replace(&mut w.current, seen);
        self.reschedule(slot, now);
        registry.queue(pending, slot, Ready::EMPTY);
        Some(registry[slot].priority())
    }

    /// How long until the next look.
    pub fn wait(&mut self, now: u64) -> Option<Duration> {
        let at = self.heap.peek()?.at;
        Some(from_ns(at.saturating_sub(now)))
    }
}
