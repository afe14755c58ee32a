//! evloop::replay on a real server under a real client: benches/net_load's
//! RESP server (its serving code, `benches/resp/server.rs`, is
//! included here) recorded on a kernel backend while redis-benchmark loads
//! it, then replayed from the trace.
//!
//! - Clean: 200,000 pipelined requests (SET and GET, 50 connections, 16
//!   commands a batch) replay with no divergence, to the same state (the
//!   connections accepted, the requests answered, the keys stored).
//! - The planted bug (`Server::lose_reply_at_buffer_end`): a reply lost
//!   when a pipelined batch ends exactly at the input buffer's end. SETs
//!   of 1,024 bytes, 16 a batch, fill the 16 KiB buffer exactly, so every
//!   connection loses the reply of its first batch's last SET and waits
//!   for it forever (redis-benchmark is killed once all 50 are lost). The
//!   buggy server replays to the same losses (iteration, connection);
//!   the fixed one, replayed from the buggy trace, diverges at the first
//!   loss, and the divergence names the connection (its accept number,
//!   not only its fd) and the iteration.
//!
//! Needs redis-benchmark (Debian's redis-tools): skipped with a loud
//! message where it is missing, a failure with
//! `EVLOOP_REQUIRE_REDIS_BENCHMARK=1` (.ci/run sets it).

mod common;
// The server: `stop_on_signals` is the binary's (a test does not take
// signals).
#[allow(dead_code)]
#[path = "../benches/resp/server.rs"]
mod server;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use evloop::net::ListenOptions;
use evloop::replay::{Accepted, Divergence, Recorded, Replay, ReplaySummary};
use evloop::{Loop, RunMode};

use common::watchdog;
use server::{resp::Db, Lost, Server};

/// The two tests load the machine's cores: one at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// What a run of the server ended with.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Outcome {
    accepted: u64,
    requests: u64,
    db: Db,
    lost: Vec<Lost>,
}

impl Outcome {
    fn of(s: &Server) -> Outcome {
        Outcome {
            accepted: s.accepted,
            requests: s.requests,
            db: s.db.clone(),
            lost: s.lost.clone(),
        }
    }
}

/// A recording: the trace, the listener's fd, what the server did.
struct Recording {
    path: PathBuf,
    listener: i32,
    outcome: Outcome,
}

impl Drop for Recording {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Whether redis-benchmark runs here; if not, a loud skip, or a panic
/// with EVLOOP_REQUIRE_REDIS_BENCHMARK=1.
fn redis_benchmark_present(test: &str) -> bool {
    let ok = Command::new("redis-benchmark")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        assert!(
            std::env::var("EVLOOP_REQUIRE_REDIS_BENCHMARK").as_deref() != Ok("1"),
            "{test}: redis-benchmark is missing, and EVLOOP_REQUIRE_REDIS_BENCHMARK=1 \
             (install Debian's redis-tools)"
        );
        // Straight to stderr: the test harness captures eprintln!.
        let _ = writeln!(
            std::io::stderr(),
            "!!! SKIP {test}: redis-benchmark is missing (install Debian's redis-tools)"
        );
    }
    ok
}

fn redis_benchmark(addr: SocketAddr, args: &[&str]) -> Command {
    let mut cmd = Command::new("redis-benchmark");
    cmd.args(["-h", "127.0.0.1", "-p", &addr.port().to_string(), "--csv"])
        .args(args);
    cmd
}

