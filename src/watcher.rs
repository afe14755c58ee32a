//! Watcher handles and the registry entry behind each of them.
//!
//! Every watcher lives in one registry (`registry.rs`), whatever its kind;
//! a handle is its index plus a generation drawn from a loop-wide counter.
//! A handle whose generation does not match the entry in its slot (the
//! watcher was removed and the slot reused) is refused with
//! [`Error::StaleHandle`] and never touches the new occupant. New kinds of watcher (signal, child, async,
//! periodic, stat, fork, cleanup) add a variant to [`Kind`] and
//! [`Callback`], a handle type, and a phase hook; nothing else changes.

use std::any::{Any, TypeId};
use std::marker::PhantomData;
use std::os::fd::RawFd;

use crate::event_loop::DEFAULT_QUEUE;
use crate::pending::{PendingSlot, NOT_PENDING};
use crate::registry::Registry;
use crate::slot_list::Link;
use crate::{Error, Interest, Loop, Ready, Result, Source};

/// Slab index and generation of a watcher.
/// Not exported: handles are opaque outside the crate.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Key {
    pub(crate) idx: u32,
    pub(crate) gen: u64,
}

impl std::fmt::Debug for Key {
    /// Shows the generation's low half, its serial number in the loop that
    /// made it: the high half names that loop's block (registry.rs), the
    /// same for every handle of the loop, and would only differ from run
    /// to run.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Key")
            .field("idx", &self.idx)
            .field("gen", &(self.gen as u32))
            .finish()
    }
}

pub(crate) mod sealed {
    pub trait Sealed {
        /// Whether this is an io handle (io operations settle a direct
        /// dispatch batch first; see io_batch.rs).
        const IO: bool;
        fn key(&self) -> super::Key;
    }
}

/// A handle to a watcher of any kind: what [`Loop::start`], [`Loop::stop`],
/// [`Loop::remove`], [`Loop::set_priority`] and the other generic watcher
/// operations take.
///
/// Handles are small `Copy` values; they do not own the watcher (the loop
/// does). Implemented by [`Io`], [`Timer`], [`Idle`], [`Prepare`], [`Check`].
///
/// ```
/// use evloop::{Handle, Loop, Sim};
/// fn describe(lp: &Loop, h: impl Handle) -> String {
///     format!("{} active={}", h.kind(), lp.is_active(h).unwrap())
/// }
/// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
/// let idle = lp.idle(|_, _, _| {}).unwrap();
/// assert_eq!(describe(&lp, idle), "idle active=true");
/// ```
pub trait Handle: sealed::Sealed + Copy + std::fmt::Debug {
    /// The kind of watcher: "io", "timer", "idle", "prepare" or "check".
    fn kind(&self) -> &'static str;
}

macro_rules! handle {
    ($(#[$doc:meta])* $name:ident, $kind:literal, $io:literal) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
        pub struct $name(pub(crate) Key);
        impl sealed::Sealed for $name {
            const IO: bool = $io;
            fn key(&self) -> Key {
                self.0
            }
        }
        impl Handle for $name {
            fn kind(&self) -> &'static str {
                $kind
            }
        }
        impl From<Key> for $name {
            fn from(key: Key) -> $name {
                $name(key)
            }
        }
    };
}

handle!(
    /// Handle to an io watcher, returned by [`Loop::io`] and
    /// [`Loop::io_borrowed`].
    ///
    /// ```
    /// use evloop::{Interest, Loop, Sim};
    /// let sim = Sim::new();
    /// let mut lp: Loop = Loop::with_backend(sim.backend());
    /// let io = lp.io(sim.socket("a", 0), Interest::READABLE, |_, _, _| {}).unwrap();
    /// assert_eq!(lp.interest(io).unwrap(), Interest::READABLE);
    /// ```
    Io,
    "io",
    true
);
handle!(
    /// Handle to a timer watcher, returned by [`Loop::timer`].
    ///
    /// ```
    /// use evloop::{Loop, Sim};
    /// use std::time::Duration;
    /// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    /// let t = lp.timer(Duration::from_secs(1), Duration::ZERO, |_, _, _| {}).unwrap();
    /// assert_eq!(lp.remaining(t).unwrap(), Duration::from_secs(1));
    /// ```
    Timer,
    "timer",
    false
);
handle!(
    /// Handle to an idle watcher, returned by [`Loop::idle`].
    ///
    /// ```
    /// use evloop::{Loop, Sim};
    /// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    /// let idle = lp.idle(|lp, _, me| lp.remove(me).unwrap()).unwrap();
    /// lp.run(evloop::RunMode::Default, &mut ()).unwrap();
    /// assert!(lp.is_active(idle).is_err());
    /// ```
    Idle,
    "idle",
    false
);
handle!(
    /// Handle to a prepare watcher, returned by [`Loop::prepare`].
    ///
    /// ```
    /// use evloop::{Loop, Sim};
    /// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    /// let p = lp.prepare(|_, _, _| {}).unwrap();
    /// assert!(lp.is_active(p).unwrap());
    /// ```
    Prepare,
    "prepare",
    false
);
handle!(
    /// Handle to a check watcher, returned by [`Loop::check`].
    ///
    /// ```
    /// use evloop::{Loop, Sim};
    /// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    /// let c = lp.check(|_, _, _| {}).unwrap();
    /// assert!(lp.is_active(c).unwrap());
    /// ```
    Check,
    "check",
    false
);

