//! Kernel mirrors of the doc examples (in `src/`, `backends/` and README.md)
//! whose run ends by running out of watchers, one test per item, named after
//! it: each runs on every OS backend (and `sim`) under the watchdog, because
//! the simulator's `Stalled` once hid a run that blocked forever on a kernel.
//! Virtual times become lower bounds on real time; scheduled arrivals become
//! bytes a peer sends.

// Examples that run a loop but are not mirrored, one line each:
// - `RunMode`: a `NoWait` run, which cannot block.
// - `Loop::check`: a `NoWait` run again (with `Default` it hangs on kernels: see `a_check_watcher_alone_runs_and_the_run_ends` in scenarios_on_kernels.rs).
// - `Loop::run`: a `Once` run that ends `IterationDone` with its prepare and check watchers still active.
// - `Sim` and `Step`: they show the simulator's `Stalled` and its trace, which only it has.
// - `AsyncSender::send`: a `NoWait` run.
// Mirrored although they end `Broken` (a `Default` run that must return): `Break`, `Loop::break_loop`.
//
// The other examples run no loop: `PollEvent`, `Capabilities`, `PollStatus`,
// `Builder`, `Builder::new`, `Builder::backend`, `Builder::backend_name`,
// `Loop::builder`, `Error`, `Result`, `MIN_PRIORITY`, `Loop::with_backend`,
// `Loop::from_boxed`, `Loop::backend_name`, `Loop::capabilities`,
// `Loop::now`, `Loop::update_now`, `Loop::pending_count`,
// `Loop::set_direct_dispatch`, `Loop::iteration`, `Loop::active_count`,
// `Loop::reinit_after_fork`, `Interest`, `Trigger`, `Ready`, `SourceFd`,
// `VirtualFd`, `Source`, `Loop::start`, `Loop::remove`, `Loop::into_source`,
// `Loop::is_active`, `Loop::is_pending`, `Loop::set_priority`,
// `Loop::priority`, `Loop::set_interest`, `Loop::interest`, `Loop::fd`,
// `Loop::set_timer`, `Loop::again`, `Loop::remaining`, `Loop::clear_pending`,
// `Handle`, `Io`, `Timer`, `Prepare`, `Check`, `Signal`, `Loop::signal_number`,
// `Async`, `Loop::async_sender`, `Fork`, `Cleanup`, `ExitStatus`,
// `ChildExit`, `SignalSet`, `Notices`, `Wake`, `unsupported`; the backends' types and
// constructors (`Epoll`, `Poll`, `Select`, `Kqueue` and their `new`: they
// call `poll` directly or nothing), `backends`, `AVAILABLE`, `default_name`,
// `open`, `fd_io` with its `read` and `write`; and the simulator's
// scheduling and inspection calls (`Sim::new` to `Sim::registered`, `SimFd`,
// `SimBackend`, `SimSocket`, `SimSocket::fd`, `SimSocket::name`, `StepKind`).

mod common;

use std::cell::Cell;
use std::io::{ErrorKind, Read, Write};
use std::process::Command;
use std::rc::Rc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{on_every_backend, World};
use evloop::{Break, ExitStatus, Interest, Loop, Ready, RunMode, RunOutcome, Trigger};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// The crate documentation's echo handler (src/lib.rs). The peer, owned by
/// a timer, closes once it has its echo (the simulator closed it at 20 ms).
#[test]
fn crate_example() {
    on_every_backend("crate example", |name| {
        let w = World::new(name);
        let (conn, mut peer) = w.pair();
        peer.send(b"hello");
        let mut lp: Loop<Vec<u8>> = w.new_loop();
        lp.io(conn, Interest::READABLE, |lp, _, ev| {
            let mut buf = [0u8; 64];
            match ev.source.read(&mut buf) {
                Ok(0) => lp.remove(ev.watcher).unwrap(), // EOF
                Ok(n) => ev.source.write_all(&buf[..n]).unwrap(),
                Err(e) => assert_eq!(e.kind(), ErrorKind::WouldBlock),
            }
        })
        .unwrap();
        let mut peer = Some(peer);
        lp.timer(ms(1), ms(1), move |lp, echoed, me| {
            echoed.extend(peer.as_mut().unwrap().receive());
            if echoed.len() >= 5 {
                peer = None; // closes it
                lp.remove(me).unwrap();
            }
        })
        .unwrap();
        let mut echoed = vec![];
        assert_eq!(
            lp.run(RunMode::Default, &mut echoed).unwrap(),
            RunOutcome::NoActiveWatchers,
            "{name}"
        );
        assert_eq!(echoed, b"hello", "{name}");
    });
}

