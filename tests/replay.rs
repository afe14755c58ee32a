//! evloop::replay: a real TCP server recorded on a kernel backend, then
//! replayed from its trace on the replay backend (virtual fds, the
//! recorded clock), callback by callback.
//!
//! - The planted bug: a line server that answers the requests it has read
//!   and then, to be done with the client, aborts instead of closing
//!   gracefully, so the replies queued in that pass are lost. Clients that
//!   send their requests and half-close at once. Recorded on epoll, poll
//!   and io_uring (with its feature, skipped loudly where the kernel
//!   refuses), replayed: the same log (iteration, loop time, fd, event,
//!   data) and the same failures at the same iterations. The fixed server
//!   replays its own trace clean, and diverges from the buggy one at the
//!   first lost reply (a write the recording does not have).
//! - 1,000 connections of echo traffic, from a client thread, replay with
//!   no divergence.
//! - The limits, detected: a read behind the loop's back, `fd_io` on a
//!   real fd during a replay, a trace cut off, a program that stops early.

mod common;
/// Traces as untrusted input: the known defects, and the property.
#[path = "replay/untrusted.rs"]
mod untrusted;

/// Counts what each thread holds allocated (`untrusted`'s bound).
#[global_allocator]
static COUNTING: evloop::conformance::CountingAllocator = evloop::conformance::CountingAllocator;

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::fd::AsRawFd;
use std::time::Duration;

use evloop::net::{Acceptor, ConnEvent, ConnOptions, Conns, ListenOptions, Listener, Stream};
use evloop::replay::{Divergence, MemoryTrace, Recorded, Recorder, Replay};
use evloop::{Break, Loop, RunMode, Sim, Source};

use common::{fd_of, watchdog, WATCHDOG};

/// The server's state: its connections, what it did, what went wrong.
#[derive(Default)]
struct Server {
    conns: Conns<()>,
    buggy: bool,
    /// One line per event: iteration, loop time, fd, what.
    log: Vec<String>,
    /// The bug, each time it bites: iteration, fd, what was lost.
    failures: Vec<String>,
    closed: usize,
    expect: usize,
}

impl AsMut<Conns<()>> for Server {
    fn as_mut(&mut self) -> &mut Conns<()> {
        &mut self.conns
    }
}

