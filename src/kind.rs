//! Watcher kinds beyond the core: the [`Kind`] trait, what a kind sees of
//! the loop ([`Context`]), the generic handle ([`Watcher`]), and the
//! loop's table of kinds ([`Kinds`]).
//!
//! The core knows io watchers, timers, the registry, the pending queues,
//! the clock and the backend. Every other kind (signal, child, async,
//! periodic, stat, once, and the phase hooks: prepare, check, idle, fork,
//! cleanup) is a component behind [`Kind`]: it owns its state, says which
//! phases of an iteration it takes part in, and queues its watchers
//! through a [`Context`]; the loop invokes their callbacks. A kind is one
//! file, in this crate (`src/kinds/`) or in the user's.

use crate::RawFd;
use std::any::{Any, TypeId};
use std::marker::PhantomData;
use std::time::{Duration, SystemTime};

use crate::backend::{Backend, Capabilities, Notices};
use crate::fd_table::FdTable;
use crate::handle::{sealed::Sealed, Key};
use crate::pending::{PendingQueues, Priority};
use crate::registry::Registry;
use crate::slot_list::{LinkStore, Slot, SlotList};
use crate::timers::Timers;
use crate::{Handle, Interest, Ready, Result, SourceFd};

/// A kind of watcher, as a component of the loop: its state, and the
/// hooks through which the loop drives it (every hook has a default that
/// does nothing).
///
/// A kind's watchers live in the loop's registry like every watcher
/// (handle, priority, reference, pending queue, callback); what is
/// particular to the kind lives in the value that implements this trait,
/// one per loop ([`Loop::install`](crate::Loop::install)). The loop calls
/// [`Kind::start`], [`Kind::stop`] and [`Kind::remove`] as the generic
/// operations ([`Loop::start`](crate::Loop::start),
/// [`Loop::stop`](crate::Loop::stop), [`Loop::remove`](crate::Loop::remove))
/// reach one of its watchers, and [`Kind::phase`] in each phase of
/// [`Kind::PHASES`]; there the kind queues whichever watchers are due
/// ([`Context::queue`]), and the loop invokes their callbacks with the
/// rest, in priority order.
///
/// Kinds run in the order they were installed, after the crate's own
/// (so within one priority a user kind's watchers queued in
/// [`Phase::Polled`] run after signal, child and async watchers).
///
/// A counter that any code holding it can bump, delivered in the check
/// phase (a channel watcher would do the same with a queue):
///
/// ```
/// use evloop::{Context, Kind, Loop, Phase, Phases, Ready, RunMode, Sim, Watcher};
/// use std::collections::HashMap;
///
/// #[derive(Default)]
/// struct Bumps {
///     due: HashMap<Watcher<Bumps>, u32>,
/// }
/// impl Kind for Bumps {
///     const NAME: &'static str = "bump";
///     const PHASES: Phases = Phases::CHECK;
///     fn phase(&mut self, cx: &mut Context<'_>, _: Phase) {
///         for (&w, n) in self.due.iter_mut() {
///             if *n > 0 && cx.is_active(w) {
///                 *n -= 1;
///                 cx.queue(w, Ready::EMPTY);
///             }
///         }
///     }
/// }
///
/// let mut lp: Loop<u32> = Loop::with_backend(Sim::new().backend());
/// lp.install(Bumps::default()).unwrap();
/// let w = lp.watcher::<Bumps, _>(|_, n, _, _| *n += 1).unwrap();
/// lp.kind_mut::<Bumps>().unwrap().due.insert(w, 2);
/// lp.start(w).unwrap();
/// let mut n = 0;
/// lp.run(RunMode::NoWait, &mut n).unwrap();
/// lp.run(RunMode::NoWait, &mut n).unwrap();
/// lp.run(RunMode::NoWait, &mut n).unwrap();
/// assert_eq!(n, 2);
/// ```
pub trait Kind: Any {
    /// What its watchers are called in errors and traces ("signal").
    const NAME: &'static str;
    /// The phases of an iteration in which [`Kind::phase`] is called.
    const PHASES: Phases = Phases::NONE;
    /// Whether an active watcher of this kind can produce an event by
    /// itself (a signal, a child's exit), as opposed to running around
    /// iterations (prepare, check): while no active watcher can, a wait
    /// could never end, and the loop does not block.
    const PRODUCES_EVENTS: bool = true;
    /// Whether an active, referenced watcher keeps `run` going (false for
    /// cleanup watchers, which only wait for the loop's end).
    const KEEPS_ALIVE: bool = true;

