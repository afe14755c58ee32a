//! `Embed::new`: another loop run inside this one (libev's `ev_embed`).
//! The outer loop owns the inner one; an embed watcher has the outer loop
//! watch the inner loop's pollable fd (`Backend::pollable_fd`, bound
//! through [`Context::watch_checked`]) and bounds the outer's wait by the
//! inner's next deadline (`Kind::wait`: `Loop::next_timeout`). Its
//! callback, which usually runs the inner loop without blocking, is
//! queued when that fd is readable or that deadline has come
//! (`Phase::Expire`). The inner loop's fd changes made between its runs
//! go to its backend in the outer's prepare phase and again just before
//! the outer polls (libev's embed watcher does `fd_reify` in a prepare
//! watcher), so that its fd is readable for watchers started meanwhile.
//!
//! While the callback runs, the inner loop is out of the kind, in the
//! callback's frame (the callback gets it by `&mut`); it is put back when
//! the callback returns or panics (the panic is caught, the loop put
//! back, the panic resumed), and dropped there if the watcher was removed
//! meanwhile. A loop put in its place is found by its id (and fd) right
//! after the callback and in the prepare phase, and its fd watched
//! instead.
//!
//! The fd is registered at `embed` (a refusal, epoll's `ELOOP` for
//! instances nested too deep, is `embed`'s error). A refusal met later
//! kills the fd as the fd table kills any (its watcher deactivated, its
//! callback queued with `Ready::ERROR`); the dispatch then stops the
//! watcher in the kind too and leaves the error, with the backend's
//! reason ([`FdTable::take_refusal`](crate::fd_table::FdTable)), for the
//! outer's `run` to return (`RunState::failure`). Unix only: the Windows
//! backends have no pollable fd.

use std::marker::PhantomData;
use std::os::fd::AsRawFd;
use std::time::Duration;

use crate::backend::{Backend, Capabilities};
use crate::event_loop::Dispatch;
use crate::handle::{sealed::Sealed, Key};
use crate::kind::{Context, Kind, Phase, Phases, Watcher};
use crate::kinds::rank;
use crate::slot_list::Slot;
use crate::unwind::Held;
use crate::{Error, Handle, Interest, Loop, RawFd, Ready, Result, SourceFd};

/// Handle to an embed watcher ([`Embed::new`]): the outer loop's watcher
/// of an embedded loop whose events are `T`'s. The shared operations act
/// on the watcher: [`Loop::stop`] leaves the embedded loop alone (its fd
/// unwatched, its deadlines ignored) until [`Loop::start`];
/// [`Loop::set_ref`]`(e, false)` lets the outer's `run` end while the
/// embed watcher is its last; [`Loop::feed_event`] runs its callback;
/// [`Loop::remove`] drops the embedded loop with the watcher (its cleanup
/// watchers run), where [`Embed::unembed`] hands it back.
///
/// ```
/// use evloop::{Embed, Handle, Loop};
/// # #[cfg(target_os = "linux")]
/// # {
/// let inner: Loop<'static, ()> = Loop::builder().backend("epoll").build()?;
/// let mut outer: Loop = Loop::builder().backend("epoll").build()?;
/// let e: Embed<()> = Embed::new(&mut outer, inner, |_, _, inner, _| {
///     inner.run(evloop::RunMode::NoWait, &mut ()).unwrap();
/// })?;
/// assert_eq!(e.kind(), "embed");
/// assert!(outer.is_active(e)?);
/// outer.remove(e)?; // the embedded loop goes with it
/// # }
/// # Ok::<(), evloop::Error>(())
/// ```
pub struct Embed<T> {
    key: Key,
    inner: PhantomData<fn() -> T>,
}

impl<T> Embed<T> {
    fn from_slot_key(key: Key) -> Embed<T> {
        Embed {
            key,
            inner: PhantomData,
        }
    }
}