/// README.md's example: the echo handler with an unreferenced inactivity
/// timeout, which must not keep the run alive for its 30 s.
#[test]
fn readme_example() {
    struct St {
        echoed: u32,
        received: Vec<u8>,
    }
    on_every_backend("README example", |name| {
        let w = World::new(name);
        let (conn, mut peer) = w.pair();
        peer.send(b"ping");
        let mut lp: Loop<St> = w.new_loop();
        lp.io(conn, Interest::READABLE, |lp, st, ev| {
            let mut buf = [0u8; 512];
            loop {
                match ev.source.read(&mut buf) {
                    Ok(0) => return lp.remove(ev.watcher).unwrap(), // peer closed
                    Ok(n) => {
                        ev.source.write_all(&buf[..n]).unwrap();
                        st.echoed += n as u32;
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                    Err(e) => panic!("{e}"),
                }
            }
        })
        .unwrap();
        let t = lp
            .timer(Duration::from_secs(30), Duration::ZERO, |_, _, _| {})
            .unwrap();
        lp.set_ref(t, false).unwrap();
        let mut peer = Some(peer);
        lp.timer(ms(1), ms(1), move |lp, st, me| {
            st.received.extend(peer.as_mut().unwrap().receive());
            if st.received.len() >= 4 {
                peer = None;
                lp.remove(me).unwrap();
            }
        })
        .unwrap();
        let mut st = St {
            echoed: 0,
            received: vec![],
        };
        assert_eq!(
            lp.run(RunMode::Default, &mut st).unwrap(),
            RunOutcome::NoActiveWatchers,
            "{name}"
        );
        assert_eq!((st.echoed, st.received), (4, b"ping".to_vec()), "{name}");
        assert!(lp.is_active(t).unwrap(), "{name}");
    });
}

/// The `Backend` trait's example: its loop has one timer (3 s there, 3 ms
/// here), and the run returns once it has fired.
#[test]
fn backend_trait_example() {
    on_every_backend("Backend example", |name| {
        let mut lp: Loop = World::new(name).new_loop();
        lp.timer(ms(3), Duration::ZERO, |lp, _, _| {
            assert!(lp.now() >= ms(3));
        })
        .unwrap();
        assert_eq!(
            lp.run(RunMode::Default, &mut ()).unwrap(),
            RunOutcome::NoActiveWatchers,
            "{name}"
        );
        assert!(lp.now() >= ms(3), "{name}");
    });
}

/// `Builder::build` (there on the default backend only).
#[test]
fn builder_build_example() {
    on_every_backend("Builder::build example", |name| {
        let w = World::new(name);
        let mut lp: Loop<usize> = w.new_loop();
        let (a, mut b) = w.pair();
        b.send(b"hi");
        lp.io(a, Interest::READABLE, |lp, got, ev| {
            let mut buf = [0; 8];
            *got += ev.source.read(&mut buf).unwrap();
            lp.remove(ev.watcher).unwrap();
        })
        .unwrap();
        let mut got = 0;
        assert_eq!(
            lp.run(RunMode::Default, &mut got).unwrap(),
            RunOutcome::NoActiveWatchers,
            "{name}"
        );
        assert_eq!(got, 2, "{name}");
    });
}

/// `Loop::new` (there on the default backend only).
#[test]
fn loop_new_example() {
    on_every_backend("Loop::new example", |name| {
        let start = Instant::now();
        let mut lp: Loop = World::new(name).new_loop();
        lp.timer(ms(5), Duration::ZERO, |_, _, _| {}).unwrap();
        assert_eq!(
            lp.run(RunMode::Default, &mut ()).unwrap(),
            RunOutcome::NoActiveWatchers,
            "{name}"
        );
        if name != "sim" {
            assert!(start.elapsed() >= ms(5), "{name}");
        }
    });
}

/// `Break`: a `Default` run that a callback ends (not the last watcher
/// going away; mirrored because it is a `Default` run that must return).
#[test]
fn break_example() {
    on_every_backend("Break example", |name| {
        let mut lp: Loop = World::new(name).new_loop();
        let idle = lp.idle(|lp, _, _| lp.break_loop(Break::One)).unwrap();
        assert_eq!(
            lp.run(RunMode::Default, &mut ()).unwrap(),
            RunOutcome::Broken,
            "{name}"
        );
        assert!(lp.is_active(idle).unwrap(), "{name}");
    });
}

/// `RunOutcome`: no watchers, no iteration.
#[test]
fn run_outcome_example() {
    on_every_backend("RunOutcome example", |name| {
        let mut lp: Loop = World::new(name).new_loop();
        assert_eq!(
            lp.run(RunMode::Default, &mut ()).unwrap(),
            RunOutcome::NoActiveWatchers,
            "{name}"
        );
        assert_eq!(lp.iteration(), 0, "{name}");
    });
}

/// `Loop`: a repeating timer that stops itself after three ticks.
#[test]
fn loop_example() {
    on_every_backend("Loop example", |name| {
        let mut lp: Loop<u32> = World::new(name).new_loop();
        let t = lp
            .timer(ms(10), ms(10), |lp, ticks, me| {
                *ticks += 1;
                if *ticks == 3 {
                    lp.stop(me).unwrap();
                }
            })
            .unwrap();
        let mut ticks = 0;
        assert_eq!(
            lp.run(RunMode::Default, &mut ticks).unwrap(),
            RunOutcome::NoActiveWatchers,
            "{name}"
        );
        assert_eq!(ticks, 3, "{name}");
        assert!(lp.now() >= ms(30), "{name}: {:?}", lp.now());
        assert!(!lp.is_active(t).unwrap(), "{name}");
    });
}

/// `Loop::depth`.
#[test]
fn loop_depth_example() {
    on_every_backend("Loop::depth example", |name| {
        let mut lp: Loop<u32> = World::new(name).new_loop();
        lp.idle(|lp, seen, me| {
            *seen = lp.depth();
            lp.remove(me).unwrap();
        })
        .unwrap();
        let mut seen = 0;
        assert_eq!(
            lp.run(RunMode::Default, &mut seen).unwrap(),
            RunOutcome::NoActiveWatchers,
            "{name}"
        );
        assert_eq!((seen, lp.depth()), (1, 0), "{name}");
    });
}

/// `Loop::break_loop` (a `Default` run ended by a callback, as `Break`).
#[test]
fn loop_break_loop_example() {
    on_every_backend("Loop::break_loop example", |name| {
        let mut lp: Loop = World::new(name).new_loop();
        let idle = lp.idle(|lp, _, _| lp.break_loop(Break::All)).unwrap();
        assert_eq!(
            lp.run(RunMode::Default, &mut ()).unwrap(),
            RunOutcome::Broken,
            "{name}"
        );
        assert!(lp.is_active(idle).unwrap(), "{name}");
    });
}

/// `Loop::io`: a writable watcher writes and removes itself.
#[test]
fn loop_io_example() {
    on_every_backend("Loop::io example", |name| {
        let w = World::new(name);
        let (sock, mut peer) = w.pair();
        let mut lp: Loop = w.new_loop();
        lp.io(sock, Interest::WRITABLE, |lp, _, ev| {
            ev.source.write_all(b"hello").unwrap();
            lp.remove(ev.watcher).unwrap();
        })
        .unwrap();
        assert_eq!(
            lp.run(RunMode::Default, &mut ()).unwrap(),
            RunOutcome::NoActiveWatchers,
            "{name}"
        );
        assert_eq!(peer.receive(), b"hello", "{name}");
    });
}

/// `Loop::io_borrowed`: the watcher stops itself; the source outlives the
/// loop.
#[test]
fn loop_io_borrowed_example() {
    on_every_backend("Loop::io_borrowed example", |name| {
        let w = World::new(name);
        let (sock, mut peer) = w.pair();
        peer.send(b"x");
        {
            let mut lp: Loop<usize> = w.new_loop();
            let io = lp
                .io_borrowed(&sock, Interest::READABLE, |lp, n, ev| {
                    let mut buf = [0; 4];
                    *n += ev.source.read(&mut buf).unwrap();
                    lp.stop(ev.watcher).unwrap();
                })
                .unwrap();
            let mut n = 0;
            assert_eq!(
                lp.run(RunMode::Default, &mut n).unwrap(),
                RunOutcome::NoActiveWatchers,
                "{name}"
            );
            assert_eq!(n, 1, "{name}");
            assert!(!lp.is_active(io).unwrap(), "{name}");
        }
        drop(sock);
    });
}

/// `Loop::timer`: two timers fire in expiry order, not start order.
#[test]
fn loop_timer_example() {
    on_every_backend("Loop::timer example", |name| {
        let mut lp: Loop<Vec<u64>> = World::new(name).new_loop();
        for after in [20, 10] {
            lp.timer(ms(after), Duration::ZERO, move |lp, log, _| {
                assert!(lp.now() >= ms(after), "fired early");
                log.push(after)
            })
            .unwrap();
        }
        let mut log = vec![];
        assert_eq!(
            lp.run(RunMode::Default, &mut log).unwrap(),
            RunOutcome::NoActiveWatchers,
            "{name}"
        );
        assert_eq!(log, [10, 20], "{name}");
    });
}

/// `Loop::idle`: an idle watcher that stops itself after three calls.
#[test]
fn loop_idle_example() {
    on_every_backend("Loop::idle example", |name| {
        let mut lp: Loop<u32> = World::new(name).new_loop();
        lp.idle(|lp, n, me| {
            *n += 1;
            if *n == 3 {
                lp.stop(me).unwrap();
            }
        })
        .unwrap();
        let mut n = 0;
        assert_eq!(
            lp.run(RunMode::Default, &mut n).unwrap(),
            RunOutcome::NoActiveWatchers,
            "{name}"
        );
        assert_eq!(n, 3, "{name}");
    });
}

/// `Loop::prepare` (also in run_semantics.rs, where the bug was found).
#[test]
fn loop_prepare_example() {
    on_every_backend("Loop::prepare example", |name| {
        let mut lp: Loop<u32> = World::new(name).new_loop();
        lp.prepare(|lp, n, me| {
            *n += 1;
            lp.remove(me).unwrap();
        })
        .unwrap();
        let mut n = 0;
        assert_eq!(
            lp.run(RunMode::Default, &mut n).unwrap(),
            RunOutcome::NoActiveWatchers,
            "{name}"
        );
        assert_eq!(n, 1, "{name}");
    });
}

/// `Loop::stop`: a timer stopped while it is pending is not called.
#[test]
fn loop_stop_example() {
    on_every_backend("Loop::stop example", |name| {
        let mut lp: Loop<u32> = World::new(name).new_loop();
        let late = lp.timer(ms(5), Duration::ZERO, |_, n, _| *n += 1).unwrap();
        let stopper = lp
            .timer(ms(5), Duration::ZERO, move |lp, _, _| {
                lp.stop(late).unwrap();
            })
            .unwrap();
        lp.set_priority(stopper, 1).unwrap();
        let mut n = 0;
        assert_eq!(
            lp.run(RunMode::Default, &mut n).unwrap(),
            RunOutcome::NoActiveWatchers,
            "{name}"
        );
        assert_eq!(n, 0, "{name}");
    });
}

/// `Loop::set_ref`: an unreferenced 60 s timer does not keep `run` waiting.
#[test]
fn loop_set_ref_example() {
    on_every_backend("Loop::set_ref example", |name| {
        let mut lp: Loop = World::new(name).new_loop();
        let t = lp
            .timer(Duration::from_secs(60), Duration::ZERO, |_, _, _| {})
            .unwrap();
        lp.set_ref(t, false).unwrap();
        assert_eq!(
            lp.run(RunMode::Default, &mut ()).unwrap(),
            RunOutcome::NoActiveWatchers,
            "{name}"
        );
        assert!(lp.is_active(t).unwrap(), "{name}");
    });
}

/// `Loop::feed_event`: a fed event on a watcher whose fd never becomes
/// ready.
#[test]
fn loop_feed_event_example() {
    on_every_backend("Loop::feed_event example", |name| {
        let w = World::new(name);
        let (sock, _peer) = w.pair();
        let mut lp: Loop<Vec<String>> = w.new_loop();
        let io = lp
            .io(sock, Interest::READABLE, |lp, log, ev| {
                log.push(ev.ready.to_string());
                lp.remove(ev.watcher).unwrap();
            })
            .unwrap();
        lp.feed_event(io, Ready::READABLE).unwrap();
        let mut log = vec![];
        assert_eq!(
            lp.run(RunMode::Default, &mut log).unwrap(),
            RunOutcome::NoActiveWatchers,
            "{name}"
        );
        assert_eq!(log, ["r"], "{name}");
    });
}

/// `Idle` (the handle type): an idle watcher that removes itself.
#[test]
fn idle_example() {
    on_every_backend("Idle example", |name| {
        let mut lp: Loop = World::new(name).new_loop();
        let idle = lp.idle(|lp, _, me| lp.remove(me).unwrap()).unwrap();
        assert_eq!(
            lp.run(RunMode::Default, &mut ()).unwrap(),
            RunOutcome::NoActiveWatchers,
            "{name}"
        );
        assert!(lp.is_active(idle).is_err(), "{name}");
    });
}

/// `IoEvent`: read what arrived, then remove the watcher.
#[test]
fn io_event_example() {
    on_every_backend("IoEvent example", |name| {
        let w = World::new(name);
        let (sock, mut peer) = w.pair();
        peer.send(b"hi");
        let mut lp: Loop<Vec<u8>> = w.new_loop();
        lp.io(sock, Interest::READABLE, |lp, got, ev| {
            let mut buf = [0; 16];
            let n = ev.source.read(&mut buf).unwrap();
            got.extend_from_slice(&buf[..n]);
            lp.remove(ev.watcher).unwrap();
        })
        .unwrap();
        let mut got = Vec::new();
        assert_eq!(
            lp.run(RunMode::Default, &mut got).unwrap(),
            RunOutcome::NoActiveWatchers,
            "{name}"
        );
        assert_eq!(got, b"hi", "{name}");
    });
}

/// The kqueue module's example (an edge-triggered reader that drains until
/// `WouldBlock`), on every backend that offers edge triggering (epoll, and
/// kqueue with `--features emulated-kqueue`); the others refuse it.
#[test]
fn kqueue_module_example() {
    on_every_backend("kqueue example", |name| {
        let w = World::new(name);
        let mut lp: Loop<Vec<u8>> = w.new_loop();
        let (a, mut b) = w.pair();
        b.send(b"hello");
        let edge = Interest::READABLE.with_trigger(Trigger::Edge);
        let made = lp.io(a, edge, |lp, got, ev| {
            let mut buf = [0u8; 2];
            loop {
                match ev.source.read(&mut buf) {
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) => panic!("{e}"),
                }
            }
            lp.remove(ev.watcher).unwrap();
        });
        if !lp.capabilities().edge {
            assert!(made.is_err(), "{name} has no edge triggering");
            return;
        }
        made.unwrap();
        let mut got = Vec::new();
        assert_eq!(
            lp.run(RunMode::Default, &mut got).unwrap(),
            RunOutcome::NoActiveWatchers,
            "{name}"
        );
        assert_eq!(got, b"hello", "{name}");
    });
}

