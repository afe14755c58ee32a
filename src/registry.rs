//! The watcher registry: every watcher of every kind in one `Vec`, the
//! handle lookup, and the one place where a watcher's state that others
//! count is changed (active, referenced, priority, io interest, deferred
//! events), so that the counts the loop relies on are kept here and only
//! here.
//!
//! Like a slab, with one difference that matters on the dispatch path: a
//! free slot holds a real (vacant) [`Entry`] whose generation is 0, which no
//! handle carries. Looking up a handle is therefore one bounds check and
//! one generation compare, and indexing with a trusted slot (from a
//! pending entry, an fd's watcher list or the timer heap, which only ever
//! name live watchers) is one bounds check, with no vacant/occupied
//! discriminant to test.
//!
//! Generations are unique in the whole process, not only in one loop: each
//! loop draws blocks of 2^32 generations from a process-wide counter, so a
//! handle of one loop never matches a watcher of another, at the cost of
//! one atomic operation per 2^32 watchers created. The block a generation
//! came from tells a foreign handle from a stale one, for the error.
//!
//! The callback type is a parameter (`C`), so that this module does not
//! depend on the loop that calls the callbacks.

use crate::RawFd;
use std::ops::{Index, IndexMut};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::handle::Key;
use crate::pending::{PendingQueues, Priority, QueuePos};
use crate::settled::Settled;
use crate::slot_list::{Link, LinkStore, Slot};
use crate::unwind::Held;
use crate::{Error, Interest, Ready};

/// The generation of a free slot; live watchers never have it (block 0 is
/// never handed out).
const VACANT: u64 = 0;

/// Generations per block: the low 32 bits count within a block.
const BLOCK_BITS: u32 = 32;

/// The next block of generations, for any loop of the process.
static NEXT_BLOCK: AtomicU64 = AtomicU64::new(1);

fn new_block() -> u64 {
    NEXT_BLOCK.fetch_add(1, Ordering::Relaxed)
}

/// What kind of watcher an entry is, with the state that the registry
/// itself needs (an io watcher's fd and interest: its interest decides
/// what it receives and whether it rules out direct dispatch). The rest of
/// a kind's state lives in its component (a timer's delay and period in
/// timers.rs, an fd's watchers in fd_table.rs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Io {
        fd: RawFd,
        interest: Interest,
    },
    Timer,
    /// A kind behind [`Kind`](crate::Kind): its index in the loop's table
    /// (kind.rs), what the counts need to know of it, and the fd it has
    /// the loop watch for it, if any (`fd` -1: none;
    /// [`Context::watch_fd`](crate::Context::watch_fd)).
    Other {
        index: u16,
        source: bool,
        keeps_alive: bool,
        fd: RawFd,
        interest: Interest,
    },
}

impl Kind {
    /// Whether a watcher of this kind produces events of its own (io
    /// readiness, an expiry), as opposed to running around iterations
    /// (prepare, check) or whenever the loop is idle. Timers are counted
    /// by the timer component (a timer beyond the end of the clock never
    /// expires).
    fn is_source(&self) -> bool {
        matches!(self, Kind::Io { .. } | Kind::Other { source: true, .. })
    }

    /// Whether an active, referenced watcher of this kind keeps `run`
    /// going: all but cleanup watchers, which only wait for the loop's end.
    fn can_keep_alive(&self) -> bool {
        !matches!(
            self,
            Kind::Other {
                keeps_alive: false,
                ..
            }
        )
    }
}

/// Where a watcher's callback is: stored in its entry, or taken out to
/// run (a nested `run` meanwhile defers the watcher's events, and does not
/// count or watch it: it cannot serve it). One explicit state rather than
/// a missing box; the same size as an `Option` (the box's niche). A
/// vacant entry holds `Running`: no handle or trusted slot reaches it.
pub(crate) enum CallbackState<C> {
    Stored(C),
    Running,
}

impl<C> CallbackState<C> {
    /// Takes the callback out to run it; `None` if it is running already
    /// (further up the stack).
    #[inline(always)]
    pub fn take_to_run(&mut self) -> Option<C> {
        match std::mem::replace(self, CallbackState::Running) {
            CallbackState::Stored(cb) => Some(cb),
            CallbackState::Running => None,
        }
    }