impl<T> Clone for Embed<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Embed<T> {}
impl<T> PartialEq for Embed<T> {
    fn eq(&self, other: &Self) -> bool {
        self.key == other.key
    }
}
impl<T> Eq for Embed<T> {}
impl<T> std::hash::Hash for Embed<T> {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.key.hash(h)
    }
}
impl<T> std::fmt::Debug for Embed<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Embed").field(&self.key).finish()
    }
}

impl<T> Sealed for Embed<T> {
    // It watches an fd: operations that a direct batch could tell from
    // queued events materialise it first.
    const IO: bool = true;
    fn key(&self) -> Key {
        self.key
    }
    fn from_key(key: Key) -> Self {
        Embed::from_slot_key(key)
    }
}

impl<T> Handle for Embed<T> {
    fn kind(&self) -> &'static str {
        "embed"
    }
}

/// One embedded loop, as its kind keeps it.
struct Embedded<T: 'static> {
    key: Key,
    /// `None` while the watcher's callback runs (it holds the loop).
    inner: Option<Loop<'static, T>>,
    /// The inner loop's pollable fd, which the outer watches while the
    /// watcher is active.
    fd: RawFd,
    /// The id of the inner loop that `fd` is the fd of: another loop put
    /// in its place (`mem::replace` on the callback's `&mut Loop`, or on
    /// [`Embed::inner_mut`]'s) is watched instead ([`Embedded::follow`]).
    owner: u32,
    active: bool,
    /// Its changes could not be made (`Loop::flush_changes` failed): the
    /// callback runs, and the inner loop's `run` meets the error.
    failed: bool,
    /// Why the watcher was stopped in a phase (a loop put in its place
    /// that this loop cannot watch), for the outer's `run` to say.
    refused: Option<Error>,
}

impl<T: 'static> Embedded<T> {
    /// Whether the loop held is still the one whose fd is watched (cheap:
    /// checked after every callback).
    fn moved(&self) -> bool {
        self.inner.as_ref().is_some_and(|inner| {
            inner.registry.owner() != self.owner
                || inner.pollable_fd().map(|fd| fd.as_raw_fd()).ok() != Some(self.fd)
        })
    }

    /// If another loop was put in place of the one whose fd is watched
    /// (or its fd changed), its fd (checked as [`Embed::new`] checks
    /// it) is watched instead, if the old one was. Errors: that check's;
    /// the old fd is unwatched then, for the caller to stop the watcher.
    fn follow(&mut self, cx: &mut Context<'_>) -> Result<()> {
        if !self.moved() {
            return Ok(());
        }
        let Some(inner) = self.inner.as_ref() else {
            return Ok(());
        };
        self.owner = inner.registry.owner();
        let slot = self.key.slot;
        // Only a watcher active in the loop is on its fd's list (one
        // stopped is unbound; one whose fd was killed, taken off it).
        // The old number may name another file by now: the backend is
        // told it goes (the epoll backend copes with a reused number).
        let watched = cx.is_active(Watcher::<Embeds<T>>::new(self.key));
        if watched {
            cx.unwatch_slot(slot);
        }
        self.fd = watchable(inner, &*cx.backend, cx.caps)?;
        if watched {
            cx.watch_checked(slot, self.fd, Interest::READABLE);
        }
        Ok(())
    }

    /// The inner loop's changes, to its backend and its fd; whether it
    /// has work now (a flush that failed counts: its `run` says why).
    fn flush(&mut self) -> Option<&mut Loop<'static, T>> {
        let inner = self.inner.as_mut()?;
        if inner.flush_changes().is_err() {
            self.failed = true;
        }
        Some(inner)
    }

    /// How long the outer may wait for this loop's sake (after a flush).
    fn wait(&mut self) -> Option<Duration> {
        let failed = self.failed;
        let inner = self.flush()?;
        if failed {
            return Some(Duration::ZERO);
        }
        inner.next_timeout()
    }
}

/// The embed watchers of one loop whose embedded loops are `Loop<T>`s, in
/// creation order.
pub(crate) struct Embeds<T: 'static> {
    loops: Vec<Embedded<T>>,
}

impl<T: 'static> Default for Embeds<T> {
    fn default() -> Self {
        Embeds { loops: Vec::new() }
    }
}