    /// A stopped watcher is starting. `Ok(false)` declines without an
    /// error (the watcher stays stopped); an `Err` is returned from the
    /// call that started it. Called before the watcher counts as active.
    fn start(&mut self, cx: &mut Context<'_>, w: Watcher<Self>) -> Result<bool>
    where
        Self: Sized,
    {
        let _ = (cx, w);
        Ok(true)
    }

    /// An active watcher stopped (it no longer counts as active; a queued
    /// invocation is already cancelled).
    fn stop(&mut self, cx: &mut Context<'_>, w: Watcher<Self>)
    where
        Self: Sized,
    {
        let _ = (cx, w);
    }

    /// A (stopped) watcher left the loop: what the kind kept for it goes.
    fn remove(&mut self, cx: &mut Context<'_>, w: Watcher<Self>)
    where
        Self: Sized,
    {
        let _ = (cx, w);
    }

    /// An active watcher's priority changed (from, to: -2..=2).
    fn priority_changed(&mut self, cx: &mut Context<'_>, w: Watcher<Self>, from: i32, to: i32)
    where
        Self: Sized,
    {
        let _ = (cx, w, from, to);
    }

    /// One of [`Kind::PHASES`] has come: queue the watchers that are due.
    fn phase(&mut self, cx: &mut Context<'_>, phase: Phase) {
        let _ = (cx, phase);
    }

    /// How long the next poll may block for this kind's sake (its next
    /// deadline, from [`Context::now`]), if anything bounds it.
    fn wait(&mut self, cx: &mut Context<'_>) -> Option<Duration> {
        let _ = cx;
        None
    }

    /// Whether one of its watchers has a deadline, so that something can
    /// still happen with no fd and no timer watched.
    fn has_deadline(&self) -> bool {
        false
    }

    /// Whether the backend's notices ([`Context::notices`], in
    /// [`Phase::Polled`]) may concern it: while no kind says so, the loop
    /// does not ask the backend for them.
    fn wants_notices(&self) -> bool {
        false
    }

    /// Whether the kind has work of its own that keeps
    /// [`Loop::run`](crate::Loop::run) going while no active, referenced
    /// watcher does (an executor's tasks: `evloop::exec`). Asked
    /// only when nothing else keeps the loop going.
    fn keeps_alive(&self) -> bool {
        false
    }

    /// The loop is about to block: `true` if something arrived already
    /// (the poll then does not block). For kinds woken from other threads
    /// (`cx` reaches the backend's services: the async watchers ask them
    /// whether to act on a send, so that a replay can answer).
    fn sleep(&mut self, cx: &mut Context<'_>) -> bool {
        let _ = cx;
        false
    }

    /// The poll returned.
    fn wake(&mut self) {}

    /// Calls `each` with every active watcher it knows to be due but has
    /// not queued yet (an async watcher sent to from another thread,
    /// until its phase takes the send). Those not queued already count
    /// as pending ([`Loop::pending_count`](crate::Loop::pending_count)),
    /// and the next poll does not block for them.
    ///
    /// ```
    /// use evloop::{Kind, Loop, Sim, Watcher};
    /// use std::collections::HashSet;
    /// // Watchers marked due (from outside the loop, say) until a phase
    /// // would queue them.
    /// #[derive(Default)]
    /// struct Marked(HashSet<Watcher<Marked>>);
    /// impl Kind for Marked {
    ///     const NAME: &'static str = "marked";
    ///     fn due(&self, each: &mut dyn FnMut(Watcher<Self>)) {
    ///         for &w in &self.0 {
    ///             each(w);
    ///         }
    ///     }
    ///     fn clear_due(&mut self, w: Watcher<Self>) {
    ///         self.0.remove(&w);
    ///     }
    /// }
    /// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    /// lp.install(Marked::default()).unwrap();
    /// let w = lp.watcher::<Marked, _>(|_, _, _, _| {}).unwrap();
    /// lp.start(w).unwrap();
    /// lp.kind_mut::<Marked>().unwrap().0.insert(w);
    /// assert!(lp.is_pending(w).unwrap());
    /// assert_eq!(lp.pending_count(), 1);
    /// lp.clear_pending(w).unwrap();
    /// assert!(!lp.is_pending(w).unwrap());
    /// assert_eq!(lp.pending_count(), 0);
    /// ```
    fn due(&self, each: &mut dyn FnMut(Watcher<Self>))
    where
        Self: Sized,
    {
        let _ = each;
    }

    /// Whether `w` is one of the watchers [`Kind::due`] gives: then, if
    /// it is active, [`Loop::is_pending`](crate::Loop::is_pending) says
    /// true (a kind with many watchers answers without the walk).
    fn is_due(&self, w: Watcher<Self>) -> bool
    where
        Self: Sized,
    {
        let mut due = false;
        self.due(&mut |d| due |= d == w);
        due
    }

    /// [`Loop::clear_pending`](crate::Loop::clear_pending) on `w`: what
    /// makes it due goes too (it is no longer [`Kind::is_due`]).
    fn clear_due(&mut self, w: Watcher<Self>)
    where
        Self: Sized,
    {
        let _ = w;
    }

    /// The loop is being dropped: push the watchers to stop then, before
    /// anything else goes (the loop stops each and asks again until none
    /// is given). A cleanup watcher's callback runs as it stops; a
    /// [`Loop::watcher`](crate::Loop::watcher) callback needs the user
    /// state, which is gone by then, so it does not run. After this the
    /// kinds are dropped, before the watchers' callbacks.
    fn dropping(&mut self, cx: &mut Context<'_>, run: &mut Vec<Watcher<Self>>)
    where
        Self: Sized,
    {
        let _ = (cx, run);
    }

    /// After `fork()`, in `Loop::reinit_after_fork`, once the backend has
    /// its kernel objects again (it has forgotten the signals and children
    /// it watched). Never called on Windows, which has no `fork()`.
    fn after_fork(&mut self, cx: &mut Context<'_>) -> Result<()> {
        let _ = cx;
        Ok(())
    }
}

/// The phases of an iteration in which a [`Kind`] can take part, in the
/// order they come (see [`Loop::run`](crate::Loop::run)).
///
/// ```
/// use evloop::Phase;
/// assert!(Phase::Prepare < Phase::Check && Phase::Check < Phase::Idle);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Phase {
    /// Before the fds are flushed and the backend polled; what is queued
    /// here is invoked before the poll.
    Prepare,
    /// After the poll and the io events: the backend's notices are in
    /// [`Context::notices`].
    Polled,
    /// After the notices (prepare's counterpart: check watchers).
    Check,
    /// After the expired timers: wall-clock and other deadlines.
    Expire,
    /// Last before the invocations: libev's idle rule.
    Idle,
}

/// A set of [`Phase`]s.
///
/// ```
/// use evloop::{Phase, Phases};
/// let p = Phases::PREPARE | Phases::CHECK;
/// assert!(p.contains(Phase::Check) && !p.contains(Phase::Idle));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Phases(u8);

impl Phases {
    /// No phase.
    pub const NONE: Phases = Phases(0);
    /// [`Phase::Prepare`].
    pub const PREPARE: Phases = Phases(1 << Phase::Prepare as u8);
    /// [`Phase::Polled`].
    pub const POLLED: Phases = Phases(1 << Phase::Polled as u8);
    /// [`Phase::Check`].
    pub const CHECK: Phases = Phases(1 << Phase::Check as u8);
    /// [`Phase::Expire`].
    pub const EXPIRE: Phases = Phases(1 << Phase::Expire as u8);
    /// [`Phase::Idle`].
    pub const IDLE: Phases = Phases(1 << Phase::Idle as u8);

    /// Both sets.
    pub const fn union(self, other: Phases) -> Phases {
        Phases(self.0 | other.0)
    }

    /// Whether `phase` is in the set.
    pub const fn contains(self, phase: Phase) -> bool {
        self.0 & (1 << phase as u8) != 0
    }
}

impl std::ops::BitOr for Phases {
    type Output = Phases;
    fn bitor(self, other: Phases) -> Phases {
        Phases(self.0 | other.0)
    }
}

/// A handle to a watcher of kind `K` (what [`Loop::watcher`](crate::Loop::watcher)
/// returns, and what `K`'s hooks receive). Like every handle, a small
/// `Copy` value that the loop checks: stale or foreign handles are refused.
///
/// ```
/// use evloop::{Handle, Kind, Loop, Sim, Watcher};
/// #[derive(Default)]
/// struct Quiet;
/// impl Kind for Quiet {
///     const NAME: &'static str = "quiet";
/// }
/// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
/// lp.install(Quiet).unwrap();
/// let w: Watcher<Quiet> = lp.watcher(|_, _, _, _| {}).unwrap();
/// assert_eq!(w.kind(), "quiet");
/// assert!(!lp.is_active(w).unwrap());
/// ```
pub struct Watcher<K> {
    key: Key,
    kind: PhantomData<fn() -> K>,
}

impl<K> Watcher<K> {
    pub(crate) fn new(key: Key) -> Watcher<K> {
        Watcher {
            key,
            kind: PhantomData,
        }
    }

    pub(crate) fn slot(self) -> Slot {
        self.key.slot
    }

    pub(crate) fn key(self) -> Key {
        self.key
    }
}

impl<K> Clone for Watcher<K> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<K> Copy for Watcher<K> {}
impl<K> PartialEq for Watcher<K> {
    fn eq(&self, other: &Self) -> bool {
        self.key == other.key
    }
}
impl<K> Eq for Watcher<K> {}
impl<K> std::hash::Hash for Watcher<K> {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.key.hash(h)
    }
}
impl<K: Kind> std::fmt::Debug for Watcher<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Watcher<{}>({:?})", K::NAME, self.key)
    }
}

impl<K: Kind> Sealed for Watcher<K> {
    // It may watch an fd (Context::watch_fd): operations that a direct
    // batch could tell from queued events materialise it first.
    const IO: bool = true;
    fn key(&self) -> Key {
        self.key
    }
    fn from_key(key: Key) -> Self {
        Watcher::new(key)
    }
}

impl<K: Kind> Handle for Watcher<K> {
    fn kind(&self) -> &'static str {
        K::NAME
    }
}

