//! libevent's `bench.c` workload, shared by the demo, the criterion
//! benchmarks and the callgrind measurement (included with `#[path]`).
//!
//! `pairs` socket pairs, each with a read watcher on one end. `active`
//! chains are started by writing one byte into evenly spaced pairs; each
//! callback reads its byte and, while writes remain, writes one byte into
//! the next pair, so `active` bytes hop around the ring until `writes`
//! writes have been made. With `timers`, every callback also pushes back a
//! per-pair inactivity timer (`Timer::again`), the classic libev pattern.
//! Every read and write is one syscall, as in bench.c.

#![allow(dead_code)]

use std::io::{ErrorKind, Read, Write};
#[cfg(unix)]
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

/// One end of an OS socket pair: a Unix socket held as a plain `OwnedFd`
/// (see [`ChainIo`]); on Windows, which has no socket pairs, a connected
/// loopback TCP stream.
#[cfg(unix)]
pub type OsSock = std::os::fd::OwnedFd;
/// One end of an OS socket pair (see the Unix definition).
#[cfg(windows)]
pub type OsSock = std::net::TcpStream;

/// A connected, non-blocking pair of OS sockets.
#[cfg(unix)]
fn os_pair() -> (OsSock, OsSock) {
    let (r, w) = UnixStream::pair().expect("socketpair (raise RLIMIT_NOFILE?)");
    r.set_nonblocking(true).unwrap();
    w.set_nonblocking(true).unwrap();
    (OsSock::from(r), OsSock::from(w))
}

/// A connected, non-blocking pair of OS sockets: loopback TCP, with
/// Nagle's delay off (each hop is one byte).
#[cfg(windows)]
fn os_pair() -> (OsSock, OsSock) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let w = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (r, _) = l.accept().unwrap();
    for s in [&r, &w] {
        s.set_nonblocking(true).unwrap();
        s.set_nodelay(true).unwrap();
    }
    (r, w)
}

use evloop::{Break, Builder, Interest, Loop, RunMode, Sim, SimSocket, Source, Timer, Trigger};

/// Shape of one run.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    pub pairs: usize,
    pub active: usize,
    pub writes: usize,
    pub timers: bool,
    /// How the read watchers are triggered: level (bench.c), edge, or
    /// one-shot, re-armed by `Loop::start` in every callback.
    pub trigger: Trigger,
}

/// Per-run state handed to every callback.
pub struct State<W> {
    writers: Vec<W>,
    timers: Vec<Timer>,
    writes_left: usize,
    fired: usize,
    target: usize,
}

/// The result of one run.
#[derive(Clone, Copy, Debug)]
pub struct Outcome {
    /// Io callbacks invoked (one per byte read).
    pub events: usize,
    /// Wall time of the run (setup excluded).
    pub elapsed: Duration,
}

/// A prepared workload: loop, watchers and write ends, ready to run
/// repeatedly.
pub struct Bench<'s, W> {
    pub lp: Loop<'s, State<W>>,
    state: State<W>,
    shape: Shape,
}

/// How a callback moves its byte: one `read(2)`/`write(2)` on OS sockets
/// (`evloop::backends::fd_io`, as bench.c calls them), `Read`/`Write` on
/// simulated ones.
pub trait ChainIo {
    fn read_byte(&mut self) -> std::io::Result<usize>;
    fn write_byte(&mut self) -> std::io::Result<usize>;
}

/// The OS sockets are held as plain `OwnedFd`s: their `as_fd` inlines,
/// where `UnixStream::as_fd` is an out-of-line call into `std`.
#[cfg(unix)]
impl ChainIo for std::os::fd::OwnedFd {
    #[inline]
    fn read_byte(&mut self) -> std::io::Result<usize> {
        evloop::backends::fd_io::read(&*self, &mut [0u8; 1])
    }
    #[inline]
    fn write_byte(&mut self) -> std::io::Result<usize> {
        evloop::backends::fd_io::write(&*self, b"e")
    }
}

#[cfg(windows)]
impl ChainIo for std::net::TcpStream {
    fn read_byte(&mut self) -> std::io::Result<usize> {
        self.read(&mut [0u8; 1])
    }
    fn write_byte(&mut self) -> std::io::Result<usize> {
        self.write(b"e")
    }
}

impl ChainIo for SimSocket {
    fn read_byte(&mut self) -> std::io::Result<usize> {
        self.read(&mut [0u8; 1])
    }
    fn write_byte(&mut self) -> std::io::Result<usize> {
        self.write(b"e")
    }
}