/// The line server, on any listener: what is recorded on a kernel and
/// replayed on the replay's listener, unchanged.
fn serve<L>(lp: &mut Loop<'static, Server>, listener: L) -> Acceptor
where
    L: Listener,
    L::Stream: Stream,
{
    Acceptor::start(lp, listener, |lp, st: &mut Server, accepted| {
        let stream = match accepted {
            Ok(s) => s,
            Err(e) => {
                st.log.push(format!("accept failed: {e}"));
                return;
            }
        };
        let fd = fd_of(&stream);
        st.log.push(format!(
            "it{} {:?} fd{fd} accepted",
            lp.iteration(),
            lp.now()
        ));
        let buggy = st.buggy;
        st.conns
            .open(
                lp,
                stream,
                ConnOptions::new(),
                (),
                move |lp, st: &mut Server, id, ev| {
                    let it = lp.iteration();
                    let now = lp.now();
                    let c = &mut st.conns[id];
                    let fd = format!("io{:?}", c.watcher());
                    match ev {
                        ConnEvent::Data => {
                            while let Some(end) = c.input().iter().position(|&b| b == b'\n') {
                                let line = c.input()[..end].to_vec();
                                c.consume(end + 1);
                                let mut reply = b"OK ".to_vec();
                                reply.extend_from_slice(&line);
                                reply.push(b'\n');
                                c.write(lp, &reply);
                                st.log.push(format!(
                                    "it{it} {now:?} {fd} request {:?}",
                                    String::from_utf8_lossy(&line)
                                ));
                            }
                            if buggy {
                                c.abort(lp); // the bug: drops what is queued
                            }
                        }
                        ConnEvent::Eof => {
                            st.log.push(format!("it{it} {now:?} {fd} eof"));
                            c.close(lp);
                        }
                        ConnEvent::Closed(reason) => {
                            let unsent = c.queued();
                            st.log.push(format!(
                                "it{it} {now:?} {fd} closed {reason:?} unsent {unsent}"
                            ));
                            if unsent > 0 {
                                st.failures.push(format!(
                                    "it{it} {now:?} {fd}: a reply of {unsent} bytes lost"
                                ));
                            }
                            st.closed += 1;
                            if st.closed == st.expect {
                                lp.break_loop(Break::All);
                            }
                        }
                        _ => {}
                    }
                },
            )
            .expect("open a connection");
    })
    .expect("start the acceptor")
}

/// What one run of the server left.
struct Outcome {
    log: Vec<String>,
    failures: Vec<String>,
    /// Each client's reply, in connection order (recording runs only).
    replies: Vec<String>,
    listener_fd: i32,
}

const CLIENTS: usize = 8;

/// Records the line server on `backend` under clients that each send a
/// request (two for every third) and half-close at once, before the server
/// runs: each first read finds every request of its client.
/// `None` if the backend cannot be made here.
fn record_lines(backend: &str, buggy: bool, trace: &MemoryTrace) -> Option<Outcome> {
    let listener = ListenOptions::new()
        .bind("127.0.0.1:0".parse().unwrap())
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let listener_fd = listener.as_raw_fd();
    let mut lp: Loop<'static, Server> = common::recording_loop(backend, trace)?;
    let clients: Vec<TcpStream> = (0..CLIENTS)
        .map(|i| {
            let mut c = TcpStream::connect(addr).unwrap();
            let mut req = format!("get {i}\n");
            if i % 3 == 0 {
                req.push_str(&format!("put {i}\n"));
            }
            c.write_all(req.as_bytes()).unwrap();
            c.shutdown(Shutdown::Write).unwrap();
            c
        })
        .collect();
    // Recorded: what the server accepts, reads and writes goes to the
    // trace (the replay gives it the replay's listener instead).
    let acceptor = serve(&mut lp, Recorded::new(listener));
    let mut st = Server {
        buggy,
        expect: CLIENTS,
        ..Server::default()
    };
    lp.run(RunMode::Default, &mut st).unwrap();
    acceptor.close(&mut lp).unwrap();
    drop(lp);
    let replies = clients
        .into_iter()
        .map(|mut c| {
            let mut s = String::new();
            c.read_to_string(&mut s).unwrap_or_default();
            s
        })
        .collect();
    Some(Outcome {
        log: st.log,
        failures: st.failures,
        replies,
        listener_fd,
    })
}

/// Replays `trace` with the line server (buggy or not) on the replay's
/// listener `listener_fd`: what it logged, and the divergence if any.
fn replay_lines(
    trace: &MemoryTrace,
    buggy: bool,
    listener_fd: i32,
) -> (Outcome, Option<Divergence>) {
    let replay = Replay::from_bytes(trace.bytes()).unwrap();
    let mut lp: Loop<'static, Server> = Loop::with_backend(replay.backend());
    let acceptor = serve(&mut lp, replay.listener(listener_fd));
    let mut st = Server {
        buggy,
        expect: CLIENTS,
        ..Server::default()
    };
    let ran = lp.run(RunMode::Default, &mut st);
    if ran.is_ok() {
        acceptor.close(&mut lp).unwrap();
    }
    drop(lp);
    let finished = replay.finish();
    if let Err(e) = &ran {
        let d = Divergence::of(e).expect("run fails only with a divergence");
        assert_eq!(
            Some(d),
            finished.as_ref().err(),
            "run's divergence is the replay's"
        );
    }
    let out = Outcome {
        log: st.log,
        failures: st.failures,
        replies: Vec::new(),
        listener_fd,
    };
    match finished {
        Ok(summary) => {
            assert!(summary.complete, "the trace was complete: {summary:?}");
            assert!(summary.polls > 0 && summary.reads > 0);
            (out, None)
        }
        Err(d) => (out, Some(d)),
    }
}

/// The round trip on one kernel backend: the bug recorded, then replayed.
fn planted_bug_round_trip(backend: &'static str) {
    watchdog(&format!("planted bug on {backend}"), WATCHDOG, move || {
        let trace = MemoryTrace::new();
        let Some(rec) = record_lines(backend, true, &trace) else {
            return;
        };
        // The clients provoked the bug: replies were lost, and the server
        // saw each loss.
        assert!(
            rec.replies.iter().all(String::is_empty),
            "{:?}",
            rec.replies
        );
        assert_eq!(rec.failures.len(), CLIENTS, "{:#?}", rec.log);
        // Replayed: the same callbacks, times, data; the same failures at
        // the same iterations.
        let (rep, div) = replay_lines(&trace, true, rec.listener_fd);
        assert_eq!(div, None);
        assert_eq!(rep.log, rec.log);
        assert_eq!(rep.failures, rec.failures);

        // The fixed server, recorded: every reply arrives, nothing lost,
        // and its trace replays clean.
        let fixed = MemoryTrace::new();
        let rec_fixed = record_lines(backend, false, &fixed).unwrap();
        assert!(rec_fixed.failures.is_empty());
        for (i, r) in rec_fixed.replies.iter().enumerate() {
            let mut want = format!("OK get {i}\n");
            if i % 3 == 0 {
                want.push_str(&format!("OK put {i}\n"));
            }
            assert_eq!(*r, want);
        }
        let (rep_fixed, div) = replay_lines(&fixed, false, rec_fixed.listener_fd);
        assert_eq!(div, None);
        assert_eq!(rep_fixed.log, rec_fixed.log);

        // The fix replayed against the buggy trace: it diverges where the
        // bug bit first, at a write the recording does not have.
        let (_, div) = replay_lines(&trace, false, rec.listener_fd);
        let d = div.expect("the fixed server diverges from the buggy trace");
        let first = &rec.failures[0];
        assert!(
            first.starts_with(&format!("it{} ", d.iteration)),
            "diverged at iteration {}, the bug first bit at {first}",
            d.iteration
        );
        assert!(d.actual.starts_with("a write of"), "{d}");
        assert!(d.actual.contains("OK get"), "{d}");
        assert_eq!(d.fd, d.callback_fd, "{d}");
        let msg = d.to_string();
        assert!(msg.contains(&format!("iteration {}", d.iteration)), "{msg}");
    });
}

#[cfg(target_os = "linux")]
#[test]
fn planted_bug_round_trip_on_epoll() {
    planted_bug_round_trip("epoll");
}

#[test]
fn planted_bug_round_trip_on_poll() {
    planted_bug_round_trip("poll");
}

#[cfg(all(feature = "io-uring", target_os = "linux"))]
#[test]
fn planted_bug_round_trip_on_io_uring() {
    planted_bug_round_trip("io_uring");
}

/// An echo server of `Conns` on any listener, stopping after `expect`
/// connections closed.
fn echo<L>(lp: &mut Loop<'static, Server>, listener: L) -> Acceptor
where
    L: Listener,
    L::Stream: Stream,
{
    Acceptor::start(lp, listener, |lp, st: &mut Server, accepted| {
        let Ok(stream) = accepted else { return };
        st.conns
            .open(
                lp,
                stream,
                ConnOptions::new(),
                (),
                |lp, st: &mut Server, id, ev| {
                    let it = lp.iteration();
                    let c = &mut st.conns[id];
                    match ev {
                        ConnEvent::Data => {
                            let n = c.input().len();
                            st.log.push(format!(
                                "it{it} {:?} {:?} {:?}",
                                lp.now(),
                                c.watcher(),
                                String::from_utf8_lossy(c.input())
                            ));
                            c.write_from_input(lp, n);
                        }
                        ConnEvent::Eof => c.close(lp),
                        ConnEvent::Closed(_) => {
                            st.closed += 1;
                            if st.closed == st.expect {
                                lp.break_loop(Break::All);
                            }
                        }
                        _ => {}
                    }
                },
            )
            .expect("open a connection");
    })
    .expect("start the acceptor")
}

#[cfg(target_os = "linux")]
#[test]
fn a_thousand_connections_of_echo_replay_with_no_divergence() {
    const N: usize = 1000;
    evloop::net::raise_fd_limit().unwrap();
    watchdog("1,000 echo connections", Duration::from_secs(60), || {
        let listener = ListenOptions::new()
            .bind("127.0.0.1:0".parse().unwrap())
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let listener_fd = listener.as_raw_fd();
        let trace = MemoryTrace::new();
        let mut lp: Loop<'static, Server> = Loop::builder()
            .backend("epoll")
            .record(trace.clone())
            .build()
            .unwrap();
        // The clients, in a thread of their own, as real traffic is: all
        // connect and send, then each half-closes and reads its echo.
        let client = std::thread::spawn(move || {
            let mut conns: Vec<(TcpStream, String)> = (0..N)
                .map(|i| {
                    let mut c = TcpStream::connect(addr).unwrap();
                    let msg = format!("hello from client {i}\n").repeat(1 + i % 4);
                    c.write_all(msg.as_bytes()).unwrap();
                    (c, msg)
                })
                .collect();
            for (c, msg) in &mut conns {
                c.shutdown(Shutdown::Write).unwrap();
                let mut back = String::new();
                c.read_to_string(&mut back).unwrap();
                assert_eq!(back, *msg);
            }
        });
        let acceptor = echo(&mut lp, Recorded::new(listener));
        let mut st = Server {
            expect: N,
            ..Server::default()
        };
        lp.run(RunMode::Default, &mut st).unwrap();
        acceptor.close(&mut lp).unwrap();
        drop(lp);
        client.join().unwrap();
        let recorded = st.log;
        assert!(recorded.len() >= N);

        let replay = Replay::from_bytes(trace.bytes()).unwrap();
        let mut lp: Loop<'static, Server> = Loop::with_backend(replay.backend());
        let acceptor = echo(&mut lp, replay.listener(listener_fd));
        let mut st = Server {
            expect: N,
            ..Server::default()
        };
        lp.run(RunMode::Default, &mut st).unwrap();
        acceptor.close(&mut lp).unwrap();
        drop(lp);
        let summary = replay.finish().unwrap();
        assert!(summary.complete);
        assert_eq!(st.log, recorded);
        assert!(summary.bytes_read >= N as u64 * 20, "{summary:?}");
        assert_eq!(summary.bytes_read, summary.bytes_written, "{summary:?}");
        eprintln!(
            "1,000 connections: a trace of {} bytes, {summary:?}",
            trace.len()
        );
    });
}

/// Records `program` on the simulator (through a `Recorder`), with one
/// socket that receives `ping` at 1 ms.
fn record_on_sim(
    program: fn(&mut Loop<'static, Vec<String>>, evloop::SimSocket),
) -> (MemoryTrace, i32, Vec<String>) {
    let sim = Sim::new();
    let sock = sim.socket("peer", 64);
    let fd = sock.fd();
    sim.deliver(Duration::from_millis(1), &sock, b"ping");
    let trace = MemoryTrace::new();
    let mut log = Vec::new();
    {
        let rec = Recorder::new(Box::new(sim.backend()), trace.clone()).unwrap();
        let mut lp: Loop<'static, Vec<String>> = Loop::with_backend(rec);
        program(&mut lp, sock);
        lp.run(RunMode::Default, &mut log).unwrap();
    }
    (trace, fd, log)
}

/// A program for [`record_on_sim`] and its replay: a 1 ms repeating
/// timer that logs `now()` and removes itself after `STOP` ticks.
fn ticks<const STOP: usize>(lp: &mut Loop<'static, Vec<String>>, _sock: evloop::SimSocket) {
    lp.timer(
        Duration::from_millis(1),
        Duration::from_millis(1),
        |lp, log, me| {
            log.push(format!("{:?}", lp.now()));
            if log.len() == STOP {
                lp.remove(me).unwrap();
            }
        },
    )
    .unwrap();
}

#[test]
fn a_read_behind_the_loops_back_is_reported_on_replay() {
    // The program reads its socket itself (std's Read), outside
    // evloop's recorded paths: the recording has the readiness, not the
    // bytes.
    fn program<T: Read + Source + 'static>(lp: &mut Loop<'static, Vec<String>>, sock: T) {
        lp.io(sock, evloop::Interest::READABLE, |lp, log, ev| {
            let mut buf = [0u8; 16];
            let n = ev.source.read(&mut buf).unwrap_or(0);
            log.push(String::from_utf8_lossy(&buf[..n]).into_owned());
            lp.remove(ev.watcher).unwrap();
        })
        .unwrap();
    }
    let (trace, fd, log) = record_on_sim(program);
    assert_eq!(log, ["ping"]);
    let replay = Replay::from_bytes(trace.bytes()).unwrap();
    let mut lp: Loop<'static, Vec<String>> = Loop::with_backend(replay.backend());
    program(&mut lp, replay.socket(fd));
    let mut log = Vec::new();
    let ran = lp.run(RunMode::Default, &mut log);
    // Never the bytes made up: no data, and a divergence naming the read.
    assert_eq!(log, [""]);
    let d = replay.divergence().expect("a divergence");
    assert_eq!((d.fd, d.callback_fd, d.iteration), (Some(fd), Some(fd), 1));
    assert!(d.actual.starts_with("a read of up to 16 bytes"), "{d}");
    // The socket was watched unwrapped: the recording noted it, and the
    // hint says so.
    assert!(
        d.hint
            .unwrap()
            .contains("watched without the recording layer"),
        "{d}"
    );
    // `run` ended by running out of watchers here (the callback removed
    // itself); `finish` still reports it.
    assert!(ran.is_ok());
    drop(lp);
    assert_eq!(replay.finish().unwrap_err(), d);
}

#[test]
fn an_unwrapped_kernel_socket_read_with_fd_io_is_noted_when_watched_and_named_on_replay() {
    // `backends::fd_io::read` on a bare TcpStream, recorded on epoll: the
    // recording notes the fd when its watcher starts (its reads are not
    // recorded); a replay that needs no read completes and lists it; one
    // that reads diverges there, saying why.
    watchdog("fd_io unwrapped", WATCHDOG, unwrapped_fd_io);
}

fn unwrapped_fd_io() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (server, _) = listener.accept().unwrap();
    server.set_nonblocking(true).unwrap();
    let fd = server.as_raw_fd();
    client.write_all(b"ping").unwrap();
    let trace = MemoryTrace::new();
    let mut log: Vec<String> = Vec::new();
    {
        let mut lp: Loop<'static, Vec<String>> = Loop::builder()
            .backend("epoll")
            .record(trace.clone())
            .build()
            .unwrap();
        lp.io(server, evloop::Interest::READABLE, |lp, log, ev| {
            let mut buf = [0u8; 16];
            let n = evloop::backends::fd_io::read(&*ev.source, &mut buf).unwrap();
            log.push(String::from_utf8_lossy(&buf[..n]).into_owned());
            lp.remove(ev.watcher).unwrap();
        })
        .unwrap();
        lp.run(RunMode::Default, &mut log).unwrap();
    }
    assert_eq!(log, ["ping"]);

    // Replayed without reading: complete, the fd listed.
    let replay = Replay::from_bytes(trace.bytes()).unwrap();
    {
        let mut lp: Loop<'static, Vec<String>> = Loop::with_backend(replay.backend());
        lp.io(
            replay.socket(fd),
            evloop::Interest::READABLE,
            |lp, _, ev| {
                lp.remove(ev.watcher).unwrap();
            },
        )
        .unwrap();
        lp.run(RunMode::Default, &mut Vec::new()).unwrap();
    }
    let summary = replay.finish().unwrap();
    assert!(summary.complete);
    assert_eq!(summary.unrecorded_fds, [fd]);
    drop(replay);

    // Replayed reading: the read has no record, and the hint names why.
    let (replay, _) = replay_one_read(&trace, fd);
    let d = replay.finish().unwrap_err();
    assert_eq!((d.fd, d.callback_fd), (Some(fd), Some(fd)));
    assert!(d.actual.starts_with("a read of up to 16 bytes"), "{d}");
    let hint = d.hint.expect("a hint");
    assert!(hint.contains("watched without the recording layer"), "{d}");
    assert!(hint.contains("backends::fd_io::read"), "{d}");
}

/// A program that reads `sock` once (up to 16 bytes) when it is
/// readable, then removes its watcher.
fn read_once<T: Read + Source + 'static>(lp: &mut Loop<'static, Vec<String>>, sock: T) {
    lp.io(sock, evloop::Interest::READABLE, |lp, _, ev| {
        let _ = ev.source.read(&mut [0u8; 16]);
        lp.remove(ev.watcher).unwrap();
    })
    .unwrap();
}