    #[inline]
    pub fn is_running(&self) -> bool {
        matches!(self, CallbackState::Running)
    }

    /// The callback, unless it is running.
    #[inline]
    pub fn stored(&self) -> Option<&C> {
        match self {
            CallbackState::Stored(cb) => Some(cb),
            CallbackState::Running => None,
        }
    }

    /// Stores `cb` (set_callback, or a callback back from running); the
    /// one stored before, if any.
    #[inline(always)]
    pub fn store(&mut self, cb: C) -> Option<C> {
        match std::mem::replace(self, CallbackState::Stored(cb)) {
            CallbackState::Stored(old) => Some(old),
            CallbackState::Running => None,
        }
    }
}

/// One watcher.
pub(crate) struct Entry<C> {
    /// Matched against the handle's; [`VACANT`] for a free slot.
    pub gen: u64,
    priority: Priority,
    active: bool,
    /// Whether, while active, it keeps `run` going (libuv's ref/unref).
    referenced: bool,
    /// Where its invocation is queued (in its priority's queue), if it is.
    pub pending: Option<QueuePos>,
    /// For an io watcher, the readiness it receives
    /// ([`Ready::receive_mask`] of its interest); empty for other kinds.
    pub receives: Ready,
    /// Events that arrived while its callback was running further up the
    /// stack (a nested `run`); queued when the callback returns.
    deferred: Option<Ready>,
    /// Its callback, or where it is while it runs.
    pub cb: CallbackState<C>,
    /// Its place in the list of active watchers it is in (its fd's, or its
    /// kind's): slot_list.rs.
    pub link: Link,
    kind: Kind,
}

impl<C> Entry<C> {
    fn vacant() -> Entry<C> {
        Entry {
            gen: VACANT,
            priority: Priority::DEFAULT,
            active: false,
            referenced: false,
            pending: None,
            receives: Ready::EMPTY,
            deferred: None,
            cb: CallbackState::Running,
            link: Link::default(),
            kind: Kind::Timer,
        }
    }

    #[inline]
    pub fn kind(&self) -> Kind {
        self.kind
    }

    #[inline]
    pub fn is_active(&self) -> bool {
        self.active
    }

    #[inline]
    pub fn priority(&self) -> Priority {
        self.priority
    }

    /// Events held for it while its callback runs, if any.
    #[inline]
    pub fn deferred(&self) -> Option<Ready> {
        self.deferred
    }

    /// An io watcher's interest (`Interest::NONE` for other kinds).
    #[inline]
    pub fn interest(&self) -> Interest {
        match self.kind {
            Kind::Io { interest, .. } | Kind::Other { interest, .. } => interest,
            _ => Interest::NONE,
        }
    }

    /// The fd the loop watches for this watcher: an io watcher's, or the
    /// one a kind's watcher has it watch.
    #[inline]
    pub fn fd(&self) -> Option<RawFd> {
        match self.kind {
            Kind::Io { fd, .. } => Some(fd),
            Kind::Other { fd, .. } if fd != crate::source::NO_FD => Some(fd),
            _ => None,
        }
    }

    /// Whether this watcher, while active, rules out dispatching io events
    /// straight from the poll results (direct_batch.rs): an io watcher with
    /// a priority other than the default (its events must be ordered
    /// against other priorities).
    fn blocks_direct_dispatch(&self) -> bool {
        self.fd().is_some() && self.priority != Priority::DEFAULT
    }

    /// Whether this is a one-shot watcher of an fd.
    fn is_oneshot_fd(&self) -> bool {
        self.fd().is_some() && self.interest().is_oneshot()
    }
}

pub(crate) struct Registry<C> {
    entries: Vec<Entry<C>>,
    /// Free slots, reused last-freed first.
    free: Vec<Slot>,
    /// The next generation to hand out.
    next_gen: u64,
    /// Every block this registry has drawn generations from (one, unless
    /// it created more than 2^32 watchers).
    blocks: Vec<u64>,
    /// Active, referenced watchers: what keeps `run` going.
    active_referenced: usize,
    /// Active watchers that rule out direct dispatch.
    blocking_direct: usize,
    /// Active one-shot watchers of fds (a direct batch disarms them).
    oneshot: usize,
    /// Watchers holding deferred events (they count as pending).
    deferred: usize,
    /// Active watchers that can produce events ([`Kind::is_source`]),
    /// referenced or not: while there are none, a wait could never end.
    active_sources: usize,
}

