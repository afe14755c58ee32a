//! The io component: per-fd state (libev's `anfds`), the list of fds
//! changed since the last poll (libev's `fdchanges`) and its flush to the
//! backend, turning poll results into pending io callbacks, and killing an
//! fd that cannot be watched.
//!
//! Starting, stopping or re-targeting an io watcher only marks its fd as
//! changed. Before polling, [`FdTable::flush_changes`] (libev's
//! `fd_reify`) computes each changed fd's union of its active watchers'
//! interests and has the backend change the fd only if it differs from
//! what the backend holds: many changes of an fd in one iteration cost at
//! most one, and none when they cancel out (and all of a flush's go to the
//! backend in one [`Backend::modify_all`]).

use crate::RawFd;

use std::io;

use crate::backend::{Backend, Capabilities, Change, PollEvent};
use crate::pending::PendingQueues;
use crate::registry::Registry;
use crate::slot_list::{LinkStore, Slot, SlotList};
use crate::{Error, Interest, Ready, Result, SourceFd, Trigger};

/// An fd's only active watcher, if it has exactly one, by the trigger it
/// is dispatched with: dispatch's first (and in the common cases only)
/// read of the fd table.
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub(crate) enum Single {
    /// One, level or edge triggered: dispatched without walking the list
    /// or testing the trigger. (First: the common case is then a test of
    /// the tag against zero.)
    Level(Slot),
    /// One, one-shot.
    Oneshot(Slot),
    /// None, or several.
    #[default]
    None,
}

/// What the loop knows about one fd.
#[derive(Default)]
pub(crate) struct FdState {
    /// The active io watchers on this fd, in start order. Changed only
    /// through [`FdTable`], which keeps `single` and `trigger` in step.
    watchers: SlotList,
    /// What the backend was last told for this fd, but for the report of a
    /// poll: while the fd is listed as reported, a one-shot registration
    /// is disarmed, whatever this says ([`FdState::registration`]).
    registered: Interest,
    /// Which change list holds the fd, if one does.
    listed: Listed,
    /// The trigger mode its watchers share (kernels keep one registration
    /// per fd); meaningful while it has watchers.
    trigger: Trigger,
    /// An OS service's internal fd (a wake fd, a pidfd, a timer, inotify):
    /// registered readable, routed to the service, never to a watcher.
    internal: bool,
}

impl FdState {
    /// The active watchers, in start order.
    #[inline]
    pub fn watchers(&self) -> SlotList {
        self.watchers
    }

    /// The only active watcher, if there is exactly one.
    #[inline]
    pub fn only(&self) -> Option<Slot> {
        self.watchers.only()
    }

    /// Whether its watchers are (or, once all stopped, were last) one-shot,
    /// so that dispatch can test the fd, not each watcher.
    #[inline]
    pub fn is_oneshot(&self) -> bool {
        self.trigger == Trigger::Oneshot
    }

    /// What the backend holds for this fd: what it was last told, unless
    /// a poll reported the fd since (it is listed as reported) and the
    /// registration was one-shot: the report disarmed it (the backend
    /// contract: the next `modify` starts from "registered, disarmed").
    /// Worked out when asked, so that the report costs nothing more than
    /// the listing.
    #[inline]
    fn registration(&self) -> Interest {
        let reported = matches!(self.listed, Listed::Reported | Listed::Dirty);
        if reported && self.registered.trigger() == Trigger::Oneshot {
            DISARMED
        } else {
            self.registered
        }
    }

    /// Its only watcher, with the fd's trigger: what
    /// [`FdTable::sync_single`] keeps in the `single` table.
    fn single(&self) -> Single {
        match (self.watchers.only(), self.trigger) {
            (None, _) => Single::None,
            (Some(slot), Trigger::Oneshot) => Single::Oneshot(slot),
            (Some(slot), _) => Single::Level(slot),
        }
    }

    /// Its watchers or registration changed otherwise than by a report:
    /// if it is listed as reported, the flush must work out what they want.
    #[inline]
    fn dirty(&mut self) {
        if self.listed == Listed::Reported {
            self.listed = Listed::Dirty;
        }
    }
}