impl<T: 'static> Embeds<T> {
    fn at(&mut self, slot: Slot) -> Option<&mut Embedded<T>> {
        self.loops.iter_mut().find(|e| e.key.slot == slot)
    }

    fn of(&self, key: Key) -> Option<&Embedded<T>> {
        self.loops.iter().find(|e| e.key == key)
    }

    fn of_mut(&mut self, key: Key) -> Option<&mut Embedded<T>> {
        self.loops.iter_mut().find(|e| e.key == key)
    }

    /// [`Embedded::follow`] for each active watcher; one whose new loop
    /// cannot be watched is stopped, and its callback queued with
    /// [`Ready::ERROR`] for the outer's `run` to say why.
    /// Whether one was stopped.
    fn follow_all(&mut self, cx: &mut Context<'_>) -> bool {
        let mut stopped = false;
        for e in self.loops.iter_mut().filter(|e| e.active) {
            if let Err(err) = e.follow(cx) {
                stopped = true;
                e.active = false;
                e.refused = Some(err);
                let w = Watcher::<Self>::new(e.key);
                cx.stopped(w);
                cx.queue(w, Ready::ERROR);
            }
        }
        stopped
    }

    /// Puts the loop that `key`'s callback held back; `Some(inner)` if
    /// the watcher is gone (the loop is then the caller's to drop).
    fn put_back(&mut self, key: Key, inner: Loop<'static, T>) -> Option<Loop<'static, T>> {
        match self.of_mut(key) {
            Some(e) if e.inner.is_none() => {
                e.inner = Some(inner);
                None
            }
            _ => Some(inner),
        }
    }
}

impl<T: 'static> Kind for Embeds<T> {
    const NAME: &'static str = "embed";
    const PHASES: Phases = Phases::PREPARE.union(Phases::EXPIRE);

    fn start(&mut self, cx: &mut Context<'_>, w: Watcher<Self>) -> Result<bool> {
        let Some(e) = self.at(w.slot()) else {
            return Ok(true);
        };
        // Checked when the watcher was created (the inner loop, which the
        // kind owns, keeps it open), unless another loop was put in its
        // place meanwhile.
        e.follow(cx)?;
        e.active = true;
        e.refused = None;
        cx.watch_checked(w.slot(), e.fd, Interest::READABLE);
        Ok(true)
    }

    /// (The loop unwatches its fd.)
    fn stop(&mut self, _: &mut Context<'_>, w: Watcher<Self>) {
        if let Some(e) = self.at(w.slot()) {
            e.active = false;
            e.failed = false;
        }
    }

    /// The embedded loop goes (if its callback holds it, when that
    /// returns). Its drop runs its cleanup watchers: user code, last.
    fn remove(&mut self, _: &mut Context<'_>, w: Watcher<Self>) {
        if let Some(i) = self.loops.iter().position(|e| e.key.slot == w.slot()) {
            let gone = self.loops.remove(i);
            drop(gone);
        }
    }

    /// Prepare: each active embedded loop's changes go to its backend
    /// (libev's embed does `fd_reify` here). Expire: the watchers whose
    /// embedded loop has work the fd does not show (a deadline come,
    /// callbacks pending, idle watchers) are queued.
    fn phase(&mut self, cx: &mut Context<'_>, phase: Phase) {
        if phase == Phase::Prepare {
            self.follow_all(cx);
        }
        for e in self.loops.iter_mut().filter(|e| e.active) {
            match phase {
                Phase::Prepare => {
                    e.flush();
                }
                Phase::Expire => {
                    let failed = std::mem::take(&mut e.failed);
                    let Some(inner) = e.inner.as_mut() else {
                        continue;
                    };
                    if failed || inner.next_timeout() == Some(Duration::ZERO) {
                        cx.queue_slot(e.key.slot, Ready::EMPTY);
                    }
                }
                _ => {}
            }
        }
    }

    /// Just before the outer polls: the changes made since the prepare
    /// phase (by prepare callbacks) are flushed too, and the wait is
    /// bounded by the earliest of the embedded loops' next timeouts.
    fn wait(&mut self, cx: &mut Context<'_>) -> Option<Duration> {
        if self.follow_all(cx) {
            return Some(Duration::ZERO); // a callback queued
        }
        let mut bound: Option<Duration> = None;
        for e in self.loops.iter_mut().filter(|e| e.active) {
            if let Some(t) = e.wait() {
                bound = Some(bound.map_or(t, |b| b.min(t)));
            }
        }
        bound
    }

    /// The embedded loops are re-created too (libev's embed has a fork
    /// watcher that does the same); a new kernel object has a new fd,
    /// which the outer watches instead.
    fn after_fork(&mut self, cx: &mut Context<'_>) -> Result<()> {
        for e in self.loops.iter_mut() {
            let Some(inner) = e.inner.as_mut() else {
                continue;
            };
            inner.reinit_after_fork()?;
            let fd = inner.pollable_fd()?;
            let raw = fd.as_raw_fd();
            if e.active {
                cx.unwatch_slot(e.key.slot);
                let w = Watcher::<Self>::new(e.key);
                cx.watch_fd(w, SourceFd::Os(fd), Interest::READABLE)?;
            }
            e.fd = raw;
        }
        Ok(())
    }
}

