//! bench.c workload on tokio 1.x: a current_thread runtime (mio's epoll
//! on Linux) and tokio's own timers.
//!
//! The shape a tokio program takes: a task per watcher, spawned on the
//! runtime, awaiting its `AsyncFd`'s read readiness and, with `-t`, its
//! `Sleep` (never due in a run) in one `poll_fn`, as a `tokio::select!`
//! over both would.  The state the callbacks share (the chain and the
//! random generator) is an `Rc<RefCell<..>>`, the tasks spawned on a
//! `LocalSet` (`spawn_local`), tokio's way for single-threaded state: 28
//! instructions per event fewer than `tokio::spawn` with an
//! `Arc<Mutex<..>>` (798 / 1,233 at P=1000, A=100).
//!
//! tokio's readiness is edge-triggered (mio's, cached per fd): on a wake-up
//! the task drains its socket with `Chain::drain` (reads until a short
//! read, which empties a stream socket: tokio's own `poll_read` clears the
//! readiness on one too), clears the readiness, and handles the bytes one
//! per wake-up, yielding between two (`yield_now`, which tokio defers until
//! its driver has been polled: one byte per pair per loop iteration, as a
//! level-triggered loop does).  When A < P that is one 1-byte `read()`
//! per event, as in every peer.  With `-t` each event first resets the
//! task's `Sleep` to now + a fresh `rng.timeout_ns()` (`Sleep::reset`;
//! tokio has no public cached "now": `Instant::now()` per event).
//!
//! Setup (timed): per pair an `AsyncFd` (one `epoll_ctl` ADD), a `Sleep`
//! with `-t`, the task spawned; then the main task yields until every
//! watcher task has run once (which puts the sleeps in tokio's timer wheel
//! and parks the tasks on their readiness).  Run (timed): the main task
//! waits until the chain is done; the task whose event ends it wakes it.
//! A fresh runtime and `LocalSet` per repetition, the runtime built with
//! `enable_all` as `#[tokio::main(flavor = "current_thread")]` does.

use std::cell::RefCell;
use std::future::{poll_fn, Future};
use std::os::fd::{AsRawFd, RawFd};
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Poll, Waker};
use std::time::Duration;

use peers_bench::{now_ns, Chain, Opts, Pairs, Rng, Samples};
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio::time::{Instant, Sleep};

/// A pair's read end, borrowed: `AsyncFd` deregisters it when dropped, the
/// pairs close it.
struct ReadEnd(RawFd);

impl AsRawFd for ReadEnd {
    fn as_raw_fd(&self) -> RawFd {
        self.0
    }
}

/// What the tasks share.
struct State {
    chain: Chain,
    rng: Rng,
    /// Watcher tasks that have run once (the setup's iteration).
    started: usize,
    /// The main task, woken by the task that ends the run.
    main: Option<Waker>,
}

type Shared = Rc<RefCell<State>>;

/// One event of pair `i`, its byte already read: the timer restarted with a
/// fresh timeout (with `-t`), then the chain's work.
fn event(s: &mut State, i: usize, sleep: Option<&mut Pin<Box<Sleep>>>) {
    if let Some(sleep) = sleep {
        let d = Duration::from_nanos(s.rng.timeout_ns());
        sleep.as_mut().reset(Instant::now() + d);
    }
    s.chain.handle(i);
    if s.chain.done() {
        if let Some(main) = s.main.take() {
            main.wake();
        }
    }
}

/// The watcher of pair `i`: its task, for the runtime's lifetime.
async fn watch(i: usize, fd: AsyncFd<ReadEnd>, mut sleep: Option<Pin<Box<Sleep>>>, st: Shared) {
    st.borrow_mut().started += 1;
    loop {
        let mut ready = poll_fn(|cx| {
            if let Some(sleep) = sleep.as_mut() {
                let _ = sleep.as_mut().poll(cx); // 10 s or more: never due in a run
            }
            fd.poll_read_ready(cx)
        })
        .await
        .expect("read readiness");
        let mut carried = {
            let mut s = st.borrow_mut();
            let n = s.chain.drain(i);
            ready.clear_ready();
            if n == 0 {
                continue;
            }
            event(&mut s, i, sleep.as_mut());
            n - 1
        };
        // Chains collide only when A = P: the other bytes, one per iteration.
        while carried > 0 {
            tokio::task::yield_now().await;
            event(&mut st.borrow_mut(), i, sleep.as_mut());
            carried -= 1;
        }
    }
}

fn main() {
    let o = Opts::parse("tokio", "epoll");
    if o.backend != "epoll" {
        eprintln!("tokio: only the epoll backend exists on Linux");
        std::process::exit(1);
    }
    let pairs = Pairs::new(o.p);
    let mut rng = Rng::default();
    let mut samples = Samples::default();

    for _ in 0..o.reps {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("tokio runtime");
        let st: Shared = Rc::new(RefCell::new(State {
            chain: Chain::new(&pairs),
            rng: std::mem::take(&mut rng),
            started: 0,
            main: None,
        }));
        let local = tokio::task::LocalSet::new();
        let (setup_ns, run_ns) = local.block_on(&rt, async {
            // setup: P watcher tasks (+ P sleeps), then every task run once.
            let t0 = now_ns();
            for i in 0..o.p {
                let sleep = o.timers.then(|| {
                    let d = Duration::from_nanos(st.borrow_mut().rng.timeout_ns());
                    Box::pin(tokio::time::sleep(d))
                });
                let end = ReadEnd(pairs.read_fd(i));
                // SAFETY: the fd stays open and the same until the runtime,
                // which owns the task and so the `AsyncFd`, is dropped:
                // `pairs` outlives every runtime.
                let fd = unsafe { AsyncFd::register_with_interest(end, Interest::READABLE) }
                    .unwrap_or_else(|e| {
                        eprintln!("tokio: AsyncFd refused pair {i} of {}: {e}", o.p);
                        std::process::exit(1);
                    });
                tokio::task::spawn_local(watch(i, fd, sleep, st.clone()));
            }
            while st.borrow_mut().started < o.p {
                tokio::task::yield_now().await;
            }
            let t1 = now_ns();

            st.borrow_mut().chain.kick(&o);
            let t2 = now_ns();
            poll_fn(|cx| {
                let mut s = st.borrow_mut();
                if s.chain.done() {
                    Poll::Ready(())
                } else {
                    s.main = Some(cx.waker().clone());
                    Poll::Pending
                }
            })
            .await;
            let t3 = now_ns();
            (t1 - t0, t3 - t2)
        });
        // Drops the tasks: their fds deregistered, the pairs stay open.
        drop(local);
        drop(rt);
        let mut s = st.borrow_mut();
        s.chain.check(&o);
        samples.push(setup_ns, run_ns);
        rng = std::mem::take(&mut s.rng);
    }
    samples.report(&o);
}
