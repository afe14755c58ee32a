//! The reactor: what futures ask of the loop, and the watchers that
//! answer them.
//!
//! A future cannot reach the loop while it is polled (the loop is busy
//! polling it), so it records what it needs in a slot of the executor's
//! reactor (readiness of a source, a deadline, a signal or child exit)
//! and queues a request; after each task's poll the executor carries the
//! requests out with the `&mut Loop` it has (`Reactor::apply`): it makes,
//! re-arms, stops or removes an ordinary watcher. The watcher's callback
//! writes into the slot and wakes the waiting task, then has the executor
//! run in the same iteration (`Owner::kick`).
//!
//! Io: on a backend with edge triggering the source is registered once,
//! for both directions, edge-triggered, and its readiness cached until a
//! read or write says `WouldBlock` (mio's and tokio's model); elsewhere
//! (poll, select, io_uring) the watcher is level-triggered and watches
//! only what a future waits for, each direction dropped from its interest
//! once reported (async-io's model), so a ready fd nobody reads does not
//! spin the loop.
//!
//! Every task that waits on a source is woken by its readiness (a
//! listener shared by acceptor tasks): each waiting future has its own
//! entry in the direction's list, removed when the future is dropped;
//! the poll methods, which have nowhere to keep an entry, share one per
//! direction, the last poller's (async-io's `Source`, tokio's
//! `poll_read_ready`).

use std::cell::RefCell;
use std::collections::VecDeque;
use std::io;
use std::rc::Rc;
use std::task::Waker;
use std::time::Duration;

use slab::Slab;

use crate::{
    Child, ExitStatus, Interest, Io, Loop, Ready, Signal, Source, SourceFd, Timer, Trigger,
};

const R: u8 = 1;
const W: u8 = 2;
const HUP: u8 = 4;
const ERR: u8 = 8;

/// Readiness bits as the reactor keeps them.
fn bits(ready: Ready) -> u8 {
    let mut b = 0;
    if ready.is_readable() {
        b |= R;
    }
    if ready.is_writable() {
        b |= W;
    }
    if ready.is_hup() {
        b |= HUP;
    }
    if ready.is_error() || ready.is_invalid() {
        b |= ERR;
    }
    b
}

fn interest(wanted: u8) -> Interest {
    match wanted & (R | W) {
        0 => Interest::NONE,
        R => Interest::READABLE,
        W => Interest::WRITABLE,
        _ => Interest::BOTH,
    }
}

/// Which way a future waits.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Direction {
    Read,
    Write,
}

impl Direction {
    fn bit(self) -> u8 {
        match self {
            Direction::Read => R,
            Direction::Write => W,
        }
    }
}

/// An `Rc` of a source, as the io watcher's own source: the watcher and
/// the `AsyncFd` share it, so the fd closes only once both are gone (the
/// watcher is removed, deregistering it, before that).
struct Held(Rc<dyn Source>);

impl Source for Held {
    fn source_fd(&self) -> SourceFd<'_> {
        self.0.source_fd()
    }
}

/// Who waits for a direction of a source: a future with its own entry
/// (made at its first wait, kept in `key`, removed by `Reactor::unwait`
/// when it is dropped), or a poll method's caller (one shared entry).
pub(crate) enum Waiter<'a> {
    Future(&'a mut Option<usize>),
    Poll,
}

/// The tasks that wait for one direction of a source.
#[derive(Default)]
struct Waiters {
    /// The poll methods' caller: the last one.
    polled: Option<Waker>,
    /// The futures', by key (an entry is `None` once woken, until its
    /// future waits again or is dropped).
    futures: Slab<Option<Waker>>,
}

impl Waiters {
    fn set(&mut self, who: Waiter<'_>, waker: &Waker) {
        let w = match who {
            Waiter::Poll => &mut self.polled,
            Waiter::Future(key) => match key.and_then(|k| self.futures.get_mut(k)) {
                Some(w) => w,
                None => {
                    *key = Some(self.futures.insert(Some(waker.clone())));
                    return;
                }
            },
        };
        match w {
            Some(old) if old.will_wake(waker) => {}
            _ => *w = Some(waker.clone()),
        }
    }

