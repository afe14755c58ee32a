//! The callback adaptor of every kind whose callback receives only its
//! own handle (timer, idle, prepare, check).

use std::marker::PhantomData;

use crate::event_loop::Dispatch;
use crate::handle::sealed::Sealed;
use crate::slot_list::Slot;
use crate::{Loop, Ready};

/// A callback `FnMut(&mut Loop, &mut S, H)`, stored as a [`Dispatch`].
pub(crate) struct Plain<H, F> {
    cb: F,
    handle: PhantomData<fn() -> H>,
}

impl<H, F> Plain<H, F> {
    pub fn boxed(cb: F) -> Box<Self> {
        Box::new(Plain {
            cb,
            handle: PhantomData,
        })
    }
}

impl<'s, S, H, F> Dispatch<'s, S> for Plain<H, F>
where
    H: Sealed,
    F: FnMut(&mut Loop<'s, S>, &mut S, H),
{
    #[inline]
    fn call(
        &mut self,
        lp: &mut Loop<'s, S>,
        state: &mut S,
        slot: Slot,
        version: u32,
        _ready: Ready,
    ) {
        let key = lp.registry.key(slot, version);
        (self.cb)(lp, state, H::from_key(key))
    }
}

/// A callback `FnMut(&mut Loop, &mut S, Watcher<K>, Ready)`: what a watcher
/// of a kind from outside the crate stores ([`Loop::watcher`]).
pub(crate) struct Raw<K, F> {
    cb: F,
    kind: PhantomData<fn() -> K>,
}

impl<K, F> Raw<K, F> {
    pub fn boxed(cb: F) -> Box<Self> {
        Box::new(Raw {
            cb,
            kind: PhantomData,
        })
    }
}

impl<'s, S, K, F> Dispatch<'s, S> for Raw<K, F>
where
    K: crate::Kind,
    F: FnMut(&mut Loop<'s, S>, &mut S, crate::Watcher<K>, Ready),
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
        (self.cb)(lp, state, crate::Watcher::new(key), ready)
    }
}
