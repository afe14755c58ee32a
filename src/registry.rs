//! The watcher registry: every watcher of every kind in one `Vec`, the
//! handle lookup, and the one place where a watcher's state that others
//! count is changed (active, referenced, priority, io interest, deferred
//! events), so that the counts the loop relies on are kept here and only
//! here.
//!
//! An entry is 64 bytes, one cache line: the callback, the slot's
//! version, the queue position, and the kind's own state (an io watcher's
//! fd, interest and list link; a timer's expiry, delay, period and heap
//! position, so that a timer operation touches its entry and its heap node,
//! as libev's touches its watcher and its node).
//!
//! Like a slab, with one difference that matters on the dispatch path: a
//! free slot holds a real (vacant) [`Entry`], whose version is even, which
//! no handle carries. Looking up a handle is therefore one bounds check and
//! two compares (the version, and the loop's id), and indexing with a
//! trusted slot (from a pending entry, an fd's watcher list or the timer
//! heap, which only ever name live watchers) is one bounds check, with no
//! vacant/occupied discriminant to test.
//!
//! A slot's version is odd while a watcher lives in it and is stepped on
//! every insert and every removal, so a handle of a removed watcher (an
//! older version) never matches the slot's next watcher. A slot whose
//! version would wrap is retired, never reused: at the cost of one entry
//! per 2^31 reuses of one slot, no version is ever handed out twice. A
//! handle of another loop is refused by the loop's id, which it carries:
//! ids are unique in the process, never reused.
//!
//! The callback type is a parameter (`C`), so that this module does not
//! depend on the loop that calls the callbacks.

use crate::RawFd;
use std::ops::{Index, IndexMut};
use std::sync::atomic::{AtomicU32, Ordering};

use crate::handle::Key;
use crate::pending::{PendingQueues, Priority, QueuePos};
use crate::settled::Settled;
use crate::slot_list::{Link, LinkStore, Slot};
use crate::timer_heap::{TimerRecord, TimerRecords};
use crate::unwind::Held;
use crate::{Error, Interest, Ready};

/// The next loop id; 0 is never handed out.
static NEXT_OWNER: AtomicU32 = AtomicU32::new(1);

/// A loop id no other loop of the process has had, or `None` once the
/// 2^32 - 1 ids are used up (ids are never reused: a handle of a dropped
/// loop must not be taken for a new loop's).
fn new_owner() -> Option<u32> {
    NEXT_OWNER
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_add(1))
        .ok()
        .filter(|&id| id != u32::MAX)
}

/// What kind of watcher an entry is, with the state that the registry
/// itself needs (an io watcher's fd and interest: its interest decides
/// what it receives and whether it rules out direct dispatch). A copy of
/// what the entry holds; the rest of a kind's state lives in its
/// component (an fd's watchers in fd_table.rs), but for timers, whose
/// record is in the entry ([`Entry`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
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

impl Role {
    /// Whether a watcher of this kind produces events of its own (io
    /// readiness, an expiry), as opposed to running around iterations
    /// (prepare, check) or whenever the loop is idle. Timers are counted
    /// by the timer component (a timer beyond the end of the clock never
    /// expires).
    fn is_source(&self) -> bool {
        matches!(self, Role::Io { .. } | Role::Other { source: true, .. })
    }

