//! Io watchers: the handle, what a callback receives ([`IoEvent`]), the
//! callback adaptors that own or borrow the source, and the `Loop`
//! methods. Per-fd state, the flush to the backend and the queuing of poll
//! results are the io component, fd_table.rs.

use crate::slot_list::Slot;
use crate::RawFd;
use std::any::{Any, TypeId};

use crate::event_loop::{BoxedCallback, Dispatch};
use crate::handle::{handle, Key};
use crate::registry::{Entry, Role};
use crate::{Error, Interest, Loop, Ready, Result, Source, SourceFd};

handle!(
    /// Handle to an io watcher, returned by [`Loop::io`] and
    /// [`Io::borrowed`].
    ///
    /// ```
    /// use evloop::{Interest, Loop, Sim};
    /// let sim = Sim::new();
    /// let mut lp: Loop = Loop::with_backend(sim.backend());
    /// let io = lp.io(sim.socket("a", 0), Interest::READABLE, |_, _, _| {}).unwrap();
    /// assert_eq!(io.interest(&lp).unwrap(), Interest::READABLE);
    /// ```
    Io,
    "io",
    true
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

/// An io callback that owns its source (handed back by `into_source`).
struct OwnedIo<T, F> {
    source: T,
    cb: F,
}

impl<'s, S, T, F> Dispatch<'s, S> for OwnedIo<T, F>
where
    T: Source + 'static,
    F: FnMut(&mut Loop<'s, S>, &mut S, IoEvent<'_, T>),
{
    #[inline]
    fn call(
        &mut self,
        lp: &mut Loop<'s, S>,
        state: &mut S,
        slot: Slot,
        version: u32,
        ready: Ready,
    ) {
        let key = lp.registry.key(slot, version);
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
    fn give_source(
        self: Box<Self>,
        into: &mut crate::registry::CallbackState<BoxedCallback<'s, S>>,
        make: &mut dyn FnMut(Box<dyn Any>) -> BoxedCallback<'s, S>,
    ) {
        let OwnedIo { source, cb } = *self;
        into.store(make(Box::new(source)));
        drop(cb);
    }
}

/// An io callback that borrows its source for the loop's lifetime.
struct BorrowedIo<'s, T: ?Sized, F> {
    source: &'s T,
    cb: F,
}

impl<'s, S, T, F> Dispatch<'s, S> for BorrowedIo<'s, T, F>
where
    T: Source + ?Sized,
    F: FnMut(&mut Loop<'s, S>, &mut S, IoEvent<'_, &'s T>),
{
    #[inline]
    fn call(
        &mut self,
        lp: &mut Loop<'s, S>,
        state: &mut S,
        slot: Slot,
        version: u32,
        ready: Ready,
    ) {
        let key = lp.registry.key(slot, version);
        let ev = IoEvent {
            watcher: Io(key),
            ready,
            source: &mut self.source,
        };
        (self.cb)(lp, state, ev)
    }
    fn borrows_source(&self) -> bool {
        true
    }
}

/// The fd of an io watcher's entry (an io handle names nothing else).
fn fd_of<C>(e: &Entry<C>) -> RawFd {
    match e.role() {
        Role::Io { fd, .. } => fd,
        _ => unreachable!("an io handle names an io watcher"),
    }
}

impl<'s, S> Loop<'s, S> {
    /// Creates and starts an io watcher that owns `source` (any `AsFd`
    /// type on Unix, any `AsSocket` type on Windows, or a simulated
    /// socket: a [`Source`](crate::Source)). The source is closed when the watcher
    /// is removed, after the backend has forgotten it, or handed back by
    /// [`Io::into_source`].
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
        let fd = self.check_source(source.source_fd())?;
        self.check_interest(fd, interest, None)?;
        let cb = Box::new(OwnedIo {
            source,
            cb: callback,
        });
        Ok(Io(self.new_io(fd, interest, cb)))
    }

    /// Registers and starts a checked io watcher.
    pub(crate) fn new_io(
        &mut self,
        fd: RawFd,
        interest: Interest,
        cb: crate::event_loop::BoxedCallback<'s, S>,
    ) -> Key {
        // A new watcher on an fd: a direct batch must not skip it.
        self.materialise_batch();
        let key = self.registry.insert(Role::Io { fd, interest }, cb);
        // `Loop::activate`, with the kind at hand.
        self.registry.activate(key.slot);
        self.fds
            .start(&mut self.registry, fd, key.slot, interest.trigger());
        key
    }

    /// Validates a source against the backend and returns its fd number.
    pub(crate) fn check_source(&mut self, src: SourceFd<'_>) -> Result<RawFd> {
        let (name, caps) = (self.backend.name(), self.caps);
        crate::fd_table::check_source(name, &caps, src, |fd| {
            crate::services::check_fd(&mut *self.backend, &mut self.notifier, caps.virtual_fds, fd)
        })
    }
}

impl Io {
    /// Creates and starts an io watcher that borrows `source` for the life
    /// of the loop (`'s`): the compiler keeps the source open, and in place,
    /// for as long as the loop may use it.
    ///
    /// ```
    /// use evloop::{Interest, Io, Loop, RunMode, Sim};
    /// use std::io::Read;
    /// use std::time::Duration;
    /// let sim = Sim::new();
    /// let sock = sim.socket("s", 0);
    /// sim.deliver(Duration::ZERO, &sock, b"x");
    /// {
    ///     let mut lp: Loop<usize> = Loop::with_backend(sim.backend());
    ///     Io::borrowed(&mut lp, &sock, Interest::READABLE, |lp, n, ev| {
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
    pub fn borrowed<'s, S, T, F>(
        lp: &mut Loop<'s, S>,
        source: &'s T,
        interest: Interest,
        callback: F,
    ) -> Result<Io>
    where
        T: Source + ?Sized,
        F: FnMut(&mut Loop<'s, S>, &mut S, IoEvent<'_, &'s T>) + 's,
    {
        let fd = lp.check_source(source.source_fd())?;
        lp.check_interest(fd, interest, None)?;
        let cb = Box::new(BorrowedIo {
            source,
            cb: callback,
        });
        Ok(Io(lp.new_io(fd, interest, cb)))
    }

    /// Replaces the callback of an io watcher that borrows its source
    /// ([`Io::borrowed`]; libev's `ev_set_cb`): the new callback
    /// borrows `source`, which must be the watcher's (the same fd). The
    /// watcher keeps its state, as with [`Io::set_callback`].
    ///
    /// Errors, the watcher unchanged: [`Error::SourceType`] if the watcher
    /// owns its source; [`Error::InvalidFd`] if `source` is not on the
    /// watcher's fd; [`Error::Busy`] from inside the watcher's own
    /// callback; a stale or foreign handle.
    ///
    /// ```
    /// use evloop::{Interest, Io, Loop, RunMode, Sim, SimSocket};
    /// use std::io::Read;
    /// use std::time::Duration;
    /// let sim = Sim::new();
    /// let sock = sim.socket("s", 0);
    /// sim.deliver(Duration::from_millis(1), &sock, b"hi");
    /// let mut lp: Loop<usize> = Loop::with_backend(sim.backend());
    /// let io = Io::borrowed(&mut lp, &sock, Interest::READABLE, |_, _, _| unreachable!()).unwrap();
    /// io.set_borrowed_callback(&mut lp, &sock, |lp, n, ev| {
    ///     let mut buf = [0; 8];
    ///     *n += ev.source.read(&mut buf).unwrap();
    ///     lp.remove(ev.watcher).unwrap();
    /// }).unwrap();
    /// let mut n = 0;
    /// lp.run(RunMode::Default, &mut n).unwrap();
    /// assert_eq!(n, 2);
    /// # drop(lp);
    /// ```
    pub fn set_borrowed_callback<'s, S, T, F>(
        self,
        lp: &mut Loop<'s, S>,
        source: &'s T,
        callback: F,
    ) -> Result<()>
    where
        T: Source + ?Sized,
        F: FnMut(&mut Loop<'s, S>, &mut S, IoEvent<'_, &'s T>) + 's,
    {
        let e = lp.entry_mut(&self)?;
        let watched = fd_of(e);
        match e.cb.stored() {
            None => return Err(Error::Busy),
            Some(cb) if cb.borrows_source() => {}
            Some(_) => return Err(Error::SourceType),
        }
        let fd = lp.check_source(source.source_fd())?;
        if fd != watched {
            return Err(Error::InvalidFd {
                fd,
                reason: format!(
                    "the self watcher watches fd {watched}: its new callback must borrow the source it watches"
                ),
            });
        }
        let cb = Box::new(BorrowedIo {
            source,
            cb: callback,
        });
        lp.replace_callback(self.0.slot, cb);
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
    /// let sock: SimSocket = io.into_source(&mut lp).unwrap();
    /// assert_eq!(sock.name(), "a");
    /// ```
    pub fn into_source<T: 'static, S>(self, lp: &mut Loop<'_, S>) -> Result<T> {
        let e = lp.entry(&self)?;
        match e.cb.stored() {
            None => return Err(Error::Busy),
            Some(cb) if cb.owned_type() == Some(TypeId::of::<T>()) => {}
            Some(_) => return Err(Error::SourceType),
        }
        lp.stop(self)?;
        let mut e = lp.registry.remove(self.0.slot);
        let mut held = crate::unwind::Held::default();
        lp.removed(self.0, e.role(), &mut held);
        held.resume(); // (an self watcher holds nothing there)
        let Some(cb) = e.cb.take_to_run() else {
            unreachable!("checked above")
        };
        let any = cb.into_source().ok_or(Error::SourceType)?;
        any.downcast::<T>()
            .map(|b| *b)
            .map_err(|_| Error::SourceType)
    }

    /// Replaces the callback of an io watcher that owns its source
    /// ([`Loop::io`]; libev's `ev_set_cb`): the new callback gets the same
    /// source, of type `T`, and the watcher keeps its state (active or
    /// not, interest, priority, a pending event). The old callback is
    /// dropped once the new one holds the source; a panic in that drop
    /// propagates with the watcher whole.
    ///
    /// Errors, the watcher unchanged: [`Error::SourceType`] if `T` is not
    /// the source's type or the source is borrowed
    /// ([`Io::set_borrowed_callback`] is for those);
    /// [`Error::Busy`] from inside the watcher's own callback, which holds
    /// the source while it runs; a stale or foreign handle.
    ///
    /// ```
    /// use evloop::{Interest, Loop, RunMode, Sim, SimSocket};
    /// use std::io::Read;
    /// use std::time::Duration;
    /// let sim = Sim::new();
    /// let sock = sim.socket("s", 0);
    /// sim.deliver(Duration::from_millis(1), &sock, b"hello");
    /// let mut lp: Loop<Vec<u8>> = Loop::with_backend(sim.backend());
    /// let io = lp.io(sock, Interest::READABLE, |_, _, _| unreachable!()).unwrap();
    /// io.set_callback(&mut lp, |lp, got, ev: evloop::IoEvent<'_, SimSocket>| {
    ///     let mut buf = [0; 8];
    ///     let n = ev.source.read(&mut buf).unwrap();
    ///     got.extend_from_slice(&buf[..n]);
    ///     lp.remove(ev.watcher).unwrap();
    /// }).unwrap();
    /// let mut got = vec![];
    /// lp.run(RunMode::Default, &mut got).unwrap();
    /// assert_eq!(got, b"hello");
    /// ```
    pub fn set_callback<'s, S, T, F>(self, lp: &mut Loop<'s, S>, callback: F) -> Result<()>
    where
        T: Source + 'static,
        F: FnMut(&mut Loop<'s, S>, &mut S, IoEvent<'_, T>) + 's,
    {
        let e = lp.entry_mut(&self)?;
        match e.cb.stored() {
            None => return Err(Error::Busy),
            Some(cb) if cb.owned_type() == Some(TypeId::of::<T>()) => {}
            Some(_) => return Err(Error::SourceType),
        }
        let Some(old) = e.cb.take_to_run() else {
            unreachable!("checked above")
        };
        let mut callback = Some(callback);
        let mut make = |source: Box<dyn Any>| -> BoxedCallback<'s, S> {
            let Ok(source) = source.downcast::<T>() else {
                unreachable!("the source's type was checked")
            };
            let Some(cb) = callback.take() else {
                unreachable!("one new callback")
            };
            Box::new(OwnedIo {
                source: *source,
                cb,
            })
        };
        old.give_source(&mut lp.registry[self.0.slot].cb, &mut make);
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
    /// io.set_interest(&mut lp, Interest::BOTH).unwrap();
    /// assert_eq!(io.interest(&lp).unwrap(), Interest::BOTH);
    /// ```
    pub fn set_interest<S>(self, lp: &mut Loop<'_, S>, interest: Interest) -> Result<()> {
        let e = lp.entry_mut(&self)?;
        let (fd, active) = (fd_of(e), e.is_active());
        if e.interest() == interest {
            return Ok(());
        }
        let slot = self.0.slot;
        lp.check_interest(fd, interest, Some(slot))?;
        lp.registry.set_interest(slot, interest);
        if active {
            lp.fds.interest_changed(fd, interest);
        }
        // An event queued (or deferred) before the change carries what the
        // old interest let through: deliver only what the new one does.
        let mask = Ready::receive_mask(interest);
        lp.registry.restrict_deferred(slot, mask);
        let e = &mut lp.registry[slot];
        if let Some(pos) = e.pending {
            if (lp.pending.get(e.priority(), pos) & mask).is_empty() {
                e.pending = None;
                lp.pending.cancel(e.priority(), pos);
            } else {
                lp.pending.restrict(e.priority(), pos, mask);
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
    /// assert_eq!(io.interest(&lp).unwrap(), Interest::WRITABLE);
    /// ```
    pub fn interest<S>(self, lp: &Loop<'_, S>) -> Result<Interest> {
        Ok(lp.entry(&self)?.interest())
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
    /// assert_eq!(io.fd(&lp).unwrap(), fd);
    /// ```
    pub fn fd<S>(self, lp: &Loop<'_, S>) -> Result<RawFd> {
        Ok(fd_of(lp.entry(&self)?))
    }
}