/// The fd table's first length: the fds a process opens first (its
/// standard streams, the notifier's) are numbered low.
const MIN_FDS: usize = 32;

/// A one-shot registration disarmed by a report.
const DISARMED: Interest = Interest::NONE.with_trigger(Trigger::Oneshot);

/// Which change list holds an fd (see [`FdTable`]), and for a reported
/// fd, whether the flush can take its change as it was recorded.
#[derive(Default, Clone, Copy, PartialEq, Eq)]
enum Listed {
    #[default]
    No,
    /// In `reported`, with nothing else changed on the fd since the last
    /// flush: its watchers want what they wanted then, the registration
    /// its entry holds.
    Reported,
    /// In `reported`, and changed otherwise too (a watcher disarmed by the
    /// report, stopped, started, re-targeted; the fd killed): the flush
    /// works out what its watchers want.
    Dirty,
    /// In `changes` only.
    Changed,
}

/// The fd table, and the fds to flush, in two lists: the one-shot fds that
/// polls reported (each report disarms a native registration), in poll
/// order, and every other change, in the order of first change. The flush
/// takes `reported` first. The queued path marks reported fds when it
/// queues the poll's events, before any callback runs, so that order is
/// the queued path's; the direct path marks each fd as its batch reaches
/// it, and callbacks' changes in between go to the other list, so it
/// flushes in the same order. (An fd changed first and reported after is
/// moved to `reported`: its entry in `changes` is skipped.)
///
/// A reported fd's entry records the registration it had before the
/// report. Left as the report found it (a one-shot watcher re-armed by its
/// callback, whose disarm a direct batch deferred: the common one-shot
/// pattern), it wants exactly that again: the flush takes it from the
/// entry without looking at the watchers. Anything else that changes the
/// fd's watchers or registration makes it [`Listed::Dirty`].
#[derive(Default)]
pub(crate) struct FdTable {
    fds: Vec<FdState>,
    /// By fd, as long as `fds`: its only watcher ([`Single`]). A table of
    /// its own, eight bytes a row, so that dispatch finds it with one
    /// scaled load.
    single: Vec<Single>,
    /// The reported fds (`fd`, and in `new` the registration before the
    /// report); during a flush, also the changes it makes.
    reported: Vec<Change>,
    changes: Vec<RawFd>,
    /// The last registration the backend refused, and why: its watchers
    /// see only [`Ready::ERROR`]; a kind that must say why takes it
    /// ([`FdTable::take_refusal`]).
    refused: Option<(RawFd, std::io::Error)>,
    /// How many fds are internal ([`FdState::internal`]): while none is,
    /// the loop does not look for them in the poll's results.
    internal: usize,
    /// The lowest and highest fd made internal since `internal` was last
    /// zero (it only widens): a poll's events outside it are not looked
    /// up, so that a loop with a wake fd pays a compare per event.
    internal_range: (RawFd, RawFd),
    /// The internal fds the last poll reported, for the service.
    routed: Vec<RawFd>,
}

impl FdTable {
    /// The state of `fd`, created on first use.
    #[inline(always)]
    fn state_mut(&mut self, fd: RawFd) -> &mut FdState {
        let i = fd as usize;
        if i >= self.fds.len() {
            self.grow(i);
        }
        &mut self.fds[i]
    }

    /// Makes room for fd number `i`. The table is lengthened by doubling
    /// (within the capacity reserved, if any: [`FdTable::reserve`]), not
    /// to `i + 1`, so that a run of new fds, numbered upwards as the
    /// kernel hands them out, lengthens it once per doubling rather than
    /// once per fd.
    #[cold]
    #[inline(never)]
    fn grow(&mut self, i: usize) {
        let (len, cap) = (self.fds.len(), self.fds.capacity());
        let mut want = (i + 1).max(len * 2).max(MIN_FDS);
        if i < cap {
            want = want.min(cap);
        }
        self.fds.resize_with(want, FdState::default);
        self.single.resize(want, Single::None);
    }

