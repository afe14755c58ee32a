//! The crate's own kinds beyond the core, one file each (each implements
//! [`Kind`](crate::Kind) and holds its `Loop` methods), and the loop's
//! side of the kind table: installing kinds, creating their watchers, and
//! calling their hooks in each phase.

pub(crate) mod asyncs;
pub(crate) mod child;
pub(crate) mod cleanup;
#[cfg(any(unix, target_os = "wasi"))]
pub(crate) mod embed;
pub(crate) mod once;
pub(crate) mod periodic;
pub(crate) mod phase_hooks;
pub(crate) mod signal;
pub(crate) mod stat;

use std::time::Duration;

use crate::event_loop::BoxedCallback;
use crate::kind::{Context, Kind, Phase};
use crate::pending::Priority;
use crate::registry::Role;
use crate::{Loop, Result};

/// The crate's kinds' ranks: their order within a phase (the order the
/// guarantees in `Loop::run`'s doc need), whichever a loop used first.
#[allow(dead_code)] // (the kinds not converted yet)
pub(crate) mod rank {
    pub const PREPARE: u32 = 10;
    pub const SIGNAL: u32 = 20;
    pub const CHILD: u32 = 30;
    pub const ASYNC: u32 = 40;
    pub const PERIODIC: u32 = 50;
    pub const STAT: u32 = 60;
    /// Before check watchers: the idle rule is decided before they queue.
    pub const IDLE: u32 = 70;
    pub const CHECK: u32 = 80;
    pub const FORK: u32 = 90;
    pub const CLEANUP: u32 = 100;
    pub const ONCE: u32 = 110;
    /// After the other deadlines of the expire phase.
    pub const EMBED: u32 = 120;
}

/// Builds a [`Context`] over the loop's core, next to its kind table.
macro_rules! split_core {
    ($lp:expr) => {{
        let lp = &mut *$lp;
        (
            &mut lp.kinds,
            Context {
                entries: &mut lp.registry,
                pending: &mut lp.pending,
                timers: &mut lp.timers,
                backend: &mut *lp.backend,
                notifier: &mut lp.notifier,
                fds: &mut lp.fds,
                caps: &lp.caps,
                notices: &lp.results.notices,
                queued: None,
                batch_busy: false,
                expired: None,
            },
        )
    }};
}

impl<'s, S> Loop<'s, S> {
    /// The crate's kind `K`, installed at its rank on first use.
    pub(crate) fn builtin<K: Kind + Default>(&mut self, rank: u32) -> (&mut K, u16) {
        let index = match self.kinds.index_of::<K>() {
            Some(i) => i,
            None => self
                .kinds
                .install_ranked(K::default(), rank)
                .expect("not installed yet"),
        };
        let kind = self.kinds.get_mut::<K>().expect("installed");
        (kind, index)
    }

    /// Creates and starts a watcher of the crate's kind `K` (installed at
    /// `rank` on first use): `configure` gives the kind what it needs to
    /// know of the new watcher before it starts. If the kind refuses to
    /// start it, the watcher is removed again and the error returned.
    pub(crate) fn create<K: Kind + Default>(
        &mut self,
        rank: u32,
        cb: BoxedCallback<'s, S>,
        configure: impl FnOnce(&mut K, crate::handle::Key),
    ) -> Result<crate::handle::Key> {
        let (_, index) = self.builtin::<K>(rank);
        let key = self.insert_of::<K>(index, cb);
        configure(self.kinds.get_mut::<K>().expect("installed"), key);
        if let Err(e) = self.start_other(index, key) {
            // Never started: nothing but the registry knows of it.
            self.remove_other(index, key);
            let entry = self.registry.remove(key.slot);
            drop(entry);
            return Err(e);
        }
        Ok(key)
    }

    /// Registers a new, stopped watcher of the kind at `index`.
    pub(crate) fn insert_of<K: Kind>(
        &mut self,
        index: u16,
        cb: BoxedCallback<'s, S>,
    ) -> crate::handle::Key {
        let tag = Role::Other {
            index,
            source: K::PRODUCES_EVENTS,
            keeps_alive: K::KEEPS_ALIVE,
            fd: crate::source::NO_FD,
            interest: crate::Interest::NONE,
        };
        self.registry.insert(tag, cb)
    }

    /// Starts the stopped watcher `key` of the kind at `index`, if the
    /// kind agrees.
    pub(crate) fn start_other(&mut self, index: u16, key: crate::handle::Key) -> Result<()> {
        // It may watch an fd: a direct batch must not miss it.
        self.materialise_batch();
        let (kinds, mut cx) = split_core!(self);
        if kinds.at(index).start(&mut cx, key)? {
            self.registry.activate(key.slot);
        }
        Ok(())
    }

    /// Stops the active watcher `key` of the kind at `index`.
    pub(crate) fn stop_other(&mut self, index: u16, key: crate::handle::Key) {
        if self.registry.deactivate(key.slot) {
            self.materialise_batch();
            let (kinds, mut cx) = split_core!(self);
            kinds.at(index).stop(&mut cx, key);
            // What it had the loop watch goes with it.
            cx.unwatch_slot(key.slot);
        }
    }

    /// The watcher `key` of the kind at `index` left the registry.
    pub(crate) fn remove_other(&mut self, index: u16, key: crate::handle::Key) {
        self.list_reported_oneshots();
        let (kinds, mut cx) = split_core!(self);
        kinds.at(index).remove(&mut cx, key);
    }