/// Replays `trace` through [`read_once`] on the replay's socket `fd`: the
/// replay, and how `run` ended.
fn replay_one_read(trace: &MemoryTrace, fd: i32) -> (Replay, evloop::Result<evloop::RunOutcome>) {
    let replay = Replay::from_bytes(trace.bytes()).unwrap();
    let ran = {
        let mut lp: Loop<'static, Vec<String>> = Loop::with_backend(replay.backend());
        read_once(&mut lp, replay.socket(fd));
        lp.run(RunMode::Default, &mut Vec::new())
    };
    (replay, ran)
}

#[test]
fn a_recorded_socket_is_not_noted() {
    // The same socket wrapped in Recorded: its watcher is not noted.
    let (trace, fd, _) = record_on_sim(|lp, sock| read_once(lp, Recorded::new(sock)));
    let (replay, ran) = replay_one_read(&trace, fd);
    ran.unwrap();
    let summary = replay.finish().unwrap();
    assert_eq!((summary.reads, summary.unrecorded_fds.len()), (1, 0));
}

#[test]
fn fd_io_on_a_real_fd_during_a_replay_is_reported() {
    let (trace, _, _) = record_on_sim(|lp, sock| {
        let mut conns_less = Some(sock);
        lp.timer(Duration::from_millis(5), Duration::ZERO, move |_, _, _| {
            drop(conns_less.take());
        })
        .unwrap();
    });
    let replay = Replay::from_bytes(trace.bytes()).unwrap();
    let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
    let err = evloop::replay::fd_io::recorded_read(&a, &mut [0u8; 4]).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::WouldBlock);
    let d = replay.divergence().expect("reported");
    assert_eq!(d.fd, Some(a.as_raw_fd()));
    assert!(d.actual.contains("through evloop::replay::fd_io"), "{d}");
    assert!(d.hint.unwrap().contains("virtual"), "{d}");
}