// ---- signal, child, async, fork and cleanup watchers ---------------------------

/// The simulator's stand-in for a child process: one that exits at once
/// with `status`, or a real one (`sh -c script`) on a kernel.
fn child_process(w: &World, script: &str, status: ExitStatus) -> u32 {
    match &w.sim {
        Some(sim) => {
            let pid = sim.spawn(script);
            sim.exit(Duration::ZERO, pid, status);
            pid
        }
        // Dropping the `Child` neither waits nor kills: the loop reaps it.
        None => Command::new("sh")
            .args(["-c", script])
            .spawn()
            .unwrap()
            .id(),
    }
}

/// `Loop::signal`: a SIGTERM sent by another process (a shell, to its
/// parent) ends the run; on the simulator, raised at 5 ms.
#[test]
fn loop_signal_example() {
    on_every_backend("Loop::signal example", |name| {
        let w = World::new(name);
        let mut lp: Loop<Vec<&str>> = w.new_loop();
        lp.signal(libc::SIGTERM, |lp, log, me| {
            log.push("SIGTERM");
            lp.remove(me).unwrap();
        })
        .unwrap();
        match &w.sim {
            Some(sim) => sim.raise(ms(5), libc::SIGTERM),
            None => {
                let kill = Command::new("sh").args(["-c", "kill -TERM $PPID"]).status();
                assert!(kill.unwrap().success());
            }
        }
        let mut log = vec![];
        assert_eq!(
            lp.run(RunMode::Default, &mut log).unwrap(),
            RunOutcome::NoActiveWatchers,
            "{name}"
        );
        assert_eq!(log, ["SIGTERM"], "{name}");
    });
}