    /// Moves every waker into `out`.
    fn take_all(&mut self, out: &mut Vec<Waker>) {
        out.extend(self.polled.take());
        for (_, w) in self.futures.iter_mut() {
            out.extend(w.take());
        }
    }

    fn clear(&mut self) {
        self.polled = None;
        self.futures.clear();
    }
}

/// One `AsyncFd` source.
pub(crate) struct IoSlot {
    /// Until the watcher is made.
    source: Option<Rc<dyn Source>>,
    watcher: Option<Io>,
    /// Level mode: the interest the watcher has now.
    registered: u8,
    /// What futures wait for.
    wanted: u8,
    /// Readiness reported and not yet consumed (R, W; HUP and ERR stay).
    ready: u8,
    readers: Waiters,
    writers: Waiters,
    /// Why the source could not be watched (given to every wait).
    error: Option<(io::ErrorKind, String)>,
    /// A request for it is queued.
    listed: bool,
}

/// One timer future.
pub(crate) struct TimerSlot {
    /// In loop time.
    deadline: Duration,
    watcher: Option<Timer>,
    waker: Option<Waker>,
    fired: bool,
    listed: bool,
}

/// What a stream slot watches.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Watched {
    Signal(i32),
    Child(u32),
    AnyChild,
}

/// What a stream slot delivers.
#[derive(Debug)]
pub(crate) enum Item {
    Signal(i32),
    Exit(u32, Option<ExitStatus>),
}

#[derive(Clone, Copy)]
enum StreamWatcher {
    Signal(Signal),
    Child(Child),
}

/// A signal or child-exit stream.
pub(crate) struct StreamSlot {
    watched: Watched,
    watcher: Option<StreamWatcher>,
    items: VecDeque<Item>,
    waker: Option<Waker>,
    error: Option<crate::Error>,
    /// A one-pid child watcher delivered its exit: nothing more comes.
    ended: bool,
    started: bool,
}

#[derive(Clone, Copy, Debug)]
enum Request {
    Io(usize),
    IoClose(usize),
    Timer(usize),
    TimerClose(usize),
    Stream(usize),
    StreamClose(usize),
}

/// What the reactor needs of the executor that owns it: the reactor
/// itself (inside the executor's shared state), and the kick that runs
/// tasks woken meanwhile in the same iteration. A trait, so that the
/// executor names the reactor and not the other way round.
pub(crate) trait Owner: 'static {
    /// The reactor.
    fn reactor(&self) -> &RefCell<Reactor>;
    /// Runs the tasks that were woken, in this iteration.
    fn kick<S>(&self, lp: &mut Loop<'_, S>);
}

/// The executor's reactor (see the module doc).
pub(crate) struct Reactor {
    edge: bool,
    io: Slab<IoSlot>,
    timers: Slab<TimerSlot>,
    /// Timer slots whose future is gone, with their stopped watchers:
    /// the next sleep takes one, so that sleeping allocates nothing in
    /// steady state.
    free_timers: Vec<usize>,
    streams: Slab<StreamSlot>,
    requests: Vec<Request>,
    /// The loop dropped its executor: nothing is watched any more.
    closed: bool,
    /// The wakers an io event wakes, gathered here (its capacity kept)
    /// to be woken once the reactor is released.
    to_wake: Vec<Waker>,
}

impl Reactor {
    pub(crate) fn new(edge: bool) -> Reactor {
        Reactor {
            edge,
            io: Slab::new(),
            timers: Slab::new(),
            free_timers: Vec::new(),
            streams: Slab::new(),
            requests: Vec::new(),
            closed: false,
            to_wake: Vec::new(),
        }
    }

    pub(crate) fn has_requests(&self) -> bool {
        !self.requests.is_empty()
    }

    /// The loop is dropping its executor: wakers go (they may hold tasks).
    pub(crate) fn close(&mut self) {
        self.closed = true;
        self.requests.clear();
        for (_, s) in self.io.iter_mut() {
            s.readers.clear();
            s.writers.clear();
        }
        for (_, t) in self.timers.iter_mut() {
            t.waker = None;
        }
        for (_, s) in self.streams.iter_mut() {
            s.waker = None;
        }
    }

    // ----- io ---------------------------------------------------------