/// What the registry offers a kind (the registry is generic over the
/// loop's callback type; a kind is not).
pub(crate) trait Entries: LinkStore {
    fn queue(&mut self, pending: &mut PendingQueues, slot: Slot, ready: Ready);
    fn priority(&self, slot: Slot) -> Priority;
    fn is_active(&self, slot: Slot) -> bool;
    fn is_live(&self, key: Key) -> bool;
    fn deactivate(&mut self, slot: Slot) -> bool;
    fn cancel(&mut self, pending: &mut PendingQueues, slot: Slot) -> Ready;
    fn bind_fd(&mut self, slot: Slot, fd: RawFd, interest: Interest);
    fn fd(&self, slot: Slot) -> Option<RawFd>;
}

impl<C> Entries for Registry<C> {
    #[inline]
    fn queue(&mut self, pending: &mut PendingQueues, slot: Slot, ready: Ready) {
        Registry::queue(self, pending, slot, ready)
    }
    fn priority(&self, slot: Slot) -> Priority {
        self[slot].priority()
    }
    fn is_active(&self, slot: Slot) -> bool {
        self[slot].is_active()
    }
    fn is_live(&self, key: Key) -> bool {
        self.lookup(key, "").is_ok()
    }
    fn deactivate(&mut self, slot: Slot) -> bool {
        Registry::deactivate(self, slot)
    }
    fn cancel(&mut self, pending: &mut PendingQueues, slot: Slot) -> Ready {
        Registry::cancel(self, pending, slot)
    }
    fn bind_fd(&mut self, slot: Slot, fd: RawFd, interest: Interest) {
        Registry::bind_fd(self, slot, fd, interest)
    }
    fn fd(&self, slot: Slot) -> Option<RawFd> {
        self[slot].fd()
    }
}