/// `Child` (the handle type): the run reaps a child that exits at once.
#[test]
fn child_example() {
    on_every_backend("Child example", |name| {
        let w = World::new(name);
        let pid = child_process(&w, "exit 0", ExitStatus::Exited(0));
        let mut lp: Loop = w.new_loop();
        let c = lp.child(pid, |_, _, _| {}).unwrap();
        assert!(lp.is_active(c).unwrap(), "{name}");
        assert_eq!(
            lp.run(RunMode::Default, &mut ()).unwrap(),
            RunOutcome::NoActiveWatchers,
            "{name}"
        );
        assert!(!lp.is_active(c).unwrap(), "{name}");
    });
}

/// `ChildEvent`: a child killed by SIGKILL.
#[test]
fn child_event_example() {
    on_every_backend("ChildEvent example", |name| {
        let w = World::new(name);
        let killed = ExitStatus::Signaled {
            signal: libc::SIGKILL,
            core_dumped: false,
        };
        let pid = child_process(&w, "kill -KILL $$", killed);
        let mut lp: Loop<Option<ExitStatus>> = w.new_loop();
        lp.child(pid, move |_, got, ev| {
            assert_eq!(ev.pid, pid);
            *got = ev.status;
        })
        .unwrap();
        let mut got = None;
        assert_eq!(
            lp.run(RunMode::Default, &mut got).unwrap(),
            RunOutcome::NoActiveWatchers,
            "{name}"
        );
        assert_eq!(got, Some(killed), "{name}");
    });
}

