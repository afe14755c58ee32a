//! Creating, starting, stopping and changing watchers.

use std::os::fd::{AsRawFd, RawFd};
use std::time::Duration;

use crate::timer_heap::{from_ns, to_ns, NEVER};
use crate::watcher::{
    lookup, lookup_mut, BorrowedIo, Check, Handle, Idle, Io, IoEvent, Kind, OwnedIo, Plain,
    Prepare, Timer,
};
use crate::{
    Error, Interest, Loop, Ready, Result, Source, SourceFd, Trigger, MAX_PRIORITY, MIN_PRIORITY,
};

impl<'s, S> Loop<'s, S> {
    /// Creates and starts an io watcher that owns `source` (any [`AsFd`]
    /// type, or a simulated socket). The source is closed when the watcher
    /// is removed, after the backend has forgotten it, or handed back by
    /// [`Loop::into_source`].
    ///
    /// Several watchers may watch one fd; the backend is told the union of
    /// their interests. Errors: the source kind does not match the backend
    /// (virtual vs OS), the fd is too large (select), the fd cannot be
    /// watched ([`Error::InvalidFd`]: not open, or a regular file or a
    /// directory, which would always be ready), the trigger mode is
    /// unsupported, or it conflicts with another watcher's on the same fd.
    /// On error the source is dropped. Checking the fd costs one `fstat`
    /// per watcher created on the OS backends.
    ///
    /// [`AsFd`]: std::os::fd::AsFd
    ///
    /// ```
    /// use evloop::{Interest, Loop, RunMode, Sim};
    /// use std::io::Write;
    /// let sim = Sim::new();
    /// let mut lp: Loop = Loop::with_backend(sim.backend());
    /// let sock = sim.socket("peer", 64);
    /// let fd = sock.fd();
    /// lp.io(sock, Interest::WRITABLE, |lp, _, ev| {
    ///     ev.source.write_all(b"hello").unwrap();
    ///     lp.remove(ev.watcher).unwrap();
    /// }).unwrap();
    /// lp.run(RunMode::Default, &mut ()).unwrap();
    /// assert_eq!(sim.sent(fd), b"hello");
    /// ```
    pub fn io<T, F>(&mut self, source: T, interest: Interest, callback: F) -> Result<Io>
    where
        T: Source + 'static,
        F: FnMut(&mut Loop<'s, S>, &mut S, IoEvent<'_, T>) + 's,
    {
        self.settle_batch();
        let fd = self.check_source(source.source_fd())?;
        self.check_interest(fd, interest, None)?;
        let cb = Box::new(OwnedIo {
            source,
            cb: callback,
        });
        let key = self.insert(Kind::Io { fd, interest }, cb);
        self.activate(key.idx);
        Ok(Io(key))
    }

