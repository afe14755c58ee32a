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
// - `Loop::is_pending`: a `NoWait` run.
// - `Loop::backend_timeout` (its second example): a `Once` run whose prepare watchers see the simulator's exact timeout (`tests/libev_api.rs` checks it on every backend).
// - `Sim::reap_elsewhere`: the simulator's own call (its kernel counterpart is `exit_status_unknown_example`).
// - `Conn::write`, `Conn::pause_reading`, `Conn::resume_reading`: `NoWait` runs.
// Mirrored although they end `Broken` (a `Default` run that must return): `Break`, `Loop::break_loop`, `Acceptor`, `Conn::input`, and the first run of the `net` module's example.
// Mirrored on the OS backends only, as the examples themselves run on real sockets (the simulator has no TCP and no half-close): `net`, `Acceptor`, `Conns::open`.
// Mirrored without their simulator-only parts (the trace line, the virtual wall clock's hour): `Sim::raise`, `Sim::call_at`, `Loop::periodic`, `Schedule::every`.
// Mirrored without the program that cannot start on the simulator, which starts no program: `Loop::spawn`.
// - `Loop::child_any`: `Once` runs; and a watcher of any child reaps every child of the process, which the other tests here spawn and wait for (`tests/child_any.rs` runs it on every backend, alone).
// - `Sim::exit`, `Sim::signals_sent`: the simulator's own calls (their kernel counterparts are `loop_kill_example` and `tests/child_any.rs`).
//
// The other examples run no loop: `PollEvent`, `Capabilities`, `PollStatus`,
// `Builder`, `Builder::new`, `Builder::backend`, `Builder::backend_name`,
// `Loop::builder`, `Error`, `Result`, `MIN_PRIORITY`, `Loop::with_backend`,
// `Loop::from_boxed`, `Loop::backend_name`, `Loop::capabilities`,
// `Loop::now`, `Loop::wall_now`, `Loop::update_now`, `Loop::pending_count`,
// `Loop::backend_timeout`, `Loop::set_direct_dispatch`, `Loop::iteration`,
// `Loop::active_count`, `Loop::reinit_after_fork`, `Interest`, `Trigger`,
// `Ready`, `SourceFd`, `VirtualFd`, `Source`, `Loop::start`, `Loop::remove`,
// `Loop::into_source`, `Loop::is_active`, `Loop::is_pending`,
// `Loop::set_priority`, `Loop::priority`, `Loop::set_interest`,
// `Loop::interest`, `Loop::fd`, `Loop::set_timer`, `Loop::again`,
// `Loop::repeat`, `Loop::remaining`, `Loop::clear_pending`, `Handle`, `Io`,
// `Timer`, `Prepare`, `Check`, `Signal`, `Loop::signal_number`, `Async`,
// `Loop::async_sender`, `Callback`, `Loop::set_cleanup_callback`,
// `Loop::set_signal`, `Loop::set_schedule`, `Fork`, `Cleanup`, `Once`, `Periodic`,
// `Loop::periodic_at`, `Schedule`, `Schedule::every_from`, `Stat`, `Loop::file_stat`, `FileStat`,
// `FileStat::of`, `ExitStatus` (but `ExitStatus::Unknown` is mirrored), `ChildExit`, `SignalSet`, `Notices`, `Wake`,
// `Signal::name`, `Spawned`, `Spawned::from_std`,
// `unsupported`; `Backend::watch_clock_steps` and `Backend::watch_path`
// (they call the default backend directly; the second polls it until its
// path notice comes, which it does on every backend here); the backends'
// types and constructors (`Epoll`, `Poll`, `Select`, `Kqueue`, `IoUring`,
// their `new`, the `force_sigchld_fallback` of all but `Kqueue`, and
// `IoUring::force_no_multishot` and `IoUring::without_deferred_task_work`:
// they call `poll` directly or nothing), `backends`, `AVAILABLE`, `default_name`, `open`, `fd_io` with
// its `read` and `write`; the simulator's scheduling and inspection calls
// (all but `Sim::raise` and `Sim::call_at`, mirrored above: `Sim::new`,
// `Sim::backend`, `Sim::socket`, `Sim::pair`, `Sim::deliver`,
// `Sim::free_send`, `Sim::close_peer`, `Sim::invalidate`,
// `Sim::spurious_wakeup`, `Sim::fail_next_modify`, `Sim::spawn`,
// `Sim::exit`, `Sim::set_wall_clock`, `Sim::wall_clock`,
// `Sim::step_wall_clock_forward`, `Sim::step_wall_clock_back`,
// `Sim::report_clock_steps`, `Sim::write_file`, `Sim::rename_file`,
// `Sim::remove_file`, `Sim::path_hints`, `Sim::watched_signals`,
// `Sim::child_name`, `Sim::now`, `Sim::trace`, `Sim::trace_lines`,
// `Sim::clear_trace`, `Sim::modify_count`, `Sim::poll_count`, `Sim::sent`,
// `Sim::buffered`, `Sim::send_capacity`, `Sim::registered`; `SimFd`,
// `SimBackend`, `SimSocket`, `SimSocket::fd`, `SimSocket::name`,
// `StepKind`); and in `net`: `ListenOptions` with `new`,
// `backlog`, `backlog_len`, `reuse_address`, `reuse_port` and `bind`;
// `fd_limits`, `raise_fd_limit`; `AcceptOptions` with `new`, `backoff` and
// `backoff_delay`; `Acceptor::start`, `Acceptor::with_options`,
// `Acceptor::local_addr`, `Acceptor::watcher`, `Acceptor::accepted`,
// `Acceptor::errors_reported`, `Acceptor::failed_attempts`,
// `Acceptor::is_backing_off`, `Acceptor::pause`, `Acceptor::resume`,
// `Acceptor::close`; `Stream`, `ConnId`, `CloseReason`,
// `CloseReason::is_clean`, `ConnEvent`, `ConnOptions` with `new`,
// `read_buffer`, `read_buffer_len`, `watermarks`, `watermark_levels`,
// `idle_timeout`, `idle_timeout_len`, `linger` and `linger_len`;
// `Conn::queued`, `Conn::is_congested`, `Conn::is_eof`, `Conn::is_closing`,
// `Conn::watcher`; `Conns::new`, `Conns::len`, `Conns::is_empty`,
// `Conns::contains`, `Conns::get`, `Conns::get_mut`, `Conns::iter`,
// `Conns::iter_mut`.

