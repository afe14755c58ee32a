//! async/await on the loop: an executor for `!Send` futures, and futures
//! for the watchers (io readiness, sleeps and timeouts, signals, child
//! exits).
//!
//! Tasks run on the loop's thread, in the loop's iteration: the executor
//! is a watcher kind whose watcher is queued in [`Phase::Polled`](crate::Phase::Polled) while
//! tasks are woken, and it polls them in the order they were woken, at
//! most a budget per iteration ([`Executor::set_budget`]). Futures and
//! callbacks mix on one loop: a callback can spawn a task
//! ([`exec::spawn_on`](crate::exec::spawn_on)), a task can wake a callback's watcher
//! through anything the callback watches. Wakers are `Send + Sync`: a
//! wake from another thread wakes the loop through the backend's waker,
//! as an [`AsyncSender`](crate::AsyncSender) does.
//!
//! On WASI (wasm32-wasip1) the executor is single-threaded: the loop's
//! thread is the only one, so every wake is made before the loop's next
//! wait (the wasi backend's waker has nothing to do). [`AsyncFd`] works on a
//! listener the runtime preopened and the sockets accepted from it;
//! [`AsyncFd::bind`] and [`AsyncFd::connect`] return an `Err` of kind
//! `Unsupported` that names WASI (a guest cannot create sockets), as do
//! the signal and child streams (WASI has neither).
//!
//! The futures for the watchers ([`AsyncFd`], [`sleep`], [`timeout`],
//! [`signals`], [`child_exit`], [`child_exits`]) use ordinary watchers,
//! made, re-armed and removed by the executor after each task's poll: a
//! future cannot reach the loop while the loop polls it. Dropping one
//! removes its watcher, so a cancelled future leaves nothing behind.
//!
//! With the `futures` feature, [`AsyncFd`] implements `futures_io`'s
//! `AsyncRead` and `AsyncWrite`, and the signal and child streams
//! `futures_core::Stream`.
//!
//! ```
//! use evloop::exec::{block_on, sleep, spawn_local, AsyncFd};
//! use evloop::{Loop, Sim};
//! use std::time::Duration;
//!
//! // An echo server for one connection, on the simulator.
//! let sim = Sim::new();
//! let conn = sim.socket("client", 1024);
//! let fd = conn.fd();
//! sim.deliver(Duration::from_millis(10), &conn, b"hello");
//! sim.close_peer(Duration::from_millis(20), &conn);
//!
//! let mut lp: Loop = Loop::with_backend(sim.backend());
//! block_on(&mut lp, &mut (), async move {
//!     let conn = AsyncFd::new(conn).unwrap();
//!     let echo = spawn_local(async move {
//!         let mut buf = [0u8; 64];
//!         loop {
//!             match conn.read(&mut buf).await? {
//!                 0 => return Ok::<_, std::io::Error>(()),
//!                 n => conn.write_all(&buf[..n]).await?,
//!             }
//!         }
//!     }).unwrap();
//!     sleep(Duration::from_millis(5)).await;
//!     echo.await.unwrap().unwrap();
//! }).unwrap();
//! assert_eq!(sim.sent(fd), b"hello");
//! assert_eq!(lp.now(), Duration::from_millis(20));
//! ```
//!
//! For a server's graceful shutdown: [`JoinSet`] (the connection tasks,
//! awaited as they finish, aborted on drop), [`Shutdown`] (a signal many
//! tasks await, triggered from any thread) and [`race`] (the first of two
//! futures), shown together in docs/async.md's "Graceful shutdown".
//!
//! `docs/async.md` says when to choose callbacks and when futures.

mod executor;
mod io;
mod join_set;
mod race;
mod reactor;
mod shutdown;
mod streams;
mod time;

pub use executor::{
    block_on, spawn_local, spawn_on, yield_now, Executor, JoinError, JoinHandle, Tasks, YieldNow,
};
pub use io::{AsyncFd, ReadyFuture};
pub use join_set::JoinSet;
pub use race::{race, Either};
pub use shutdown::{Shutdown, Triggered};
pub use streams::{child_exit, child_exits, signals, ChildExits, ChildWait, Exit, Signals};
pub use time::{sleep, sleep_until, timeout, Elapsed, Sleep, Timeout};

#[cfg(feature = "hyper")]
pub mod hyper;