    /// The only active watcher of `fd`, if it has exactly one, and how it
    /// is triggered.
    #[inline(always)]
    pub fn single(&self, fd: RawFd) -> Single {
        self.single.get(fd as usize).copied().unwrap_or_default()
    }

    /// Keeps `fd`'s only watcher in step with its list and trigger mode.
    #[inline]
    fn sync_single(&mut self, fd: RawFd) {
        let i = fd as usize;
        self.single[i] = self.fds[i].single();
    }

    /// Room for fds numbered below `fds`, and for as many changed fds in
    /// one iteration, without growing (the builder's capacity hint).
    pub fn reserve(&mut self, fds: usize) {
        self.fds.reserve(fds.saturating_sub(self.fds.len()));
        self.single.reserve(fds.saturating_sub(self.single.len()));
        self.changes.reserve(fds.saturating_sub(self.changes.len()));
        // The flush writes its changes over `reported`.
        self.reported
            .reserve(fds.saturating_sub(self.reported.len()));
    }

    /// The state of `fd`, if it was ever used.
    #[inline]
    pub fn get(&self, fd: RawFd) -> Option<&FdState> {
        self.fds.get(fd as usize)
    }

    /// Makes `fd` an internal fd of the loop's OS service (`on`), which
    /// the caller has just registered readable with the backend, or no
    /// longer one; says whether it was one.
    pub fn set_internal(&mut self, fd: RawFd, on: bool) -> bool {
        let state = self.state_mut(fd);
        let was = std::mem::replace(&mut state.internal, on);
        state.registered = if on {
            Interest::READABLE
        } else {
            Interest::NONE
        };
        state.dirty();
        match (was, on) {
            (false, true) => {
                let (lo, hi) = self.internal_range;
                self.internal_range = if self.internal == 0 {
                    (fd, fd)
                } else {
                    (lo.min(fd), hi.max(fd))
                };
                self.internal += 1;
            }
            (true, false) => self.internal -= 1,
            _ => {}
        }
        was
    }

    /// After the backend was re-created (fork): the service re-creates
    /// its internal fds, so none is registered any more.
    #[cfg(any(unix, target_os = "wasi"))]
    pub fn forget_internal(&mut self) {
        if self.internal == 0 {
            return;
        }
        for state in &mut self.fds {
            if state.internal {
                state.internal = false;
                state.registered = Interest::NONE;
            }
        }
        self.internal = 0;
    }

    /// The internal fds among `events` (none looked for while the loop
    /// has none), in report order, taken by the caller.
    #[inline]
    pub fn internal_ready(&mut self, events: &[PollEvent]) -> Option<Vec<RawFd>> {
        if self.internal == 0 {
            return None;
        }
        self.collect_internal(events)
    }

    #[inline]
    fn collect_internal(&mut self, events: &[PollEvent]) -> Option<Vec<RawFd>> {
        let (lo, hi) = self.internal_range;
        // Without a branch per event (the compiler can vectorise it): the
        // common poll reports none of them.
        let near = events
            .iter()
            .fold(false, |near, ev| near | ((ev.fd >= lo) & (ev.fd <= hi)));
        if !near {
            return None;
        }
        let mut routed = std::mem::take(&mut self.routed);
        routed.clear();
        for ev in events {
            if (lo..=hi).contains(&ev.fd)
                && self.fds.get(ev.fd as usize).is_some_and(|s| s.internal)
            {
                routed.push(ev.fd);
            }
        }
        if routed.is_empty() {
            self.routed = routed;
            return None;
        }
        Some(routed)
    }

    /// Gives back the list [`FdTable::internal_ready`] lent (its
    /// allocation is kept for the next poll).
    pub fn routed(&mut self, list: Vec<RawFd>) {
        self.routed = list;
    }

    /// Whether changes wait for [`FdTable::flush_changes`] (some may
    /// cancel out and send nothing).
    pub fn has_unflushed(&self) -> bool {
        !self.changes.is_empty() || !self.reported.is_empty()
    }

