//! `race`: the first of two futures to finish, without futures-util.

use std::future::Future;
use std::pin::pin;
use std::task::Poll;

/// One of two values: which future of a [`race`] finished first.
///
/// ```
/// use evloop::exec::Either;
/// let e: Either<u8, &str> = Either::Right("two");
/// assert_eq!(e, Either::Right("two"));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Either<L, R> {
    /// The first future's value.
    Left(L),
    /// The second future's value.
    Right(R),
}

/// Waits for whichever of `left` and `right` finishes first, and drops
/// the other (with what it holds: a `Sleep`'s timer, an `accept`'s
/// waiter). Each wake-up polls `left` first, then `right`: when both are
/// ready, `left` wins, so put the one that must win (a shutdown signal)
/// there. Neither future is boxed. futures-util's `select` does the same
/// on any executor; this one is in the default build.
///
/// ```
/// use evloop::exec::{block_on, race, sleep, Either};
/// use evloop::{Loop, Sim};
/// use std::time::Duration;
///
/// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
/// let won = block_on(&mut lp, &mut (), async {
///     let slow = async { sleep(Duration::from_secs(5)).await; "slow" };
///     let fast = async { sleep(Duration::from_secs(1)).await; 1 };
///     race(slow, fast).await
/// }).unwrap();
/// assert_eq!(won, Either::Right(1));
/// assert_eq!(lp.now(), Duration::from_secs(1));
/// assert_eq!(lp.active_count(), 0); // the slow sleep's timer went with it
/// ```
pub async fn race<A: Future, B: Future>(left: A, right: B) -> Either<A::Output, B::Output> {
    let mut left = pin!(left);
    let mut right = pin!(right);
    std::future::poll_fn(move |cx| {
        if let Poll::Ready(v) = left.as_mut().poll(cx) {
            return Poll::Ready(Either::Left(v));
        }
        if let Poll::Ready(v) = right.as_mut().poll(cx) {
            return Poll::Ready(Either::Right(v));
        }
        Poll::Pending
    })
    .await
}
