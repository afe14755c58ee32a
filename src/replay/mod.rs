//! Record a real run, replay it deterministically: a production bug
//! turned into an exact test. `docs/replay.md` is the guide.
//!
//! **Recording.** [`Builder::record`](crate::Builder::record) (a writer)
//! or [`Builder::record_to`](crate::Builder::record_to) (a path) wraps the
//! chosen backend in a [`Recorder`], which writes to a trace everything
//! that enters the loop from outside: each poll's timeout and results,
//! every clock reading (`now`, `wall_now`), signal and child notices,
//! wake-ups, wall-clock steps, file attributes and path hints, the
//! registrations the loop asks for and their results, and the async
//! sends the loop acts on (below). What the program
//! reads, writes, accepts and half-closes is recorded by a layer over
//! its sockets: [`Recorded`] wraps any [`net::Stream`](crate::net::Stream)
//! or [`net::Listener`](crate::net::Listener) (a `Recorded` listener's
//! accepted streams are `Recorded` too), so a server given
//! `Recorded::new(listener)` has every byte of its
//! [`net::Conns`](crate::net::Conns) in the trace; [`fd_io`] (Unix, WASI) is
//! `backends::fd_io` recorded. The recorder and the wrappers meet in a
//! per-thread sink (one thread-local load when nothing records); `net`,
//! `backends::fd_io` and the builder never call into this module. The
//! trace is streamed to
//! the writer in 64 KiB blocks (memory stays bounded) and completed when
//! the loop is dropped; [`flush_recording`] writes out what is buffered.
//!
//! **Replaying.** [`Replay`] reads a trace back. Its backend
//! ([`Replay::backend`]) answers the loop with the recorded polls, times
//! and notices; its sockets ([`Replay::socket`], [`Replay::listener`], and
//! those an acceptor accepts from it) carry the recorded fd numbers and
//! answer reads with the recorded bytes. So the same program, given the
//! replay's sockets instead of real ones, runs its callbacks in the same
//! order, at the same loop times, with the same data. Everything it does
//! is checked against the trace as it goes: each poll's timeout, each
//! registration change (`modify`), each io watcher's fd (`check_fd`),
//! each read's size, each write's bytes, each accept and half-close. The
//! first difference is a [`Divergence`] (the iteration, the fd, the
//! callback running, what the trace has, what the program did): the call
//! fails if it can, `run` returns it as an error at the next poll,
//! [`Replay::divergence`] and [`Replay::finish`] report it, and every
//! later call that can fail fails.
//!
//! **A trace is untrusted input**: whatever its bytes, the decoder and
//! the replay never panic, hang or allocate more than the trace's size
//! justifies (plus a constant); an fd number above 65,536 plus the bytes
//! read so far is refused before it sizes the loop's fd table.
//! `docs/replay.md` ("A trace is untrusted input") has the details.
//!
//! ```
//! use evloop::net::{ConnEvent, ConnOptions, Conns};
//! use evloop::replay::{MemoryTrace, Recorded, Recorder, Replay};
//! use evloop::{Loop, RunMode, Sim};
//! use std::time::Duration;
//!
//! // The program under test: replies "ok" to anything, generic over its
//! // stream (a simulated or real socket when recorded, the replay's when
//! // replayed).
//! fn serve<T: evloop::net::Stream>(lp: &mut Loop<Conns<()>>, conns: &mut Conns<()>, s: T)
//!     -> evloop::Result<()> {
//!     conns.open(lp, s, ConnOptions::new(), (), |lp, conns, id, ev| {
//!         if let ConnEvent::Data = ev {
//!             let c = &mut conns[id];
//!             c.consume(c.input().len());
//!             c.write(lp, b"ok");
//!             c.close(lp);
//!         }
//!     })?;
//!     Ok(())
//! }
//!
//! // Recorded (here on the simulator; on a kernel in docs/replay.md).
//! let sim = Sim::new();
//! let sock = sim.socket("client", 64);
//! sim.deliver(Duration::from_millis(2), &sock, b"hi");
//! let fd = sock.fd();
//! let trace = MemoryTrace::new();
//! {
//!     let rec = Recorder::new(Box::new(sim.backend()), trace.clone())?;
//!     let mut lp = Loop::with_backend(rec);
//!     let mut conns = Conns::new();
//!     serve(&mut lp, &mut conns, Recorded::new(sock))?;
//!     lp.run(RunMode::Default, &mut conns)?;
//! }
//! // Replayed: the same program on the replay's socket of the same fd.
//! let replay = Replay::from_bytes(trace.bytes())?;
//! {
//!     let mut lp = Loop::with_backend(replay.backend());
//!     let mut conns = Conns::new();
//!     serve(&mut lp, &mut conns, replay.socket(fd))?;
//!     lp.run(RunMode::Default, &mut conns)?;
//! }
//! let summary = replay.finish()?;
//! assert_eq!((summary.bytes_read, summary.bytes_written), (2, 2));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # What cannot be replayed
//!
//! - **Reads and writes behind the loop's back**: a `Read` or `Write` on
//!   an unwrapped socket (`TcpStream::read`), a plain `backends::fd_io`
//!   call, a file read, a DNS lookup, are not recorded. On replay the
//!   program's sockets are the replay's, so such a read on one of them
//!   finds no record: a divergence, with a hint saying so (never data
//!   made up). The recording says so where it starts: an io watcher
//!   on an fd that is not a [`Recorded`] socket's is noted in the trace
//!   (and a `tracing` warning names it), the replay's divergence on that
//!   fd says it was unrecorded, and [`ReplaySummary::unrecorded_fds`]
//!   lists such fds. A read through a [`Recorded`] socket (or [`fd_io`])
//!   on a real descriptor during a replay is a divergence too.
//! - **Other threads, beyond their async sends**: the data they hand
//!   over (a channel, shared memory), a task they wake through the
//!   executor (`exec`'s wake-ups are its own queue's, not recorded), a
//!   decision by [`Async::is_sent`](crate::Async::is_sent) or
//!   [`Loop::pending_count`](crate::Loop::pending_count) (they read the
//!   senders' flags as they are). See below for what is recorded.
//! - **Randomness and the environment**: a program that decides by
//!   anything else (random numbers, `SystemTime::now()` read directly,
//!   environment variables) decides differently on replay, and is caught
//!   only where that changes what it asks of the loop or writes.
//! - **Children's pipes**: a spawned child's pid is replayed, its pipes
//!   are not (the replay starts no process; `Spawned` has no pipes).
//! - **Errno values** are the recording OS's: replay on the same OS.
//!
//! # Other threads: async sends
//!
//! The loop acts on other threads' sends to its async watchers at two
//! points, and both are recorded: before a poll, whether something was
//! sent already (the poll then does not block), and after it, which
//! watchers' sends it took, in the order it queues them (each watcher
//! named by its number in the loop: the order in which the loop first
//! started it). A replay answers both from the trace at the same
//! iterations and ignores the senders' flags: the replayed program may
//! leave its threads out, or keep threads that send otherwise; their
//! sends are dropped during a replay (they succeed, and nothing comes of
//! them). The program must create and start its async watchers in the
//! recorded order (a recorded send to a number it has no active async
//! watcher of is a divergence), and its callbacks must not decide by what
//! the threads handed over outside the recording (the trace says *that*
//! a watcher was sent to, not what is in the channel).
//!
//! # The format (version 1)
//!
//! ```text
//! trace   = magic "EVLOOPRC" (8 bytes), version (u16, little-endian: 1),
//!           record*                      (the first one is Begin)
//! record  = tag (1 byte), length (varint), payload (length bytes)
//! varint  = unsigned LEB128, possibly padded (0x85 0x80 0x00 is 5: the
//!           hot records keep fixed offsets); signed numbers (fds,
//!           errnos) zigzag first
//! dur     = seconds (varint), nanoseconds (varint)
//! result  = 0 (ok, then the value if any) | 1, error
//! error   = 0, errno (signed) | 1, kind (1 byte), message (bytes)
//! bytes   = length (varint), the bytes
//!
//! tag  record        payload
//!   1  Begin         backend name (bytes), capabilities: flags (edge 1,
//!                    oneshot 2, virtual fds 4, max fd 8), [max fd],
//!                    hang-up, closed fd, level (1 byte each)
//!   2  Poll          timeout (0 none | 1, dur), then 0 done | 1 stalled,
//!                    event count, (fd, ready bits)* | 2, error
//!   3  Now           dur (the monotonic clock read by the loop)
//!   4  Wall          dur (the wall clock since the epoch)
//!   5  Modify        fd, old interest, new interest (1 byte each), result
//!   6  ModifyAll     count, (fd, old, new)*, 0 | 1, failed index, error
//!   7  CheckFd       fd, result
//!   8  Notices       signal bits, flags (woken 1, clock stepped 2),
//!                    exits (count, (pid, 0 code | 1 signal | 2 signal
//!                    with core | 3 unknown)*), path tokens (count, token*)
//!   9  WatchSignal   signal, result          10  WatchChild     pid, result
//!  11  WatchAnyChild result                  12  SignalChild    pid, signal, result
//!  13  Spawn         program (bytes), 0 pid | 1 error
//!  14  Waker         result                  15  WatchClockSteps  0 | 1
//!  16  Stat          path (bytes), exists, size, 0 | 1 (before the epoch),
//!                    mtime (dur), inode, device, links, mode
//!  17  WatchPath     path (bytes), token, result
//!  18  Reinit        result
//!  19  Async         0 (a send seen before the poll: it does not block)
//!                    | 1, count, watcher number* (the sends taken after
//!                    the poll, in queue order)
//!  20  Unrecorded    fd (a note, not a call: an io watcher started on
//!                    an fd that was not a `Recorded` socket's)
//!  21  Unsent        fd, bytes (the completion I/O's unsent bytes of an
//!                    adopted stream, as its connection's close asked)
//!  32  Read          fd, length asked for, 0 the bytes read | 1 error
//!  33  Write         fd, length offered, 0 the bytes taken | 1 error
//!  34  Accept        listening fd, 0 new fd | 1 error
//!  35  Shutdown      fd, result (a connection's half-close)
//! 255  End           (nothing: the recording loop was dropped)
//! ```
//!
//! A trace without `End` was cut off (the process ended without dropping
//! its loop, or its last block was not written): its replay stops where
//! it ends, and says so.

mod format;
mod layer;
mod play;
mod record;
pub(crate) mod sink;

#[cfg(any(unix, target_os = "wasi"))]
pub use layer::fd_io;
pub use layer::Recorded;
pub use play::{
    Accepted, Divergence, Replay, ReplayBackend, ReplayListener, ReplaySocket, ReplaySummary,
};
pub use record::{flush_recording, MemoryTrace, Recorder};
