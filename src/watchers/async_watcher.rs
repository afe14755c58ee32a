//! Async watchers: the handle and the `Loop` methods. The flags, the
//! sender and the wake-up protocol are the async component's (asyncs.rs).

use crate::asyncs::AsyncSender;
use crate::handle::handle;
use crate::registry::Kind;
use crate::watchers::plain::Plain;
use crate::{Error, Loop, Result};

handle!(
    /// Handle to an async watcher, returned by [`Loop::async_watcher`].
    ///
    /// ```
    /// use evloop::Loop;
    /// let mut lp: Loop = Loop::new()?;
    /// let (a, _sender) = lp.async_watcher(|_, _, _| {})?;
    /// let another = lp.async_sender(a)?;
    /// another.send()?;
    /// # Ok::<(), evloop::Error>(())
    /// ```
    Async,
    "async",
    false
);

impl<'s, S> Loop<'s, S> {
    /// Creates and starts an async watcher, and a sender that other threads
    /// use to make the loop run its callback ([`AsyncSender::send`]): the
    /// loop's way to be woken from outside (libev's `ev_async`). A loop may
    /// have any number of them; they share one wake-up of the backend,
    /// written only while the loop waits.
    ///
    /// Sends made before the callback runs coalesce into one call; a send
    /// made once it has started is followed by another call.
    ///
    /// Errors: [`Error::Backend`] if the backend cannot be woken from
    /// another thread.
    ///
    /// ```
    /// use evloop::{Loop, RunMode};
    /// use std::sync::mpsc;
    /// let (results, done) = mpsc::channel();
    /// let mut lp: Loop<Vec<u64>> = Loop::new()?;
    /// let (_, sender) = lp.async_watcher(move |lp, got, me| {
    ///     got.extend(done.try_iter()); // what the worker has sent so far
    ///     if got.len() == 3 {
    ///         lp.remove(me).unwrap(); // all in: the loop has nothing left
    ///     }
    /// })?;
    /// // A worker thread hands its results over while the loop waits.
    /// let worker = std::thread::spawn(move || {
    ///     for n in 1..=3u64 {
    ///         results.send(n * n).unwrap();
    ///         // Wakes the loop. Once it has all three, it removes the
    ///         // watcher, maybe before the last send: that one then fails.
    ///         sender.send().ok();
    ///     }
    /// });
    /// let mut got = vec![];
    /// lp.run(RunMode::Default, &mut got)?;
    /// assert_eq!(got, [1, 4, 9]);
    /// worker.join().unwrap();
    /// # Ok::<(), evloop::Error>(())
    /// ```
    pub fn async_watcher<F>(&mut self, callback: F) -> Result<(Async, AsyncSender)>
    where
        F: FnMut(&mut Loop<'s, S>, &mut S, Async) + 's,
    {
        if !self.asyncs.has_waker() {
            let backend = self.backend.name();
            let waker = self.backend.waker().map_err(|source| Error::Backend {
                backend,
                op: "provide a waker",
                source,
            })?;
            self.asyncs.set_waker(waker);
        }
        let key = self
            .watchers
            .insert(Kind::Async, Plain::<Async, F>::boxed(callback));
        let flag = self.asyncs.create(key.slot);
        self.activate(key.slot);
        Ok((Async(key), AsyncSender::new(flag)))
    }

    /// Whether the async watcher was sent to and the loop has not taken
    /// the send yet (libev's `ev_async_pending`): true from a send until
    /// the loop, after its next poll, queues the callback; false for a
    /// stopped watcher, whose sends are dropped. [`Loop::is_pending`]
    /// says whether the callback is due at all: sent, or queued.
    ///
    /// ```
    /// use evloop::{Loop, RunMode};
    /// let mut lp: Loop<Vec<(bool, bool)>> = Loop::new()?;
    /// let (a, sender) = lp.async_watcher(|lp, seen, me| {
    ///     // Queued, then called: the send was taken.
    ///     seen.push((lp.async_pending(me).unwrap(), lp.is_pending(me).unwrap()));
    ///     lp.remove(me).unwrap();
    /// })?;
    /// assert!(!lp.async_pending(a)?);
    /// std::thread::spawn(move || sender.send().unwrap()).join().unwrap();
    /// assert!(lp.async_pending(a)? && lp.is_pending(a)?);
    /// let mut seen = vec![];
    /// lp.run(RunMode::Default, &mut seen)?;
    /// assert_eq!(seen, [(false, false)]);
    /// # Ok::<(), evloop::Error>(())
    /// ```
    pub fn async_pending(&self, a: Async) -> Result<bool> {
        let active = self.entry(&a)?.is_active();
        Ok(active && self.asyncs.is_sent(a.0.slot))
    }

    /// Another sender for an async watcher.
    ///
    /// ```
    /// # use evloop::Loop;
    /// let mut lp: Loop = Loop::new()?;
    /// let (a, _) = lp.async_watcher(|_, _, _| {})?;
    /// assert!(lp.async_sender(a).is_ok());
    /// lp.remove(a)?;
    /// assert!(lp.async_sender(a).is_err()); // a stale handle
    /// # Ok::<(), evloop::Error>(())
    /// ```
    pub fn async_sender(&self, a: Async) -> Result<AsyncSender> {
        self.entry(&a)?;
        let flag = self
            .asyncs
            .flag(a.0.slot)
            .expect("an async watcher has a flag");
        Ok(AsyncSender::new(flag))
    }
}
