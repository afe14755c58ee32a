//! Cleanup watchers, as a [`Kind`]: run once when the loop is dropped
//! ([`Kind::dropping`]; `Drop for Loop` in loop_controls.rs runs them),
//! never keeping `run` going; the handle, the callback adaptor and the
//! `Loop` methods.

use std::collections::HashMap;

use crate::event_loop::Dispatch;
use crate::handle::{handle, Key};
use crate::kind::{Context, Kind, Watcher};
use crate::kinds::rank;
use crate::slot_list::{Slot, SlotList};
use crate::{Loop, Ready, Result};

/// The active cleanup watchers, in start order.
#[derive(Default)]
pub(crate) struct Cleanups {
    list: SlotList,
    /// Their keys, for `dropping`.
    keys: HashMap<Slot, Key>,
}

impl Kind for Cleanups {
    const NAME: &'static str = "cleanup";
    const PRODUCES_EVENTS: bool = false;
    const KEEPS_ALIVE: bool = false;

    fn start(&mut self, cx: &mut Context<'_>, w: Watcher<Self>) -> Result<bool> {
        self.list.push(cx.links(), w.slot());
        self.keys.insert(w.slot(), w.key());
        Ok(true)
    }

    fn stop(&mut self, cx: &mut Context<'_>, w: Watcher<Self>) {
        self.list.remove(cx.links(), w.slot());
        self.keys.remove(&w.slot());
    }

    /// The first active one: the loop stops it, runs it and asks again,
    /// so that one a cleanup callback starts runs too (after the others)
    /// and one it stops does not run.
    fn dropping(&mut self, _: &mut Context<'_>, run: &mut Vec<Watcher<Self>>) {
        run.extend(
            self.list
                .first()
                .and_then(|slot| self.keys.get(&slot))
                .map(|&key| Watcher::new(key)),
        );
    }
}

handle!(
    /// Handle to a cleanup watcher, returned by [`Cleanup::new`].
    ///
    /// ```
    /// use evloop::{Cleanup, Loop, Sim};
    /// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    /// let c = Cleanup::new(&mut lp, |_| {}).unwrap();
    /// lp.stop(c).unwrap(); // it will not run
    /// ```
    Cleanup,
    "cleanup",
    false
);

/// A cleanup callback, stored as a [`Dispatch`]: run at most once.
struct CleanupCallback<F>(Option<F>);

impl<'s, S, F> Dispatch<'s, S> for CleanupCallback<F>
where
    F: FnOnce(&mut Loop<'s, S>),
{
    /// Fed an event: it runs now, and not again.
    fn call(
        &mut self,
        lp: &mut Loop<'s, S>,
        _state: &mut S,
        _slot: Slot,
        _version: u32,
        _ready: Ready,
    ) {
        if let Some(f) = self.0.take() {
            f(lp)
        }
    }
    fn cleanup(mut self: Box<Self>, lp: &mut Loop<'s, S>) {
        if let Some(f) = self.0.take() {
            f(lp)
        }
    }
}

impl Cleanup {
    /// Creates and starts a cleanup watcher: its callback runs once, when
    /// the loop is dropped, with the loop (the user state is not at hand
    /// then), before any watcher or source is dropped: the place to stop
    /// what the loop owns in an orderly way (libev's `ev_cleanup`). A
    /// cleanup watcher never keeps `run` going. Cleanup watchers run in
    /// start order; one stopped is not run. One that panics does not keep
    /// the others from running, nor the async watchers' senders from being
    /// closed: its panic propagates from the drop of the loop once they
    /// have.
    ///
    /// ```
    /// use evloop::{Cleanup, Loop, RunMode, RunOutcome, Sim};
    /// use std::rc::Rc;
    /// use std::cell::Cell;
    /// let ran = Rc::new(Cell::new(false));
    /// let seen = ran.clone();
    /// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    /// Cleanup::new(&mut lp, move |_| seen.set(true)).unwrap();
    /// assert_eq!(lp.run(RunMode::Default, &mut ()).unwrap(), RunOutcome::NoActiveWatchers);
    /// assert!(!ran.get());
    /// drop(lp);
    /// assert!(ran.get());
    /// ```
    pub fn new<'s, S, F>(lp: &mut Loop<'s, S>, callback: F) -> Result<Cleanup>
    where
        F: FnOnce(&mut Loop<'s, S>) + 's,
    {
        let cb = Box::new(CleanupCallback(Some(callback)));
        let key = lp.create::<Cleanups>(rank::CLEANUP, cb, |_, _| {})?;
        Ok(Cleanup(key))
    }

    /// Replaces a cleanup watcher's callback (libev's `ev_set_cb`); the
    /// watcher keeps its place in the start order. The old callback is
    /// dropped unrun (after the new one is in place). Errors: a stale or
    /// foreign handle.
    ///
    /// ```
    /// use evloop::{Cleanup, Loop, Sim};
    /// use std::cell::RefCell;
    /// use std::rc::Rc;
    /// let log = Rc::new(RefCell::new(vec![]));
    /// let (first, second) = (log.clone(), log.clone());
    /// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    /// let c = Cleanup::new(&mut lp, move |_| first.borrow_mut().push("first")).unwrap();
    /// c.set_callback(&mut lp, move |_| second.borrow_mut().push("second")).unwrap();
    /// drop(lp);
    /// assert_eq!(*log.borrow(), ["second"]);
    /// ```
    pub fn set_callback<'s, S, F>(self, lp: &mut Loop<'s, S>, callback: F) -> Result<()>
    where
        F: FnOnce(&mut Loop<'s, S>) + 's,
    {
        lp.entry_mut(&self)?;
        let cb = Box::new(CleanupCallback(Some(callback)));
        lp.replace_callback(self.0.slot, cb);
        Ok(())
    }
}