/// What an io callback receives.
///
/// ```
/// use evloop::{Interest, Loop, RunMode, Sim};
/// use std::io::Read;
/// use std::time::Duration;
/// let sim = Sim::new();
/// let sock = sim.socket("client", 0);
/// sim.deliver(Duration::from_millis(1), &sock, b"hi");
/// let mut lp: Loop<Vec<u8>> = Loop::with_backend(sim.backend());
/// lp.io(sock, Interest::READABLE, |lp, got, ev| {
///     let mut buf = [0; 16];
///     let n = ev.source.read(&mut buf).unwrap();
///     got.extend_from_slice(&buf[..n]);
///     lp.remove(ev.watcher).unwrap();
/// }).unwrap();
/// let mut got = Vec::new();
/// lp.run(RunMode::Default, &mut got).unwrap();
/// assert_eq!(got, b"hi");
/// ```
pub struct IoEvent<'a, T: ?Sized> {
    /// The watcher being invoked.
    pub watcher: Io,
    /// What is ready (filtered by the watcher's interest; `HUP` and `ERROR`
    /// are always passed on).
    pub ready: Ready,
    /// The watcher's source, for reading and writing.
    pub source: &'a mut T,
}

/// A watcher's callback, type-erased: one trait object per watcher, so
/// dispatch is a single indirect call whatever the kind.
pub(crate) trait Dispatch<'s, S> {
    fn call(&mut self, lp: &mut Loop<'s, S>, state: &mut S, key: Key, ready: Ready);
    /// The source's type, if the callback owns an io source.
    fn owned_type(&self) -> Option<TypeId> {
        None
    }
    /// The owned io source, for handing back.
    fn into_source(self: Box<Self>) -> Option<Box<dyn Any>> {
        None
    }
}

/// What a watcher's callback is stored as; `None` while it runs.
pub(crate) type BoxedCallback<'s, S> = Box<dyn Dispatch<'s, S> + 's>;

pub(crate) struct OwnedIo<T, F> {
    pub source: T,
    pub cb: F,
}

impl<'s, S, T, F> Dispatch<'s, S> for OwnedIo<T, F>
where
    T: Source + 'static,
    F: FnMut(&mut Loop<'s, S>, &mut S, IoEvent<'_, T>),
{
    #[inline]
    fn call(&mut self, lp: &mut Loop<'s, S>, state: &mut S, key: Key, ready: Ready) {
        let ev = IoEvent {
            watcher: Io(key),
            ready,
            source: &mut self.source,
        };
        (self.cb)(lp, state, ev)
    }
    fn owned_type(&self) -> Option<TypeId> {
        Some(TypeId::of::<T>())
    }
    fn into_source(self: Box<Self>) -> Option<Box<dyn Any>> {
        Some(Box::new(self.source))
    }
}

pub(crate) struct BorrowedIo<'s, T: ?Sized, F> {
    pub source: &'s T,
    pub cb: F,
}