/// `Loop::child`: the run returns once the child has exited with code 3.
#[test]
fn loop_child_example() {
    on_every_backend("Loop::child example", |name| {
        let w = World::new(name);
        let pid = child_process(&w, "exit 3", ExitStatus::Exited(3));
        let mut lp: Loop<Vec<String>> = w.new_loop();
        lp.child(pid, |_, log, ev| log.push(ev.status.unwrap().to_string()))
            .unwrap();
        let mut log = vec![];
        assert_eq!(
            lp.run(RunMode::Default, &mut log).unwrap(),
            RunOutcome::NoActiveWatchers,
            "{name}"
        );
        assert_eq!(log, ["exited with code 3"], "{name}");
    });
}

/// `Loop::async_watcher`: a worker thread hands three results over while
/// the loop waits (on the simulator, which cannot wait for a thread, the
/// worker is done before the run).
#[test]
fn loop_async_watcher_example() {
    on_every_backend("Loop::async_watcher example", |name| {
        let w = World::new(name);
        let (results, done) = mpsc::channel();
        let mut lp: Loop<Vec<u64>> = w.new_loop();
        let (_, sender) = lp
            .async_watcher(move |lp, got, me| {
                got.extend(done.try_iter());
                if got.len() == 3 {
                    lp.remove(me).unwrap();
                }
            })
            .unwrap();
        let worker = std::thread::spawn(move || {
            for n in 1..=3u64 {
                results.send(n * n).unwrap();
                sender.send().ok();
            }
        });
        if w.sim.is_some() {
            worker.join().unwrap();
        }
        let mut got = vec![];
        assert_eq!(
            lp.run(RunMode::Default, &mut got).unwrap(),
            RunOutcome::NoActiveWatchers,
            "{name}"
        );
        assert_eq!(got, [1, 4, 9], "{name}");
    });
}

