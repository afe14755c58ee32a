//! The executor's costs (`evloop::exec`), on the platform's default
//! backend (epoll on Linux), in nanoseconds per operation:
//!
//! - `spawn/one`: `exec::spawn_on` of an empty task and one
//!   `RunMode::NoWait` iteration that runs it to completion (a whole loop
//!   iteration per task: the backend's zero-timeout poll included).
//! - `spawn/batch_1024`: 1024 spawns through an `Executor`, then the loop
//!   run until they are done (the budget set to 1024: one pass polls them
//!   all); per task.
//! - `wake/task_to_task`: two tasks waking each other in turn (a flag and
//!   a waker each); per wake-poll round trip: the wake, and the woken
//!   task's poll (a task woken during a pass runs in the next iteration,
//!   so each round trip is one loop iteration).
//! - `wake/callback_to_task`: an idle watcher's callback wakes a task
//!   each iteration; per wake and poll.
//! - `sleep/register_cancel`: a task makes a `sleep` of an hour, polls it
//!   once (its timer watcher is made and started after the poll) and
//!   drops it (the watcher removed); per sleep, in batches of 1024.
//! - `sleep/await_1ns`: a task awaits `sleep(1 ns)`: registration, the
//!   timer's expiry in the next iteration, the wake and the poll; per
//!   sleep.
//!
//! Run: `CARGO_TARGET_DIR=/tmp/target-bench cargo bench --manifest-path benches/criterion/Cargo.toml --bench exec`
//! (about 20 seconds; a filter selects rows: `... -- wake`).
//! docs/benchmarks.md, "async: hyper on the executor", has the numbers.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::{pin, Pin};
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use criterion::measurement::WallTime;
use criterion::{criterion_group, criterion_main, BenchmarkGroup, Criterion};
use evloop::exec::{block_on, sleep, spawn_local, spawn_on, Executor};
use evloop::{Idle, Loop, RunMode};

/// A group with the timings all of this file's groups share (a short
/// warm-up and measurement: the whole run takes about 20 s).
fn group<'c>(c: &'c mut Criterion, name: &str) -> BenchmarkGroup<'c, WallTime> {
    let mut g = c.benchmark_group(name);
    g.warm_up_time(Duration::from_millis(500));
    g.measurement_time(Duration::from_secs(2));
    g
}

/// A flag a task waits for, and the waker to wake it with.
#[derive(Default)]
struct Signal {
    set: Cell<bool>,
    waker: RefCell<Option<Waker>>,
}

impl Signal {
    fn raise(&self) {
        self.set.set(true);
        if let Some(w) = self.waker.borrow_mut().take() {
            w.wake();
        }
    }

    fn wait(&self) -> impl Future<Output = ()> + '_ {
        std::future::poll_fn(move |cx| {
            if self.set.replace(false) {
                Poll::Ready(())
            } else {
                *self.waker.borrow_mut() = Some(cx.waker().clone());
                Poll::Pending
            }
        })
    }
}

fn spawn(c: &mut Criterion) {
    let mut g = group(c, "spawn");
    let mut lp: Loop = Loop::new().unwrap();
    g.bench_function("one", |b| {
        b.iter(|| {
            let task = spawn_on(&mut lp, async {}).unwrap();
            lp.run(RunMode::NoWait, &mut ()).unwrap();
            debug_assert!(task.is_finished());
        })
    });
    let ex = Executor::of(&mut lp).unwrap();
    ex.set_budget(1024);
    g.bench_function("batch_1024", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters.div_ceil(1024) {
                let start = Instant::now();
                for _ in 0..1024 {
                    drop(ex.spawn(async {}).unwrap());
                }
                lp.run(RunMode::Default, &mut ()).unwrap();
                total += start.elapsed();
                debug_assert_eq!(ex.task_count(), 0);
            }
            // Per task: criterion divides by `iters`.
            total.mul_f64(iters as f64 / (iters.div_ceil(1024) * 1024) as f64)
        })
    });
    g.finish();
}

fn wake(c: &mut Criterion) {
    let mut g = group(c, "wake");
    let mut lp: Loop = Loop::new().unwrap();
    g.bench_function("task_to_task", |b| {
        b.iter_custom(|iters| {
            let ping = Rc::new(Signal::default());
            let pong = Rc::new(Signal::default());
            let (p1, q1) = (ping.clone(), pong.clone());
            // Each round trip below is two wakes and two polls.
            let rounds = iters.div_ceil(2);
            spawn_on(&mut lp, async move {
                for _ in 0..rounds {
                    p1.wait().await;
                    q1.raise();
                }
            })
            .unwrap();
            let start = Instant::now();
            block_on(&mut lp, &mut (), async move {
                for _ in 0..rounds {
                    ping.raise();
                    pong.wait().await;
                }
            })
            .unwrap();
            start.elapsed()
        })
    });
    g.bench_function("callback_to_task", |b| {
        b.iter_custom(|iters| {
            let signal = Rc::new(Signal::default());
            let s = signal.clone();
            let idle = Idle::new(&mut lp, move |_, _, _| s.raise()).unwrap();
            lp.start(idle).unwrap();
            let start = Instant::now();
            block_on(&mut lp, &mut (), async move {
                for _ in 0..iters {
                    signal.wait().await;
                }
            })
            .unwrap();
            let t = start.elapsed();
            lp.remove(idle).unwrap();
            t
        })
    });
    g.finish();
}

fn sleeps(c: &mut Criterion) {
    let mut g = group(c, "sleep");
    let mut lp: Loop = Loop::new().unwrap();
    g.bench_function("register_cancel", |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            block_on(&mut lp, &mut (), async move {
                let mut left = iters;
                while left > 0 {
                    let n = left.min(1024);
                    left -= n;
                    // A task of its own per batch: its sleeps are made
                    // after its poll, and removed after the next.
                    spawn_local(async move {
                        let mut held = Vec::with_capacity(n as usize);
                        for _ in 0..n {
                            let mut s = Box::pin(sleep(Duration::from_secs(3600)));
                            poll_once(s.as_mut()).await;
                            held.push(s);
                        }
                        yield_now().await;
                        drop(held);
                    })
                    .unwrap()
                    .await
                    .unwrap();
                }
            })
            .unwrap();
            start.elapsed()
        })
    });
    g.bench_function("await_1ns", |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            block_on(&mut lp, &mut (), async move {
                for _ in 0..iters {
                    sleep(Duration::from_nanos(1)).await;
                }
            })
            .unwrap();
            start.elapsed()
        })
    });
    g.finish();
}

/// Polls `f` once, whatever it says.
async fn poll_once<F: Future>(mut f: Pin<&mut F>) {
    std::future::poll_fn(|cx: &mut Context<'_>| {
        let _ = f.as_mut().poll(cx);
        Poll::Ready(())
    })
    .await
}

/// Pending once, woken at once: the rest runs in the next pass.
async fn yield_now() {
    let mut yielded = false;
    let mut f = pin!(std::future::poll_fn(move |cx: &mut Context<'_>| {
        if yielded {
            Poll::Ready(())
        } else {
            yielded = true;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }));
    f.as_mut().await
}

criterion_group!(benches, spawn, wake, sleeps);
criterion_main!(benches);
