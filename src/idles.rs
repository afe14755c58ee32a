//! The idle component: active idle watchers listed per priority, and
//! libev's rule for which of them run in an iteration.

use crate::pending::{PendingQueues, Priority};
use crate::slot_list::{LinkStore, Slot, SlotList};

#[derive(Default)]
pub(crate) struct Idles {
    /// One list per priority, in start order.
    lists: [SlotList; Priority::COUNT],
    /// Active idle watchers in all.
    count: usize,
}

impl Idles {
    /// Whether an idle watcher is active (the loop then never blocks).
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    pub fn add(&mut self, links: &mut impl LinkStore, slot: Slot, priority: Priority) {
        self.lists[priority.index()].push(links, slot);
        self.count += 1;
    }

    pub fn remove(&mut self, links: &mut impl LinkStore, slot: Slot, priority: Priority) {
        self.lists[priority.index()].remove(links, slot);
        self.count -= 1;
    }

    /// An active idle watcher changed priority: it moves to the end of the
    /// new priority's list.
    pub fn moved(&mut self, links: &mut impl LinkStore, slot: Slot, from: Priority, to: Priority) {
        self.lists[from.index()].remove(links, slot);
        self.lists[to.index()].push(links, slot);
    }

    /// The idle watchers of `priority`.
    pub fn list(&self, priority: Priority) -> SlotList {
        self.lists[priority.index()]
    }

    /// libev's idle rule: the idle watchers of the highest priority that
    /// has any run, unless something is pending at that priority or above.
    /// One priority level per iteration, so an idle watcher of a high
    /// priority runs while lower work is pending, and a low one waits for
    /// everything above it. Returns that priority unless what is pending
    /// now holds it back: queued work, or unqueued work at the default
    /// priority (a direct batch: `default_busy`, asked only if it matters).
    /// The caller still checks the timers that expire after this is asked.
    pub fn level(
        &self,
        pending: &PendingQueues,
        default_busy: impl FnOnce() -> bool,
    ) -> Option<Priority> {
        if self.is_empty() {
            return None;
        }
        let p = Priority::descending().find(|&p| !self.lists[p.index()].is_empty())?;
        let held = pending.has_live_at_or_above(p) || (p <= Priority::DEFAULT && default_busy());
        (!held).then_some(p)
    }
}