/// Every callback is dropped (with its captures and an owned io source:
/// user code), even if one of those `Drop`s panics; the first panic then
/// propagates, unless the registry is dropped by another panic's
/// unwinding (a second panic out of it would abort the process).
impl<C> Drop for Registry<C> {
    fn drop(&mut self) {
        let mut held = Held::default();
        for e in self.entries.drain(..) {
            held.drop(e);
        }
        held.resume();
    }
}

impl<C> Default for Registry<C> {
    fn default() -> Self {
        let block = new_block();
        Registry {
            // Index 0 stays vacant: no slot names it.
            entries: vec![Entry::vacant()],
            free: Vec::new(),
            next_gen: (block << BLOCK_BITS) | 1,
            blocks: vec![block],
            active_referenced: 0,
            blocking_direct: 0,
            oneshot: 0,
            deferred: 0,
            active_sources: 0,
        }
    }
}

impl<C> Registry<C> {
    /// Number of live watchers.
    pub fn len(&self) -> usize {
        self.entries.len() - 1 - self.free.len()
    }

    /// Active, referenced watchers.
    #[inline]
    pub fn active_referenced(&self) -> usize {
        self.active_referenced
    }

    /// Active io watchers that rule out direct dispatch.
    #[inline]
    pub fn blocking_direct(&self) -> usize {
        self.blocking_direct
    }

    /// Active one-shot watchers of fds.
    #[inline]
    pub fn oneshot(&self) -> usize {
        self.oneshot
    }

    /// Watchers holding deferred events.
    #[inline]
    pub fn deferred_count(&self) -> usize {
        self.deferred
    }

    /// Active watchers that can produce events.
    #[inline]
    pub fn active_sources(&self) -> usize {
        self.active_sources
    }

    /// A generation no watcher of any loop in this process has had.
    fn new_generation(&mut self) -> u64 {
        let gen = self.next_gen;
        if gen as u32 == u32::MAX {
            // The block is used up (2^32 - 1 watchers): take another.
            let block = new_block();
            self.blocks.push(block);
            self.next_gen = (block << BLOCK_BITS) | 1;
        } else {
            self.next_gen += 1;
        }
        gen
    }

    /// Registers a new, inactive watcher at the default priority,
    /// referenced unless its kind cannot keep the loop alive.
    pub fn insert(&mut self, kind: Kind, cb: C) -> Key {
        let gen = self.new_generation();
        let entry = Entry {
            gen,
            receives: match kind {
                Kind::Io { interest, .. } => Ready::receive_mask(interest),
                _ => Ready::EMPTY,
            },
            referenced: kind.can_keep_alive(),
            cb: CallbackState::Stored(cb),
            kind,
            ..Entry::vacant()
        };
        let slot = match self.free.pop() {
            Some(slot) => {
                self.entries[slot.index()] = entry;
                slot
            }
            None => {
                self.entries.push(entry);
                Slot::new(self.entries.len() - 1)
            }
        };
        Key { slot, gen }
    }

    /// Takes the watcher at `slot` out, freeing the slot. It must be
    /// inactive and not queued (stop it first).
    pub fn remove(&mut self, slot: Slot) -> Entry<C> {
        let entry = std::mem::replace(&mut self.entries[slot.index()], Entry::vacant());
        debug_assert_ne!(entry.gen, VACANT, "removing a free slot");
        debug_assert!(!entry.active && entry.pending.is_none() && entry.deferred.is_none());
        self.free.push(slot);
        entry
    }

    /// The live watcher `key` names, or why there is none: it was removed
    /// ([`Error::StaleHandle`]) or it is another loop's
    /// ([`Error::ForeignHandle`]). `kind` is the handle's, for the error.
    #[inline]
    pub fn lookup(&self, key: Key, kind: &'static str) -> Result<&Entry<C>, Error> {
        match self.entries.get(key.slot.index()) {
            Some(e) if e.gen == key.gen => Ok(e),
            _ => Err(self.refusal(key, kind)),
        }
    }