    pub(crate) fn add_io(&mut self, source: Rc<dyn Source>) -> usize {
        self.io.insert(IoSlot {
            source: Some(source),
            watcher: None,
            registered: 0,
            wanted: 0,
            ready: 0,
            readers: Waiters::default(),
            writers: Waiters::default(),
            error: None,
            listed: false,
        })
    }

    /// `who` waits for `dir`: `Some(result)` if it need not wait.
    pub(crate) fn poll_io(
        &mut self,
        slot: usize,
        dir: Direction,
        who: Waiter<'_>,
        waker: &Waker,
    ) -> Option<io::Result<()>> {
        let closed = self.closed;
        let edge = self.edge;
        let s = &mut self.io[slot];
        if let Some((kind, text)) = &s.error {
            return Some(Err(io::Error::new(*kind, text.clone())));
        }
        // A hang-up makes reads see the end; an error answers both ways.
        let answers = match dir {
            Direction::Read => R | HUP | ERR,
            Direction::Write => W | ERR,
        };
        if s.ready & answers != 0 {
            return Some(Ok(()));
        }
        if closed {
            return Some(Err(io::Error::other(
                "the loop that watched this source was dropped",
            )));
        }
        match dir {
            Direction::Read => s.readers.set(who, waker),
            Direction::Write => s.writers.set(who, waker),
        }
        let needs = if edge {
            s.watcher.is_none()
        } else {
            s.wanted & dir.bit() == 0
        };
        s.wanted |= dir.bit();
        if needs && !s.listed {
            s.listed = true;
            self.requests.push(Request::Io(slot));
        }
        None
    }

    /// A waiting future is dropped: its entry goes.
    pub(crate) fn unwait(&mut self, slot: usize, dir: Direction, key: usize) {
        if let Some(s) = self.io.get_mut(slot) {
            let w = match dir {
                Direction::Read => &mut s.readers,
                Direction::Write => &mut s.writers,
            };
            w.futures.try_remove(key);
        }
    }

    /// Whether the loop is known to have reported no readiness for `dir`
    /// since the last `WouldBlock` (edge-registered, so every new
    /// readiness is reported): an operation would only say `WouldBlock`.
    /// Whether the source has its watcher (registered with the loop).
    #[cfg_attr(not(feature = "hyper"), allow(dead_code))]
    pub(crate) fn watched(&self, slot: usize) -> bool {
        self.io.get(slot).is_some_and(|s| s.watcher.is_some())
    }

    pub(crate) fn known_unready(&self, slot: usize, dir: Direction) -> bool {
        let Some(s) = self.io.get(slot) else {
            return false;
        };
        let answers = match dir {
            Direction::Read => R | HUP | ERR,
            Direction::Write => W | ERR,
        };
        self.edge && s.watcher.is_some() && s.error.is_none() && s.ready & answers == 0
    }

    /// A read gave less than it asked for: a stream is drained, and an
    /// edge-registered source reports the next data (tokio's rule; on a
    /// level watcher the next wait costs an iteration, so it is kept).
    pub(crate) fn read_short(&mut self, slot: usize) {
        if self.edge {
            self.clear_io(slot, Direction::Read);
        }
    }

    /// A read or write said `WouldBlock`: the readiness was stale.
    pub(crate) fn clear_io(&mut self, slot: usize, dir: Direction) {
        if let Some(s) = self.io.get_mut(slot) {
            s.ready &= !dir.bit();
        }
    }

    pub(crate) fn close_io(&mut self, slot: usize) {
        if self.closed {
            self.io.remove(slot);
            return;
        }
        let s = &mut self.io[slot];
        s.readers.clear();
        s.writers.clear();
        self.requests.push(Request::IoClose(slot));
    }

    // ----- timers -----------------------------------------------------

    pub(crate) fn add_timer(&mut self, deadline: Duration, waker: &Waker) -> usize {
        let slot = match self.free_timers.pop() {
            Some(slot) => {
                let t = &mut self.timers[slot];
                t.deadline = deadline;
                t.waker = Some(waker.clone());
                t.fired = false;
                t.listed = true;
                slot
            }
            None => self.timers.insert(TimerSlot {
                deadline,
                watcher: None,
                waker: Some(waker.clone()),
                fired: false,
                listed: true,
            }),
        };
        self.requests.push(Request::Timer(slot));
        slot
    }