/// What a [`Kind`]'s hooks see of the loop: its watchers' state, the
/// pending queues (to queue them), the clock and the backend.
///
/// ```
/// use evloop::{Context, Kind, Phase, Phases};
/// // A kind that only looks at the clock and the backend.
/// struct Looks;
/// impl Kind for Looks {
///     const NAME: &'static str = "looks";
///     const PHASES: Phases = Phases::PREPARE;
///     fn phase(&mut self, cx: &mut Context<'_>, _: Phase) {
///         let _ = (cx.now(), cx.backend().name());
///     }
/// }
/// ```
pub struct Context<'a> {
    pub(crate) entries: &'a mut dyn Entries,
    pub(crate) pending: &'a mut PendingQueues,
    pub(crate) timers: &'a mut Timers,
    pub(crate) backend: &'a mut dyn Backend,
    pub(crate) notifier: &'a mut crate::services::Own,
    pub(crate) fds: &'a mut FdTable,
    pub(crate) caps: &'a Capabilities,
    pub(crate) notices: &'a Notices,
    /// The highest priority queued through this context.
    pub(crate) queued: Option<Priority>,
    /// Set by the loop for [`Phase::Check`] and [`Phase::Idle`]: whether
    /// io events are waiting at the default priority outside the queues
    /// (a direct batch), and the highest priority among the timers and
    /// deadlines expired in this iteration.
    pub(crate) batch_busy: bool,
    pub(crate) expired: Option<Priority>,
}