/// An embed watcher's callback: it gets the embedded loop, taken from the
/// kind for the call.
struct EmbedCallback<T, F> {
    cb: F,
    inner: PhantomData<fn() -> T>,
}

impl<'s, S, T, F> Dispatch<'s, S> for EmbedCallback<T, F>
where
    T: 'static,
    F: FnMut(&mut Loop<'s, S>, &mut S, &mut Loop<'static, T>, Embed<T>),
{
    fn call(
        &mut self,
        lp: &mut Loop<'s, S>,
        state: &mut S,
        slot: Slot,
        version: u32,
        ready: Ready,
    ) {
        let key = lp.registry.key(slot, version);
        let me = Embed::<T>::from_slot_key(key);
        if ready.is_error() && !lp.is_active(me).unwrap_or(true) {
            // Stopped by the loop: the backend refused or reported
            // invalid the fd, or a loop put in place cannot be watched.
            refused::<S, T>(lp, key);
            return;
        }
        let taken = lp
            .kinds
            .get_mut::<Embeds<T>>()
            .and_then(|k| k.of_mut(key))
            .and_then(|e| e.inner.take());
        let Some(mut inner) = taken else {
            return;
        };
        // Whether the callback returns or panics, the loop goes back to
        // the kind (or, if the watcher was removed meanwhile, is dropped);
        // then a panic propagates.
        let mut held = Held::default();
        held.run(|| (self.cb)(lp, state, &mut inner, me));
        let orphan = match lp.kinds.get_mut::<Embeds<T>>() {
            Some(k) => k.put_back(key, inner),
            None => Some(inner),
        };
        if let Some(orphan) = orphan {
            held.drop(orphan);
        } else {
            follow_now(lp, me);
        }
        held.resume();
    }
}

/// The loop the callback put back is another than the one whose fd the
/// outer watched (`mem::replace` on its `&mut Loop`): the new one's fd is
/// watched from now on (the old number, closed or soon reused, no
/// longer), through a stop and a start; if it cannot be, the watcher
/// stays stopped and the outer's `run` says why.
fn follow_now<S, T: 'static>(lp: &mut Loop<'_, S>, me: Embed<T>) {
    let moved = lp
        .kinds
        .get_mut::<Embeds<T>>()
        .and_then(|k| k.of_mut(me.key))
        .is_some_and(|e| e.moved());
    if !moved || !lp.is_active(me).unwrap_or(false) {
        return; // (a stopped watcher follows when started)
    }
    let restarted = lp.stop(me).and_then(|()| lp.start(me));
    if let Err(err) = restarted {
        lp.run.failure.get_or_insert(err);
    }
}