    /// Mutable [`Registry::lookup`], for a change: only against the proof
    /// that a direct batch cannot tell it from queued events (settled.rs).
    #[inline]
    pub fn lookup_mut(
        &mut self,
        key: Key,
        kind: &'static str,
        _: Settled,
    ) -> Result<&mut Entry<C>, Error> {
        let blocks = &self.blocks;
        match self.entries.get_mut(key.slot.index()) {
            Some(e) if e.gen == key.gen => Ok(e),
            _ => Err(refused(blocks.contains(&(key.gen >> BLOCK_BITS)), kind)),
        }
    }

    #[cold]
    fn refusal(&self, key: Key, kind: &'static str) -> Error {
        refused(self.blocks.contains(&(key.gen >> BLOCK_BITS)), kind)
    }

    /// The entry at `slot`, if that slot exists (it may be vacant: compare
    /// the generation).
    #[inline]
    pub fn get_mut(&mut self, slot: Slot) -> Option<&mut Entry<C>> {
        self.entries.get_mut(slot.index())
    }

    /// Whether the watcher at `slot` is active and referenced.
    #[inline]
    pub fn is_active_referenced(&self, slot: Slot) -> bool {
        let e = &self.entries[slot.index()];
        e.active && e.referenced
    }

    /// The watchers whose callbacks are out of their entries, running
    /// further up the stack (a scan: for nested runs only).
    pub fn running(&self) -> Vec<Slot> {
        (1..self.entries.len())
            .filter(|&i| self.entries[i].gen != VACANT && self.entries[i].cb.is_running())
            .map(Slot::new)
            .collect()
    }

    /// Whether `key` names a live, inactive, one-shot io watcher of `fd`.
    #[inline]
    pub fn is_inactive_oneshot_of(&self, key: Key, fd: RawFd) -> bool {
        self.entries.get(key.slot.index()).is_some_and(|e| {
            e.gen == key.gen
                && !e.active
                && matches!(e.kind, Kind::Io { fd: f, interest } if f == fd && interest.is_oneshot())
        })
    }

    /// Marks a watcher active; false if it already was.
    pub fn activate(&mut self, slot: Slot) -> bool {
        let e = &mut self.entries[slot.index()];
        if e.active {
            return false;
        }
        e.active = true;
        self.active_referenced += e.referenced as usize;
        self.blocking_direct += e.blocks_direct_dispatch() as usize;
        self.oneshot += e.is_oneshot_fd() as usize;
        self.active_sources += e.kind.is_source() as usize;
        true
    }

    /// Marks a watcher inactive; false if it already was.
    pub fn deactivate(&mut self, slot: Slot) -> bool {
        let e = &mut self.entries[slot.index()];
        if !e.active {
            return false;
        }
        e.active = false;
        self.active_referenced -= e.referenced as usize;
        self.blocking_direct -= e.blocks_direct_dispatch() as usize;
        self.oneshot -= e.is_oneshot_fd() as usize;
        self.active_sources -= e.kind.is_source() as usize;
        true
    }

    /// Whether the watcher keeps `run` going while active.
    pub fn set_referenced(&mut self, slot: Slot, referenced: bool) {
        let e = &mut self.entries[slot.index()];
        let referenced = referenced && e.kind.can_keep_alive();
        if e.referenced != referenced && e.active {
            if referenced {
                self.active_referenced += 1;
            } else {
                self.active_referenced -= 1;
            }
        }
        e.referenced = referenced;
    }

    /// Changes a watcher's priority (the caller moves a queued entry).
    pub fn set_priority(&mut self, slot: Slot, priority: Priority) {
        self.recount(slot, |e| e.priority = priority);
    }

    /// Has the loop watch `fd` for `interest` for the kind's watcher at
    /// `slot` (`fd` -1: no more), and so what it receives.
    pub fn bind_fd(&mut self, slot: Slot, fd: RawFd, new: Interest) {
        self.recount(slot, |e| {
            if let Kind::Other {
                fd: bound,
                interest,
                ..
            } = &mut e.kind
            {
                *bound = fd;
                *interest = new;
            }
            e.receives = Ready::receive_mask(new);
        });
    }