/// Records the server on `backend` (the planted bug on if `buggy`) on a
/// thread of its own while `client` loads it, then stops it with
/// SHUTDOWN. `None` (a loud skip) if the backend cannot be made here.
fn record(
    name: &str,
    backend: &'static str,
    buggy: bool,
    client: impl FnOnce(SocketAddr, &Receiver<Lost>),
) -> Option<Recording> {
    let path = std::env::temp_dir().join(format!(
        "evloop-replay-resp-{name}-{backend}-{}.trace",
        std::process::id()
    ));
    let (listening, started) = mpsc::channel();
    let (lost_tx, lost_rx) = mpsc::channel();
    let trace = path.clone();
    let thread = std::thread::spawn(move || {
        let listener = ListenOptions::new()
            .bind("127.0.0.1:0".parse().unwrap())
            .unwrap();
        let fd = listener.as_raw_fd();
        let built = Loop::builder().backend(backend).record_to(&trace).build();
        let mut lp: Loop<Server> = match built {
            Ok(lp) => lp,
            Err(e) => {
                listening.send(Err(e.to_string())).unwrap();
                return None;
            }
        };
        let mut s = Server::default();
        s.lose_reply_at_buffer_end = buggy;
        s.on_lost = Some(Box::new(move |l: &Lost| {
            let _ = lost_tx.send(*l);
        }));
        let local = server::serve(&mut lp, &mut s, Recorded::new(listener), |st| {
            let _ = st.get_ref().set_nodelay(true);
        })
        .unwrap();
        let completion = lp.capabilities().completion;
        listening.send(Ok((local, fd, completion))).unwrap();
        lp.run(RunMode::Default, &mut s).unwrap();
        drop(lp); // completes the trace
        Some(Outcome::of(&s))
    });
    let (addr, listener, completion) = match started.recv().expect("the server starts") {
        Ok(listening) => listening,
        Err(e) => {
            let _ = writeln!(
                std::io::stderr(),
                "!!! SKIPPED: {name} on {backend}: the backend cannot be made here: {e}"
            );
            let _ = thread.join();
            let _ = std::fs::remove_file(&path);
            return None;
        }
    };
    let io = if completion { " (completion I/O)" } else { "" };
    eprintln!("{name}: recording on {backend}{io} to {}", path.display());
    client(addr, &lost_rx);
    // SHUTDOWN: the server closes everything, its run returns.
    let mut stop = TcpStream::connect(addr).unwrap();
    stop.write_all(b"SHUTDOWN\r\n").unwrap();
    let _ = stop.read_to_end(&mut Vec::new());
    let outcome = thread.join().expect("the recorded server")?;
    Some(Recording {
        path,
        listener,
        outcome,
    })
}

/// Replays `rec` through the server (the planted bug on if `buggy`): what
/// the server did, and how the replay ended.
fn replay(rec: &Recording, buggy: bool) -> (Outcome, Result<ReplaySummary, Divergence>) {
    let replay = Replay::open(&rec.path).unwrap();
    let mut s = Server::default();
    s.lose_reply_at_buffer_end = buggy;
    let run = {
        let mut lp = Loop::with_backend(replay.backend());
        server::serve(&mut lp, &mut s, replay.listener(rec.listener), |_| {}).unwrap();
        lp.run(RunMode::Default, &mut s)
    };
    let finish = replay.finish();
    if let Err(e) = &run {
        let d = Divergence::of(e).expect("run fails only with a divergence");
        assert_eq!(
            Some(d),
            finish.as_ref().err(),
            "run and finish report one divergence"
        );
    }
    (Outcome::of(&s), finish)
}