#[test]
fn a_trace_cut_off_stops_the_replay_and_says_so() {
    let (trace, _, log) = record_on_sim(ticks::<50>);
    assert_eq!(log.len(), 50);
    let mut bytes = trace.bytes();
    bytes.truncate(bytes.len() / 2);
    let replay = Replay::from_bytes(bytes).unwrap();
    let mut lp: Loop<'static, Vec<String>> = Loop::with_backend(replay.backend());
    ticks::<50>(&mut lp, Sim::new().socket("unused", 0));
    let mut replayed = Vec::new();
    let err = lp.run(RunMode::Default, &mut replayed).unwrap_err();
    let d = Divergence::of(&err).unwrap();
    assert!(d.expected.contains("cut off"), "{d}");
    assert!(!replayed.is_empty() && replayed.len() < 50);
    assert_eq!(replayed[..], log[..replayed.len()]);
}

#[test]
fn a_program_that_stops_early_is_reported_by_finish() {
    let (trace, _, _) = record_on_sim(ticks::<3>);
    let replay = Replay::from_bytes(trace.bytes()).unwrap();
    let mut lp: Loop<'static, Vec<String>> = Loop::with_backend(replay.backend());
    ticks::<3>(&mut lp, Sim::new().socket("unused", 0));
    let mut log = Vec::new();
    lp.run(RunMode::Once, &mut log).unwrap(); // one iteration, not three
    drop(lp);
    let d = replay.finish().unwrap_err();
    assert!(d.actual.contains("ended before the recording did"), "{d}");
    assert_eq!(d.iteration, 1, "{d}");
    assert!(d.expected.starts_with("now() -> 1ms"), "{d}");
}