    /// Whether the timer fired, or its deadline is `now` or past (a
    /// reset to a time passed: done at once, its watcher stopped, as
    /// tokio's and async-io's are); if not, `waker` is woken when it fires.
    pub(crate) fn poll_timer(&mut self, slot: usize, waker: &Waker, now: Duration) -> bool {
        let Some(t) = self.timers.get_mut(slot) else {
            return true;
        };
        if !t.fired && t.deadline <= now {
            t.fired = true;
            t.waker = None;
            if !t.listed {
                t.listed = true;
                self.requests.push(Request::Timer(slot));
            }
        }
        if t.fired {
            return true;
        }
        match &t.waker {
            Some(old) if old.will_wake(waker) => {}
            _ => t.waker = Some(waker.clone()),
        }
        false
    }

    /// Whether the timer fired, or its deadline is `now` or past.
    pub(crate) fn timer_elapsed(&self, slot: usize, now: Duration) -> bool {
        self.timers
            .get(slot)
            .is_some_and(|t| t.fired || t.deadline <= now)
    }

    pub(crate) fn reset_timer(&mut self, slot: usize, deadline: Duration) {
        let Some(t) = self.timers.get_mut(slot) else {
            return;
        };
        t.deadline = deadline;
        t.fired = false;
        if !t.listed {
            t.listed = true;
            self.requests.push(Request::Timer(slot));
        }
    }

    pub(crate) fn close_timer(&mut self, slot: usize) {
        if self.closed {
            self.timers.try_remove(slot);
            return;
        }
        if let Some(t) = self.timers.get_mut(slot) {
            t.waker = None;
            self.requests.push(Request::TimerClose(slot));
        }
    }

    // ----- signal and child streams ----------------------------------

    pub(crate) fn add_stream(&mut self, watched: Watched) -> usize {
        let slot = self.streams.insert(StreamSlot {
            watched,
            watcher: None,
            items: VecDeque::new(),
            waker: None,
            error: None,
            ended: false,
            started: false,
        });
        self.requests.push(Request::Stream(slot));
        slot
    }

    /// The next item, an error, the end (`Some(None)`), or `None`: wait.
    #[allow(clippy::option_option)]
    pub(crate) fn poll_stream(
        &mut self,
        slot: usize,
        waker: &Waker,
    ) -> Option<Option<crate::Result<Item>>> {
        let closed = self.closed;
        let s = &mut self.streams[slot];
        if let Some(e) = s.error.take() {
            s.ended = true;
            return Some(Some(Err(e)));
        }
        if let Some(item) = s.items.pop_front() {
            return Some(Some(Ok(item)));
        }
        if s.ended || closed {
            return Some(None);
        }
        match &s.waker {
            Some(old) if old.will_wake(waker) => {}
            _ => s.waker = Some(waker.clone()),
        }
        None
    }

    pub(crate) fn close_stream(&mut self, slot: usize) {
        if self.closed {
            self.streams.try_remove(slot);
            return;
        }
        self.streams[slot].waker = None;
        self.requests.push(Request::StreamClose(slot));
    }

    // ----- carrying the requests out ---------------------------------