    /// Marks `fd` as needing a backend update before the next poll.
    #[inline]
    pub fn mark_changed(&mut self, fd: RawFd) {
        let state = self.state_mut(fd);
        match state.listed {
            Listed::No => {
                state.listed = Listed::Changed;
                self.changes.push(fd);
            }
            Listed::Reported => state.listed = Listed::Dirty,
            Listed::Dirty | Listed::Changed => {}
        }
    }

    /// A poll reported the one-shot fd `fd` (its state exists): a native
    /// registration, which the kernel disarmed with the report, is
    /// re-armed or forgotten at the next flush, among the poll's reported
    /// fds. (Again for the same poll: nothing more.)
    #[inline(always)]
    pub fn report_oneshot(&mut self, fd: RawFd) {
        let state = &mut self.fds[fd as usize];
        if state.listed != Listed::No {
            return self.report_listed(fd);
        }
        state.listed = Listed::Reported;
        // The registration from before the report (`registered` still says
        // it: see `FdState::registration`).
        let before = state.registered;
        self.reported.push(Change {
            fd,
            old: Interest::NONE,
            new: before,
        });
    }

    /// [`FdTable::report_oneshot`] for an fd listed already: changed
    /// (it moves to the reported list, dirty), or reported already
    /// (nothing more).
    #[cold]
    fn report_listed(&mut self, fd: RawFd) {
        let state = &mut self.fds[fd as usize];
        if state.listed == Listed::Changed {
            state.listed = Listed::Dirty;
            let before = state.registered;
            self.reported.push(Change {
                fd,
                old: Interest::NONE,
                new: before,
            });
        }
    }

    /// Adds an active watcher to `fd`'s list (the registry has marked it
    /// active).
    pub fn start(
        &mut self,
        links: &mut (impl LinkStore + ?Sized),
        fd: RawFd,
        slot: Slot,
        trigger: Trigger,
    ) {
        // `state_mut` and `mark_changed`, with the state at hand.
        let i = fd as usize;
        if i >= self.fds.len() {
            self.grow(i);
        }
        let state = &mut self.fds[i];
        state.watchers.push(links, slot);
        state.trigger = trigger;
        self.single[i] = state.single();
        match state.listed {
            Listed::No => {
                state.listed = Listed::Changed;
                self.changes.push(fd);
            }
            Listed::Reported => state.listed = Listed::Dirty,
            Listed::Dirty | Listed::Changed => {}
        }
    }

    /// Removes a watcher from `fd`'s list (the registry has marked it
    /// inactive).
    pub fn stop(&mut self, links: &mut (impl LinkStore + ?Sized), fd: RawFd, slot: Slot) {
        let state = self.state_mut(fd);
        state.watchers.remove(links, slot);
        self.sync_single(fd);
        self.mark_changed(fd);
    }

    /// An active watcher on `fd` changed its interest to `interest`.
    pub fn interest_changed(&mut self, fd: RawFd, interest: Interest) {
        let state = self.state_mut(fd);
        state.trigger = interest.trigger();
        self.sync_single(fd);
        self.mark_changed(fd);
    }

    /// Checks that the backend (`caps` its capabilities) offers the
    /// trigger mode and that it agrees with the other active watchers on
    /// the fd (`except` excluded).
    #[inline]
    pub fn check_interest(
        &self,
        caps: &Capabilities,
        backend: &dyn Backend,
        fd: RawFd,
        interest: Interest,
        except: Option<Slot>,
    ) -> Result<()> {
        let trigger = interest.trigger();
        if trigger == Trigger::Edge && !caps.edge {
            return Err(Error::UnsupportedTrigger {
                trigger,
                backend: backend.name(),
            });
        }
        match self.trigger_conflict(fd, trigger, except) {
            Some(existing) => Err(Error::TriggerConflict {
                fd,
                existing,
                requested: trigger,
            }),
            None => Ok(()),
        }
    }

