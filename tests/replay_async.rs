//! evloop::replay: async sends from worker threads, recorded on each
//! kernel backend of the build (epoll, poll, select; io_uring with its
//! feature, skipped loudly where the kernel refuses; kqueue with
//! `emulated-kqueue`; on Windows, iocp and select, under Wine in
//! `.ci/run`), then replayed without the workers, and with
//! workers that send otherwise: the same callbacks at the same iterations
//! and loop times, and the trace followed to its end.
//!
//! The program: three async watchers and a 1 ms repeating timer that
//! ends everything after its 40th tick. The workers send whenever they
//! like (not synchronised with the loop): what the loop saw of their
//! sends is in the trace, and a replay acts on that, not on its own
//! threads' sends.

mod common;

use std::thread::JoinHandle;
use std::time::Duration;

use evloop::replay::{MemoryTrace, Replay};
use evloop::{Async, AsyncSender, Loop, RunMode};

use common::on_each_kernel;

/// Timer ticks before the program removes its watchers.
const TICKS: usize = 40;

#[derive(Default)]
struct St {
    /// One line per callback: what, iteration, loop time.
    log: Vec<String>,
    ticks: usize,
}

/// The program, the same recorded and replayed: its senders, by watcher.
fn program(lp: &mut Loop<'static, St>) -> Vec<AsyncSender> {
    let mut handles = Vec::new();
    let mut senders = Vec::new();
    for name in ["a", "b", "c"] {
        let (w, s) = Async::new(lp, move |lp, st: &mut St, _| {
            st.log
                .push(format!("{name} it{} {:?}", lp.iteration(), lp.now()));
        })
        .unwrap();
        handles.push(w);
        senders.push(s);
    }
    let ms = Duration::from_millis(1);
    lp.timer(ms, ms, move |lp, st, me| {
        st.ticks += 1;
        st.log
            .push(format!("tick it{} {:?}", lp.iteration(), lp.now()));
        if st.ticks == TICKS {
            for &w in &handles {
                lp.remove(w).unwrap();
            }
            lp.remove(me).unwrap();
        }
    })
    .unwrap();
    senders
}

/// Threads that send to `senders` (each its list, in turn) until the
/// watchers are gone, pausing `pause` between sends (none: as fast as
/// they can), at most 20,000 sends each.
fn workers(plan: Vec<Vec<AsyncSender>>, pause: Option<Duration>) -> Vec<JoinHandle<usize>> {
    plan.into_iter()
        .map(|mine| {
            std::thread::spawn(move || {
                let mut sent = 0;
                for i in 0..20_000 {
                    if mine[i % mine.len()].send().is_err() {
                        break;
                    }
                    sent += 1;
                    match pause {
                        // Pauses of different lengths: sends land at
                        // unrelated times in the loop's iterations.
                        Some(p) => std::thread::sleep(p * (1 + (i % 5) as u32)),
                        None => std::thread::yield_now(),
                    }
                }
                sent
            })
        })
        .collect()
}

fn round_trip(backend: &'static str) {
    let trace = MemoryTrace::new();
    let mut recorded = St::default();
    {
        let Some(mut lp) = common::recording_loop::<St>(backend, &trace) else {
            return;
        };
        let s = program(&mut lp);
        // a from one worker, b from two, c from one that also sends to b.
        let plan = vec![
            vec![s[0].clone()],
            vec![s[1].clone()],
            vec![s[1].clone(), s[2].clone()],
        ];
        let threads = workers(plan, Some(Duration::from_micros(90)));
        lp.run(RunMode::Default, &mut recorded).unwrap();
        drop(lp);
        for t in threads {
            assert!(t.join().unwrap() > 0);
        }
    }
    for name in ["a", "b", "c"] {
        assert!(
            recorded.log.iter().any(|l| l.starts_with(name)),
            "{backend}: no send to {name} reached the loop: {:#?}",
            recorded.log
        );
    }
    // Replayed without the workers, then with workers that send to every
    // watcher as fast as they can: their sends are dropped, the
    // recording's are acted on.
    for with_threads in [false, true] {
        let replay = Replay::from_bytes(trace.bytes()).unwrap();
        let mut st = St::default();
        {
            let mut lp: Loop<'static, St> = Loop::with_backend(replay.backend());
            let s = program(&mut lp);
            let threads = if with_threads {
                workers(vec![s.clone(), s.into_iter().rev().collect()], None)
            } else {
                Vec::new()
            };
            let ran = lp.run(RunMode::Default, &mut st);
            drop(lp);
            for t in threads {
                t.join().unwrap();
            }
            ran.unwrap_or_else(|e| panic!("{backend}, threads {with_threads}: {e}"));
        }
        let summary = replay
            .finish()
            .unwrap_or_else(|d| panic!("{backend}, threads {with_threads}: {d}"));
        assert!(summary.complete, "{summary:?}");
        assert_eq!(
            st.log, recorded.log,
            "{backend}, threads {with_threads}: the replay's callbacks differ"
        );
    }
    eprintln!(
        "{backend}: {} callbacks ({} async), a trace of {} bytes",
        recorded.log.len(),
        recorded.log.len() - TICKS,
        trace.len()
    );
}

#[test]
fn async_sends_from_worker_threads_replay_on_every_kernel_backend() {
    on_each_kernel("async sends recorded and replayed", round_trip);
}