    /// Carries out every request queued (and those made meanwhile).
    pub(crate) fn apply<S, O: Owner>(lp: &mut Loop<'_, S>, shared: &Rc<O>) {
        loop {
            let requests = {
                let mut reactor = shared.reactor().borrow_mut();
                if reactor.requests.is_empty() {
                    return;
                }
                std::mem::take(&mut reactor.requests)
            };
            for &r in &requests {
                match r {
                    Request::Io(slot) => sync_io(lp, shared, slot),
                    Request::IoClose(slot) => {
                        let w = shared.reactor().borrow_mut().io.remove(slot).watcher;
                        if let Some(w) = w {
                            let _ = lp.remove(w);
                        }
                    }
                    Request::Timer(slot) => arm_timer(lp, shared, slot),
                    Request::TimerClose(slot) => {
                        // Kept, stopped, for the next sleep.
                        let w = {
                            let mut reactor = shared.reactor().borrow_mut();
                            let Some(t) = reactor.timers.get_mut(slot) else {
                                continue;
                            };
                            t.waker = None;
                            t.fired = true;
                            t.listed = false;
                            let w = t.watcher;
                            reactor.free_timers.push(slot);
                            w
                        };
                        if let Some(w) = w {
                            let _ = lp.stop(w);
                        }
                    }
                    Request::Stream(slot) => start_stream(lp, shared, slot),
                    Request::StreamClose(slot) => {
                        let s = shared.reactor().borrow_mut().streams.try_remove(slot);
                        match s.and_then(|s| s.watcher) {
                            Some(StreamWatcher::Signal(w)) => {
                                let _ = lp.remove(w);
                            }
                            Some(StreamWatcher::Child(w)) => {
                                let _ = lp.remove(w);
                            }
                            None => {}
                        }
                    }
                }
            }
            // Give the vector back (its capacity), unless more came.
            let mut reactor = shared.reactor().borrow_mut();
            if reactor.requests.is_empty() {
                let mut requests = requests;
                requests.clear();
                reactor.requests = requests;
            }
        }
    }
}

/// Makes or re-arms an io slot's watcher.
fn sync_io<S, O: Owner>(lp: &mut Loop<'_, S>, shared: &Rc<O>, slot: usize) {
    let mut reactor = shared.reactor().borrow_mut();
    let edge = reactor.edge;
    let Some(s) = reactor.io.get_mut(slot) else {
        return;
    };
    s.listed = false;
    if let Some(w) = s.watcher {
        if edge || s.wanted == s.registered {
            return;
        }
        let wanted = s.wanted;
        s.registered = wanted;
        drop(reactor);
        set_level_interest(lp, w, wanted);
        return;
    }
    let Some(source) = s.source.take() else {
        return;
    };
    let want = if edge {
        Interest::BOTH.with_trigger(Trigger::Edge)
    } else {
        interest(s.wanted)
    };
    s.registered = s.wanted;
    drop(reactor);
    let weak = Rc::downgrade(shared);
    let made = lp.io(Held(source), want, move |lp, _, ev| {
        if let Some(shared) = weak.upgrade() {
            io_ready(lp, &shared, slot, ev.ready);
        }
    });
    let mut reactor = shared.reactor().borrow_mut();
    let s = &mut reactor.io[slot];
    match made {
        Ok(w) => s.watcher = Some(w),
        Err(e) => {
            s.error = Some((io::ErrorKind::Other, e.to_string()));
            let mut wake = Vec::new();
            s.readers.take_all(&mut wake);
            s.writers.take_all(&mut wake);
            drop(reactor);
            wake.into_iter().for_each(Waker::wake);
        }
    }
}

fn set_level_interest<S>(lp: &mut Loop<'_, S>, w: Io, wanted: u8) {
    if wanted & (R | W) == 0 {
        let _ = lp.stop(w);
    } else {
        let _ = w.set_interest(lp, interest(wanted));
        if !lp.is_active(w).unwrap_or(true) {
            let _ = lp.start(w);
        }
    }
}

/// An io watcher's callback: record, wake, and (level) stop watching
/// what was reported until a future waits for it again.
fn io_ready<S, O: Owner>(lp: &mut Loop<'_, S>, shared: &Rc<O>, slot: usize, ready: Ready) {
    let mut reactor = shared.reactor().borrow_mut();
    let edge = reactor.edge;
    let mut wake = std::mem::take(&mut reactor.to_wake);
    let Some(s) = reactor.io.get_mut(slot) else {
        return;
    };
    let got = bits(ready);
    s.ready |= got;
    if got & (R | HUP | ERR) != 0 {
        s.readers.take_all(&mut wake);
    }
    // A hang-up wakes writers too: they try, and see an error or write
    // (a writer to a half-closed peer can go on).
    if got & (W | HUP | ERR) != 0 {
        s.writers.take_all(&mut wake);
    }
    let mut rearm = None;
    if !edge {
        // Reported: no longer watched until a future waits again. A hang
        // up or error answers every direction.
        let answered = if got & (HUP | ERR) != 0 {
            R | W
        } else {
            got & (R | W)
        };
        s.wanted &= !answered;
        if s.wanted != s.registered {
            s.registered = s.wanted;
            rearm = s.watcher.map(|w| (w, s.wanted));
        }
    }
    drop(reactor);
    if let Some((w, wanted)) = rearm {
        set_level_interest(lp, w, wanted);
    }
    wake.drain(..).for_each(Waker::wake);
    // The capacity back (a waker's wake may have put one there meanwhile).
    if let Ok(mut reactor) = shared.reactor().try_borrow_mut() {
        if reactor.to_wake.capacity() < wake.capacity() {
            reactor.to_wake = wake;
        }
    }
    shared.kick(lp);
}