impl Context<'_> {
    /// Queues an invocation of `w`'s callback with `ready` (merged with
    /// one already queued), at its priority.
    pub fn queue<K: Kind>(&mut self, w: Watcher<K>, ready: Ready) {
        self.queue_slot(w.slot(), ready);
    }

    /// Whether `w` is active (a removed watcher is not).
    pub fn is_active<K: Kind>(&self, w: Watcher<K>) -> bool {
        self.entries.is_live(w.key) && self.entries.is_active(w.slot())
    }

    /// `w`'s priority (-2..=2).
    pub fn priority<K: Kind>(&self, w: Watcher<K>) -> i32 {
        self.entries.priority(w.slot()).user()
    }

    /// Stops `w` from inside its kind (the kind has let go of it already:
    /// [`Kind::stop`] is not called), cancelling a queued invocation.
    pub fn stopped<K: Kind>(&mut self, w: Watcher<K>) {
        let slot = w.slot();
        self.entries.cancel(self.pending, slot);
        self.entries.deactivate(slot);
    }

    /// The loop's time ([`Loop::now`](crate::Loop::now)).
    pub fn now(&self) -> Duration {
        crate::timers::from_ns(self.timers.now())
    }

    /// The wall clock, read from the OS service now.
    pub fn read_wall_clock(&mut self) -> SystemTime {
        crate::timers::wall_time(self.services(|s, _| s.wall_now()))
    }

    /// Runs `f` on the loop's OS services ([`NoticeService`]: the
    /// backend's own, or the loop's Unix notifier), with where the
    /// service's internal fds go: how a kind reaches signals, children,
    /// the waker, the wall clock and path hints.
    ///
    /// [`NoticeService`]: crate::backend::NoticeService
    ///
    /// ```
    /// use evloop::{Context, Kind, Loop, Sim, Watcher};
    /// // A kind that asks for the loop's waker when a watcher starts.
    /// struct Waking;
    /// impl Kind for Waking {
    ///     const NAME: &'static str = "waking";
    ///     fn start(&mut self, cx: &mut Context<'_>, _: Watcher<Self>) -> evloop::Result<bool> {
    ///         let waker = cx.services(|s, fds| s.waker(fds)).expect("the simulator has one");
    ///         waker.wake();
    ///         Ok(true)
    ///     }
    /// }
    /// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    /// lp.install(Waking).unwrap();
    /// let w = lp.watcher::<Waking, _>(|_, _, _, _| {}).unwrap();
    /// lp.start(w).unwrap();
    /// ```
    pub fn services<R>(
        &mut self,
        f: impl FnOnce(
            &mut dyn crate::backend::NoticeService,
            &mut dyn crate::backend::InternalFds,
        ) -> R,
    ) -> R {
        crate::services::with(
            &mut *self.backend,
            &mut *self.notifier,
            &mut *self.fds,
            self.caps.max_fd,
            f,
        )
    }

    /// The loop's backend.
    pub fn backend(&mut self) -> &mut dyn Backend {
        &mut *self.backend
    }

    /// What the backend noticed besides fd readiness in the last poll
    /// (in [`Phase::Polled`]; empty elsewhere).
    pub fn notices(&self) -> &Notices {
        self.notices
    }

    /// Has the loop watch `source`'s fd for `interest` on `w`'s behalf:
    /// its readiness, filtered by the interest as an io watcher's is,
    /// reaches `w`'s callback (through the fd table, the batching and the
    /// direct dispatch that io watchers get). Usually called from
    /// [`Kind::start`]; the fd is unwatched when `w` stops, or by
    /// [`Context::unwatch_fd`]. The source's checks are those of
    /// [`Loop::io`](crate::Loop::io) (closed fds, regular files, fds too
    /// large for the backend, trigger modes) with the same errors. The
    /// kind keeps the source open while it is watched.
    ///
    /// ```
    /// use evloop::{Context, Interest, Kind, Loop, RunMode, Sim, SimSocket, Source, Watcher};
    /// use std::collections::HashMap;
    /// // A kind that watches a socket it owns for readability.
    /// #[derive(Default)]
    /// struct Bells(HashMap<Watcher<Bells>, SimSocket>);
    /// impl Kind for Bells {
    ///     const NAME: &'static str = "bell";
    ///     fn start(&mut self, cx: &mut Context<'_>, w: Watcher<Self>) -> evloop::Result<bool> {
    ///         cx.watch_fd(w, self.0[&w].source_fd(), Interest::READABLE)?;
    ///         Ok(true)
    ///     }
    /// }
    /// let sim = Sim::new();
    /// let sock = sim.socket("bell", 64);
    /// sim.deliver(std::time::Duration::from_millis(5), &sock, b"ding");
    /// let mut lp: Loop<u32> = Loop::with_backend(sim.backend());
    /// lp.install(Bells::default()).unwrap();
    /// let w = lp.watcher::<Bells, _>(|lp, rung, me, ready| {
    ///     assert!(ready.is_readable());
    ///     *rung += 1;
    ///     lp.remove(me).unwrap();
    /// }).unwrap();
    /// lp.kind_mut::<Bells>().unwrap().0.insert(w, sock);
    /// lp.start(w).unwrap();
    /// let mut rung = 0;
    /// lp.run(RunMode::Default, &mut rung).unwrap();
    /// assert_eq!(rung, 1);
    /// ```
    pub fn watch_fd<K: Kind>(
        &mut self,
        w: Watcher<K>,
        source: SourceFd<'_>,
        interest: Interest,
    ) -> Result<()> {
        let slot = w.slot();
        let name = self.backend.name();
        let caps = self.caps;
        let fd = crate::fd_table::check_source(name, caps, source, |fd| {
            crate::services::check_fd(&mut *self.backend, self.notifier, caps.virtual_fds, fd)
        })?;
        self.fds
            .check_interest(self.caps, &*self.backend, fd, interest, Some(slot))?;
        self.unwatch_fd(w);
        self.entries.bind_fd(slot, fd, interest);
        self.fds
            .start(&mut *self.entries, fd, slot, interest.trigger());
        Ok(())
    }

    /// Stops watching the fd [`Context::watch_fd`] watches for `w`, if
    /// any; the backend is told at once (the kind may close the fd next).
    pub fn unwatch_fd<K: Kind>(&mut self, w: Watcher<K>) {
        self.unwatch_slot(w.slot())
    }

    pub(crate) fn unwatch_slot(&mut self, slot: Slot) {
        if let Some(fd) = self.entries.fd(slot) {
            self.fds.stop(&mut *self.entries, fd, slot);
            self.entries
                .bind_fd(slot, crate::source::NO_FD, Interest::NONE);
            self.fds.remove_if_unwatched(fd, &mut *self.backend);
        }
    }

    /// [`Context::watch_fd`] for an fd checked already (when the watcher
    /// was created; its owner keeps it open).
    pub(crate) fn watch_checked(&mut self, slot: Slot, fd: RawFd, interest: Interest) {
        self.entries.bind_fd(slot, fd, interest);
        self.fds
            .start(&mut *self.entries, fd, slot, interest.trigger());
    }

    #[inline]
    pub(crate) fn queue_slot(&mut self, slot: Slot, ready: Ready) {
        self.queued = self.queued.max(Some(self.entries.priority(slot)));
        self.entries.queue(self.pending, slot, ready);
    }

    /// Queues every watcher of `list`, in order.
    pub(crate) fn queue_list(&mut self, list: SlotList) {
        let mut cur = list.first();
        while let Some(slot) = cur {
            cur = self.entries.link(slot).next;
            self.queue_slot(slot, Ready::EMPTY);
        }
    }

    pub(crate) fn links(&mut self) -> &mut (dyn Entries + '_) {
        &mut *self.entries
    }

    pub(crate) fn timers(&mut self) -> &mut Timers {
        self.timers
    }

    pub(crate) fn pending(&self) -> &PendingQueues {
        self.pending
    }
}