impl<'s, S, T, F> Dispatch<'s, S> for BorrowedIo<'s, T, F>
where
    T: Source + ?Sized,
    F: FnMut(&mut Loop<'s, S>, &mut S, IoEvent<'_, &'s T>),
{
    #[inline]
    fn call(&mut self, lp: &mut Loop<'s, S>, state: &mut S, key: Key, ready: Ready) {
        let ev = IoEvent {
            watcher: Io(key),
            ready,
            source: &mut self.source,
        };
        (self.cb)(lp, state, ev)
    }
}

/// A callback that receives only its own handle (timer, idle, prepare,
/// check).
pub(crate) struct Plain<H, F> {
    pub cb: F,
    pub handle: PhantomData<fn() -> H>,
}

impl<H, F> Plain<H, F> {
    pub fn new(cb: F) -> Self {
        Plain {
            cb,
            handle: PhantomData,
        }
    }
}

impl<'s, S, H, F> Dispatch<'s, S> for Plain<H, F>
where
    H: From<Key>,
    F: FnMut(&mut Loop<'s, S>, &mut S, H),
{
    #[inline]
    fn call(&mut self, lp: &mut Loop<'s, S>, state: &mut S, key: Key, _ready: Ready) {
        (self.cb)(lp, state, H::from(key))
    }
}

/// Kind-specific state of a watcher.
pub(crate) enum Kind {
    Io {
        fd: RawFd,
        interest: Interest,
    },
    Timer {
        /// Delay used by `start` (relative to the loop time), nanoseconds.
        after: u64,
        /// Period in nanoseconds; zero for a one-shot timer. The expiry and
        /// heap index of an active timer live in the timer heap.
        repeat: u64,
    },
    Idle,
    Prepare,
    Check,
}

/// One watcher in the registry.
pub(crate) struct Entry<'s, S> {
    pub gen: u64,
    /// Priority as a queue index, 0 (lowest, -2) to 4 (highest, +2).
    pub queue: u8,
    pub active: bool,
    /// Whether an active watcher keeps `run` going (libuv's ref/unref).
    pub keepalive: bool,
    /// Where its invocation is queued (in queue `queue`), if it is pending.
    /// [`NOT_PENDING`](crate::pending::NOT_PENDING) when it is not.
    pub pending: PendingSlot,
    /// For an io watcher, the readiness bits it receives
    /// ([`Ready::receive_mask`] of its interest); empty for other kinds.
    pub io_mask: Ready,
    /// Events that arrived while its callback was running (nested `run`);
    /// queued again when the callback returns.
    pub deferred: Option<Ready>,
    /// `None` while the callback runs.
    pub cb: Option<BoxedCallback<'s, S>>,
    /// Its place in the list of active watchers it is in (its fd's, or its
    /// kind's): see slot_list.rs.
    pub link: Link,
    pub kind: Kind,
}

impl<S> Entry<'_, S> {
    /// Whether an invocation is queued.
    #[inline]
    pub fn is_queued(&self) -> bool {
        self.pending != NOT_PENDING
    }

    /// Whether this watcher, while active, rules out dispatching io events
    /// straight from the poll results (io_batch.rs): an io watcher with a
    /// priority other than the default (its events must be ordered against
    /// other priorities) or one-shot (it is disarmed when its event is
    /// queued, which must happen before any callback runs).
    pub fn blocks_direct_dispatch(&self) -> bool {
        match self.kind {
            Kind::Io { interest, .. } => self.queue != DEFAULT_QUEUE || interest.is_oneshot(),
            _ => false,
        }
    }

    /// Forgets the queued invocation's slot, returning it.
    pub fn take_pending(&mut self) -> Option<PendingSlot> {
        match std::mem::replace(&mut self.pending, NOT_PENDING) {
            NOT_PENDING => None,
            slot => Some(slot),
        }
    }
}

/// Looks up a live watcher by handle, refusing stale and foreign ones.
/// Generations are unique in the process, so one compare settles both.
pub(crate) fn lookup<'a, 's, S>(
    watchers: &'a Registry<'s, S>,
    h: &impl Handle,
) -> Result<&'a Entry<'s, S>> {
    let k = h.key();
    match watchers.get(k.idx) {
        Some(e) if e.gen == k.gen => Ok(e),
        _ => Err(refusal(watchers, h)),
    }
}

/// Mutable [`lookup`].
pub(crate) fn lookup_mut<'a, 's, S>(
    watchers: &'a mut Registry<'s, S>,
    h: &impl Handle,
) -> Result<&'a mut Entry<'s, S>> {
    let k = h.key();
    watchers
        .get_live_mut(k.idx, k.gen)
        .map_err(|issued| refused(issued, h))
}

/// Why a handle matches no watcher: it was removed, or it is another
/// loop's.
#[cold]
fn refusal<S>(watchers: &Registry<'_, S>, h: &impl Handle) -> Error {
    refused(watchers.issued(h.key().gen), h)
}

#[cold]
fn refused(issued_here: bool, h: &impl Handle) -> Error {
    if issued_here {
        Error::StaleHandle { kind: h.kind() }
    } else {
        Error::ForeignHandle { kind: h.kind() }
    }
}
