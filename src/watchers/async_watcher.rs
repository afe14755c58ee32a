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
    /// use evloop::{Loop, Sim};
    /// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    /// let (a, _sender) = lp.async_watcher(|_, _, _| {}).unwrap();
    /// let another = lp.async_sender(a).unwrap();
    /// another.send().unwrap();
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
    /// use evloop::{Loop, RunMode, Sim};
    /// let mut lp: Loop<u32> = Loop::with_backend(Sim::new().backend());
    /// let (_, sender) = lp.async_watcher(|lp, n, me| {
    ///     *n += 1;
    ///     lp.remove(me).unwrap(); // done: the loop has nothing left
    /// })?;
    /// std::thread::spawn(move || sender.send().unwrap()).join().unwrap();
    /// let mut n = 0;
    /// lp.run(RunMode::Default, &mut n)?;
    /// assert_eq!(n, 1);
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

    /// Another sender for an async watcher.
    ///
    /// ```
    /// # use evloop::{Loop, Sim};
    /// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    /// let (a, _) = lp.async_watcher(|_, _, _| {}).unwrap();
    /// assert!(lp.async_sender(a).is_ok());
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