    /// Whether an active, referenced watcher of this kind keeps `run`
    /// going: all but cleanup watchers, which only wait for the loop's end.
    fn can_keep_alive(&self) -> bool {
        !matches!(
            self,
            Role::Other {
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

/// What every watcher has, whatever its kind: three bytes, kept in each
/// variant of [`Body`] right after its tag (so in the same place in each,
/// and a timer's 36-byte record fits after them in 40 bytes).
#[derive(Clone, Copy)]
struct Head {
    priority: Priority,
    /// For a watcher of an fd, the readiness it receives
    /// ([`Ready::receive_mask`] of its interest); empty for other kinds.
    receives: Ready,
    /// [`ACTIVE`], [`REFERENCED`] (while active, it keeps `run` going:
    /// libuv's ref/unref), and [`DEFERRED`] with the bits of the events
    /// that arrived while its callback was running further up the stack
    /// (a nested `run`; queued when the callback returns).
    state: u8,
}

const ACTIVE: u8 = 0x80;
const REFERENCED: u8 = 0x40;
const DEFERRED: u8 = 0x20;
/// The bits of a [`Ready`] (five of them) in `Head::state`.
const READY_BITS: u8 = DEFERRED - 1;
const _: () = assert!(Ready::INVALID.bits() * 2 == DEFERRED);

impl Head {
    fn new(referenced: bool, receives: Ready) -> Head {
        Head {
            priority: Priority::DEFAULT,
            receives,
            state: if referenced { REFERENCED } else { 0 },
        }
    }

    #[inline(always)]
    fn active(&self) -> bool {
        self.state & ACTIVE != 0
    }

    #[inline(always)]
    fn set_active(&mut self, active: bool) {
        self.state = self.state & !ACTIVE | if active { ACTIVE } else { 0 };
    }

    #[inline(always)]
    fn referenced(&self) -> bool {
        self.state & REFERENCED != 0
    }

    #[inline(always)]
    fn set_referenced(&mut self, referenced: bool) {
        self.state = self.state & !REFERENCED | if referenced { REFERENCED } else { 0 };
    }

    #[inline(always)]
    fn has_deferred(&self) -> bool {
        self.state & DEFERRED != 0
    }

    #[inline(always)]
    fn deferred(&self) -> Option<Ready> {
        self.has_deferred()
            .then(|| Ready::from_bits(self.state & READY_BITS))
    }

    #[inline(always)]
    fn set_deferred(&mut self, deferred: Option<Ready>) {
        let bits = deferred.map_or(0, |r| DEFERRED | r.bits());
        self.state = self.state & !(DEFERRED | READY_BITS) | bits;
    }

    #[inline(always)]
    fn take_deferred(&mut self) -> Option<Ready> {
        let held = self.deferred();
        self.set_deferred(None);
        held
    }
}

/// The kind's own state. `repr(u8)`: each variant is laid out in
/// declaration order after its one-byte tag, so the head is at the same
/// offset in every variant (reading it needs no branch) and a timer's
/// record fits after it in 40 bytes.
#[repr(u8)]
enum Body {
    Io {
        head: Head,
        fd: RawFd,
        interest: Interest,
        /// Its place in its fd's list of active watchers (slot_list.rs).
        link: Link,
    },
    Timer {
        head: Head,
        timer: TimerRecord,
    },
    Other {
        head: Head,
        index: u16,
        source: bool,
        keeps_alive: bool,
        /// The fd the loop watches for it (`NO_FD`: none).
        fd: RawFd,
        interest: Interest,
        /// Its place in the list of active watchers it is in (its
        /// kind's, or its fd's).
        link: Link,
    },
}

impl Body {
    fn new(kind: Role) -> Body {
        let head = Head::new(kind.can_keep_alive(), Ready::EMPTY);
        match kind {
            Role::Io { fd, interest } => Body::Io {
                head: Head {
                    receives: Ready::receive_mask(interest),
                    ..head
                },
                fd,
                interest,
                link: Link::default(),
            },
            Role::Timer => Body::Timer {
                head,
                timer: TimerRecord::default(),
            },
            Role::Other {
                index,
                source,
                keeps_alive,
                fd,
                interest,
            } => Body::Other {
                head,
                index,
                source,
                keeps_alive,
                fd,
                interest,
                link: Link::default(),
            },
        }
    }

    #[inline(always)]
    fn head(&self) -> &Head {
        match self {
            Body::Io { head, .. } | Body::Timer { head, .. } | Body::Other { head, .. } => head,
        }
    }

    #[inline(always)]
    fn head_mut(&mut self) -> &mut Head {
        match self {
            Body::Io { head, .. } | Body::Timer { head, .. } | Body::Other { head, .. } => head,
        }
    }
}

/// One watcher: 64 bytes, aligned to a cache line.
#[repr(align(64))]
pub(crate) struct Entry<C> {
    /// Its callback, or where it is while it runs.
    pub cb: CallbackState<C>,
    /// The slot's version: odd while a watcher lives in it, matched
    /// against the handle's.
    version: u32,
    /// Where its invocation is queued (in its priority's queue), if it is.
    pub pending: Option<QueuePos>,
    body: Body,
}

impl<C> Entry<C> {
    fn vacant(version: u32) -> Entry<C> {
        Entry {
            cb: CallbackState::Running,
            version,
            pending: None,
            body: Body::new(Role::Timer),
        }
    }

    /// The slot's version while this watcher lives in it.
    #[inline(always)]
    pub fn version(&self) -> u32 {
        self.version
    }

    #[inline]
    pub fn role(&self) -> Role {
        match self.body {
            Body::Io { fd, interest, .. } => Role::Io { fd, interest },
            Body::Timer { .. } => Role::Timer,
            Body::Other {
                index,
                source,
                keeps_alive,
                fd,
                interest,
                ..
            } => Role::Other {
                index,
                source,
                keeps_alive,
                fd,
                interest,
            },
        }
    }

    #[inline(always)]
    pub fn is_active(&self) -> bool {
        self.body.head().active()
    }

    #[inline(always)]
    pub fn priority(&self) -> Priority {
        self.body.head().priority
    }

    /// For a watcher of an fd, the readiness it receives.
    #[inline(always)]
    pub fn receives(&self) -> Ready {
        self.body.head().receives
    }

    /// Events held for it while its callback runs, if any.
    #[inline]
    pub fn deferred(&self) -> Option<Ready> {
        self.body.head().deferred()
    }

    /// An io watcher's interest (`Interest::NONE` for other kinds).
    #[inline]
    pub fn interest(&self) -> Interest {
        match self.body {
            Body::Io { interest, .. } | Body::Other { interest, .. } => interest,
            Body::Timer { .. } => Interest::NONE,
        }
    }

    /// The fd the loop watches for this watcher: an io watcher's, or the
    /// one a kind's watcher has it watch.
    #[inline]
    pub fn fd(&self) -> Option<RawFd> {
        match self.body {
            Body::Io { fd, .. } => Some(fd),
            Body::Other { fd, .. } if fd != crate::source::NO_FD => Some(fd),
            _ => None,
        }
    }

    /// A timer watcher's record (timer_heap.rs).
    #[inline(always)]
    pub fn timer(&self) -> &TimerRecord {
        match &self.body {
            Body::Timer { timer, .. } => timer,
            _ => unreachable!("a timer's record asked of another kind"),
        }
    }

    #[inline(always)]
    fn timer_mut(&mut self) -> &mut TimerRecord {
        match &mut self.body {
            Body::Timer { timer, .. } => timer,
            _ => unreachable!("a timer's record asked of another kind"),
        }
    }

    /// Whether this watcher, while active, rules out dispatching io events
    /// straight from the poll results (direct_batch.rs): an io watcher with
    /// a priority other than the default (its events must be ordered
    /// against other priorities).
    fn blocks_direct_dispatch(&self) -> bool {
        self.fd().is_some() && self.priority() != Priority::DEFAULT
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
    /// This loop's id, carried by its handles.
    owner: u32,
    /// Active, referenced watchers: what keeps `run` going.
    active_referenced: usize,
    /// Active watchers that rule out direct dispatch.
    blocking_direct: usize,
    /// Active one-shot watchers of fds (a direct batch disarms them).
    oneshot: usize,
    /// Watchers holding deferred events (they count as pending).
    deferred: usize,
    /// Active watchers that can produce events ([`Role::is_source`]),
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

impl<C> Registry<C> {
    /// An empty registry with an id of its own; `None` once the process
    /// has made 2^32 - 1 of them ([`new_owner`]).
    pub fn new() -> Option<Registry<C>> {
        Some(Registry {
            // Index 0 stays vacant: no slot names it.
            entries: vec![Entry::vacant(0)],
            free: Vec::new(),
            owner: new_owner()?,
            active_referenced: 0,
            blocking_direct: 0,
            oneshot: 0,
            deferred: 0,
            active_sources: 0,
        })
    }

    /// The id of the loop that owns it (unique in the process).
    #[cfg_attr(not(unix), allow(dead_code))] // its reader, embed, is Unix only
    pub fn owner(&self) -> u32 {
        self.owner
    }

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

    /// Registers a new, inactive watcher at the default priority,
    /// referenced unless its kind cannot keep the loop alive.
    #[inline]
    pub fn insert(&mut self, kind: Role, cb: C) -> Key {
        self.insert_body(Body::new(kind), cb)
    }

    #[inline(always)]
    fn insert_body(&mut self, body: Body, cb: C) -> Key {
        let (slot, version) = match self.free.pop() {
            Some(slot) => {
                let e = &mut self.entries[slot.index()];
                let version = e.version.wrapping_add(1);
                *e = Entry {
                    cb: CallbackState::Stored(cb),
                    version,
                    pending: None,
                    body,
                };
                (slot, version)
            }
            None => {
                self.entries.push(Entry {
                    cb: CallbackState::Stored(cb),
                    version: 1,
                    pending: None,
                    body,
                });
                (Slot::new(self.entries.len() - 1), 1)
            }
        };
        Key {
            slot,
            version,
            owner: self.owner,
        }
    }

    /// Takes the watcher at `slot` out, freeing the slot (or retiring it,
    /// if its version would wrap). It must be inactive and not queued
    /// (stop it first).
    pub fn remove(&mut self, slot: Slot) -> Entry<C> {
        let old = &self.entries[slot.index()];
        debug_assert!(old.version % 2 == 1, "removing a free slot");
        let version = old.version.wrapping_add(1);
        let entry = std::mem::replace(&mut self.entries[slot.index()], Entry::vacant(version));
        debug_assert!(!entry.is_active() && entry.pending.is_none() && entry.deferred().is_none());
        if version != 0 {
            self.free.push(slot);
        }
        entry
    }

    /// The live watcher `key` names, or why there is none: it was removed
    /// ([`Error::StaleHandle`]) or it is another loop's
    /// ([`Error::ForeignHandle`]). `kind` is the handle's, for the error.
    #[inline]
    pub fn lookup(&self, key: Key, kind: &'static str) -> Result<&Entry<C>, Error> {
        match self.entries.get(key.slot.index()) {
            Some(e) if matches(e, key, self.owner) => Ok(e),
            _ => Err(refused(key.owner == self.owner, kind)),
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
        let owner = self.owner;
        match self.entries.get_mut(key.slot.index()) {
            Some(e) if matches(e, key, owner) => Ok(e),
            _ => Err(refused(key.owner == owner, kind)),
        }
    }

    /// The timer watcher `key` (a timer handle's) names, for the timers'
    /// fast paths (watchers/timer.rs): its entry and the count its
    /// activity changes, found with one lookup.
    #[inline(always)]
    pub fn timer_mut(&mut self, key: Key, settled: Settled) -> Result<TimerEntry<'_>, Error> {
        let active_referenced = &mut self.active_referenced;
        let owner = self.owner;
        match self.entries.get_mut(key.slot.index()) {
            Some(entry) if matches(entry, key, owner) => {
                let _ = settled;
                let Body::Timer { head, timer } = &mut entry.body else {
                    unreachable!("a timer handle names a timer");
                };
                Ok(TimerEntry {
                    queued: entry.pending.is_some() || head.has_deferred(),
                    head,
                    record: timer,
                    active_referenced,
                })
            }
            _ => Err(refused(key.owner == owner, "timer")),
        }
    }

    /// A timer expired (its node is rescheduled or gone): it is stopped if
    /// `stop`, and its invocation queued; its priority is returned.
    #[inline]
    pub fn expired_timer(
        &mut self,
        slot: Slot,
        stop: bool,
        pending: &mut PendingQueues,
    ) -> Priority {
        let e = &mut self.entries[slot.index()];
        let head = e.body.head_mut();
        if stop && head.active() {
            head.set_active(false);
            self.active_referenced -= head.referenced() as usize;
        }
        let priority = head.priority;
        pending.queue(&mut e.pending, priority, slot, Ready::EMPTY);
        priority
    }

    /// Registers a new timer watcher with its delay and period, active
    /// (its caller arms it).
    #[inline]
    pub fn insert_active_timer(&mut self, after: u64, repeat: u64, cb: C) -> Key {
        let body = Body::Timer {
            head: Head {
                state: ACTIVE | REFERENCED,
                ..Head::new(true, Ready::EMPTY)
            },
            timer: TimerRecord::new(after, repeat),
        };
        self.active_referenced += 1;
        self.insert_body(body, cb)
    }

    /// The handle of the live watcher at `slot`, whose version is
    /// `version`.
    #[inline(always)]
    pub fn key(&self, slot: Slot, version: u32) -> Key {
        Key {
            slot,
            version,
            owner: self.owner,
        }
    }

    /// Whether `key` was made by this loop.
    #[inline(always)]
    pub fn owns(&self, key: Key) -> bool {
        key.owner == self.owner
    }

    /// The entry at `slot`, if that slot exists (it may be vacant: compare
    /// the version).
    #[inline]
    pub fn get_mut(&mut self, slot: Slot) -> Option<&mut Entry<C>> {
        self.entries.get_mut(slot.index())
    }

    /// Whether the watcher at `slot` is active and referenced.
    #[inline]
    pub fn is_active_referenced(&self, slot: Slot) -> bool {
        let h = self.entries[slot.index()].body.head();
        h.active() && h.referenced()
    }

    /// The watchers whose callbacks are out of their entries, running
    /// further up the stack (a scan: for nested runs only).
    pub fn running(&self) -> Vec<Slot> {
        (1..self.entries.len())
            .filter(|&i| self.entries[i].version % 2 == 1 && self.entries[i].cb.is_running())
            .map(Slot::new)
            .collect()
    }

    /// Marks a watcher active; false if it already was.
    #[inline]
    pub fn activate(&mut self, slot: Slot) -> bool {
        let e = &mut self.entries[slot.index()];
        if e.is_active() {
            return false;
        }
        e.body.head_mut().set_active(true);
        self.active_referenced += e.body.head().referenced() as usize;
        match e.body {
            Body::Timer { .. } => {}
            _ => {
                self.blocking_direct += e.blocks_direct_dispatch() as usize;
                self.oneshot += e.is_oneshot_fd() as usize;
                self.active_sources += e.role().is_source() as usize;
            }
        }
        true
    }

    /// Marks a watcher inactive; false if it already was.
    #[inline]
    pub fn deactivate(&mut self, slot: Slot) -> bool {
        let e = &mut self.entries[slot.index()];
        if !e.is_active() {
            return false;
        }
        e.body.head_mut().set_active(false);
        self.active_referenced -= e.body.head().referenced() as usize;
        match e.body {
            Body::Timer { .. } => {}
            _ => {
                self.blocking_direct -= e.blocks_direct_dispatch() as usize;
                self.oneshot -= e.is_oneshot_fd() as usize;
                self.active_sources -= e.role().is_source() as usize;
            }
        }
        true
    }

    /// Whether the watcher keeps `run` going while active.
    pub fn set_referenced(&mut self, slot: Slot, referenced: bool) {
        let e = &mut self.entries[slot.index()];
        let referenced = referenced && e.role().can_keep_alive();
        let h = e.body.head_mut();
        if h.referenced() != referenced && h.active() {
            if referenced {
                self.active_referenced += 1;
            } else {
                self.active_referenced -= 1;
            }
        }
        h.set_referenced(referenced);
    }

    /// Changes a watcher's priority (the caller moves a queued entry).
    pub fn set_priority(&mut self, slot: Slot, priority: Priority) {
        self.recount(slot, |e| e.body.head_mut().priority = priority);
    }

    /// Has the loop watch `fd` for `interest` for the kind's watcher at
    /// `slot` (`fd` -1: no more), and so what it receives.
    pub fn bind_fd(&mut self, slot: Slot, fd: RawFd, new: Interest) {
        self.recount(slot, |e| {
            if let Body::Other {
                head,
                fd: bound,
                interest,
                ..
            } = &mut e.body
            {
                *bound = fd;
                *interest = new;
                head.receives = Ready::receive_mask(new);
            }
        });
    }

    /// Changes an io watcher's interest, and so what it receives.
    pub fn set_interest(&mut self, slot: Slot, new: Interest) {
        self.recount(slot, |e| {
            if let Body::Io { head, interest, .. } = &mut e.body {
                *interest = new;
                head.receives = Ready::receive_mask(new);
            }
        });
    }

    /// Applies a change that may make an active watcher start or stop
    /// ruling out direct dispatch or being one-shot, keeping the counts.
    fn recount(&mut self, slot: Slot, change: impl FnOnce(&mut Entry<C>)) {
        let e = &mut self.entries[slot.index()];
        let before = (
            e.is_active() && e.blocks_direct_dispatch(),
            e.is_active() && e.is_oneshot_fd(),
        );
        change(e);
        let after = (
            e.is_active() && e.blocks_direct_dispatch(),
            e.is_active() && e.is_oneshot_fd(),
        );
        self.blocking_direct = self.blocking_direct + after.0 as usize - before.0 as usize;
        self.oneshot = self.oneshot + after.1 as usize - before.1 as usize;
    }

    /// Queues an invocation of `slot` with `ready`, merging with one
    /// already queued (libev ORs events into a pending watcher).
    #[inline]
    pub fn queue(&mut self, pending: &mut PendingQueues, slot: Slot, ready: Ready) {
        let e = &mut self.entries[slot.index()];
        pending.queue(&mut e.pending, e.body.head().priority, slot, ready);
    }

    /// Queues an io event for `slot`, if what it receives lets it through.
    #[inline(always)]
    pub fn queue_received(&mut self, pending: &mut PendingQueues, slot: Slot, ready: Ready) {
        let e = &mut self.entries[slot.index()];
        let r = ready & e.receives();
        if !r.is_empty() {
            pending.queue(&mut e.pending, e.body.head().priority, slot, r);
        }
    }

    /// Cancels the watcher's queued invocation and deferred events, if
    /// any, and returns the events they carried: after this its callback
    /// is not called for them.
    pub fn cancel(&mut self, pending: &mut PendingQueues, slot: Slot) -> Ready {
        let deferred = self.take_deferred(slot).unwrap_or(Ready::EMPTY);
        let e = &mut self.entries[slot.index()];
        match e.pending.take() {
            Some(pos) => pending.cancel(e.body.head().priority, pos) | deferred,
            None => deferred,
        }
    }

    /// Holds `ready` for a watcher whose callback is running further up
    /// the stack.
    pub fn defer(&mut self, slot: Slot, ready: Ready) {
        let h = self.entries[slot.index()].body.head_mut();
        match h.deferred() {
            Some(held) => h.set_deferred(Some(held | ready)),
            None => {
                h.set_deferred(Some(ready));
                self.deferred += 1;
            }
        }
    }

    /// Takes a watcher's deferred events.
    pub fn take_deferred(&mut self, slot: Slot) -> Option<Ready> {
        let held = self.entries[slot.index()].body.head_mut().take_deferred();
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

/// A live timer watcher, reached by its handle ([`Registry::timer_mut`]).
pub(crate) struct TimerEntry<'a> {
    /// Whether an invocation is queued or deferred.
    queued: bool,
    head: &'a mut Head,
    record: &'a mut TimerRecord,
    active_referenced: &'a mut usize,
}

impl TimerEntry<'_> {
    /// Whether an invocation is queued or deferred (the general path
    /// cancels it).
    #[inline(always)]
    pub fn is_queued(&self) -> bool {
        self.queued
    }

    #[inline(always)]
    pub fn is_active(&self) -> bool {
        self.head.active()
    }

    /// Marks it active or not, keeping the count of active, referenced
    /// watchers (a timer counts in no other).
    #[inline(always)]
    pub fn set_active(&mut self, active: bool) {
        let head = &mut *self.head;
        if head.active() != active {
            head.set_active(active);
            if head.referenced() {
                if active {
                    *self.active_referenced += 1;
                } else {
                    *self.active_referenced -= 1;
                }
            }
        }
    }

    /// Its record (timer_heap.rs).
    #[inline(always)]
    pub fn record(&mut self) -> &mut TimerRecord {
        self.record
    }
}

/// Whether `key` names the watcher in `e`, of the loop whose id is
/// `owner`: its version and the loop's id, compared as one 64-bit value.
#[inline(always)]
fn matches<C>(e: &Entry<C>, key: Key, owner: u32) -> bool {
    (owner as u64) << 32 | e.version as u64 == key.stamp()
}

#[cold]
fn refused(issued_here: bool, kind: &'static str) -> Error {
    if issued_here {
        Error::StaleHandle { kind }
    } else {
        Error::ForeignHandle { kind }
    }
}

/// The timer records of the timer watchers, in their entries.
impl<C> TimerRecords for Registry<C> {
    #[inline(always)]
    fn record(&self, slot: usize) -> &TimerRecord {
        self.entries[slot].timer()
    }
    #[inline(always)]
    fn record_mut(&mut self, slot: usize) -> &mut TimerRecord {
        self.entries[slot].timer_mut()
    }
    fn count(&self) -> usize {
        self.entries.len()
    }
    fn each(&mut self, mut f: impl FnMut(&mut TimerRecord)) {
        for e in &mut self.entries {
            if let Body::Timer { timer, .. } = &mut e.body {
                f(timer);
            }
        }
    }
}

impl<C> LinkStore for Registry<C> {
    #[inline]
    fn link(&self, slot: Slot) -> Link {
        match &self.entries[slot.index()].body {
            Body::Io { link, .. } | Body::Other { link, .. } => *link,
            Body::Timer { .. } => Link::default(),
        }
    }
    #[inline]
    fn link_mut(&mut self, slot: Slot) -> &mut Link {
        match &mut self.entries[slot.index()].body {
            Body::Io { link, .. } | Body::Other { link, .. } => link,
            Body::Timer { .. } => unreachable!("timers are in no list"),
        }
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

/// An entry is one cache line, with the loop's callback type (a boxed
/// trait object: two words) on 64-bit targets.
#[cfg(target_pointer_width = "64")]
const _: () = assert!(std::mem::size_of::<Entry<Box<dyn Fn()>>>() == 64);

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(key: Key) -> usize {
        key.slot.index()
    }

    #[test]
    fn slots_are_reused_last_freed_first_and_free_slots_read_as_vacant() {
        let mut r: Registry<()> = Registry::new().unwrap();
        let (a, b, c) = (
            r.insert(Role::Timer, ()),
            r.insert(Role::Timer, ()),
            r.insert(Role::Timer, ()),
        );
        assert_eq!((slot(a), slot(b), slot(c)), (1, 2, 3));
        r.remove(a.slot);
        r.remove(c.slot);
        assert_eq!(r.len(), 1);
        assert_eq!(r.get_mut(c.slot).map(|e| e.version % 2), Some(0));
        assert!(matches!(
            r.lookup(c, "timer"),
            Err(Error::StaleHandle { kind: "timer" })
        ));
        let (d, e) = (r.insert(Role::Timer, ()), r.insert(Role::Timer, ()));
        assert_eq!((slot(d), slot(e), r.len()), (3, 1, 3));
        assert!(r.lookup(b, "timer").is_ok() && r.lookup(a, "timer").is_err());
    }

    #[test]
    fn versions_refuse_stale_handles_and_ids_refuse_foreign_ones() {
        let mut a: Registry<()> = Registry::new().unwrap();
        let mut b: Registry<()> = Registry::new().unwrap();
        let (ka, kb) = (a.insert(Role::Timer, ()), b.insert(Role::Timer, ()));
        // The same slot and version in two loops: told apart by the id.
        assert_eq!((ka.slot, ka.version), (kb.slot, kb.version));
        assert!(matches!(
            a.lookup(kb, "timer"),
            Err(Error::ForeignHandle { .. })
        ));
        assert!(matches!(
            b.lookup_mut(ka, "timer", Settled::for_tests()),
            Err(Error::ForeignHandle { .. })
        ));
        // Every reuse of a slot gives a new version.
        a.remove(ka.slot);
        let again = a.insert(Role::Timer, ());
        assert_eq!(again.slot, ka.slot);
        assert_ne!(again.version, ka.version);
        assert!(matches!(
            a.lookup(ka, "timer"),
            Err(Error::StaleHandle { .. })
        ));
        // A slot whose version would wrap is retired, never reused.
        a.entries[again.slot.index()].version = u32::MAX;
        let last = Key {
            version: u32::MAX,
            ..again
        };
        assert!(a.lookup(last, "timer").is_ok());
        a.remove(again.slot);
        assert!(a.lookup(last, "timer").is_err());
        let next = a.insert(Role::Timer, ());
        assert_ne!(next.slot, again.slot, "a retired slot is not reused");
        assert!(a.lookup(last, "timer").is_err());
    }

    #[test]
    fn entries_are_one_cache_line() {
        assert_eq!(std::mem::size_of::<Entry<Box<dyn Fn()>>>(), 64);
        assert_eq!(std::mem::align_of::<Entry<Box<dyn Fn()>>>(), 64);
        assert_eq!(std::mem::size_of::<Key>(), 12);
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
        let mut r: Registry<()> = Registry::new().unwrap();
        let io = r.insert(
            Role::Io {
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
