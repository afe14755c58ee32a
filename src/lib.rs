//! # evloop
//!
//! A libev-style event loop in safe Rust: io, timer, idle, prepare and check
//! watchers with five priorities; fd-change batching; per-priority FIFO
//! pending queues; a 4-ary timer heap; libev's iteration phases and run
//! modes; pluggable backends, including a deterministic simulator.
//!
//! ```
//! use evloop::{Interest, Loop, RunMode, RunOutcome, Sim};
//! use std::io::{Read, Write};
//! use std::time::Duration;
//!
//! // An echo handler, run on the simulator.
//! let sim = Sim::new();
//! let conn = sim.socket("client", 1024);
//! let fd = conn.fd();
//! sim.deliver(Duration::from_millis(10), &conn, b"hello");
//! sim.close_peer(Duration::from_millis(20), &conn);
//!
//! let mut lp: Loop = Loop::with_backend(sim.backend());
//! lp.io(conn, Interest::READABLE, |lp, _, ev| {
//!     let mut buf = [0u8; 64];
//!     match ev.source.read(&mut buf) {
//!         Ok(0) => lp.remove(ev.watcher).unwrap(), // EOF
//!         Ok(n) => { ev.source.write_all(&buf[..n]).unwrap(); }
//!         Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock),
//!     }
//! }).unwrap();
//! assert_eq!(lp.run(RunMode::Default, &mut ()).unwrap(), RunOutcome::NoActiveWatchers);
//! assert_eq!(sim.sent(fd), b"hello");
//! assert_eq!(lp.now(), Duration::from_millis(20));
//! ```
//!
//! The crate root holds what a user of the watcher API needs. Writing or
//! driving a backend takes [`backend`] (the [`Backend`](backend::Backend)
//! trait and its types); the crate's backends, and the simulator's
//! inspection types ([`Step`](backends::sim::Step) of its trace, ...), are
//! in [`backends`].
//!
//! **Features.** By default only the core compiles: the loop, its watcher
//! kinds, the OS backends and the simulator. The products beside it are
//! features: `exec` (an executor on the loop: tasks, sleeps, async
//! sockets), `net` (TCP server helpers: buffered connections, an
//! acceptor), `replay` (record a run, replay it deterministically; takes
//! `net`), `futures` and `hyper` (the executor's futures-io and hyper
//! glue; take `exec`), `io-uring` (Linux) and `conformance` (the kit for
//! backend authors).
//!
//! See `docs/architecture.md` for how it works inside.
#![deny(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]

pub mod backend;
mod builder;
mod direct_batch;
mod dispatch;
mod error;
mod event_loop;
#[cfg(feature = "exec")]
#[cfg_attr(docsrs, doc(cfg(feature = "exec")))]
pub mod exec;
mod fd_table;
mod feeds;
mod handle;
mod hooks;
mod interest;
mod kind;
mod kinds;
mod loop_controls;
#[cfg(feature = "net")]
#[cfg_attr(docsrs, doc(cfg(feature = "net")))]
pub mod net;
mod pending;
#[cfg(any(unix, target_os = "wasi"))]
mod pollable;
mod registry;
#[cfg(feature = "replay")]
#[cfg_attr(docsrs, doc(cfg(feature = "replay")))]
pub mod replay;
mod run_state;
mod services;
mod settled;
mod slot_list;
mod source;
mod timer_heap;
mod timers;
mod unwind;
mod watchers;

#[path = "../backends/mod.rs"]
pub mod backends;

// The conformance kit: test code for backend authors, published behind a
// feature. In `backends/` because its fixture needs unsafe code (pipes,
// fds closed behind the loop's back, signals, fork).
#[cfg(all(any(unix, windows), feature = "conformance"))]
#[cfg_attr(docsrs, doc(cfg(feature = "conformance")))]
#[path = "../backends/conformance/mod.rs"]
pub mod conformance;

pub use backend::{Capabilities, ExitStatus, FileStat, Spawned};
pub use backends::sim::{Sim, SimSocket};
pub use builder::Builder;
pub use error::{Error, Result};
pub use event_loop::Loop;
pub use handle::Handle;
pub use interest::{Interest, Ready, Trigger};
pub use kind::{Context, Kind, Phase, Phases, Watcher};
pub use kinds::asyncs::{Async, AsyncSender};
pub use kinds::child::{Child, ChildEvent};
pub use kinds::cleanup::Cleanup;
#[cfg(any(unix, target_os = "wasi"))]
pub use kinds::embed::Embed;
pub use kinds::once::{Once, OnceEvent};
pub use kinds::periodic::{Periodic, Schedule};
pub use kinds::phase_hooks::{Check, Fork, Idle, Prepare};
pub use kinds::signal::Signal;
pub use kinds::stat::{Stat, StatEvent};
pub use pending::{MAX_PRIORITY, MIN_PRIORITY};
#[cfg(any(unix, target_os = "wasi"))]
pub use pollable::{NotPollable, PollableLoop};
pub use run_state::{Break, RunMode, RunOutcome};
pub use source::{RawFd, Source, SourceFd, VirtualFd};
pub use watchers::io::{Io, IoEvent};
pub use watchers::timer::Timer;
pub use watchers::Callback;

/// The README and every page of `docs/`, compiled and run as doc tests:
/// each Rust block in them compiles (and runs, unless it is `no_run`,
/// because it would serve for ever); the other blocks are tagged (`sh`,
/// `text`, `toml`). `tests/docs_blocks.rs` fails when a page is missing
/// here or a block is tagged `ignore` (but one shown `from:` a file that
/// a test crate of its own builds: docs/recipes.md's tokio driver).
#[cfg(doctest)]
pub mod doc_pages {
    #[doc = include_str!("../README.md")]
    pub struct Readme;
    #[doc = include_str!("../docs/architecture.md")]
    pub struct Architecture;
    #[cfg(feature = "exec")]
    #[doc = include_str!("../docs/async.md")]
    pub struct AsyncGuide;
    #[doc = include_str!("../docs/backends.md")]
    pub struct Backends;
    #[doc = include_str!("../docs/benchmarks.md")]
    pub struct Benchmarks;
    #[doc = include_str!("../docs/porting.md")]
    pub struct Porting;
    #[doc = include_str!("../docs/recipes.md")]
    pub struct Recipes;
    #[cfg(feature = "replay")]
    #[doc = include_str!("../docs/replay.md")]
    pub struct ReplayGuide;
    #[cfg(feature = "net")]
    #[doc = include_str!("../docs/servers.md")]
    pub struct Servers;
}