    /// Whether a watcher with trigger mode `trigger` may join `fd`: the
    /// fd's watchers (other than `except`) share one mode, which the fd
    /// records, so this is O(1) however many watchers share it. Returns
    /// the mode in the way.
    pub fn trigger_conflict(
        &self,
        fd: RawFd,
        trigger: Trigger,
        except: Option<Slot>,
    ) -> Option<Trigger> {
        let state = self.get(fd)?;
        // Only `except` itself (being changed) is on the fd: no one to agree with.
        let alone = except.is_some() && state.only() == except;
        let others = !state.watchers.is_empty() && !alone;
        (others && state.trigger != trigger).then_some(state.trigger)
    }

    /// Sends each changed fd's interest union to the backend, once
    /// (libev's `fd_reify`): the reported one-shot fds first, then the
    /// others, all in one [`Backend::modify_all`]. An fd the backend
    /// refuses is killed (and the rest sent after it).
    pub fn flush_changes<C>(
        &mut self,
        registry: &mut Registry<C>,
        pending: &mut PendingQueues,
        backend: &mut dyn Backend,
        flush: Flush,
    ) {
        if self.reported.is_empty() && self.changes.is_empty() {
            return;
        }
        // The changes to make are written over `reported` (each entry read
        // before it is written), then appended.
        let mut made = std::mem::take(&mut self.reported);
        let fds = &mut self.fds;
        made.retain_mut(|c| {
            // A listed fd has its state (`report_oneshot` is given one).
            let state = &mut fds[c.fd as usize];
            if state.listed == Listed::Reported {
                // As the report found it: its watchers want what they
                // wanted, the registration before the report (`c.new`,
                // which `registered` still says), which the report
                // disarmed if it was one-shot (then re-armed here).
                state.listed = Listed::No;
                let rearm = c.new.trigger() == Trigger::Oneshot;
                c.old = if rearm { DISARMED } else { c.new };
                return rearm;
            }
            if state.listed != Listed::Dirty {
                return false; // not reached: entries are unique
            }
            let want = wanted(state, registry, flush);
            c.old = state.registration();
            c.new = want;
            state.listed = Listed::No;
            state.registered = want;
            want != c.old
        });
        if !self.changes.is_empty() {
            let mut changes = std::mem::take(&mut self.changes);
            for &fd in &changes {
                let state = &mut self.fds[fd as usize];
                if state.listed != Listed::Changed {
                    continue; // moved to `reported`, and taken there
                }
                state.listed = Listed::No;
                let want = wanted(state, registry, flush);
                let old = state.registered;
                if want != old {
                    state.registered = want;
                    made.push(Change { fd, old, new: want });
                }
            }
            changes.clear();
            self.changes = changes;
        }
        if !made.is_empty() {
            self.send(&made, registry, pending, backend);
            made.clear();
        }
        // Kept for the allocation.
        self.reported = made;
    }

    /// Sends `made` to the backend in order, killing each fd it refuses
    /// (with its registration as it was) and sending the rest after it.
    /// Each change is traced before it is made: with `tracing` at trace
    /// level, one call per change.
    fn send<C>(
        &mut self,
        made: &[Change],
        registry: &mut Registry<C>,
        pending: &mut PendingQueues,
        backend: &mut dyn Backend,
    ) {
        let mut from = 0;
        while from < made.len() {
            let rest = &made[from..];
            let sent = if tracing::level_enabled!(tracing::Level::TRACE) {
                send_traced(rest, backend)
            } else {
                backend.modify_all(rest)
            };
            let Err((i, err)) = sent else { break };
            let Some(&refused) = rest.get(i) else {
                // Not one of the batch: the backend broke `modify_all`'s
                // contract, and which fds it registered is unknown. Each
                // one's watchers are told (evicted, as a refused fd's),
                // rather than left waiting on a registration that may
                // not exist.
                let n = rest.len();
                tracing::error!(index = i, n, %err, "backend refused a change not in its batch");
                for c in rest {
                    self.fds[c.fd as usize].registered = c.old;
                    self.evict(c.fd, registry, pending, backend);
                    let why = format!("the backend refused change {i} of a batch of {n} ({err})");
                    self.refused = Some((c.fd, std::io::Error::new(err.kind(), why)));
                }
                break;
            };
            self.fds[refused.fd as usize].registered = refused.old;
            tracing::debug!(fd = refused.fd, %err, "backend refused the fd; stopping its watchers");
            self.evict(refused.fd, registry, pending, backend);
            self.refused = Some((refused.fd, err));
            from += i + 1;
        }
    }