mod common;

use std::cell::{Cell, RefCell};
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::rc::Rc;
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime};

use common::{on_every_backend, watchdog, Conn, Peer, World, WATCHDOG};
use evloop::net::{Acceptor, CloseReason, ConnEvent, ConnOptions, Conns, ListenOptions, Stream};
use evloop::{
    Break, ExitStatus, Interest, Loop, Once, Ready, RunMode, RunOutcome, Schedule, Sim, Trigger,
};

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

/// `Loop::spawn`: a child started and watched at once, its output read
/// from the pipe it was given; on the simulator, a simulated child that
/// exits at 1 ms (no program runs, so none fails to start).
#[test]
fn loop_spawn_example() {
    on_every_backend("Loop::spawn example", |name| {
        let w = World::new(name);
        let mut lp: Loop<Option<ExitStatus>> = w.new_loop();
        let mut job = Command::new("sh");
        job.args(["-c", "echo hello; exit 3"])
            .stdout(Stdio::piped());
        let (_watcher, spawned) = lp
            .spawn(&mut job, |lp, got, ev| {
                *got = ev.status;
                lp.remove(ev.watcher).unwrap();
            })
            .unwrap();
        match &w.sim {
            Some(sim) => sim.exit(ms(1), spawned.pid, ExitStatus::Exited(3)),
            None => {
                let mut out = String::new();
                spawned.stdout.unwrap().read_to_string(&mut out).unwrap();
                assert_eq!(out, "hello\n", "{name}");
            }
        }
        let mut got = None;
        assert_eq!(
            lp.run(RunMode::Default, &mut got).unwrap(),
            RunOutcome::NoActiveWatchers,
            "{name}"
        );
        assert_eq!(got, Some(ExitStatus::Exited(3)), "{name}");
        if w.sim.is_none() {
            let none = lp.spawn(&mut Command::new("/no/such/program"), |_, _, _| {});
            assert!(none.is_err(), "{name}");
        }
        assert_eq!(lp.active_count(), 0, "{name}");
    });
}

