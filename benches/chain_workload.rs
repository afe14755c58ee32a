//! libevent's `bench.c` workload, shared by the demo, the criterion
//! benchmarks and the callgrind measurement (included with `#[path]`).
//!
//! `pairs` socket pairs, each with a read watcher on one end. `active`
//! chains are started by writing one byte into evenly spaced pairs; each
//! callback reads its byte and, while writes remain, writes one byte into
//! the next pair, so `active` bytes hop around the ring until `writes`
//! writes have been made. With `timers`, every callback also pushes back a
//! per-pair inactivity timer (`Loop::again`), the classic libev pattern.
//! Every read and write is one syscall, as in bench.c.

#![allow(dead_code)]

use std::io::{ErrorKind, Read, Write};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use evloop::{Break, Interest, Loop, RunMode, Sim, SimSocket, Source, Timer};

/// Shape of one run.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    pub pairs: usize,
    pub active: usize,
    pub writes: usize,
    pub timers: bool,
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

fn on_readable<R: Read, W: Write>(
    i: usize,
    pairs: usize,
    timers: bool,
) -> impl FnMut(&mut Loop<'_, State<W>>, &mut State<W>, evloop::IoEvent<'_, R>) {
    move |lp, st, ev| {
        let mut byte = [0u8; 1];
        match ev.source.read(&mut byte) {
            Ok(1) => {}
            Ok(_) => return,
            Err(e) if e.kind() == ErrorKind::WouldBlock => return,
            Err(e) => panic!("read: {e}"),
        }
        st.fired += 1;
        if timers {
            lp.again(st.timers[i]).unwrap();
        }
        if st.writes_left > 0 {
            st.writes_left -= 1;
            st.writers[(i + 1) % pairs].write_all(b"e").unwrap();
        }
        if st.fired == st.target {
            lp.break_loop(Break::All);
        }
    }
}

impl<'s, W: Write + 's> Bench<'s, W> {
    fn build<R: Source + Read + 'static>(
        mut lp: Loop<'s, State<W>>,
        ends: Vec<(R, W)>,
        shape: Shape,
    ) -> evloop::Result<Self> {
        let mut writers = Vec::with_capacity(shape.pairs);
        let mut timers = Vec::new();
        for (i, (reader, writer)) in ends.into_iter().enumerate() {
            writers.push(writer);
            lp.io(
                reader,
                Interest::READABLE,
                on_readable::<R, W>(i, shape.pairs, shape.timers),
            )?;
            if shape.timers {
                let t = lp
                    .timer(Duration::ZERO, Duration::from_secs(60), |_, _, _| {})
                    .unwrap();
                lp.again(t).unwrap();
                lp.set_ref(t, false).unwrap();
                timers.push(t);
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
            st.writers[c * space].write_all(b"e").unwrap();
        }
        let outcome = self.lp.run(RunMode::Default, st).unwrap();
        assert_eq!(outcome, evloop::RunOutcome::Broken, "every byte arrives");
        Outcome {
            events: st.fired,
            elapsed: start.elapsed(),
        }
    }
}

/// The workload on an OS backend ("epoll", "poll", "select", ...), with
/// real non-blocking Unix socket pairs.
pub fn on_os(backend: &str, shape: Shape) -> evloop::Result<Bench<'static, UnixStream>> {
    let lp = Loop::builder().backend(backend).build()?;
    let ends = (0..shape.pairs)
        .map(|_| {
            let (r, w) = UnixStream::pair().expect("socketpair (raise RLIMIT_NOFILE?)");
            r.set_nonblocking(true).unwrap();
            w.set_nonblocking(true).unwrap();
            (r, w)
        })
        .collect();
    Bench::build(lp, ends, shape)
}

/// The workload on the simulator, with connected simulated pairs.
pub fn on_sim(shape: Shape) -> Bench<'static, SimSocket> {
    let sim = Sim::new();
    let lp = Loop::with_backend(sim.backend());
    let ends = (0..shape.pairs)
        .map(|i| sim.pair(&format!("p{i}"), 4096))
        .collect();
    Bench::build(lp, ends, shape).expect("the simulator accepts every pair")
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit; returns the limit.
pub fn raise_fd_limit() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid pointer to a local struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
    lim.rlim_cur
}