/// The outer's `run` is to fail: `key`'s watcher was stopped because its
/// fd could not be watched. The error names both backends and the
/// backend's reason (epoll's `ELOOP`: nested too deep).
fn refused<S, T: 'static>(lp: &mut Loop<'_, S>, key: Key) {
    let outer = lp.backend_name();
    let Some(e) = lp.kinds.get_mut::<Embeds<T>>().and_then(|k| k.of_mut(key)) else {
        return;
    };
    e.active = false;
    e.failed = false;
    let inner = e.inner.as_ref().map_or("unknown", |l| l.backend_name());
    let (fd, kept) = (e.fd, e.refused.take());
    let err = kept.unwrap_or_else(|| Error::CannotEmbed {
        inner,
        outer,
        reason: match lp.fds.take_refusal(fd) {
            Some(err) => refusal_reason(outer, &err),
            None => format!(
                "the {outer} backend reported its pollable fd (fd {fd}) invalid: \
                 it could not watch it (loops nested too deep, say)"
            ),
        },
    });
    lp.run.failure.get_or_insert(err);
}

/// Why the backend refused to watch an embedded loop's fd.
fn refusal_reason(outer: &str, err: &std::io::Error) -> String {
    if err.raw_os_error() == Some(libc::ELOOP) {
        return format!(
            "the {outer} backend refused to watch its pollable fd: loops nested too deep \
             (ELOOP: Linux nests epoll instances at most 4 deep below the outermost one, \
             so at most 4 loops can be embedded in one another below it): {err}"
        );
    }
    format!("the {outer} backend refused to watch its pollable fd: {err}")
}

/// The fd of `inner` that a loop on `outer` watches to embed it; the
/// checks of [`Embed::can_embed`].
fn watchable<T>(inner: &Loop<'_, T>, outer: &dyn Backend, caps: &Capabilities) -> Result<RawFd> {
    let refused = |reason: String| Error::CannotEmbed {
        inner: inner.backend_name(),
        outer: outer.name(),
        reason,
    };
    let fd = match inner.pollable_fd() {
        Ok(fd) => fd,
        Err(Error::NoPollableFd { reason, .. }) => {
            return Err(refused(format!("it has no pollable fd: {reason}")))
        }
        Err(e) => return Err(refused(e.to_string())),
    };
    // (The inner loop's pollable fd is one the OS can watch.)
    crate::fd_table::check_source(outer.name(), caps, SourceFd::Os(fd), |_| Ok(()))
        .map_err(|e| refused(e.to_string()))
}

/// The fd `inner` would be watched on, if `lp` can embed it.
fn embeddable<S, T>(lp: &Loop<'_, S>, inner: &Loop<'_, T>) -> Result<RawFd> {
    watchable(inner, &*lp.backend, &lp.caps)
}