/// `Loop::kill`: a SIGTERM ends a spawned `sleep`, and once it is reaped
/// nothing more is sent; on the simulator, the child dies of it at 1 ms.
#[test]
fn loop_kill_example() {
    on_every_backend("Loop::kill example", |name| {
        let w = World::new(name);
        let mut lp: Loop<Option<ExitStatus>> = w.new_loop();
        let (job, spawned) = lp
            .spawn(Command::new("sleep").arg("60"), |_, got, ev| {
                *got = ev.status
            })
            .unwrap();
        lp.kill(job, evloop::Signal::TERM).unwrap();
        let by_term = ExitStatus::Signaled {
            signal: evloop::Signal::TERM,
            core_dumped: false,
        };
        if let Some(sim) = &w.sim {
            sim.exit(ms(1), spawned.pid, by_term);
        }
        let mut got = None;
        assert_eq!(
            lp.run(RunMode::Default, &mut got).unwrap(),
            RunOutcome::NoActiveWatchers,
            "{name}"
        );
        assert_eq!(got, Some(by_term), "{name}");
        let err = lp.kill(job, evloop::Signal::TERM).unwrap_err();
        assert!(
            matches!(err, evloop::Error::ChildExited { .. }),
            "{name}: {err}"
        );
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

/// `Loop::child`'s second example: two loops, in two threads, watching
/// one child both hear it. Kernels only: the simulator is one loop's
/// world.
#[test]
#[allow(clippy::zombie_processes)] // the loops reap it
fn loop_child_two_loops_example() {
    for &name in evloop::backends::AVAILABLE {
        common::watchdog(
            &format!("Loop::child two loops example on {name}"),
            common::WATCHDOG,
            move || {
                let mut job = Command::new("sh")
                    .args(["-c", "read _; exit 4"])
                    .stdin(Stdio::piped())
                    .spawn()
                    .unwrap();
                let pid = job.id();
                let (watching, started) = mpsc::channel();
                let other = std::thread::spawn(move || {
                    let mut lp: Loop<Option<ExitStatus>> = World::new(name).new_loop();
                    lp.child(pid, |_, got, ev| *got = ev.status).unwrap();
                    watching.send(()).unwrap();
                    let mut got = None;
                    lp.run(RunMode::Default, &mut got).unwrap();
                    got
                });
                let mut lp: Loop<Option<ExitStatus>> = World::new(name).new_loop();
                lp.child(pid, |_, got, ev| *got = ev.status).unwrap();
                started.recv().unwrap();
                drop(job.stdin.take());
                let mut got = None;
                assert_eq!(
                    lp.run(RunMode::Default, &mut got).unwrap(),
                    RunOutcome::NoActiveWatchers,
                    "{name}"
                );
                assert_eq!(got, Some(ExitStatus::Exited(4)), "{name}");
                assert_eq!(other.join().unwrap(), Some(ExitStatus::Exited(4)), "{name}");
            },
        );
    }
}

/// `ExitStatus::Unknown`: a child reaped by `std` before the loop looks
/// is reported as such, and the run returns; on the simulator, reaped
/// elsewhere at 0 ms.
#[test]
fn exit_status_unknown_example() {
    on_every_backend("ExitStatus::Unknown example", |name| {
        let w = World::new(name);
        let mut lp: Loop<Option<ExitStatus>> = w.new_loop();
        let job = match &w.sim {
            Some(sim) => {
                let pid = sim.spawn("job");
                sim.reap_elsewhere(Duration::ZERO, pid);
                lp.child(pid, |_, got, ev| *got = ev.status).unwrap();
                None
            }
            None => {
                let mut job = Command::new("sh")
                    .args(["-c", "read _; exit 3"])
                    .stdin(Stdio::piped())
                    .spawn()
                    .unwrap();
                lp.child(job.id(), |_, got, ev| *got = ev.status).unwrap();
                drop(job.stdin.take());
                assert_eq!(job.wait().unwrap().code(), Some(3), "{name}");
                Some(job)
            }
        };
        let mut got = None;
        assert_eq!(
            lp.run(RunMode::Default, &mut got).unwrap(),
            RunOutcome::NoActiveWatchers,
            "{name}"
        );
        assert_eq!(got, Some(ExitStatus::Unknown), "{name}");
        drop(job);
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

/// `Sim::raise`: a SIGHUP (sent by a shell to its parent on a kernel, after
/// the watcher exists: unwatched, it would end the test process) is seen
/// once, and the watcher removes itself.
#[test]
fn sim_raise_example() {
    on_every_backend("Sim::raise example", |name| {
        let w = World::new(name);
        let mut lp: Loop<u32> = w.new_loop();
        lp.signal(libc::SIGHUP, |lp, n, me| {
            *n += 1;
            lp.remove(me).unwrap();
        })
        .unwrap();
        match &w.sim {
            Some(sim) => sim.raise(ms(1), libc::SIGHUP),
            None => {
                let kill = Command::new("sh").args(["-c", "kill -HUP $PPID"]).status();
                assert!(kill.unwrap().success());
            }
        }
        let mut n = 0;
        assert_eq!(
            lp.run(RunMode::Default, &mut n).unwrap(),
            RunOutcome::NoActiveWatchers,
            "{name}"
        );
        assert_eq!(n, 1, "{name}");
    });
}

/// `Sim::call_at`: an async watcher woken at 7 ms by a send from outside
/// the loop (on a kernel, a thread that sends 7 ms after it starts; the
/// loop only waits for the send, whenever it comes).
#[test]
fn sim_call_at_example() {
    on_every_backend("Sim::call_at example", |name| {
        let w = World::new(name);
        let mut lp: Loop<Vec<Duration>> = w.new_loop();
        let (_, sender) = lp
            .async_watcher(|lp, log, me| {
                log.push(lp.now());
                lp.remove(me).unwrap();
            })
            .unwrap();
        let worker = match &w.sim {
            Some(sim) => {
                sim.call_at(ms(7), move || sender.send().unwrap());
                None
            }
            None => Some(std::thread::spawn(move || {
                std::thread::sleep(ms(7)); // the scenario's delay, not a synchronisation
                sender.send().unwrap();
            })),
        };
        let mut log = vec![];
        assert_eq!(
            lp.run(RunMode::Default, &mut log).unwrap(),
            RunOutcome::NoActiveWatchers,
            "{name}"
        );
        assert_eq!(log.len(), 1, "{name}: {log:?}");
        assert!(log[0] >= ms(7), "{name}: woken at {:?}", log[0]);
        if let Some(worker) = worker {
            worker.join().unwrap();
        }
    });
}

// ---- timers, once, periodic and stat watchers ----------------------------------

/// `Loop::set_repeat`: a 10 ms repeating timer set to 50 ms at its second
/// tick; the tick after the change was already due 10 ms on.
#[test]
fn loop_set_repeat_example() {
    on_every_backend("Loop::set_repeat example", |name| {
        let mut lp: Loop<Vec<Duration>> = World::new(name).new_loop();
        lp.timer(ms(10), ms(10), |lp, log, me| {
            log.push(lp.now());
            if log.len() == 2 {
                lp.set_repeat(me, ms(50)).unwrap();
            }
            if log.len() == 4 {
                lp.stop(me).unwrap();
            }
        })
        .unwrap();
        let mut log = vec![];
        assert_eq!(
            lp.run(RunMode::Default, &mut log).unwrap(),
            RunOutcome::NoActiveWatchers,
            "{name}"
        );
        assert_eq!(log.len(), 4, "{name}");
        for (at, least) in log.iter().zip([10, 20, 30, 80]) {
            assert!(*at >= ms(least), "{name}: {log:?}");
        }
        if name == "sim" {
            assert_eq!(log, [ms(10), ms(20), ms(30), ms(80)]);
        }
    });
}

/// `Loop::once`: a quiet socket (its peer stays open and silent) times
/// out at 20 ms; the source comes back and nothing is left behind.
#[test]
fn loop_once_example() {
    on_every_backend("Loop::once example", |name| {
        let w = World::new(name);
        let (quiet, _peer) = w.pair();
        let mut lp: Loop<Vec<String>> = w.new_loop();
        lp.once(
            Some((quiet, Interest::READABLE)),
            Some(ms(20)),
            |lp, log, what| match what {
                Once::Ready { ready, .. } => log.push(format!("ready {ready}")),
                Once::TimedOut { source } => {
                    assert!(lp.now() >= ms(20), "timed out at {:?}", lp.now());
                    log.push(format!("timed out, source back: {}", source.is_some()))
                }
            },
        )
        .unwrap();
        let mut log = vec![];
        assert_eq!(
            lp.run(RunMode::Default, &mut log).unwrap(),
            RunOutcome::NoActiveWatchers,
            "{name}"
        );
        assert_eq!(log, ["timed out, source back: true"], "{name}");
        assert_eq!(lp.active_count(), 0, "{name}");
    });
}

/// `OnceWatcher`: a once cancelled by `remove` reports nothing, and the
/// run ends at once (its one-second timeout went with it).
#[test]
fn once_watcher_example() {
    on_every_backend("OnceWatcher example", |name| {
        let w = World::new(name);
        let (quiet, _peer) = w.pair();
        let mut lp: Loop<u32> = w.new_loop();
        let once = lp
            .once(
                Some((quiet, Interest::READABLE)),
                // An hour: a run that waited for it would be stopped by
                // the watchdog, however fast or slow the machine is.
                Some(Duration::from_secs(3600)),
                |_, n, _| *n += 1,
            )
            .unwrap();
        assert!(lp.is_active(once).unwrap(), "{name}");
        lp.remove(once).unwrap();
        let mut n = 0;
        lp.run(RunMode::Default, &mut n).unwrap();
        assert_eq!((n, lp.active_count()), (0, 0), "{name}");
        assert!(lp.is_active(once).is_err(), "{name}");
    });
}

fn since_epoch(t: SystemTime) -> Duration {
    t.duration_since(SystemTime::UNIX_EPOCH).unwrap()
}

/// `Loop::periodic`: `Schedule::every_from` (there every 10 minutes at 5
/// past, here every 20 ms at 5 ms past, on the real wall clock) fires
/// three times, each at or after its slot: the first slot at or after the
/// start, then one interval after the other (a late tick fires once, so
/// the slots never repeat).
#[test]
fn loop_periodic_example() {
    on_every_backend("Loop::periodic example", |name| {
        let (offset, interval) = (ms(5), ms(20));
        let w = World::new(name);
        if let Some(sim) = &w.sim {
            sim.set_wall_clock(SystemTime::UNIX_EPOCH + Duration::from_secs(3600));
        }
        let mut lp: Loop<Vec<Duration>> = w.new_loop();
        let start = since_epoch(lp.wall_now()).as_nanos();
        let (o, i) = (offset.as_nanos(), interval.as_nanos());
        let first = o + (start - o).div_ceil(i) * i;
        lp.periodic(Schedule::every_from(offset, interval), |lp, log, me| {
            log.push(since_epoch(lp.wall_now()));
            if log.len() == 3 {
                lp.stop(me).unwrap();
            }
        })
        .unwrap();
        let mut log = vec![];
        assert_eq!(
            lp.run(RunMode::Default, &mut log).unwrap(),
            RunOutcome::NoActiveWatchers,
            "{name}"
        );
        assert_eq!(log.len(), 3, "{name}");
        for (k, at) in log.iter().enumerate() {
            let slot = first + k as u128 * i;
            assert!(
                at.as_nanos() >= slot,
                "{name}: tick {k} at {at:?}, before {slot} ns"
            );
        }
        if name == "sim" {
            let at = |ms: u64| Duration::from_millis(3_600_000 + ms);
            assert_eq!(log, [at(5), at(25), at(45)]);
        }
    });
}

/// `Schedule::every`: aligned to multiples of the interval on the wall
/// clock, not counted from the start (there every minute from 45 s past
/// one, so first after 15 s; here every 20 ms on the real wall clock, on
/// the simulator from 5 ms past a multiple, so first after 15 ms):
/// each tick at or after its multiple, the first one the first multiple
/// at or after the start.
#[test]
fn schedule_every_example() {
    on_every_backend("Schedule::every example", |name| {
        let interval = ms(20);
        let w = World::new(name);
        if let Some(sim) = &w.sim {
            let start = Duration::from_secs(12 * 3600 + 45) + ms(5);
            sim.set_wall_clock(SystemTime::UNIX_EPOCH + start);
        }
        let mut lp: Loop<Vec<Duration>> = w.new_loop();
        let start = since_epoch(lp.wall_now()).as_nanos();
        let i = interval.as_nanos();
        let first = start.div_ceil(i) * i;
        lp.periodic(Schedule::every(interval), |lp, log, me| {
            log.push(since_epoch(lp.wall_now()));
            if log.len() == 2 {
                lp.stop(me).unwrap();
            }
        })
        .unwrap();
        let mut log = vec![];
        assert_eq!(
            lp.run(RunMode::Default, &mut log).unwrap(),
            RunOutcome::NoActiveWatchers,
            "{name}"
        );
        for (k, at) in log.iter().enumerate() {
            let slot = first + k as u128 * i;
            assert!(
                at.as_nanos() >= slot,
                "{name}: tick {k} at {at:?}, before {slot} ns"
            );
        }
        if name == "sim" {
            let at = |ms: u64| Duration::from_millis((12 * 3600 + 45) * 1000 + ms);
            assert_eq!(log, [at(20), at(40)]);
        }
    });
}

/// A file for a stat mirror: a unique name under the temp directory on a
/// kernel (removed at the drop), the same name in the simulator's files.
struct Files {
    sim: Option<Sim>,
    path: PathBuf,
}

impl Files {
    fn new(w: &World, test: &str) -> Files {
        let file = format!(
            "evloop-doc-mirror-{test}-{}-{}",
            std::process::id(),
            w.backend
        );
        let path = std::env::temp_dir().join(file);
        let _ = std::fs::remove_file(&path);
        Files {
            sim: w.sim.clone(),
            path,
        }
    }

    /// Makes the file `size` bytes long, creating it if need be: bytes
    /// appended in one write (never truncated, so no watcher can see it
    /// shorter on the way); on the simulator, now.
    fn grow(&self, size: u64) {
        match &self.sim {
            Some(sim) => sim.write_file(sim.now(), &self.path, size),
            None => {
                let mut f = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&self.path)
                    .unwrap();
                let have = f.metadata().unwrap().len();
                f.write_all(&vec![b'x'; (size - have) as usize]).unwrap();
            }
        }
    }

    fn remove(&self) {
        match &self.sim {
            Some(sim) => sim.remove_file(sim.now(), &self.path),
            None => std::fs::remove_file(&self.path).unwrap(),
        }
    }
}

impl Drop for Files {
    fn drop(&mut self) {
        if self.sim.is_none() {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// `Loop::stat`: a 10-byte file, watched from 1 ms on (1 s interval), grows
/// to 20 bytes at 50 ms (500 ms there) and is removed at 90 ms (900 ms
/// there) once the growth was seen, all from the loop's own timers; the
/// watcher sees both changes, no earlier than they were made.
#[test]
fn loop_stat_example() {
    on_every_backend("Loop::stat example", |name| {
        let w = World::new(name);
        let files = Rc::new(Files::new(&w, "stat"));
        files.grow(10);
        let mut lp: Loop<Vec<String>> = w.new_loop();
        let f = files.clone();
        lp.timer(ms(1), Duration::ZERO, move |lp, _, _| {
            let g = f.clone();
            lp.stat(&f.path, Duration::from_secs(1), move |lp, log, ev| {
                let (from, to, at) = (ev.previous.size, ev.current.size, lp.now());
                log.push(format!("{from} -> {to}"));
                if ev.current.exists {
                    assert!(at >= ms(50), "grown at {at:?}");
                    let g = g.clone();
                    let after = ms(90).saturating_sub(at);
                    lp.timer(after, Duration::ZERO, move |_, _, _| g.remove())
                        .unwrap();
                } else {
                    assert!(at >= ms(90), "removed at {at:?}");
                    lp.remove(ev.watcher).unwrap();
                }
            })
            .unwrap();
        })
        .unwrap();
        let f = files.clone();
        lp.timer(ms(50), Duration::ZERO, move |_, _, _| f.grow(20))
            .unwrap();
        let mut log = vec![];
        assert_eq!(
            lp.run(RunMode::Default, &mut log).unwrap(),
            RunOutcome::NoActiveWatchers,
            "{name}"
        );
        assert_eq!(log, ["10 -> 20", "20 -> 0"], "{name}");
    });
}

/// `StatEvent`: a file created at 3 ms is seen appear (the watched path,
/// `previous` missing, `current` there); the watcher then stops itself.
#[test]
fn stat_event_example() {
    on_every_backend("StatEvent example", |name| {
        let w = World::new(name);
        let files = Rc::new(Files::new(&w, "stat-event"));
        let mut lp: Loop<Vec<(bool, bool)>> = w.new_loop();
        let path = files.path.clone();
        lp.stat(&files.path, Duration::from_secs(1), move |lp, log, ev| {
            assert!(lp.now() >= ms(3), "seen at {:?}", lp.now());
            assert_eq!(ev.path, path);
            log.push((ev.previous.exists, ev.current.exists));
            lp.stop(ev.watcher).unwrap();
        })
        .unwrap();
        let f = files.clone();
        lp.timer(ms(3), Duration::ZERO, move |_, _, _| f.grow(12))
            .unwrap();
        let mut log = vec![];
        assert_eq!(
            lp.run(RunMode::Default, &mut log).unwrap(),
            RunOutcome::NoActiveWatchers,
            "{name}"
        );
        assert_eq!(log, [(false, true)], "{name}");
    });
}

// ---- the net module ------------------------------------------------------------

/// The connection the loop watches, as a `net` stream: the simulator's
/// sockets have no half-close (as `SimSocket`'s own `Stream`).
impl Stream for Conn {
    fn shutdown_write(&mut self) -> std::io::Result<()> {
        match self {
            Conn::Sim(s) => s.shutdown_write(),
            Conn::Os(s) => s.shutdown(Shutdown::Write),
        }
    }
}

/// A peer driven by a 1 ms repeating timer of the loop (whose thread never
/// waits on it): every tick it reads what has arrived, then
/// `script(now, peer, everything received)` may send; once it returns
/// `false` the peer is dropped (closed) and the timer removed. Returns
/// what it received.
fn scripted_peer<'s, S>(
    lp: &mut Loop<'s, S>,
    peer: Peer,
    mut script: impl FnMut(Duration, &mut Peer, &[u8]) -> bool + 's,
) -> Rc<RefCell<Vec<u8>>> {
    let received = Rc::new(RefCell::new(Vec::new()));
    let got = received.clone();
    let mut peer = Some(peer);
    lp.timer(ms(1), ms(1), move |lp, _, me| {
        let p = peer.as_mut().unwrap();
        got.borrow_mut().extend(p.receive());
        if !script(lp.now(), p, &got.borrow()) {
            peer = None;
            lp.remove(me).unwrap();
        }
    })
    .unwrap();
    received
}

/// Runs `scenario(backend)` on every OS backend (not the simulator), each
/// under the watchdog: for the examples on real TCP sockets or a real
/// half-close, which the simulator has not.
fn on_every_os_backend(what: &str, scenario: fn(&'static str)) {
    for &name in evloop::backends::AVAILABLE {
        watchdog(&format!("{what} on {name}"), WATCHDOG, move || {
            scenario(name)
        });
    }
}

/// The `net` module's example: a TCP echo server for one client on
/// loopback (a thread), accepted in a first run (ended `Broken`), served
/// to the end in a second one once the acceptor is closed.
#[test]
fn net_module_example() {
    on_every_os_backend("net example", |name| {
        let listener = ListenOptions::new()
            .bind("127.0.0.1:0".parse().unwrap())
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let client = std::thread::spawn(move || {
            let mut s = TcpStream::connect(addr).unwrap();
            s.write_all(b"hello, echo").unwrap();
            s.shutdown(Shutdown::Write).unwrap();
            let mut back = String::new();
            s.read_to_string(&mut back).unwrap();
            back
        });
        let mut lp: Loop<Conns<()>> = World::new(name).new_loop();
        let acceptor = Acceptor::start(&mut lp, listener, |lp, conns, accepted| {
            let stream = accepted.expect("accept");
            conns
                .open(
                    lp,
                    stream,
                    ConnOptions::new(),
                    (),
                    |lp, conns, id, ev| match ev {
                        ConnEvent::Data => {
                            let n = conns[id].input().len();
                            conns[id].write_from_input(lp, n);
                        }
                        ConnEvent::Eof => conns[id].close(lp),
                        _ => {}
                    },
                )
                .unwrap();
            lp.break_loop(Break::One);
        })
        .unwrap();
        let mut conns = Conns::new();
        assert_eq!(
            lp.run(RunMode::Default, &mut conns).unwrap(),
            RunOutcome::Broken,
            "{name}"
        );
        acceptor.close(&mut lp).unwrap();
        assert_eq!(
            lp.run(RunMode::Default, &mut conns).unwrap(),
            RunOutcome::NoActiveWatchers,
            "{name}"
        );
        assert_eq!(client.join().unwrap(), "hello, echo", "{name}");
        assert!(conns.is_empty(), "{name}");
    });
}

/// `Acceptor`: one client connects; the run ends `Broken` once it is
/// accepted (a `Default` run that must return).
#[test]
fn acceptor_example() {
    on_every_os_backend("Acceptor example", |name| {
        let listener = ListenOptions::new()
            .bind("127.0.0.1:0".parse().unwrap())
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let mut lp: Loop<Vec<TcpStream>> = World::new(name).new_loop();
        let acceptor = Acceptor::start(&mut lp, listener, |lp, accepted, res| {
            accepted.push(res.expect("accept"));
            lp.break_loop(Break::One);
        })
        .unwrap();
        let _client = TcpStream::connect(addr).unwrap();
        let mut accepted = Vec::new();
        assert_eq!(
            lp.run(RunMode::Default, &mut accepted).unwrap(),
            RunOutcome::Broken,
            "{name}"
        );
        assert_eq!((accepted.len(), acceptor.accepted()), (1, 1), "{name}");
        acceptor.close(&mut lp).unwrap();
    });
}

/// `Conns::open`: an echo over a socket pair whose peer half-closes (so
/// not on the simulator, whose pairs have no half-close); the run ends
/// when the connection is done, and the peer reads its echo to the end.
#[test]
fn conns_open_example() {
    on_every_os_backend("Conns::open example", |name| {
        let (mine, mut peer) = UnixStream::pair().unwrap();
        mine.set_nonblocking(true).unwrap();
        let mut lp: Loop<Conns<()>> = World::new(name).new_loop();
        let mut conns = Conns::new();
        conns
            .open(
                &mut lp,
                mine,
                ConnOptions::new(),
                (),
                |lp, conns, id, ev| match ev {
                    ConnEvent::Data => {
                        let n = conns[id].input().len();
                        conns[id].write_from_input(lp, n);
                    }
                    ConnEvent::Eof => conns[id].close(lp),
                    _ => {}
                },
            )
            .unwrap();
        peer.write_all(b"over a socket pair").unwrap();
        peer.shutdown(Shutdown::Write).unwrap();
        assert_eq!(
            lp.run(RunMode::Default, &mut conns).unwrap(),
            RunOutcome::NoActiveWatchers,
            "{name}"
        );
        let mut back = String::new();
        peer.read_to_string(&mut back).unwrap();
        assert_eq!(back, "over a socket pair", "{name}");
    });
}

/// `Conn`: "ping" in, "pong" out, then a graceful close. The peer sends at
/// 1 ms and closes once it has the reply (the simulated one never closed:
/// its run lasted the 5 s linger).
#[test]
fn conn_example() {
    on_every_backend("Conn example", |name| {
        let w = World::new(name);
        let (sock, peer) = w.pair();
        let mut lp: Loop<Conns<u32>> = w.new_loop();
        let mut sent = false;
        let received = scripted_peer(&mut lp, peer, move |_, p, got| {
            if !std::mem::replace(&mut sent, true) {
                p.send(b"ping\n");
            }
            got != b"pong\n"
        });
        let mut conns = Conns::new();
        conns
            .open(&mut lp, sock, ConnOptions::new(), 0, |lp, conns, id, ev| {
                if let ConnEvent::Data = ev {
                    let c = &mut conns[id];
                    c.data += c.input().len() as u32;
                    c.consume(c.input().len());
                    c.write(lp, b"pong\n");
                    c.close(lp);
                }
            })
            .unwrap();
        assert_eq!(
            lp.run(RunMode::Default, &mut conns).unwrap(),
            RunOutcome::NoActiveWatchers,
            "{name}"
        );
        assert_eq!(*received.borrow(), b"pong\n", "{name}");
        assert!(conns.is_empty(), "{name}");
    });
}

/// `Conn::abort`: closed at once, its entry still there for its last event.
#[test]
fn conn_abort_example() {
    on_every_backend("Conn::abort example", |name| {
        let w = World::new(name);
        let (sock, _peer) = w.pair();
        let mut lp: Loop<Conns<bool>> = w.new_loop();
        let aborted = Rc::new(Cell::new(false));
        let seen = aborted.clone();
        let mut conns = Conns::new();
        let id = conns
            .open(
                &mut lp,
                sock,
                ConnOptions::new(),
                false,
                move |_, conns, id, ev| {
                    if let ConnEvent::Closed(CloseReason::Aborted) = ev {
                        conns[id].data = true;
                        seen.set(true);
                    }
                },
            )
            .unwrap();
        conns[id].abort(&mut lp);
        assert_eq!(
            lp.run(RunMode::Default, &mut conns).unwrap(),
            RunOutcome::NoActiveWatchers,
            "{name}"
        );
        assert!(aborted.get(), "{name}");
        assert!(conns.is_empty(), "{name}");
    });
}

/// `Conn::close`: "last words" are flushed before the half-close; the peer
/// closes too at 3 ms (once it has them), and the close is clean.
#[test]
fn conn_close_example() {
    on_every_backend("Conn::close example", |name| {
        let w = World::new(name);
        let (sock, peer) = w.pair();
        let mut lp: Loop<Conns<()>> = w.new_loop();
        let received = scripted_peer(&mut lp, peer, |now, _, got| {
            !(now >= ms(3) && got == b"last words")
        });
        let closed = Rc::new(Cell::new(false));
        let seen = closed.clone();
        let mut conns = Conns::new();
        let id = conns
            .open(
                &mut lp,
                sock,
                ConnOptions::new(),
                (),
                move |lp, _, _, ev| {
                    if let ConnEvent::Closed(reason) = ev {
                        assert!(reason.is_clean(), "{reason:?}");
                        assert!(lp.now() >= ms(3), "closed at {:?}", lp.now());
                        seen.set(true);
                    }
                },
            )
            .unwrap();
        conns[id].write(&mut lp, b"last words");
        conns[id].close(&mut lp);
        assert_eq!(
            lp.run(RunMode::Default, &mut conns).unwrap(),
            RunOutcome::NoActiveWatchers,
            "{name}"
        );
        assert!(closed.get(), "{name}");
        assert_eq!(*received.borrow(), b"last words", "{name}");
    });
}

/// `Conn::consume`: "ab" at 1 ms is kept until "cd" arrives at 2 ms; the
/// four bytes go back in capitals, then a graceful close (the peer closes
/// once it has them).
#[test]
fn conn_consume_example() {
    on_every_backend("Conn::consume example", |name| {
        let w = World::new(name);
        let (sock, peer) = w.pair();
        let mut lp: Loop<Conns<()>> = w.new_loop();
        let mut ticks = 0;
        let received = scripted_peer(&mut lp, peer, move |_, p, got| {
            ticks += 1;
            match ticks {
                1 => p.send(b"ab"),
                2 => p.send(b"cd"),
                _ => {}
            }
            got != b"ABCD"
        });
        let mut conns = Conns::new();
        conns
            .open(
                &mut lp,
                sock,
                ConnOptions::new(),
                (),
                |lp, conns, id, ev| {
                    if let ConnEvent::Data = ev {
                        let c = &mut conns[id];
                        if c.input().len() == 4 {
                            c.write(lp, c.input().to_ascii_uppercase().as_slice());
                            c.consume(4);
                            c.close(lp);
                        }
                    }
                },
            )
            .unwrap();
        assert_eq!(
            lp.run(RunMode::Default, &mut conns).unwrap(),
            RunOutcome::NoActiveWatchers,
            "{name}"
        );
        assert_eq!(*received.borrow(), b"ABCD", "{name}");
    });
}

/// `Conn::input`: what has arrived is there; the handler ends the run
/// (`Broken`: a `Default` run that must return), having sent nothing.
#[test]
fn conn_input_example() {
    on_every_backend("Conn::input example", |name| {
        let w = World::new(name);
        let (sock, mut peer) = w.pair();
        peer.send(b"GET /\r\n");
        let mut lp: Loop<Conns<usize>> = w.new_loop();
        let mut conns = Conns::new();
        let id = conns
            .open(&mut lp, sock, ConnOptions::new(), 0, |lp, conns, id, ev| {
                if let ConnEvent::Data = ev {
                    assert_eq!(conns[id].input(), b"GET /\r\n");
                    conns[id].data += 1;
                    lp.break_loop(Break::One);
                }
            })
            .unwrap();
        assert_eq!(
            lp.run(RunMode::Default, &mut conns).unwrap(),
            RunOutcome::Broken,
            "{name}"
        );
        let c = &conns[id];
        assert_eq!((c.data, c.input().len()), (1, 7), "{name}");
        assert_eq!(peer.receive(), b"", "{name}");
    });
}

/// `Conn::write_from_input`: an echo; the peer closes at 2 ms once it has
/// it, and the connection closes on its end of file.
#[test]
fn conn_write_from_input_example() {
    on_every_backend("Conn::write_from_input example", |name| {
        let w = World::new(name);
        let (sock, peer) = w.pair();
        let mut lp: Loop<Conns<()>> = w.new_loop();
        let mut sent = false;
        let received = scripted_peer(&mut lp, peer, move |now, p, got| {
            if !std::mem::replace(&mut sent, true) {
                p.send(b"echo me");
            }
            !(now >= ms(2) && got == b"echo me")
        });
        let mut conns = Conns::new();
        conns
            .open(
                &mut lp,
                sock,
                ConnOptions::new(),
                (),
                |lp, conns, id, ev| match ev {
                    ConnEvent::Data => {
                        let n = conns[id].input().len();
                        conns[id].write_from_input(lp, n);
                    }
                    ConnEvent::Eof => conns[id].close(lp),
                    _ => {}
                },
            )
            .unwrap();
        assert_eq!(
            lp.run(RunMode::Default, &mut conns).unwrap(),
            RunOutcome::NoActiveWatchers,
            "{name}"
        );
        assert_eq!(*received.borrow(), b"echo me", "{name}");
        assert!(conns.is_empty(), "{name}");
    });
}

/// `Conns`: a server state with more than its connections counts the
/// lines a peer sends before it closes; the connection closes on its end
/// of file.
#[test]
fn conns_example() {
    #[derive(Default)]
    struct Server {
        conns: Conns<()>,
        lines: usize,
    }
    impl AsMut<Conns<()>> for Server {
        fn as_mut(&mut self) -> &mut Conns<()> {
            &mut self.conns
        }
    }
    on_every_backend("Conns example", |name| {
        let w = World::new(name);
        let (sock, mut peer) = w.pair();
        peer.send(b"a\nb\n");
        drop(peer);
        let mut lp: Loop<Server> = w.new_loop();
        let mut server = Server::default();
        server
            .conns
            .open(
                &mut lp,
                sock,
                ConnOptions::new(),
                (),
                |lp, server: &mut Server, id, ev| match ev {
                    ConnEvent::Data => {
                        let c = &mut server.conns[id];
                        server.lines += c.input().iter().filter(|&&b| b == b'\n').count();
                        c.consume(c.input().len());
                    }
                    ConnEvent::Eof => server.conns[id].close(lp),
                    _ => {}
                },
            )
            .unwrap();
        assert_eq!(
            lp.run(RunMode::Default, &mut server).unwrap(),
            RunOutcome::NoActiveWatchers,
            "{name}"
        );
        assert_eq!(server.lines, 2, "{name}");
        assert!(server.conns.is_empty(), "{name}");
    });
}

/// `Conns::close_all`: three connections whose peers never close each
/// close after their linger (20 ms here, the default 5 s there).
#[test]
fn conns_close_all_example() {
    on_every_backend("Conns::close_all example", |name| {
        let w = World::new(name);
        let mut lp: Loop<Conns<()>> = w.new_loop();
        let mut conns = Conns::new();
        let mut peers = vec![];
        for _ in 0..3 {
            let (sock, peer) = w.pair();
            peers.push(peer);
            let opts = ConnOptions::new().linger(ms(20));
            conns
                .open(&mut lp, sock, opts, (), |_, _, _, _| {})
                .unwrap();
        }
        conns.close_all(&mut lp);
        assert_eq!(
            lp.run(RunMode::Default, &mut conns).unwrap(),
            RunOutcome::NoActiveWatchers,
            "{name}"
        );
        assert!(conns.is_empty(), "{name}");
        assert!(lp.now() >= ms(20), "{name}: {:?}", lp.now());
        drop(peers);
    });
}

/// `Loop::set_callback`: a repeating timer's first callback installs the
/// next one, which removes it (there at 1 s and 2 s, here every 5 ms).
#[test]
fn loop_set_callback_example() {
    on_every_backend("Loop::set_callback example", |name| {
        let mut lp: Loop<Vec<String>> = World::new(name).new_loop();
        lp.timer(ms(5), ms(5), |lp, log, me| {
            log.push("first".into());
            lp.set_callback(me, |lp, log, me| {
                log.push("then".into());
                lp.remove(me).unwrap();
            })
            .unwrap();
        })
        .unwrap();
        let mut log = vec![];
        assert_eq!(
            lp.run(RunMode::Default, &mut log).unwrap(),
            RunOutcome::NoActiveWatchers,
            "{name}"
        );
        assert_eq!(log, ["first", "then"], "{name}");
        assert!(lp.now() >= ms(10), "{name}: {:?}", lp.now());
    });
}

/// `Loop::set_io_callback`: the new callback reads what the peer sent
/// from the source the watcher owns, and removes it.
#[test]
fn loop_set_io_callback_example() {
    on_every_backend("Loop::set_io_callback example", |name| {
        let w = World::new(name);
        let (sock, mut peer) = w.pair();
        let mut lp: Loop<Vec<u8>> = w.new_loop();
        let io = lp
            .io(sock, Interest::READABLE, |_, _, _| unreachable!())
            .unwrap();
        lp.set_io_callback(io, |lp, got, ev: evloop::IoEvent<'_, Conn>| {
            got.extend(common::drain(ev.source));
            lp.remove(ev.watcher).unwrap();
        })
        .unwrap();
        peer.send(b"hello");
        let mut got = vec![];
        assert_eq!(
            lp.run(RunMode::Default, &mut got).unwrap(),
            RunOutcome::NoActiveWatchers,
            "{name}"
        );
        assert_eq!(got, b"hello", "{name}");
    });
}

/// `Loop::set_borrowed_io_callback`: the same with a borrowed source.
#[test]
fn loop_set_borrowed_io_callback_example() {
    on_every_backend("Loop::set_borrowed_io_callback example", |name| {
        let w = World::new(name);
        let (sock, mut peer) = w.pair();
        let mut lp: Loop<usize> = w.new_loop();
        let io = lp
            .io_borrowed(&sock, Interest::READABLE, |_, _, _| unreachable!())
            .unwrap();
        lp.set_borrowed_io_callback(io, &sock, |lp, n, ev| {
            let mut buf = [0; 8];
            let mut source: &Conn = ev.source;
            *n += source.read(&mut buf).unwrap();
            lp.remove(ev.watcher).unwrap();
        })
        .unwrap();
        peer.send(b"hi");
        let mut n = 0;
        assert_eq!(
            lp.run(RunMode::Default, &mut n).unwrap(),
            RunOutcome::NoActiveWatchers,
            "{name}"
        );
        assert_eq!(n, 2, "{name}");
        drop(lp);
    });
}

/// `Loop::now_wall`: a periodic's callback sees a wall time at or after
/// its slot (there the minute after 100 s on the simulator's wall clock,
/// here the next 20 ms slot of the real one), and the watcher stops.
#[test]
fn loop_now_wall_example() {
    on_every_backend("Loop::now_wall example", |name| {
        let mut lp: Loop<Vec<Duration>> = World::new(name).new_loop();
        let interval = ms(20);
        let start = since_epoch(lp.wall_now()).as_nanos();
        let slot = start.div_ceil(interval.as_nanos()) * interval.as_nanos();
        lp.periodic(Schedule::every(interval), |lp, log, me| {
            log.push(since_epoch(lp.now_wall()));
            lp.stop(me).unwrap();
        })
        .unwrap();
        let mut log = vec![];
        assert_eq!(
            lp.run(RunMode::Default, &mut log).unwrap(),
            RunOutcome::NoActiveWatchers,
            "{name}"
        );
        assert_eq!(log.len(), 1, "{name}");
        assert!(log[0].as_nanos() >= slot, "{name}: {log:?}, slot {slot}");
    });
}

/// `Loop::async_pending`: pending from a send made by a joined thread,
/// taken (not pending) in the callback, which removes the watcher.
#[test]
fn loop_async_pending_example() {
    on_every_backend("Loop::async_pending example", |name| {
        let mut lp: Loop<Vec<(bool, bool)>> = World::new(name).new_loop();
        let (a, sender) = lp
            .async_watcher(|lp, seen, me| {
                seen.push((lp.async_pending(me).unwrap(), lp.is_pending(me).unwrap()));
                lp.remove(me).unwrap();
            })
            .unwrap();
        assert!(!lp.async_pending(a).unwrap(), "{name}");
        std::thread::spawn(move || sender.send().unwrap())
            .join()
            .unwrap();
        assert!(
            lp.async_pending(a).unwrap() && lp.is_pending(a).unwrap(),
            "{name}"
        );
        let mut seen = vec![];
        assert_eq!(
            lp.run(RunMode::Default, &mut seen).unwrap(),
            RunOutcome::NoActiveWatchers,
            "{name}"
        );
        assert_eq!(seen, [(false, false)], "{name}");
    });
}