/// Runs `scenario` on `backend` under the watchdog, one at a time, where
/// redis-benchmark is.
fn on(backend: &'static str, test: &str, scenario: fn(&'static str)) {
    let test = format!("{test} on {backend}");
    if !redis_benchmark_present(&test) {
        return;
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    watchdog(&test, Duration::from_secs(120), move || scenario(backend));
}

/// 200,000 pipelined requests replay with no divergence, to the same state.
fn clean(backend: &'static str) {
    let started = Instant::now();
    let Some(rec) = record("clean", backend, false, |addr, _| {
        let args = [
            "-n", "100000", "-c", "50", "-P", "16", "-t", "set,get", "-r", "10000",
        ];
        let out = redis_benchmark(addr, &args).output().unwrap();
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        // The server answers CONFIG GET with +OK: that warning is expected.
        let errors = stderr
            .lines()
            .any(|l| !l.trim().is_empty() && !l.contains("Could not fetch server CONFIG"));
        assert!(
            out.status.success() && !errors && !stdout.to_lowercase().contains("error"),
            "redis-benchmark failed: {}\n{stdout}\n{stderr}",
            out.status
        );
        for test in ["\"SET\"", "\"GET\""] {
            assert!(stdout.contains(test), "no {test} row: {stdout}");
        }
        eprintln!("redis-benchmark:\n{stdout}");
    }) else {
        return;
    };
    let recorded = &rec.outcome;
    eprintln!(
        "recorded: {} connections, {} requests, {} keys, {} bytes of trace, {:?}",
        recorded.accepted,
        recorded.requests,
        recorded.db.len(),
        std::fs::metadata(&rec.path).unwrap().len(),
        started.elapsed()
    );
    assert!(recorded.requests >= 200_000, "{}", recorded.requests);
    // 50 connections per test, and SHUTDOWN's.
    assert!(recorded.accepted > 100, "{}", recorded.accepted);
    assert!(recorded.lost.is_empty());

    let replayed_at = Instant::now();
    let (replayed, finish) = replay(&rec, false);
    let summary = finish.unwrap_or_else(|d| panic!("{d}"));
    eprintln!("replayed: {summary:?} in {:?}", replayed_at.elapsed());
    assert!(summary.complete, "{summary:?}");
    assert_eq!(&replayed, recorded, "the replay's state differs");
}

/// The planted bug: recorded, replayed to the same losses; the fix
/// replayed from its trace diverges at the first, naming its connection.
fn lost_reply(backend: &'static str) {
    const CLIENTS: usize = 50;
    // A SET of a 980-byte value under redis-benchmark's 16-byte key is
    // 1,024 bytes: 16 of them fill the 16 KiB buffer to its last byte.
    assert_eq!(server::READ_BUFFER, 16 * 1024);
    let Some(rec) = record("lost", backend, true, |addr, lost| {
        let clients = CLIENTS.to_string();
        let args = [
            "-n", "10000000", "-c", &clients, "-P", "16", "-t", "set", "-d", "980",
        ];
        let mut bench = redis_benchmark(addr, &args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        for n in 0..CLIENTS {
            let left = deadline.saturating_duration_since(Instant::now());
            if lost.recv_timeout(left).is_err() {
                let _ = bench.kill();
                panic!("{n} of {CLIENTS} replies lost within 60 s");
            }
        }
        assert!(
            bench.try_wait().unwrap().is_none(),
            "redis-benchmark waits for the lost replies"
        );
        bench.kill().unwrap();
        bench.wait().unwrap();
    }) else {
        return;
    };
    let lost = &rec.outcome.lost;
    eprintln!(
        "recorded: {} replies lost, the first {:?}",
        lost.len(),
        lost[0]
    );
    // One per connection, at its first batch: it waits for it since.
    assert_eq!(lost.len(), CLIENTS, "{lost:?}");
    let mut conns: Vec<u64> = lost.iter().map(|l| l.accept).collect();
    conns.sort_unstable();
    conns.dedup();
    assert_eq!(conns.len(), CLIENTS, "one loss per connection: {lost:?}");
    // 16 SETs a connection (and redis-benchmark's CONFIG GETs).
    let sets = 16 * CLIENTS as u64;
    let requests = rec.outcome.requests;
    assert!((sets..sets + 4).contains(&requests), "{requests}");

    // The buggy server, replayed: the same losses, where they were.
    let (replayed, finish) = replay(&rec, true);
    let summary = finish.unwrap_or_else(|d| panic!("{d}"));
    assert!(summary.complete, "{summary:?}");
    assert_eq!(replayed, rec.outcome);

    // The fix, replayed from the buggy trace: it writes the reply the
    // recording lost, at the first loss, on its connection.
    let (fixed, finish) = replay(&rec, false);
    let d = finish.expect_err("the fixed server diverges");
    eprintln!("{d}");
    let first = lost[0];
    assert_eq!(d.iteration, first.iteration, "{d}");
    assert_eq!(d.fd, Some(first.fd), "{d}");
    assert_eq!(
        d.connection.as_deref(),
        Some(&Accepted {
            fd: first.fd,
            listener: rec.listener,
            nth: first.accept,
            iteration: first.accepted_at,
        }),
        "{d}"
    );
    // 16 +OK replies, where the recording has 15.
    assert!(d.actual.starts_with("a write of 80 bytes"), "{d}");
    assert!(d.expected.starts_with("a write of 75 bytes"), "{d}");
    let named = format!(
        "(the connection of accept #{} on fd{}",
        first.accept, rec.listener
    );
    assert!(d.to_string().contains(&named), "{d}");
    assert!(fixed.lost.is_empty());
}

const CLEAN: &str = "redis-benchmark's 200,000 pipelined requests replay clean";
const LOST: &str = "a reply lost at the buffer's end replays; the fix diverges at its connection";

#[cfg(target_os = "linux")]
#[test]
fn redis_benchmark_200k_pipelined_requests_replay_clean_on_epoll() {
    on("epoll", CLEAN, clean);
}

#[test]
fn redis_benchmark_200k_pipelined_requests_replay_clean_on_poll() {
    on("poll", CLEAN, clean);
}

#[cfg(all(feature = "io-uring", target_os = "linux"))]
#[test]
fn redis_benchmark_200k_pipelined_requests_replay_clean_on_io_uring() {
    on("io_uring", CLEAN, clean);
}

#[cfg(target_os = "linux")]
#[test]
fn a_reply_lost_at_the_buffers_end_replays_and_the_fix_diverges_on_epoll() {
    on("epoll", LOST, lost_reply);
}

#[test]
fn a_reply_lost_at_the_buffers_end_replays_and_the_fix_diverges_on_poll() {
    on("poll", LOST, lost_reply);
}

#[cfg(all(feature = "io-uring", target_os = "linux"))]
#[test]
fn a_reply_lost_at_the_buffers_end_replays_and_the_fix_diverges_on_io_uring() {
    on("io_uring", LOST, lost_reply);
}