/// `REARM`: the watcher is one-shot, re-armed first thing (a constant, so
/// that the other shapes pay nothing for it).
fn on_readable<R: ChainIo, W: ChainIo, const REARM: bool>(
    next: usize,
    timer: Option<Timer>,
) -> impl FnMut(&mut Loop<'_, State<W>>, &mut State<W>, evloop::IoEvent<'_, R>) {
    move |lp, st, ev| {
        if REARM {
            lp.start(ev.watcher).unwrap();
        }
        match ev.source.read_byte() {
            Ok(1) => {}
            Ok(_) => return,
            Err(e) if e.kind() == ErrorKind::WouldBlock => return,
            Err(e) => panic!("read: {e}"),
        }
        st.fired += 1;
        if let Some(t) = timer {
            t.again(lp).unwrap();
        }
        if st.writes_left > 0 {
            st.writes_left -= 1;
            let n = st.writers[next].write_byte().expect("write");
            assert_eq!(n, 1, "a socket pair with room takes one byte");
        }
        if st.fired == st.target {
            lp.break_loop(Break::All);
        }
    }
}

impl<'s, W: ChainIo + 's> Bench<'s, W> {
    fn build<R: Source + ChainIo + 'static>(
        mut lp: Loop<'s, State<W>>,
        ends: Vec<(R, W)>,
        shape: Shape,
    ) -> evloop::Result<Self> {
        let mut writers = Vec::with_capacity(shape.pairs);
        let mut timers = Vec::new();
        for (i, (reader, writer)) in ends.into_iter().enumerate() {
            writers.push(writer);
            let timer = if shape.timers {
                let t = lp.timer(Duration::ZERO, Duration::from_secs(60), |_, _, _| {})?;
                t.again(&mut lp)?;
                lp.set_ref(t, false)?;
                timers.push(t);
                Some(t)
            } else {
                None
            };
            let next = (i + 1) % shape.pairs;
            let interest = Interest::READABLE.with_trigger(shape.trigger);
            if shape.trigger == Trigger::Oneshot {
                lp.io(reader, interest, on_readable::<R, W, true>(next, timer))?;
            } else {
                lp.io(reader, interest, on_readable::<R, W, false>(next, timer))?;
            }
        }
        let state = State {
            writers,
            timers,
            writes_left: 0,
            fired: 0,
            target: 0,
        };
        Ok(Bench { lp, state, shape })
    }

    /// One run: prime `active` chains, run until every byte was read.
    pub fn run(&mut self) -> Outcome {
        let Shape {
            pairs,
            active,
            writes,
            ..
        } = self.shape;
        let st = &mut self.state;
        st.fired = 0;
        st.writes_left = writes;
        st.target = active + writes;
        let space = pairs / active;
        let start = Instant::now();
        for c in 0..active {
            assert_eq!(st.writers[c * space].write_byte().unwrap(), 1);
        }
        let outcome = self.lp.run(RunMode::Default, st).unwrap();
        assert_eq!(outcome, evloop::RunOutcome::Broken, "every byte arrives");
        Outcome {
            events: st.fired,
            elapsed: start.elapsed(),
        }
    }
}

/// The workload on the OS backend called `backend` ("epoll", "poll",
/// "select", ...: a name of [`Builder::available`](evloop::Builder::available)
/// on a plain builder), with real non-blocking Unix socket pairs.
pub fn on_os(backend: &str, shape: Shape) -> evloop::Result<Bench<'static, OsSock>> {
    on_builder(&Loop::builder().backend(backend), shape)
}

/// The workload on the loop `builder` builds: a backend registered with it
/// ([`Builder::register`](evloop::Builder::register)) as well as one of the
/// crate's.
pub fn on_builder(builder: &Builder, shape: Shape) -> evloop::Result<Bench<'static, OsSock>> {
    on_loop(builder.build()?, shape)
}

/// The workload on any loop whose backend watches OS fds (one made with
/// [`Loop::with_backend`] on a backend of another crate, say), with real
/// non-blocking Unix socket pairs.
pub fn on_loop<'s>(lp: Loop<'s, State<OsSock>>, shape: Shape) -> evloop::Result<Bench<'s, OsSock>> {
    let ends = (0..shape.pairs).map(|_| os_pair()).collect();
    Bench::build(lp, ends, shape)
}

/// The workload on the simulator, with connected simulated pairs.
pub fn on_sim(shape: Shape) -> Bench<'static, SimSocket> {
    on_sim_world(shape).0
}

/// [`on_sim`], also returning the simulated world, so that a caller running
/// many times can empty its trace between runs ([`Sim::clear_trace`]): the
/// simulator records every poll and dispatch, which would otherwise grow
/// without bound over a long benchmark.
pub fn on_sim_world(shape: Shape) -> (Bench<'static, SimSocket>, Sim) {
    let sim = Sim::new();
    let lp = Loop::with_backend(sim.backend());
    let ends = (0..shape.pairs)
        .map(|i| sim.pair(&format!("p{i}"), 4096))
        .collect();
    let bench = Bench::build(lp, ends, shape).expect("the simulator accepts every pair");
    (bench, sim)
}