impl<T: 'static> Embed<T> {
    /// Runs `inner` inside this loop (libev's `ev_embed`): this loop owns
    /// it, watches its [`Loop::pollable_fd`] and bounds its own wait by
    /// `inner`'s [`Loop::next_timeout`], and calls `callback` when `inner`
    /// has work: its fd is readable (an io watcher's fd is ready, a signal
    /// or an async send arrived...), or its next deadline has come (a
    /// timer, with no io at all: it fires on time), or callbacks or idle
    /// watchers wait in it. The callback gets this loop, the state, the
    /// embedded loop and its own handle, and usually runs the embedded
    /// loop without blocking: `inner.run(RunMode::NoWait, &mut inner_state)`
    /// (the embedded loop's state is the caller's to keep: in `S`, or
    /// captured). A callback that leaves the work undone is called again
    /// at the next iteration, as a level-triggered io watcher is.
    ///
    /// The embedded loop's fd changes made between its runs (watchers
    /// started through [`Embed::inner_mut`], say) reach its backend in
    /// this loop's prepare phase, and again just before this loop polls,
    /// so that its fd is readable for them ([`Loop::flush_changes`]).
    /// Reach the embedded loop between runs with [`Embed::inner_mut`],
    /// take it back with [`Embed::unembed`]; [`Loop::remove`] drops it.
    /// After `fork()`, this loop's [`Loop::reinit_after_fork`] re-creates
    /// the embedded loop's kernel objects too (do not call it on the
    /// embedded loop yourself). The watcher is active and referenced from
    /// the start: while it is, this loop's `run` does not end for want of
    /// watchers ([`Loop::set_ref`] changes that).
    ///
    /// A panic in the callback propagates out of this loop's `run` as any
    /// callback's does, and the embedded loop is put back first: nothing
    /// is lost. The callback's priority is the watcher's
    /// ([`Loop::set_priority`]).
    ///
    /// The callback may put another loop in place of the one it gets
    /// (`*inner = other`, `std::mem::replace`), and so may a caller of
    /// [`Embed::inner_mut`]: this loop then watches the new loop's fd
    /// (right after the callback returns; before this loop next polls,
    /// for `Embed::inner_mut`), never the old one's number, which the old
    /// loop's drop closed and the next open may reuse. A new loop that
    /// cannot be embedded stops the watcher, and this loop's `run`
    /// returns [`Error::CannotEmbed`] (the loop stays, for
    /// [`Embed::unembed`]; [`Loop::start`] says the same until a loop that
    /// can be embedded is put in place).
    ///
    /// Errors: [`Error::CannotEmbed`] when `inner`'s backend has no
    /// pollable fd (poll, select, the simulator, an io_uring ring with
    /// deferred task work) or this loop's backend cannot watch it (the
    /// simulator watches virtual fds only; select, fds below
    /// `FD_SETSIZE`), or refuses to: the fd is registered at once, and
    /// Linux refuses epoll instances nested more than 4 deep below the
    /// outermost one (`ELOOP`, "nested too deep": a top loop and 4 epoll
    /// loops embedded in one another below it). `inner` is dropped then:
    /// [`Embed::can_embed`] asks first without giving it away (it does not
    /// register the fd). A refusal met later (the watcher started again,
    /// or a backend that reports refusals at its next poll: kqueue,
    /// io_uring) stops the watcher, and this loop's `run` returns the
    /// error once the iteration's callbacks ran.
    ///
    /// ```
    /// use evloop::{Embed, Loop, RunMode};
    /// use std::time::Duration;
    /// # #[cfg(target_os = "linux")]
    /// # {
    /// // The inner loop's state is kept in the outer's.
    /// #[derive(Default)]
    /// struct Outer { inner_fired: u32, runs: u32 }
    ///
    /// let started = std::time::Instant::now();
    /// let mut inner: Loop<'static, u32> = Loop::builder().backend("epoll").build()?;
    /// inner.timer(Duration::from_millis(20), Duration::ZERO, |lp, fired, _| {
    ///     *fired += 1;
    /// })?;
    /// let mut outer: Loop<Outer> = Loop::builder().backend("epoll").build()?;
    /// let e = Embed::new(&mut outer, inner, |outer, st, inner, me| {
    ///     st.runs += 1;
    ///     inner.run(RunMode::NoWait, &mut st.inner_fired).unwrap();
    ///     if inner.active_count() == 0 {
    ///         outer.stop(me).unwrap(); // nothing left in it
    ///     }
    /// })?;
    /// let mut st = Outer::default();
    /// outer.run(RunMode::Default, &mut st)?; // blocks about 20 ms, no io at all
    /// assert_eq!(st.inner_fired, 1);
    /// // (Not `outer.now()`: the outer loop's clock started after the
    /// // inner's, so it may read a little less than the inner's 20 ms.)
    /// assert!(started.elapsed() >= Duration::from_millis(20));
    /// let inner = e.unembed(&mut outer)?; // back, and working
    /// assert_eq!(inner.active_count(), 0);
    /// # }
    /// # Ok::<(), evloop::Error>(())
    /// ```
    pub fn new<'s, S, F>(
        lp: &mut Loop<'s, S>,
        inner: Loop<'static, T>,
        callback: F,
    ) -> Result<Embed<T>>
    where
        F: FnMut(&mut Loop<'s, S>, &mut S, &mut Loop<'static, T>, Embed<T>) + 's,
    {
        let fd = embeddable(lp, &inner)?;
        let (owner, inner_name) = (inner.registry.owner(), inner.backend_name());
        let cb = Box::new(EmbedCallback {
            cb: callback,
            inner: PhantomData,
        });
        let key = lp.create::<Embeds<T>>(rank::EMBED, cb, |embeds, key| {
            embeds.loops.push(Embedded {
                key,
                inner: Some(inner),
                fd,
                owner,
                active: false,
                failed: false,
                refused: None,
            });
        })?;
        let e = Embed::from_slot_key(key);
        // Registered now, so that a refusal (epoll's nesting limit) is
        // this call's error rather than a watcher stopped in `run`.
        lp.materialise_batch();
        lp.flush_fds();
        if !lp.is_active(e)? {
            let reason = match lp.fds.take_refusal(fd) {
                Some(err) => refusal_reason(lp.backend_name(), &err),
                None => format!("the {} backend refused its pollable fd", lp.backend_name()),
            };
            lp.remove(e)?; // (its queued error callback with it)
            return Err(Error::CannotEmbed {
                inner: inner_name,
                outer: lp.backend_name(),
                reason,
            });
        }
        Ok(e)
    }

    /// Whether `inner` could be embedded in this loop ([`Embed::new`]),
    /// without giving it away: `Ok` if its backend has a pollable fd and
    /// this loop's backend can watch it.
    ///
    /// Errors: [`Error::CannotEmbed`], naming both backends and why.
    ///
    /// ```
    /// use evloop::{Embed, Error, Loop, Sim};
    /// # #[cfg(target_os = "linux")]
    /// # {
    /// let inner: Loop = Loop::builder().backend("poll").build()?;
    /// let outer: Loop = Loop::builder().backend("epoll").build()?;
    /// let err = Embed::can_embed(&outer, &inner).unwrap_err();
    /// assert!(matches!(err, Error::CannotEmbed { inner: "poll", outer: "epoll", .. }));
    /// assert!(err.to_string().contains("no kernel object"), "{err}");
    ///
    /// // An epoll loop's fd is an OS descriptor: the simulator cannot watch it.
    /// let inner: Loop = Loop::builder().backend("epoll").build()?;
    /// let sim: Loop = Loop::with_backend(Sim::new().backend());
    /// let err = Embed::can_embed(&sim, &inner).unwrap_err();
    /// assert!(matches!(err, Error::CannotEmbed { inner: "epoll", outer: "sim", .. }));
    /// assert!(Embed::can_embed(&outer, &inner).is_ok());
    /// # }
    /// # Ok::<(), evloop::Error>(())
    /// ```
    pub fn can_embed<S>(lp: &Loop<'_, S>, inner: &Loop<'_, T>) -> Result<()> {
        embeddable(lp, inner).map(|_| ())
    }

    /// The loop that `e` embeds, to look at.
    ///
    /// Errors: [`Error::StaleHandle`] (removed, or unembedded),
    /// [`Error::ForeignHandle`], and [`Error::EmbeddedRunning`] while the
    /// watcher's callback holds it.
    ///
    /// ```
    /// use evloop::{Embed, Loop};
    /// # #[cfg(target_os = "linux")]
    /// # {
    /// let inner: Loop<'static, ()> = Loop::builder().backend("epoll").build()?;
    /// let mut outer: Loop = Loop::builder().backend("epoll").build()?;
    /// let e = Embed::new(&mut outer, inner, |_, _, _, _| {})?;
    /// assert_eq!(e.inner(&outer)?.backend_name(), "epoll");
    /// # }
    /// # Ok::<(), evloop::Error>(())
    /// ```
    pub fn inner<'a, S>(self, lp: &'a Loop<'_, S>) -> Result<&'a Loop<'static, T>> {
        lp.entry(&self)?;
        lp.kind::<Embeds<T>>()
            .and_then(|k| k.of(self.key))
            .ok_or(Error::StaleHandle { kind: "embed" })?
            .inner
            .as_ref()
            .ok_or(Error::EmbeddedRunning)
    }

    /// The loop that `e` embeds, to change between its runs: watchers
    /// started, stopped or removed there are seen by its next run, and
    /// their fds by this loop's next poll (its changes are flushed before
    /// it). Do not call its `reinit_after_fork`: this loop's does.
    ///
    /// Errors: those of [`Embed::inner`].
    ///
    /// ```
    /// use evloop::{Embed, Interest, Loop, RunMode};
    /// # #[cfg(target_os = "linux")]
    /// # {
    /// use std::io::Write;
    /// use std::os::unix::net::UnixStream;
    /// let inner: Loop<'static, Vec<u8>> = Loop::builder().backend("epoll").build()?;
    /// let mut outer: Loop<Vec<u8>> = Loop::builder().backend("epoll").build()?;
    /// let e = Embed::new(&mut outer, inner, |_, got, inner, _| {
    ///     inner.run(RunMode::NoWait, got).unwrap();
    /// })?;
    /// // A watcher started in the embedded loop before it ever ran.
    /// let (a, mut peer) = UnixStream::pair()?;
    /// e.inner_mut(&mut outer)?.io(a, Interest::READABLE, |lp, got, ev| {
    ///     use std::io::Read;
    ///     let mut buf = [0; 8];
    ///     let n = ev.source.read(&mut buf).unwrap();
    ///     got.extend_from_slice(&buf[..n]);
    ///     lp.remove(ev.watcher).unwrap();
    /// })?;
    /// peer.write_all(b"hi")?;
    /// let mut got = Vec::new();
    /// outer.run(RunMode::Once, &mut got)?;
    /// assert_eq!(got, b"hi");
    /// # }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn inner_mut<'a, S>(self, lp: &'a mut Loop<'_, S>) -> Result<&'a mut Loop<'static, T>> {
        lp.entry(&self)?;
        lp.kind_mut::<Embeds<T>>()
            .and_then(|k| k.of_mut(self.key))
            .ok_or(Error::StaleHandle { kind: "embed" })?
            .inner
            .as_mut()
            .ok_or(Error::EmbeddedRunning)
    }

    /// Takes the loop that `e` embeds back, working, and removes the
    /// watcher (its fd unwatched first, its callback dropped; the handle
    /// is stale from then on). A panic in the callback's `Drop` (its
    /// captures) propagates, and drops the loop with it.
    ///
    /// Errors: those of [`Embed::inner`]; nothing changes then.
    ///
    /// ```
    /// use evloop::{Embed, Loop, RunMode, RunOutcome};
    /// # #[cfg(target_os = "linux")]
    /// # {
    /// use std::time::Duration;
    /// let inner: Loop<'static, u32> = Loop::builder().backend("epoll").build()?;
    /// let mut outer: Loop = Loop::builder().backend("epoll").build()?;
    /// let e = Embed::new(&mut outer, inner, |_, _, inner, _| {
    ///     inner.run(RunMode::NoWait, &mut 0).unwrap();
    /// })?;
    /// let mut inner = e.unembed(&mut outer)?;
    /// assert!(e.unembed(&mut outer).is_err()); // stale
    /// inner.timer(Duration::ZERO, Duration::ZERO, |_, n, _| *n += 1)?;
    /// let mut n = 0;
    /// assert_eq!(inner.run(RunMode::Default, &mut n)?, RunOutcome::NoActiveWatchers);
    /// assert_eq!(n, 1);
    /// # }
    /// # Ok::<(), evloop::Error>(())
    /// ```
    pub fn unembed<S>(self, lp: &mut Loop<'_, S>) -> Result<Loop<'static, T>> {
        lp.entry(&self)?;
        let inner = lp
            .kind_mut::<Embeds<T>>()
            .and_then(|k| k.of_mut(self.key))
            .ok_or(Error::StaleHandle { kind: "embed" })?
            .inner
            .take()
            .ok_or(Error::EmbeddedRunning)?;
        // Its record goes with the watcher (empty: the loop is here).
        lp.remove(self)?;
        Ok(inner)
    }
}