    /// Why the backend refused `fd`'s registration, if that was the last
    /// refusal (and it was not taken yet).
    #[cfg_attr(not(unix), allow(dead_code))] // its reader, embed, is Unix only
    pub fn take_refusal(&mut self, fd: RawFd) -> Option<std::io::Error> {
        match self.refused.take() {
            Some((at, err)) if at == fd => Some(err),
            other => {
                self.refused = other;
                None
            }
        }
    }

    /// The fd is unusable: every io watcher on it is stopped and receives
    /// [`Ready::ERROR`] (libev's `fd_kill`), and the backend forgets it.
    pub fn evict<C>(
        &mut self,
        fd: RawFd,
        registry: &mut Registry<C>,
        pending: &mut PendingQueues,
        backend: &mut dyn Backend,
    ) {
        let state = self.state_mut(fd);
        if state.internal {
            // The service's: routed, not killed.
            return;
        }
        let old = state.registration();
        state.registered = Interest::NONE;
        state.dirty();
        if old != Interest::NONE {
            // Best effort: poll/select keep tables that must drop the fd.
            let _ = backend.modify(fd, old, Interest::NONE);
        }
        self.single[fd as usize] = Single::None;
        let state = &mut self.fds[fd as usize];
        state.watchers.drain(registry, |registry, slot| {
            registry.deactivate(slot);
            let ready = Ready::ERROR | Ready::from_interest(registry[slot].interest());
            registry.queue(pending, slot, ready);
        });
    }

    /// After an io watcher is removed: if no active watcher is left on its
    /// fd, tells the backend now, before the source is closed and its
    /// number can be reused (mio asks its users to do this by hand).
    pub fn remove_if_unwatched(&mut self, fd: RawFd, backend: &mut dyn Backend) {
        let state = self.state_mut(fd);
        let old = state.registration();
        if state.watchers.is_empty() && old != Interest::NONE {
            state.registered = Interest::NONE;
            state.dirty();
            if let Err(err) = backend.modify(fd, old, Interest::NONE) {
                tracing::debug!(fd, %err, "backend failed to forget a removed fd");
            }
        }
    }

    /// After the backend was re-created (fork): every fd it knew is new to
    /// it, and is registered again at the next flush.
    #[cfg(any(unix, target_os = "wasi"))]
    pub fn reregister_all(&mut self) {
        for fd in 0..self.fds.len() {
            if self.fds[fd].registered != Interest::NONE {
                self.fds[fd].registered = Interest::NONE;
                self.mark_changed(fd as RawFd);
            }
        }
    }

    /// The direct path's counterpart of [`FdTable::queue_events`] for a
    /// one-shot fd's only watcher, whose event a direct batch dispatched
    /// (the batch marked the fd reported, [`FdTable::report_oneshot`]):
    /// the watcher is stopped (registry and list). The batch defers this
    /// until something could tell (`Loop::settle_disarm`).
    #[cold]
    #[inline(never)]
    pub fn disarm<C>(&mut self, slot: Slot, registry: &mut Registry<C>) {
        let Some(fd) = registry[slot].fd() else {
            unreachable!("a deferred disarm names an fd's watcher")
        };
        let state = &mut self.fds[fd as usize];
        registry.deactivate(slot);
        state.watchers.remove(registry, slot);
        state.dirty();
        self.sync_single(fd);
    }