    /// Changes an io watcher's interest, and so what it receives.
    pub fn set_interest(&mut self, slot: Slot, new: Interest) {
        self.recount(slot, |e| {
            if let Kind::Io { interest, .. } = &mut e.kind {
                *interest = new;
            }
            e.receives = Ready::receive_mask(new);
        });
    }

    /// Applies a change that may make an active watcher start or stop
    /// ruling out direct dispatch or being one-shot, keeping the counts.
    fn recount(&mut self, slot: Slot, change: impl FnOnce(&mut Entry<C>)) {
        let e = &mut self.entries[slot.index()];
        let before = (
            e.active && e.blocks_direct_dispatch(),
            e.active && e.is_oneshot_fd(),
        );
        change(e);
        let after = (
            e.active && e.blocks_direct_dispatch(),
            e.active && e.is_oneshot_fd(),
        );
        self.blocking_direct = self.blocking_direct + after.0 as usize - before.0 as usize;
        self.oneshot = self.oneshot + after.1 as usize - before.1 as usize;
    }

    /// Queues an invocation of `slot` with `ready`, merging with one
    /// already queued (libev ORs events into a pending watcher).
    #[inline]
    pub fn queue(&mut self, pending: &mut PendingQueues, slot: Slot, ready: Ready) {
        let e = &mut self.entries[slot.index()];
        pending.queue(&mut e.pending, e.priority, slot, ready);
    }

    /// Queues an io event for `slot`, if what it receives lets it through.
    #[inline(always)]
    pub fn queue_received(&mut self, pending: &mut PendingQueues, slot: Slot, ready: Ready) {
        let e = &mut self.entries[slot.index()];
        let r = ready & e.receives;
        if !r.is_empty() {
            pending.queue(&mut e.pending, e.priority, slot, r);
        }
    }

    /// Cancels the watcher's queued invocation and deferred events, if
    /// any, and returns the events they carried: after this its callback
    /// is not called for them.
    pub fn cancel(&mut self, pending: &mut PendingQueues, slot: Slot) -> Ready {
        let deferred = self.take_deferred(slot).unwrap_or(Ready::EMPTY);
        let e = &mut self.entries[slot.index()];
        match e.pending.take() {
            Some(pos) => pending.cancel(e.priority, pos) | deferred,
            None => deferred,
        }
    }

    /// Holds `ready` for a watcher whose callback is running further up
    /// the stack.
    pub fn defer(&mut self, slot: Slot, ready: Ready) {
        let e = &mut self.entries[slot.index()];
        match &mut e.deferred {
            Some(held) => *held |= ready,
            None => {
                e.deferred = Some(ready);
                self.deferred += 1;
            }
        }
    }

    /// Takes a watcher's deferred events.
    pub fn take_deferred(&mut self, slot: Slot) -> Option<Ready> {
        let held = self.entries[slot.index()].deferred.take();
        self.deferred -= held.is_some() as usize;
        held
    }

    /// Keeps only the deferred events in `mask` (dropping them if none is
    /// left).
    pub fn restrict_deferred(&mut self, slot: Slot, mask: Ready) {
        if let Some(held) = self.take_deferred(slot) {
            if !(held & mask).is_empty() {
                self.defer(slot, held & mask);
            }
        }
    }

    /// Room for `n` more watchers, and for every slot to be freed, without
    /// growing (the loop's capacity hint).
    pub fn reserve(&mut self, n: usize) {
        self.entries.reserve(n);
        let slots = self.entries.len() - 1 + n;
        self.free.reserve(slots.saturating_sub(self.free.len()));
    }
}

#[cold]
fn refused(issued_here: bool, kind: &'static str) -> Error {
    if issued_here {
        Error::StaleHandle { kind }
    } else {
        Error::ForeignHandle { kind }
    }
}

impl<C> LinkStore for Registry<C> {
    #[inline]
    fn link(&self, slot: Slot) -> Link {
        self.entries[slot.index()].link
    }
    #[inline]
    fn link_mut(&mut self, slot: Slot) -> &mut Link {
        &mut self.entries[slot.index()].link
    }
}

impl<C> Index<Slot> for Registry<C> {
    type Output = Entry<C>;
    #[inline]
    fn index(&self, slot: Slot) -> &Entry<C> {
        &self.entries[slot.index()]
    }
}