/// Makes or re-arms a timer slot's watcher at its deadline.
fn arm_timer<S, O: Owner>(lp: &mut Loop<'_, S>, shared: &Rc<O>, slot: usize) {
    let mut reactor = shared.reactor().borrow_mut();
    let Some(t) = reactor.timers.get_mut(slot) else {
        return;
    };
    t.listed = false;
    if t.fired {
        // Done before its watcher fired: the watcher must not keep `run`.
        let w = t.watcher;
        drop(reactor);
        if let Some(w) = w {
            if lp.is_active(w).unwrap_or(false) {
                let _ = lp.stop(w);
            }
        }
        return;
    }
    let after = t.deadline.saturating_sub(lp.now());
    if let Some(w) = t.watcher {
        drop(reactor);
        let _ = w.set(lp, after, Duration::ZERO);
        if !lp.is_active(w).unwrap_or(true) {
            let _ = lp.start(w);
        }
        return;
    }
    drop(reactor);
    let weak = Rc::downgrade(shared);
    let made = lp.timer(after, Duration::ZERO, move |lp, _, _| {
        let Some(shared) = weak.upgrade() else { return };
        let waker = {
            let mut reactor = shared.reactor().borrow_mut();
            let Some(t) = reactor.timers.get_mut(slot) else {
                return;
            };
            t.fired = true;
            t.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
        shared.kick(lp);
    });
    if let Ok(w) = made {
        if let Some(t) = shared.reactor().borrow_mut().timers.get_mut(slot) {
            t.watcher = Some(w);
        }
    }
}

/// Starts a signal or child stream's watcher.
fn start_stream<S, O: Owner>(lp: &mut Loop<'_, S>, shared: &Rc<O>, slot: usize) {
    let watched = {
        let mut reactor = shared.reactor().borrow_mut();
        let Some(s) = reactor.streams.get_mut(slot) else {
            return;
        };
        if s.started {
            return;
        }
        s.started = true;
        s.watched
    };
    let weak = Rc::downgrade(shared);
    let deliver = move |lp: &mut Loop<'_, S>, item: Item, ended: bool| {
        let Some(shared) = weak.upgrade() else { return };
        let waker = {
            let mut reactor = shared.reactor().borrow_mut();
            let Some(s) = reactor.streams.get_mut(slot) else {
                return;
            };
            s.items.push_back(item);
            s.ended |= ended;
            s.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
        shared.kick(lp);
    };
    let made = match watched {
        Watched::Signal(n) => {
            Signal::new(lp, n, move |lp, _, _| deliver(lp, Item::Signal(n), false))
                .map(StreamWatcher::Signal)
        }
        Watched::Child(pid) => Child::new(lp, pid, move |lp, _, ev| {
            deliver(lp, Item::Exit(ev.pid, ev.status), true)
        })
        .map(StreamWatcher::Child),
        Watched::AnyChild => Child::any(lp, move |lp, _, ev| {
            deliver(lp, Item::Exit(ev.pid, ev.status), false)
        })
        .map(StreamWatcher::Child),
    };
    let waker = {
        let mut reactor = shared.reactor().borrow_mut();
        let Some(s) = reactor.streams.get_mut(slot) else {
            // Closed meanwhile (cannot happen: one request at a time).
            return;
        };
        match made {
            Ok(w) => {
                s.watcher = Some(w);
                None
            }
            Err(e) => {
                s.error = Some(e);
                s.waker.take()
            }
        }
    };
    if let Some(w) = waker {
        w.wake();
    }
}