    /// Marks every one-shot fd that `events` (the unread results of a
    /// direct batch) report, as [`FdTable::report_oneshot`] (the batch
    /// would as it reaches them; again then is nothing more): before
    /// anything outside the batch could read their registrations.
    #[cold]
    #[inline(never)]
    pub fn oneshots_reported(&mut self, events: &[PollEvent]) {
        for ev in events {
            if self.get(ev.fd).is_some_and(FdState::is_oneshot) {
                self.report_oneshot(ev.fd);
            }
        }
    }

    /// Turns poll results into pending io callbacks (filtered per watcher
    /// by what it receives). Invalid fds are killed; a one-shot watcher is
    /// disarmed (stopped) as its event is queued.
    pub fn queue_events<C>(
        &mut self,
        events: &[PollEvent],
        registry: &mut Registry<C>,
        pending: &mut PendingQueues,
        backend: &mut dyn Backend,
    ) {
        for &PollEvent { fd, ready } in events {
            let Some(state) = self.fds.get(fd as usize) else {
                continue;
            };
            if ready.is_invalid() {
                self.evict(fd, registry, pending, backend);
                continue;
            }
            // Not one-shot, so the flush (which ran just before the poll)
            // left the registration matching the watchers' shared mode.
            if !state.is_oneshot() {
                match self.single[fd as usize] {
                    Single::Level(slot) => registry.queue_received(pending, slot, ready),
                    _ => state.watchers.for_each(registry, |registry, slot| {
                        registry.queue_received(pending, slot, ready)
                    }),
                }
                continue;
            }
            self.queue_oneshot(fd, ready, registry, pending);
        }
    }

    /// A one-shot fd's event: its watchers (all one-shot: they share the
    /// fd's mode) are queued and disarmed, and a native registration,
    /// which the kernel disarmed, is re-armed or forgotten at the next
    /// flush.
    fn queue_oneshot<C>(
        &mut self,
        fd: RawFd,
        ready: Ready,
        registry: &mut Registry<C>,
        pending: &mut PendingQueues,
    ) {
        self.report_oneshot(fd);
        let state = &mut self.fds[fd as usize];
        if let Some(slot) = state.only() {
            // The common case: one watcher, no list walk.
            let r = ready & registry[slot].receives();
            if !r.is_empty() {
                registry.queue(pending, slot, r);
                registry.deactivate(slot);
                state.watchers.remove(registry, slot);
                self.single[fd as usize] = Single::None;
                state.dirty();
            }
        } else {
            let mut list = state.watchers;
            let walk = list;
            let mut disarmed = false;
            walk.for_each(registry, |registry, slot| {
                let r = ready & registry[slot].receives();
                if !r.is_empty() {
                    registry.queue(pending, slot, r);
                    registry.deactivate(slot);
                    list.remove(registry, slot);
                    disarmed = true;
                }
            });
            let state = &mut self.fds[fd as usize];
            if disarmed {
                state.dirty();
            }
            state.watchers = list;
            self.sync_single(fd);
        }
    }
}

/// How [`FdTable::flush_changes`] runs.
#[derive(Clone, Copy)]
pub(crate) struct Flush {
    /// The backend's one-shot is native (else the loop emulates it, and
    /// the backend sees level).
    pub native_oneshot: bool,
    /// A nested run is under way: callbacks may be running further up
    /// the stack.
    pub nested: bool,
}

/// [`Backend::modify_all`] one change at a time, each traced first.
#[cold]
fn send_traced(
    changes: &[Change],
    backend: &mut dyn Backend,
) -> std::result::Result<(), (usize, io::Error)> {
    for (i, c) in changes.iter().enumerate() {
        tracing::trace!(fd = c.fd, old = %c.old, new = %c.new, "backend modify");
        backend.modify(c.fd, c.old, c.new).map_err(|e| (i, e))?;
    }
    Ok(())
}