impl<C> IndexMut<Slot> for Registry<C> {
    #[inline]
    fn index_mut(&mut self, slot: Slot) -> &mut Entry<C> {
        &mut self.entries[slot.index()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(key: Key) -> usize {
        key.slot.index()
    }

    #[test]
    fn slots_are_reused_last_freed_first_and_free_slots_read_as_vacant() {
        let mut r: Registry<()> = Registry::default();
        let (a, b, c) = (
            r.insert(Kind::Timer, ()),
            r.insert(Kind::Timer, ()),
            r.insert(Kind::Timer, ()),
        );
        assert_eq!((slot(a), slot(b), slot(c)), (1, 2, 3));
        r.remove(a.slot);
        r.remove(c.slot);
        assert_eq!(r.len(), 1);
        assert_eq!(r.get_mut(c.slot).map(|e| e.gen), Some(VACANT));
        assert!(matches!(
            r.lookup(c, "timer"),
            Err(Error::StaleHandle { kind: "timer" })
        ));
        let (d, e) = (r.insert(Kind::Timer, ()), r.insert(Kind::Timer, ()));
        assert_eq!((slot(d), slot(e), r.len()), (3, 1, 3));
        assert!(r.lookup(b, "timer").is_ok() && r.lookup(a, "timer").is_err());
    }

    #[test]
    fn generations_are_unique_across_registries_and_blocks() {
        let mut a: Registry<()> = Registry::default();
        let mut b: Registry<()> = Registry::default();
        let (ka, kb) = (a.insert(Kind::Timer, ()), b.insert(Kind::Timer, ()));
        assert_eq!(ka.slot, kb.slot);
        assert_ne!(ka.gen, kb.gen);
        assert!(matches!(
            a.lookup(kb, "timer"),
            Err(Error::ForeignHandle { .. })
        ));
        assert!(matches!(
            b.lookup_mut(ka, "timer", Settled::for_tests()),
            Err(Error::ForeignHandle { .. })
        ));
        // The end of a block moves on to a fresh one, still ours.
        a.next_gen |= u32::MAX as u64;
        let last = a.new_generation();
        let next = a.new_generation();
        assert!(next >> 32 != last >> 32);
        assert_eq!(a.blocks.len(), 2);
        assert!(a.blocks.contains(&(last >> 32)) && a.blocks.contains(&(next >> 32)));
    }

    #[test]
    fn a_callbacks_state_is_the_size_of_its_box() {
        type Cb = Box<dyn FnMut()>;
        assert_eq!(
            std::mem::size_of::<CallbackState<Cb>>(),
            std::mem::size_of::<Cb>()
        );
    }

    #[test]
    fn counts_follow_every_change() {
        let mut r: Registry<()> = Registry::default();
        let io = r.insert(
            Kind::Io {
                fd: 3,
                interest: Interest::READABLE,
            },
            (),
        );
        assert!(r.activate(io.slot) && !r.activate(io.slot));
        assert_eq!((r.active_referenced(), r.blocking_direct()), (1, 0));
        r.set_priority(io.slot, Priority::from_user(1).unwrap());
        assert_eq!(r.blocking_direct(), 1);
        r.set_interest(
            io.slot,
            Interest::READABLE.with_trigger(crate::Trigger::Oneshot),
        );
        r.set_priority(io.slot, Priority::DEFAULT);
        assert_eq!(r.blocking_direct(), 0, "one-shot does not block");
        assert_eq!(r.oneshot(), 1);
        r.set_referenced(io.slot, false);
        assert_eq!(r.active_referenced(), 0);
        assert!(r.deactivate(io.slot));
        assert_eq!(
            (r.active_referenced(), r.blocking_direct(), r.oneshot()),
            (0, 0, 0)
        );
        r.set_referenced(io.slot, true);
        assert_eq!(r.active_referenced(), 0, "inactive");
        r.defer(io.slot, Ready::READABLE);
        r.defer(io.slot, Ready::WRITABLE);
        assert_eq!(r.deferred_count(), 1);
        r.restrict_deferred(io.slot, Ready::WRITABLE);
        assert_eq!(r.take_deferred(io.slot), Some(Ready::WRITABLE));
        assert_eq!(r.deferred_count(), 0);
    }
}