/// The same chains with no event loop at all: only the reads and writes
/// (the same `Read::read` of one byte and `write_all` of one byte on the
/// same non-blocking Unix socket pairs), the bytes visited round-robin as
/// the loop would dispatch them. Its cost per event is the floor that any
/// loop adds to; `benches/callgrind.sh bare` counts its instructions.
#[cfg(unix)]
pub struct Bare<T = UnixStream> {
    readers: Vec<T>,
    writers: Vec<T>,
    /// The pair each chain's byte is in (`usize::MAX`: chain finished).
    at: Vec<usize>,
    shape: Shape,
}

/// Sets up [`Bare`] (`shape.timers` is ignored: there is no loop to hold
/// timers).
#[cfg(unix)]
pub fn bare(shape: Shape) -> Bare {
    let (mut readers, mut writers) = (Vec::new(), Vec::new());
    for _ in 0..shape.pairs {
        let (r, w) = UnixStream::pair().expect("socketpair (raise RLIMIT_NOFILE?)");
        r.set_nonblocking(true).unwrap();
        w.set_nonblocking(true).unwrap();
        readers.push(r);
        writers.push(w);
    }
    Bare {
        readers,
        writers,
        at: vec![usize::MAX; shape.active],
        shape,
    }
}

/// [`bare`] with the sockets held as `OwnedFd`s, as the loop's workload
/// holds them, for [`Bare::run_fd_io`].
#[cfg(unix)]
pub fn bare_fd(shape: Shape) -> Bare<OsSock> {
    let b = bare(shape);
    Bare {
        readers: b.readers.into_iter().map(OsSock::from).collect(),
        writers: b.writers.into_iter().map(OsSock::from).collect(),
        at: b.at,
        shape: b.shape,
    }
}

#[cfg(unix)]
impl Bare {
    /// One run: prime `active` chains, then read and pass on every byte
    /// until `writes` writes were made and every byte was read, with the
    /// callbacks' calls (`Read::read`, `Write::write_all`).
    pub fn run(&mut self) -> Outcome {
        self.run_with(
            |r| r.read(&mut [0u8; 1]).ok() == Some(1),
            |w| w.write_all(b"e").unwrap(),
        )
    }

    /// [`Bare::run`] with `libc::read` and `libc::write` called directly,
    /// as a C program such as bench.c does: what the same syscalls cost
    /// without Rust's `std::io` wrappers.
    pub fn run_libc(&mut self) -> Outcome {
        use std::os::fd::AsRawFd;
        self.run_with(
            |r| {
                let mut byte = 0u8;
                // SAFETY: reads at most one byte into a local; the fd is
                // owned by a live `UnixStream`.
                unsafe { libc::read(r.as_raw_fd(), (&mut byte as *mut u8).cast(), 1) == 1 }
            },
            |w| {
                // SAFETY: writes one byte from a static; the fd is owned by
                // a live `UnixStream`.
                let n = unsafe { libc::write(w.as_raw_fd(), b"e".as_ptr().cast(), 1) };
                assert_eq!(n, 1, "write");
            },
        )
    }
}

#[cfg(unix)]
impl Bare<OsSock> {
    /// [`Bare::run`] with the calls the loop's callbacks make on OS
    /// sockets (`evloop::backends::fd_io`, one `read(2)`/`write(2)` each,
    /// on `OwnedFd`s): the floor the loop's own cost is measured against.
    pub fn run_fd_io(&mut self) -> Outcome {
        self.run_with(
            |r| r.read_byte().ok() == Some(1),
            |w| assert_eq!(w.write_byte().expect("write"), 1, "write"),
        )
    }
}

#[cfg(unix)]
impl<T> Bare<T> {
    fn run_with(
        &mut self,
        mut read_one: impl FnMut(&mut T) -> bool,
        mut write_one: impl FnMut(&mut T),
    ) -> Outcome {
        let Shape {
            pairs,
            active,
            writes,
            ..
        } = self.shape;
        let space = pairs / active;
        let start = Instant::now();
        for c in 0..active {
            self.at[c] = c * space;
            write_one(&mut self.writers[c * space]);
        }
        let (mut writes_left, mut fired, target) = (writes, 0, active + writes);
        while fired < target {
            for c in 0..active {
                let i = self.at[c];
                if i == usize::MAX {
                    continue;
                }
                assert!(
                    read_one(&mut self.readers[i]),
                    "bare chain: read on pair {i}"
                );
                fired += 1;
                if writes_left > 0 {
                    writes_left -= 1;
                    let next = if i + 1 == pairs { 0 } else { i + 1 };
                    write_one(&mut self.writers[next]);
                    self.at[c] = next;
                } else {
                    self.at[c] = usize::MAX;
                }
            }
        }
        Outcome {
            events: fired,
            elapsed: start.elapsed(),
        }
    }
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit; returns the limit
/// (on Windows, which has none, `u64::MAX`).
pub fn raise_fd_limit() -> u64 {
    evloop::net::raise_fd_limit().unwrap_or(0)
}