/// What an fd's watchers want the backend to watch: their interests'
/// union (a single one's, usually), as the backend takes it.
#[inline(never)]
fn wanted<C>(state: &FdState, registry: &Registry<C>, flush: Flush) -> Interest {
    let want = match state.only() {
        // The common case: one watcher, and no callback running.
        Some(slot) if !flush.nested => registry[slot].interest(),
        _ => union(state, registry),
    };
    if want.is_empty() {
        if state.internal {
            Interest::READABLE
        } else {
            Interest::NONE
        }
    } else if want.trigger() == Trigger::Oneshot && !flush.native_oneshot {
        // The loop emulates one-shot: the backend sees level.
        want.events()
    } else {
        want
    }
}

/// The union of the interests of an fd's watchers, leaving out those whose
/// callback is running (a nested run is under way): their events could
/// only be held back meanwhile.
#[inline(never)]
fn union<C>(state: &FdState, registry: &Registry<C>) -> Interest {
    let mut want = Interest::NONE;
    for slot in state.watchers.iter(registry) {
        if !registry[slot].cb.is_running() {
            want |= registry[slot].interest();
        }
    }
    want
}

/// Validates a source against the backend (`backend` names it) and
/// returns its fd number; `check` is the OS service's
/// (`NoticeService::check_fd`).
#[inline]
pub(crate) fn check_source(
    backend: &'static str,
    caps: &Capabilities,
    src: SourceFd<'_>,
    check: impl FnOnce(RawFd) -> io::Result<()>,
) -> Result<RawFd> {
    let fd = match src {
        SourceFd::Os(fd) if !caps.virtual_fds => crate::source::raw(fd),
        SourceFd::Virtual(v) if caps.virtual_fds => v.get(),
        SourceFd::Os(_) => {
            return Err(Error::WrongSourceKind {
                backend,
                virtual_source: false,
            })
        }
        SourceFd::Virtual(_) => {
            return Err(Error::WrongSourceKind {
                backend,
                virtual_source: true,
            })
        }
    };
    // `as i64`: on Windows a socket is unsigned, and INVALID_SOCKET (all
    // ones) is negative this way too.
    if (fd as i64) < 0 {
        return Err(Error::InvalidFd {
            fd,
            reason: "negative descriptor number".into(),
        });
    }
    if let Some(max) = caps.max_fd {
        if fd > max {
            return Err(Error::FdTooLarge { fd, max, backend });
        }
    }
    // Closed, or never watchable (a regular file): say so now, at the
    // call that caused it, not later as a silent ERROR callback.
    check(fd).map_err(|err| Error::InvalidFd {
        fd,
        reason: err.to_string(),
    })?;
    Ok(fd)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn polled(fds: &[RawFd]) -> Vec<PollEvent> {
        let ready = Ready::READABLE;
        fds.iter().map(|&fd| PollEvent { fd, ready }).collect()
    }

    fn routed(t: &mut FdTable, fds: &[RawFd]) -> Vec<RawFd> {
        let list = t.internal_ready(&polled(fds)).unwrap_or_default();
        let got = list.clone();
        t.routed(list);
        got
    }

    /// The range that spares a poll's other events a lookup: widened by
    /// each internal fd, reset when none is left; an fd inside it that is
    /// not internal (or no longer) is not routed.
    #[test]
    fn internal_fds_are_found_among_the_polled_ones_and_no_other() {
        let mut t = FdTable::default();
        assert!(
            t.internal_ready(&polled(&[3, 5])).is_none(),
            "none internal"
        );
        t.set_internal(5, true);
        t.set_internal(9, true);
        assert_eq!(routed(&mut t, &[3, 5, 7, 9, 11]), [5, 9]);
        assert!(t.internal_ready(&polled(&[3, 7, 11])).is_none());
        t.set_internal(5, false);
        assert_eq!(routed(&mut t, &[9, 5, 6]), [9]);
        t.set_internal(9, false);
        assert!(t.internal_ready(&polled(&[5, 9])).is_none());
        t.set_internal(20, true);
        assert_eq!(routed(&mut t, &[2, 9, 20, 21]), [20]);
        t.set_internal(2, true);
        assert_eq!(routed(&mut t, &[2, 9, 20, 21]), [2, 20]);
    }
}