    /// Creates and starts an io watcher that borrows `source` for the life
    /// of the loop (`'s`): the compiler keeps the source open, and in place,
    /// for as long as the loop may use it.
    ///
    /// ```
    /// use evloop::{Interest, Loop, RunMode, Sim};
    /// use std::io::Read;
    /// use std::time::Duration;
    /// let sim = Sim::new();
    /// let sock = sim.socket("s", 0);
    /// sim.deliver(Duration::ZERO, &sock, b"x");
    /// {
    ///     let mut lp: Loop<usize> = Loop::with_backend(sim.backend());
    ///     lp.io_borrowed(&sock, Interest::READABLE, |lp, n, ev| {
    ///         let mut buf = [0; 4];
    ///         *n += ev.source.read(&mut buf).unwrap();
    ///         lp.stop(ev.watcher).unwrap();
    ///     }).unwrap();
    ///     let mut n = 0;
    ///     lp.run(RunMode::Default, &mut n).unwrap();
    ///     assert_eq!(n, 1);
    /// }
    /// drop(sock); // allowed only once the loop is gone
    /// ```
    pub fn io_borrowed<T, F>(
        &mut self,
        source: &'s T,
        interest: Interest,
        callback: F,
    ) -> Result<Io>
    where
        T: Source + ?Sized,
        F: FnMut(&mut Loop<'s, S>, &mut S, IoEvent<'_, &'s T>) + 's,
    {
        self.settle_batch();
        let fd = self.check_source(source.source_fd())?;
        self.check_interest(fd, interest, None)?;
        let cb = Box::new(BorrowedIo {
            source,
            cb: callback,
        });
        let key = self.insert(Kind::Io { fd, interest }, cb);
        self.activate(key.idx);
        Ok(Io(key))
    }

    /// Creates and starts a timer that fires `after` from the loop time
    /// ([`Loop::now`]) and then every `repeat` (zero: once). A one-shot
    /// timer is stopped before its callback runs.
    ///
    /// The loop's clock counts nanoseconds in a `u64` from the backend's
    /// origin, about 584 years; a deadline beyond that (`Duration::MAX`,
    /// say) never comes: the timer stays active but never fires, and a
    /// repeating timer that would be rescheduled past it is parked there.
    ///
    /// ```
    /// use evloop::{Loop, RunMode, Sim};
    /// use std::time::Duration;
    /// let mut lp: Loop<Vec<u64>> = Loop::with_backend(Sim::new().backend());
    /// lp.timer(Duration::from_millis(20), Duration::ZERO, |lp, log, _| {
    ///     log.push(lp.now().as_millis() as u64)
    /// }).unwrap();
    /// lp.timer(Duration::from_millis(10), Duration::ZERO, |lp, log, _| {
    ///     log.push(lp.now().as_millis() as u64)
    /// }).unwrap();
    /// let mut log = vec![];
    /// lp.run(RunMode::Default, &mut log).unwrap();
    /// assert_eq!(log, [10, 20]);
    /// ```
    pub fn timer<F>(&mut self, after: Duration, repeat: Duration, callback: F) -> Result<Timer>
    where
        F: FnMut(&mut Loop<'s, S>, &mut S, Timer) + 's,
    {
        let kind = Kind::Timer {
            after: to_ns(after),
            repeat: to_ns(repeat),
        };
        let key = self.insert(kind, Box::new(Plain::<Timer, F>::new(callback)));
        self.activate(key.idx);
        Ok(Timer(key))
    }

    /// Creates and starts an idle watcher, for work to do when the loop has
    /// nothing more urgent; while one is active the loop never blocks.
    ///
    /// libev's rule decides which idle watchers run in an iteration: those
    /// of the highest priority that has any, and only if no io event,
    /// expired timer or other callback is pending at that priority or
    /// above (the iteration's check watchers aside). So a priority-2 idle
    /// watcher runs even while priority-0 work is pending, a priority -1
    /// one waits until everything above it is done, and one priority level
    /// runs per iteration.
    ///
    /// ```
    /// use evloop::{Loop, RunMode, Sim};
    /// let mut lp: Loop<u32> = Loop::with_backend(Sim::new().backend());
    /// lp.idle(|lp, n, me| { *n += 1; if *n == 3 { lp.stop(me).unwrap(); } }).unwrap();
    /// let mut n = 0;
    /// lp.run(RunMode::Default, &mut n).unwrap();
    /// assert_eq!(n, 3);
    /// ```
    pub fn idle<F>(&mut self, callback: F) -> Result<Idle>
    where
        F: FnMut(&mut Loop<'s, S>, &mut S, Idle) + 's,
    {
        let key = self.insert(Kind::Idle, Box::new(Plain::<Idle, F>::new(callback)));
        self.activate(key.idx);
        Ok(Idle(key))
    }

    /// Creates and starts a prepare watcher: invoked at the start of every
    /// iteration, before fd changes reach the backend and before blocking.
    ///
    /// ```
    /// use evloop::{Loop, RunMode, Sim};
    /// let mut lp: Loop<u32> = Loop::with_backend(Sim::new().backend());
    /// lp.prepare(|lp, n, me| { *n += 1; lp.remove(me).unwrap(); }).unwrap();
    /// let mut n = 0;
    /// lp.run(RunMode::Default, &mut n).unwrap();
    /// assert_eq!(n, 1);
    /// ```
    pub fn prepare<F>(&mut self, callback: F) -> Result<Prepare>
    where
        F: FnMut(&mut Loop<'s, S>, &mut S, Prepare) + 's,
    {
        let key = self.insert(Kind::Prepare, Box::new(Plain::<Prepare, F>::new(callback)));
        self.activate(key.idx);
        Ok(Prepare(key))
    }

    /// Creates and starts a check watcher: queued after every poll, after
    /// that iteration's io events and before its expired timers and idle
    /// watchers; within one priority it runs in that order (libuv's and
    /// Node's: `setImmediate` before `setTimeout(0)`).
    ///
    /// ```
    /// use evloop::{Loop, RunMode, Sim};
    /// let mut lp: Loop<u32> = Loop::with_backend(Sim::new().backend());
    /// lp.check(|lp, n, me| { *n += 1; lp.remove(me).unwrap(); }).unwrap();
    /// let mut n = 0;
    /// lp.run(RunMode::NoWait, &mut n).unwrap();
    /// assert_eq!(n, 1);
    /// ```
    pub fn check<F>(&mut self, callback: F) -> Result<Check>
    where
        F: FnMut(&mut Loop<'s, S>, &mut S, Check) + 's,
    {
        let key = self.insert(Kind::Check, Box::new(Plain::<Check, F>::new(callback)));
        self.activate(key.idx);
        Ok(Check(key))
    }

    /// Starts a stopped watcher (no effect if it is active). A timer starts
    /// counting its `after` delay from [`Loop::now`].
    ///
    /// ```
    /// # use evloop::{Loop, Sim};
    /// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    /// let idle = lp.idle(|_, _, _| {}).unwrap();
    /// lp.stop(idle).unwrap();
    /// lp.start(idle).unwrap();
    /// assert!(lp.is_active(idle).unwrap());
    /// ```
    pub fn start(&mut self, h: impl Handle) -> Result<()> {
        self.settle_for(&h);
        let e = lookup(&self.watchers, &h)?;
        if e.active {
            return Ok(());
        }
        if let Kind::Io { fd, interest } = e.kind {
            self.check_interest(fd, interest, None)?;
        }
        self.activate(h.key().idx);
        Ok(())
    }

    /// Stops a watcher: it leaves the backend, heap or list, and a pending
    /// invocation is cancelled: after `stop` its callback is not called
    /// (until it is started again, or fed an event).
    ///
    /// ```
    /// use evloop::{Loop, RunMode, Sim};
    /// use std::time::Duration;
    /// let mut lp: Loop<u32> = Loop::with_backend(Sim::new().backend());
    /// let late = lp.timer(Duration::from_millis(5), Duration::ZERO, |_, n, _| *n += 1).unwrap();
    /// let stopper = lp.timer(Duration::from_millis(5), Duration::ZERO, move |lp, _, _| {
    ///     lp.stop(late).unwrap(); // `late` is already pending in this iteration
    /// }).unwrap();
    /// lp.set_priority(stopper, 1).unwrap(); // so that it runs first
    /// let mut n = 0;
    /// lp.run(RunMode::Default, &mut n).unwrap();
    /// assert_eq!(n, 0);
    /// ```
    pub fn stop(&mut self, h: impl Handle) -> Result<()> {
        // No need to settle a direct batch (io_batch.rs): it finds an fd's
        // watchers when it reaches the fd, so a stopped one is skipped just
        // as its cancelled entry would have been.
        lookup(&self.watchers, &h)?;
        let idx = h.key().idx;
        self.cancel_pending(idx);
        self.deactivate(idx);
        Ok(())
    }

    /// Stops and removes a watcher; its handle becomes stale. An owned io
    /// source is deregistered from the backend right away (so a new fd with
    /// the same number starts clean) and then closed. Removing a watcher
    /// from inside its own callback is allowed.
    ///
    /// ```
    /// # use evloop::{Loop, Sim, Error};
    /// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    /// let idle = lp.idle(|_, _, _| {}).unwrap();
    /// lp.remove(idle).unwrap();
    /// assert!(matches!(lp.remove(idle), Err(Error::StaleHandle { kind: "idle" })));
    /// ```
    pub fn remove(&mut self, h: impl Handle) -> Result<()> {
        self.stop(h)?;
        let e = self.watchers.remove(h.key().idx);
        if let Kind::Io { fd, .. } = e.kind {
            self.forget_fd_if_unwatched(fd);
        }
        drop(e);
        Ok(())
    }

    /// Removes an io watcher and hands back the source it owned. Fails with
    /// [`Error::SourceType`] (the watcher is kept) if `T` is not the source's
    /// type or the source was borrowed, and with [`Error::Busy`] from inside
    /// the watcher's own callback.
    ///
    /// ```
    /// use evloop::{Interest, Loop, Sim, SimSocket};
    /// let sim = Sim::new();
    /// let mut lp: Loop = Loop::with_backend(sim.backend());
    /// let io = lp.io(sim.socket("a", 0), Interest::READABLE, |_, _, _| {}).unwrap();
    /// let sock: SimSocket = lp.into_source(io).unwrap();
    /// assert_eq!(sock.name(), "a");
    /// ```
    pub fn into_source<T: 'static>(&mut self, io: Io) -> Result<T> {
        let e = lookup(&self.watchers, &io)?;
        match &e.cb {
            None => return Err(Error::Busy),
            Some(cb) if cb.owned_type() == Some(std::any::TypeId::of::<T>()) => {}
            Some(_) => return Err(Error::SourceType),
        }
        self.stop(io)?;
        let e = self.watchers.remove(io.0.idx);
        if let Kind::Io { fd, .. } = e.kind {
            self.forget_fd_if_unwatched(fd);
        }
        let Some(cb) = e.cb else {
            unreachable!("checked above")
        };
        let any = cb.into_source().ok_or(Error::SourceType)?;
        any.downcast::<T>()
            .map(|b| *b)
            .map_err(|_| Error::SourceType)
    }

    /// Whether the watcher is active (started and not stopped).
    ///
    /// ```
    /// # use evloop::{Loop, Sim};
    /// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    /// let c = lp.check(|_, _, _| {}).unwrap();
    /// assert!(lp.is_active(c).unwrap());
    /// ```
    pub fn is_active(&self, h: impl Handle) -> Result<bool> {
        Ok(lookup(&self.watchers, &h)?.active)
    }

    /// Whether the watcher has an invocation queued.
    ///
    /// ```
    /// # use evloop::{Loop, Ready, Sim};
    /// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    /// let c = lp.check(|_, _, _| {}).unwrap();
    /// lp.feed_event(c, Ready::EMPTY).unwrap();
    /// assert!(lp.is_pending(c).unwrap());
    /// ```
    pub fn is_pending(&self, h: impl Handle) -> Result<bool> {
        let e = lookup(&self.watchers, &h)?;
        // An io event not yet queued because it is dispatched directly
        // (io_batch.rs) is pending all the same.
        let in_batch = match e.kind {
            Kind::Io { fd, .. } if e.active => self.batch_holds(fd, e.io_mask),
            _ => false,
        };
        Ok(e.is_queued() || e.deferred.is_some() || in_batch)
    }

    /// Sets the priority, from [`MIN_PRIORITY`] to [`MAX_PRIORITY`]
    /// (default 0). Higher priorities are invoked first within an iteration.
    /// A pending invocation moves to the end of its new priority's queue.
    ///
    /// ```
    /// # use evloop::{Loop, Sim, Error};
    /// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    /// let c = lp.check(|_, _, _| {}).unwrap();
    /// lp.set_priority(c, 2).unwrap();
    /// assert_eq!(lp.priority(c).unwrap(), 2);
    /// assert!(matches!(lp.set_priority(c, 3), Err(Error::InvalidPriority(3))));
    /// ```
    pub fn set_priority(&mut self, h: impl Handle, priority: i32) -> Result<()> {
        self.settle_for(&h);
        if !(MIN_PRIORITY..=MAX_PRIORITY).contains(&priority) {
            return Err(Error::InvalidPriority(priority));
        }
        let queue = (priority - MIN_PRIORITY) as u8;
        let e = lookup_mut(&mut self.watchers, &h)?;
        if e.queue == queue {
            return Ok(());
        }
        let blocked_before = e.active && e.blocks_direct_dispatch();
        let old_queue = std::mem::replace(&mut e.queue, queue);
        let blocks_now = e.active && e.blocks_direct_dispatch();
        let moves_idle_list = e.active && matches!(e.kind, Kind::Idle);
        self.recount_blocking_direct(blocked_before, blocks_now);
        let idx = h.key().idx;
        if moves_idle_list {
            // Idle watchers are listed by priority (the idle rule).
            self.idles[old_queue as usize].remove(&mut self.watchers, idx);
            self.idles[queue as usize].push(&mut self.watchers, idx);
        }
        let e = &mut self.watchers[idx];
        if let Some(slot) = e.take_pending() {
            let ready = self.pending.cancel(old_queue, slot);
            self.queue(h.key().idx, ready);
        }
        Ok(())
    }

    /// The watcher's priority.
    ///
    /// ```
    /// # use evloop::{Loop, Sim};
    /// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    /// let c = lp.check(|_, _, _| {}).unwrap();
    /// assert_eq!(lp.priority(c).unwrap(), 0);
    /// ```
    pub fn priority(&self, h: impl Handle) -> Result<i32> {
        Ok(lookup(&self.watchers, &h)?.queue as i32 + MIN_PRIORITY)
    }

    /// Whether an active watcher keeps [`RunMode::Default`](crate::RunMode)
    /// running (default true). An unreferenced watcher still works, but the
    /// loop may return while it is active: libuv's `uv_unref`, and libev's
    /// idiom of `ev_unref` after starting a watcher.
    ///
    /// ```
    /// use evloop::{Loop, RunMode, RunOutcome, Sim};
    /// use std::time::Duration;
    /// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    /// let t = lp.timer(Duration::from_secs(60), Duration::ZERO, |_, _, _| {}).unwrap();
    /// lp.set_ref(t, false).unwrap();
    /// assert_eq!(lp.run(RunMode::Default, &mut ()).unwrap(), RunOutcome::NoActiveWatchers);
    /// ```
    pub fn set_ref(&mut self, h: impl Handle, referenced: bool) -> Result<()> {
        let e = lookup_mut(&mut self.watchers, &h)?;
        if e.keepalive != referenced {
            e.keepalive = referenced;
            if e.active {
                if referenced {
                    self.active_refs += 1;
                } else {
                    self.active_refs -= 1;
                }
            }
        }
        Ok(())
    }

    /// Queues an invocation of the watcher as if the event had happened
    /// (libev's `ev_feed_event`); the callback runs in this iteration's
    /// invoke phase, or the next one's.
    ///
    /// ```
    /// use evloop::{Interest, Loop, Ready, RunMode, Sim};
    /// let sim = Sim::new();
    /// let mut lp: Loop<Vec<String>> = Loop::with_backend(sim.backend());
    /// let io = lp.io(sim.socket("s", 0), Interest::READABLE, |lp, log, ev| {
    ///     log.push(ev.ready.to_string());
    ///     lp.remove(ev.watcher).unwrap();
    /// }).unwrap();
    /// lp.feed_event(io, Ready::READABLE).unwrap();
    /// let mut log = vec![];
    /// lp.run(RunMode::Default, &mut log).unwrap();
    /// assert_eq!(log, ["r"]);
    /// ```
    pub fn feed_event(&mut self, h: impl Handle, ready: Ready) -> Result<()> {
        self.settle_for(&h);
        lookup(&self.watchers, &h)?;
        self.queue(h.key().idx, ready);
        Ok(())
    }

    /// Changes what an io watcher waits for; takes effect before the next
    /// poll (one backend call for all changes to the fd in this iteration).
    ///
    /// ```
    /// # use evloop::{Interest, Loop, Sim};
    /// let sim = Sim::new();
    /// let mut lp: Loop = Loop::with_backend(sim.backend());
    /// let io = lp.io(sim.socket("s", 0), Interest::READABLE, |_, _, _| {}).unwrap();
    /// lp.set_interest(io, Interest::BOTH).unwrap();
    /// assert_eq!(lp.interest(io).unwrap(), Interest::BOTH);
    /// ```
    pub fn set_interest(&mut self, io: Io, interest: Interest) -> Result<()> {
        self.settle_batch();
        let e = lookup(&self.watchers, &io)?;
        let (Kind::Io { fd, interest: old }, active) = (&e.kind, e.active) else {
            unreachable!("io handle to a non-io watcher")
        };
        let fd = *fd;
        if *old == interest {
            return Ok(());
        }
        self.check_interest(fd, interest, Some(io.0.idx))?;
        let e = &mut self.watchers[io.0.idx];
        let blocked_before = active && e.blocks_direct_dispatch();
        if let Kind::Io { interest: i, .. } = &mut e.kind {
            *i = interest;
        }
        e.io_mask = Ready::receive_mask(interest);
        let blocks_now = active && e.blocks_direct_dispatch();
        self.recount_blocking_direct(blocked_before, blocks_now);
        if active {
            self.fds.get_mut(fd).set_trigger(interest.trigger());
            self.fds.mark_changed(fd);
        }
        // An event queued (or deferred) before the change carries what the
        // old interest let through: deliver only what the new one does.
        let mask = Ready::receive_mask(interest);
        let e = &mut self.watchers[io.0.idx];
        if let Some(held) = e.deferred {
            e.deferred = Some(held & mask).filter(|r| !r.is_empty());
            if e.deferred.is_none() {
                self.deferred_count -= 1;
            }
        }
        if e.is_queued() {
            if (self.pending.get(e.queue, e.pending) & mask).is_empty() {
                let slot = e.pending;
                e.pending = crate::pending::NOT_PENDING;
                self.pending.cancel(e.queue, slot);
            } else {
                self.pending.restrict(e.queue, e.pending, mask);
            }
        }
        Ok(())
    }

    /// What an io watcher waits for.
    ///
    /// ```
    /// # use evloop::{Interest, Loop, Sim};
    /// let sim = Sim::new();
    /// let mut lp: Loop = Loop::with_backend(sim.backend());
    /// let io = lp.io(sim.socket("s", 0), Interest::WRITABLE, |_, _, _| {}).unwrap();
    /// assert_eq!(lp.interest(io).unwrap(), Interest::WRITABLE);
    /// ```
    pub fn interest(&self, io: Io) -> Result<Interest> {
        match lookup(&self.watchers, &io)?.kind {
            Kind::Io { interest, .. } => Ok(interest),
            _ => unreachable!("io handle to a non-io watcher"),
        }
    }

    /// The fd an io watcher watches.
    ///
    /// ```
    /// # use evloop::{Interest, Loop, Sim};
    /// let sim = Sim::new();
    /// let mut lp: Loop = Loop::with_backend(sim.backend());
    /// let sock = sim.socket("s", 0);
    /// let fd = sock.fd();
    /// let io = lp.io(sock, Interest::READABLE, |_, _, _| {}).unwrap();
    /// assert_eq!(lp.fd(io).unwrap(), fd);
    /// ```
    pub fn fd(&self, io: Io) -> Result<RawFd> {
        match lookup(&self.watchers, &io)?.kind {
            Kind::Io { fd, .. } => Ok(fd),
            _ => unreachable!("io handle to a non-io watcher"),
        }
    }

    /// Changes a timer's delay and period. An active timer is restarted with
    /// the new values from [`Loop::now`]; a stopped one keeps them for its
    /// next [`Loop::start`].
    ///
    /// ```
    /// # use evloop::{Loop, Sim};
    /// # use std::time::Duration;
    /// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    /// let t = lp.timer(Duration::from_secs(1), Duration::ZERO, |_, _, _| {}).unwrap();
    /// lp.set_timer(t, Duration::from_secs(5), Duration::from_secs(1)).unwrap();
    /// assert_eq!(lp.remaining(t).unwrap(), Duration::from_secs(5));
    /// ```
    pub fn set_timer(&mut self, t: Timer, after: Duration, repeat: Duration) -> Result<()> {
        let e = lookup_mut(&mut self.watchers, &t)?;
        let active = e.active;
        if let Kind::Timer {
            after: a,
            repeat: r,
            ..
        } = &mut e.kind
        {
            *a = to_ns(after);
            *r = to_ns(repeat);
        }
        if active {
            self.deactivate(t.0.idx);
            self.activate(t.0.idx);
        }
        Ok(())
    }

    /// libev's `ev_timer_again`: a repeating timer is (re)started to fire
    /// `repeat` from now, whether it was active or not; a timer without a
    /// period is stopped. The classic use is an inactivity timeout that is
    /// pushed back on every read, in O(log n) and without allocation.
    ///
    /// ```
    /// use evloop::{Loop, Sim};
    /// use std::time::Duration;
    /// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    /// let t = lp.timer(Duration::ZERO, Duration::from_secs(30), |_, _, _| {}).unwrap();
    /// lp.again(t).unwrap();
    /// assert_eq!(lp.remaining(t).unwrap(), Duration::from_secs(30));
    /// ```
    #[inline]
    pub fn again(&mut self, t: Timer) -> Result<()> {
        let e = lookup(&self.watchers, &t)?;
        let (Kind::Timer { repeat, .. }, active) = (&e.kind, e.active) else {
            unreachable!("timer handle to a non-timer")
        };
        let repeat = *repeat;
        let idx = t.0.idx;
        if e.is_queued() || e.deferred.is_some() {
            self.cancel_pending(idx);
        }
        if repeat == 0 {
            self.deactivate(idx);
            return Ok(());
        }
        self.timer_seq += 1;
        let at = self.now_ns.saturating_add(repeat);
        if active {
            self.timers.reschedule(idx, at, self.timer_seq);
        } else {
            let e = &mut self.watchers[idx];
            e.active = true;
            if e.keepalive {
                self.active_refs += 1;
            }
            self.timers.insert(idx, at, self.timer_seq);
        }
        Ok(())
    }

    /// Time until an active timer fires (zero if it is due or inactive),
    /// relative to [`Loop::now`]; `Duration::MAX` if it never will (its
    /// deadline lies beyond the end of the loop's clock, about 584 years
    /// after the backend's origin).
    ///
    /// ```
    /// use evloop::{Loop, Sim};
    /// use std::time::Duration;
    /// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    /// let t = lp.timer(Duration::from_millis(1500), Duration::ZERO, |_, _, _| {}).unwrap();
    /// assert_eq!(lp.remaining(t).unwrap(), Duration::from_millis(1500));
    /// lp.stop(t).unwrap();
    /// assert_eq!(lp.remaining(t).unwrap(), Duration::ZERO);
    /// ```
    pub fn remaining(&self, t: Timer) -> Result<Duration> {
        let e = lookup(&self.watchers, &t)?;
        if !e.active {
            return Ok(Duration::ZERO);
        }
        match self.timers.expiry(t.0.idx) {
            // Beyond the end of the clock: it never fires.
            NEVER => Ok(Duration::MAX),
            at => Ok(from_ns(at.saturating_sub(self.now_ns))),
        }
    }

    /// Cancels the watcher's queued invocation, if any, and returns the
    /// events it carried (libev's `ev_clear_pending`); the watcher stays
    /// active.
    ///
    /// ```
    /// use evloop::{Loop, Ready, Sim};
    /// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    /// let c = lp.check(|_, _, _| {}).unwrap();
    /// lp.feed_event(c, Ready::READABLE).unwrap();
    /// assert_eq!(lp.clear_pending(c).unwrap(), Ready::READABLE);
    /// assert_eq!(lp.pending_count(), 0);
    /// assert!(lp.is_active(c).unwrap());
    /// ```
    pub fn clear_pending(&mut self, h: impl Handle) -> Result<Ready> {
        self.settle_for(&h);
        lookup(&self.watchers, &h)?;
        Ok(self.cancel_pending(h.key().idx))
    }

    /// Cancels a queued invocation of `idx`, if any.
    fn cancel_pending(&mut self, idx: u32) -> Ready {
        let e = &mut self.watchers[idx];
        let deferred = match e.deferred.take() {
            Some(ready) => {
                self.deferred_count -= 1;
                ready
            }
            None => Ready::EMPTY,
        };
        match e.take_pending() {
            Some(slot) => self.pending.cancel(e.queue, slot) | deferred,
            None => deferred,
        }
    }

    /// Validates a source against the backend and returns its fd number.
    fn check_source(&self, src: SourceFd<'_>) -> Result<RawFd> {
        let backend = self.backend.name();
        let fd = match src {
            SourceFd::Os(fd) if !self.caps.virtual_fds => fd.as_raw_fd(),
            SourceFd::Virtual(v) if self.caps.virtual_fds => v.get(),
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
        if fd < 0 {
            return Err(Error::InvalidFd {
                fd,
                reason: "negative descriptor number".into(),
            });
        }
        if let Some(max) = self.caps.max_fd {
            if fd > max {
                return Err(Error::FdTooLarge { fd, max, backend });
            }
        }
        // Closed, or never watchable (a regular file): say so now, at the
        // call that caused it, not later as a silent ERROR callback.
        self.backend.check_fd(fd).map_err(|err| Error::InvalidFd {
            fd,
            reason: err.to_string(),
        })?;
        Ok(fd)
    }

    /// Checks that the backend offers the trigger mode and that it agrees
    /// with the other active watchers on the fd (`except` excluded).
    fn check_interest(&self, fd: RawFd, interest: Interest, except: Option<u32>) -> Result<()> {
        let trigger = interest.trigger();
        if trigger == Trigger::Edge && !self.caps.edge {
            return Err(Error::UnsupportedTrigger {
                trigger,
                backend: self.backend.name(),
            });
        }
        // The fd's watchers share one mode, so the fd records it: O(1),
        // however many watchers the fd has.
        if let Some(anfd) = self.fds.get(fd) {
            if let Some(existing) = anfd.trigger() {
                let only_except = except.is_some() && anfd.watchers().only() == except;
                if existing != trigger && !only_except {
                    return Err(Error::TriggerConflict {
                        fd,
                        existing,
                        requested: trigger,
                    });
                }
            }
        }
        Ok(())
    }

    /// After an io watcher is removed: if no active watcher is left on its
    /// fd, tell the backend now, before the source is closed and its number
    /// can be reused (mio asks its users to do this by hand).
    fn forget_fd_if_unwatched(&mut self, fd: RawFd) {
        let anfd = self.fds.get_mut(fd);
        if anfd.watchers().is_empty() && anfd.registered != Interest::NONE {
            let old = std::mem::replace(&mut anfd.registered, Interest::NONE);
            if let Err(err) = self.backend.modify(fd, old, Interest::NONE) {
                tracing::debug!(fd, %err, "backend failed to forget a removed fd");
            }
        }
    }
}