/// A kind in the loop's table, its type erased (the hooks of [`Kind`]
/// without `Self` in them).
pub(crate) trait Erased: Any {
    fn start(&mut self, cx: &mut Context<'_>, key: Key) -> Result<bool>;
    fn stop(&mut self, cx: &mut Context<'_>, key: Key);
    fn remove(&mut self, cx: &mut Context<'_>, key: Key);
    fn priority_changed(&mut self, cx: &mut Context<'_>, key: Key, from: i32, to: i32);
    fn phase(&mut self, cx: &mut Context<'_>, phase: Phase);
    fn wait(&mut self, cx: &mut Context<'_>) -> Option<Duration>;
    fn has_deadline(&self) -> bool;
    fn wants_notices(&self) -> bool;
    fn keeps_alive(&self) -> bool;
    fn sleep(&mut self, cx: &mut Context<'_>) -> bool;
    fn wake(&mut self);
    fn due(&self, each: &mut dyn FnMut(Key));
    fn is_due(&self, key: Key) -> bool;
    fn clear_due(&mut self, key: Key);
    fn dropping(&mut self, cx: &mut Context<'_>, run: &mut Vec<Key>);
    #[cfg(any(unix, target_os = "wasi"))]
    fn after_fork(&mut self, cx: &mut Context<'_>) -> Result<()>;
    fn as_any(&self) -> &dyn Any;
    fn as_any_mut(&mut self) -> &mut dyn Any;
}

impl<K: Kind> Erased for K {
    fn start(&mut self, cx: &mut Context<'_>, key: Key) -> Result<bool> {
        Kind::start(self, cx, Watcher::new(key))
    }
    fn stop(&mut self, cx: &mut Context<'_>, key: Key) {
        Kind::stop(self, cx, Watcher::new(key))
    }
    fn remove(&mut self, cx: &mut Context<'_>, key: Key) {
        Kind::remove(self, cx, Watcher::new(key))
    }
    fn priority_changed(&mut self, cx: &mut Context<'_>, key: Key, from: i32, to: i32) {
        Kind::priority_changed(self, cx, Watcher::new(key), from, to)
    }
    fn phase(&mut self, cx: &mut Context<'_>, phase: Phase) {
        Kind::phase(self, cx, phase)
    }
    fn wait(&mut self, cx: &mut Context<'_>) -> Option<Duration> {
        Kind::wait(self, cx)
    }
    fn has_deadline(&self) -> bool {
        Kind::has_deadline(self)
    }
    fn wants_notices(&self) -> bool {
        Kind::wants_notices(self)
    }
    fn keeps_alive(&self) -> bool {
        Kind::keeps_alive(self)
    }
    fn sleep(&mut self, cx: &mut Context<'_>) -> bool {
        Kind::sleep(self, cx)
    }
    fn wake(&mut self) {
        Kind::wake(self)
    }
    fn due(&self, each: &mut dyn FnMut(Key)) {
        Kind::due(self, &mut |w| each(w.key))
    }
    fn is_due(&self, key: Key) -> bool {
        Kind::is_due(self, Watcher::new(key))
    }
    fn clear_due(&mut self, key: Key) {
        Kind::clear_due(self, Watcher::new(key))
    }
    fn dropping(&mut self, cx: &mut Context<'_>, run: &mut Vec<Key>) {
        let mut mine = Vec::new();
        Kind::dropping(self, cx, &mut mine);
        run.extend(mine.into_iter().map(Watcher::key));
    }
    #[cfg(any(unix, target_os = "wasi"))]
    fn after_fork(&mut self, cx: &mut Context<'_>) -> Result<()> {
        Kind::after_fork(self, cx)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

/// The loop's kinds beyond the core, in install order (the crate's own
/// first, in the order of the phases' documented guarantees), and which
/// of them take part in each phase.
#[derive(Default)]
pub(crate) struct Kinds {
    /// Each kind with its type and its rank.
    table: Vec<(TypeId, u32, Box<dyn Erased>)>,
    /// Per phase, the indexes of the kinds in it, by rank.
    by_phase: [Vec<u16>; 5],
    /// The phases some kind takes part in.
    present: Phases,
    /// Every kind's index, by rank.
    ranked: Vec<u16>,
}

/// The rank of the first kind installed from outside the crate: they
/// come after the crate's own, in install order.
const OUTSIDE: u32 = 1 << 16;

impl Kinds {
    /// Installs `kind` (from outside the crate: after the crate's own
    /// kinds); its index. `None` if a kind of its type is there.
    pub fn install<K: Kind>(&mut self, kind: K) -> Option<u16> {
        let rank = OUTSIDE + self.table.len() as u32;
        self.install_ranked(kind, rank)
    }

    /// Installs one of the crate's kinds: `rank` is its place in each
    /// phase, whatever the order the loop first needed them in.
    pub fn install_ranked<K: Kind>(&mut self, kind: K, rank: u32) -> Option<u16> {
        if self.index_of::<K>().is_some() {
            return None;
        }
        let index = u16::try_from(self.table.len()).expect("fewer than 65536 kinds");
        self.table.push((TypeId::of::<K>(), rank, Box::new(kind)));
        self.present = self.present.union(K::PHASES);
        let at = self
            .ranked
            .partition_point(|&i| self.table[i as usize].1 < rank);
        self.ranked.insert(at, index);
        for (p, list) in self.by_phase.iter_mut().enumerate() {
            if K::PHASES.0 & (1 << p) != 0 {
                let at = list.partition_point(|&i| self.table[i as usize].1 < rank);
                list.insert(at, index);
            }
        }
        Some(index)
    }

    pub fn index_of<K: Kind>(&self) -> Option<u16> {
        let id = TypeId::of::<K>();
        self.table
            .iter()
            .position(|(t, _, _)| *t == id)
            .map(|i| i as u16)
    }

    pub fn get<K: Kind>(&self) -> Option<&K> {
        let i = self.index_of::<K>()?;
        self.table[i as usize].2.as_any().downcast_ref()
    }

    pub fn get_mut<K: Kind>(&mut self) -> Option<&mut K> {
        let i = self.index_of::<K>()?;
        self.table[i as usize].2.as_any_mut().downcast_mut()
    }

    /// The kind at `index`.
    #[inline]
    pub fn at(&mut self, index: u16) -> &mut dyn Erased {
        &mut *self.table[index as usize].2
    }

    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    /// Whether a kind takes part in `phase`.
    #[inline(always)]
    pub fn any_in(&self, phase: Phase) -> bool {
        self.present.0 & (1 << phase as u8) != 0
    }

    /// The indexes of the kinds taking part in `phase`.
    #[inline]
    pub fn in_phase(&self, phase: Phase) -> &[u16] {
        &self.by_phase[phase as usize]
    }

    pub fn iter(&self) -> impl Iterator<Item = &dyn Erased> {
        self.table.iter().map(|(_, _, k)| &**k)
    }

    pub fn len(&self) -> usize {
        self.table.len()
    }

    /// The kinds' indexes by rank (the crate's in their documented order,
    /// then the user's in install order).
    pub fn by_rank(&self) -> Vec<u16> {
        self.ranked.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Outside;
    impl Kind for Outside {
        const NAME: &'static str = "outside";
        const PHASES: Phases = Phases::CHECK;
    }
    struct Late;
    impl Kind for Late {
        const NAME: &'static str = "late";
        const PHASES: Phases = Phases::CHECK.union(Phases::IDLE);
    }
    struct Early;
    impl Kind for Early {
        const NAME: &'static str = "early";
        const PHASES: Phases = Phases::CHECK;
    }

    #[test]
    fn kinds_come_by_rank_whatever_the_install_order() {
        let mut k = Kinds::default();
        assert_eq!(k.install(Outside), Some(0));
        assert_eq!(k.install_ranked(Late, 20), Some(1));
        assert_eq!(k.install_ranked(Early, 10), Some(2));
        assert_eq!(k.install(Outside), None, "one per type");
        assert_eq!(k.by_rank(), [2, 1, 0]);
        assert_eq!(k.in_phase(Phase::Check), [2, 1, 0]);
        assert_eq!(k.in_phase(Phase::Idle), [1]);
        assert!(k.any_in(Phase::Idle) && !k.any_in(Phase::Prepare));
        assert!(k.get::<Early>().is_some() && k.get_mut::<Late>().is_some());
    }
}