/// `AsyncSender`: two sends, one from another thread, coalesce into one
/// call, which removes the watcher.
#[test]
fn async_sender_example() {
    on_every_backend("AsyncSender example", |name| {
        let mut lp: Loop<u32> = World::new(name).new_loop();
        let (_, sender) = lp
            .async_watcher(|lp, n, me| {
                *n += 1;
                lp.remove(me).unwrap();
            })
            .unwrap();
        let other = sender.clone();
        std::thread::spawn(move || other.send().unwrap())
            .join()
            .unwrap();
        sender.send().unwrap();
        let mut n = 0;
        assert_eq!(
            lp.run(RunMode::Default, &mut n).unwrap(),
            RunOutcome::NoActiveWatchers,
            "{name}"
        );
        assert_eq!(n, 1, "{name}");
        assert!(sender.send().is_err(), "{name}");
    });
}

/// `Loop::fork`: after `reinit_after_fork` (in the same process here, as
/// in the example), the fork watcher runs before the prepare watcher.
#[test]
fn loop_fork_example() {
    on_every_backend("Loop::fork example", |name| {
        let mut lp: Loop<Vec<&str>> = World::new(name).new_loop();
        lp.fork(|lp, log, me| {
            log.push("fork");
            lp.remove(me).unwrap();
        })
        .unwrap();
        lp.prepare(|lp, log, me| {
            log.push("prepare");
            lp.remove(me).unwrap();
        })
        .unwrap();
        lp.reinit_after_fork().unwrap();
        let mut log = vec![];
        assert_eq!(
            lp.run(RunMode::Default, &mut log).unwrap(),
            RunOutcome::NoActiveWatchers,
            "{name}"
        );
        assert_eq!(log, ["fork", "prepare"], "{name}");
    });
}

/// `Loop::cleanup`: a cleanup watcher keeps no run going, and runs at the
/// drop.
#[test]
fn loop_cleanup_example() {
    on_every_backend("Loop::cleanup example", |name| {
        let ran = Rc::new(Cell::new(false));
        let seen = ran.clone();
        let mut lp: Loop = World::new(name).new_loop();
        lp.cleanup(move |_| seen.set(true)).unwrap();
        assert_eq!(
            lp.run(RunMode::Default, &mut ()).unwrap(),
            RunOutcome::NoActiveWatchers,
            "{name}"
        );
        assert!(!ran.get(), "{name}");
        drop(lp);
        assert!(ran.get(), "{name}");
    });
}