#[test]
fn one_recording_or_replay_per_thread() {
    let trace = MemoryTrace::new();
    let first: Loop = Loop::builder()
        .backend("poll")
        .record(trace.clone())
        .build()
        .unwrap();
    let err = Loop::builder()
        .backend("poll")
        .record(MemoryTrace::new())
        .build::<()>()
        .unwrap_err();
    assert!(err.to_string().contains("already"), "{err}");
    assert!(Replay::from_bytes(trace.bytes()).is_err());
    drop(first);
    let replay = Replay::from_bytes(trace.bytes()).unwrap();
    assert!(Loop::builder()
        .backend("poll")
        .record(MemoryTrace::new())
        .build::<()>()
        .is_err());
    drop(replay);
    // And in another thread meanwhile, a recording of its own.
    std::thread::spawn(|| {
        let _lp: Loop = Loop::builder()
            .backend("poll")
            .record(MemoryTrace::new())
            .build()
            .unwrap();
    })
    .join()
    .unwrap();
}

#[test]
fn the_example_records_itself_then_replays_itself() {
    let exe = common::example("record_replay");
    let out = watchdog("examples/record_replay", WATCHDOG, move || {
        std::process::Command::new(exe).output().unwrap()
    });
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("same callbacks, times and data: true"),
        "{stdout}"
    );
    assert!(stdout.contains("diverged, as it should"), "{stdout}");
}