    /// The active watcher `key` of the kind at `index` changed priority.
    pub(crate) fn reprioritised_other(
        &mut self,
        index: u16,
        key: crate::handle::Key,
        from: Priority,
        to: Priority,
    ) {
        let (kinds, mut cx) = split_core!(self);
        kinds
            .at(index)
            .priority_changed(&mut cx, key, from.user(), to.user());
    }

    /// Runs `phase` for every kind in it; the highest priority queued.
    /// `expired`: the highest among the timers and deadlines expired in
    /// this iteration (for [`Phase::Idle`]). Inlined: with no kind in the
    /// phase (the common case on the hot path), one bit test.
    #[inline(always)]
    pub(crate) fn run_phase(
        &mut self,
        phase: Phase,
        expired: Option<Priority>,
    ) -> Option<Priority> {
        if !self.kinds.any_in(phase) {
            return None;
        }
        self.run_kinds_phase(phase, expired)
    }

    #[inline(never)]
    fn run_kinds_phase(&mut self, phase: Phase, expired: Option<Priority>) -> Option<Priority> {
        let batch_busy = matches!(phase, Phase::Check | Phase::Idle)
            && self.results.has_invocations(&self.fds, &self.registry);
        self.list_reported_oneshots();
        let (kinds, mut cx) = split_core!(self);
        cx.batch_busy = batch_busy;
        cx.expired = expired;
        for i in 0..kinds.in_phase(phase).len() {
            let index = kinds.in_phase(phase)[i];
            kinds.at(index).phase(&mut cx, phase);
        }
        cx.queued
    }

    /// A kind may watch or unwatch fds (`Context`): the one-shot fds that
    /// an open direct batch has still to reach are listed as reported
    /// first (their registrations disarmed), as queuing them would have.
    /// (A poll reports a one-shot fd only while it has active watchers.)
    fn list_reported_oneshots(&mut self) {
        if self.results.is_open() && self.registry.oneshot() > 0 {
            self.fds.oneshots_reported(self.results.unread_results());
        }
    }

    /// The earliest of the kinds' deadlines, from now.
    pub(crate) fn kinds_wait(&mut self) -> Option<Duration> {
        if self.kinds.is_empty() {
            return None;
        }
        let (kinds, mut cx) = split_core!(self);
        let mut wait: Option<Duration> = None;
        for i in 0..kinds.len() {
            if let Some(b) = kinds.at(i as u16).wait(&mut cx) {
                wait = Some(wait.map_or(b, |w| w.min(b)));
            }
        }
        wait
    }

    /// Whether a kind has a deadline.
    pub(crate) fn kinds_have_deadline(&self) -> bool {
        self.kinds.iter().any(|k| k.has_deadline())
    }

    /// Whether a kind wants the backend's notices.
    #[inline]
    pub(crate) fn kinds_want_notices(&self) -> bool {
        !self.kinds.is_empty() && self.kinds.iter().any(|k| k.wants_notices())
    }

    /// The loop is about to block: whether a kind says it must not.
    #[inline]
    pub(crate) fn kinds_sleep(&mut self) -> bool {
        if self.kinds.is_empty() {
            return false;
        }
        let (kinds, mut cx) = split_core!(self);
        let mut awake = false;
        for i in 0..kinds.len() {
            awake |= kinds.at(i as u16).sleep(&mut cx);
        }
        awake
    }

    /// The poll returned.
    #[inline]
    pub(crate) fn kinds_wake(&mut self) {
        for i in 0..self.kinds.len() {
            self.kinds.at(i as u16).wake();
        }
    }

    /// Watchers due in the kinds but not queued yet: active, and not
    /// queued (or deferred) already.
    pub(crate) fn kinds_due(&self) -> usize {
        let mut due = 0;
        for kind in self.kinds.iter() {
            kind.due(&mut |key| {
                if let Ok(e) = self.registry.lookup(key, "") {
                    if e.is_active() && e.pending.is_none() && e.deferred().is_none() {
                        due += 1;
                    }
                }
            });
        }
        due
    }

    /// Whether the watcher `key` of the kind at `index` is due in it (not
    /// queued yet).
    pub(crate) fn kind_is_due(&self, index: u16, key: crate::handle::Key) -> bool {
        self.kinds
            .iter()
            .nth(index as usize)
            .is_some_and(|k| k.is_due(key))
    }

    /// `clear_pending` on the watcher `key` of the kind at `index`.
    pub(crate) fn kind_clear_due(&mut self, index: u16, key: crate::handle::Key) {
        self.kinds.at(index).clear_due(key);
    }

    /// Each kind after `fork()`, by rank (signals are watched again
    /// before fork watchers are queued, whichever the loop used first).
    #[cfg(any(unix, target_os = "wasi"))]
    pub(crate) fn kinds_after_fork(&mut self) -> Result<()> {
        let (kinds, mut cx) = split_core!(self);
        for index in kinds.by_rank() {
            kinds.at(index).after_fork(&mut cx)?;
        }
        Ok(())
    }

    /// The watchers whose callbacks run as the loop is dropped.
    pub(crate) fn kinds_dropping(&mut self) -> Vec<crate::handle::Key> {
        let mut run = Vec::new();
        let (kinds, mut cx) = split_core!(self);
        for index in kinds.by_rank() {
            kinds.at(index).dropping(&mut cx, &mut run);
        }
        run
    }
}
