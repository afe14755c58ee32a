//! The examples that no other test drives, run as a user runs them: built
//! with `cargo build --examples` (a no-op when `cargo test` built them
//! already), then started as processes under a watchdog, on every OS
//! backend through `EVLOOP_BACKEND`. (`echo_server` and `http_server` are
//! driven in-process by tests/net_kernel.rs, `chat_server` by
//! tests/net_*.rs.) `demo`, the README's first command, runs here too
//! (about a second in a debug build), and by `.ci/run` in release mode;
//! so does `compare`, at its smallest. `http_server --record` runs here
//! too, and its recording is replayed in-process (the example included).

mod common;

#[allow(dead_code)] // its `main` is the example's
#[path = "../examples/http_server.rs"]
mod http_server;

use common::example;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// How long one example may take before the test fails (a hang).
const WATCHDOG: Duration = Duration::from_secs(60);

/// The OS backends of this platform, by name.
fn backends() -> Vec<&'static str> {
    evloop::backends::AVAILABLE
        .iter()
        .copied()
        .filter(|&b| b != "sim")
        .collect()
}

/// Waits for `child` to exit, killing it and failing after the watchdog.
fn wait_with_watchdog(mut child: Child, what: &str) -> (std::process::ExitStatus, String) {
    let mut stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut out = String::new();
        let _ = stdout.read_to_string(&mut out);
        let _ = tx.send(out);
    });
    match rx.recv_timeout(WATCHDOG) {
        Ok(out) => (child.wait().unwrap(), out),
        Err(_) => {
            let _ = child.kill();
            panic!("{what} did not finish within {WATCHDOG:?}");
        }
    }
}

#[test]
fn signals_and_children_shuts_down_by_itself_on_every_backend() {
    let exe = example("signals_and_children");
    for backend in backends() {
        let child = Command::new(&exe)
            .env("EVLOOP_BACKEND", backend)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let (status, out) = wait_with_watchdog(child, backend);
        assert!(status.success(), "{backend}: {status}\n{out}");
        let at = |needle: &str| {
            out.find(needle)
                .unwrap_or_else(|| panic!("{backend}: no {needle:?} in\n{out}"))
        };
        assert!(out.contains(&format!("on the {backend} backend")), "{out}");
        // Every progress report, the child's exit with its code, then the
        // shutdown on the signal, and the run ending for want of watchers.
        for step in 1..=5 {
            at(&format!("worker: step {step} of 5"));
        }
        assert!(at("worker: done") < at("supervisor: all done"), "{out}");
        assert!(
            at("exited with code 3") < at("supervisor: all done"),
            "{out}"
        );
        assert!(
            at("supervisor: all done") < at("SIGTERM, shutting down"),
            "{out}"
        );
        assert!(
            at("SIGTERM, shutting down") < at("NoActiveWatchers, bye"),
            "{out}"
        );
    }
}

#[test]
fn http_per_core_serves_from_every_loop() {
    let exe = example("http_per_core");
    for backend in backends() {
        let mut child = Command::new(&exe)
            .args(["127.0.0.1:0", "2"])
            .env("EVLOOP_BACKEND", backend)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let first = lines.next().expect("a first line").unwrap();
        // "http on 127.0.0.1:PORT, 2 loops (SO_REUSEPORT)"
        let addr = first
            .strip_prefix("http on ")
            .and_then(|rest| rest.split(',').next())
            .unwrap_or_else(|| panic!("{backend}: {first}"))
            .to_string();
        assert!(first.ends_with("2 loops (SO_REUSEPORT)"), "{first}");
        // Many connections, each one request: the kernel spreads them over
        // both listeners, and every one is answered.
        for i in 0..40 {
            let mut conn = TcpStream::connect(&addr).unwrap();
            conn.set_read_timeout(Some(WATCHDOG)).unwrap();
            conn.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                .unwrap();
            let mut reply = String::new();
            conn.read_to_string(&mut reply).unwrap();
            assert!(
                reply.starts_with("HTTP/1.1 200 OK"),
                "{backend}: request {i}: {reply:?}"
            );
        }
        child.kill().unwrap();
        child.wait().unwrap();
    }
}

#[test]
fn http_server_records_its_run_to_a_trace_that_replays_clean() {
    let exe = example("http_server");
    for backend in backends() {
        let trace = std::env::temp_dir().join(format!(
            "evloop-http-record-{}-{backend}",
            std::process::id()
        ));
        let mut child = Command::new(&exe)
            .arg("--record")
            .arg(&trace)
            .arg("127.0.0.1:0")
            .env("EVLOOP_BACKEND", backend)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut line = || lines.next().expect("a line").unwrap();
        // "http on ADDR (backend NAME)", "recording to PATH (listener fd N)"
        let (first, second) = (line(), line());
        let addr = first
            .strip_prefix("http on ")
            .and_then(|rest| rest.split(' ').next())
            .unwrap_or_else(|| panic!("{backend}: {first}"))
            .to_string();
        let listener_fd: evloop::RawFd = second
            .rsplit_once("listener fd ")
            .and_then(|(_, n)| n.trim_end_matches(')').parse().ok())
            .unwrap_or_else(|| panic!("{backend}: {second}"));
        // Keep-alive, pipelined, then a closing request, on two connections.
        let mut received = 0;
        for _ in 0..2 {
            let mut conn = TcpStream::connect(&addr).unwrap();
            conn.set_read_timeout(Some(WATCHDOG)).unwrap();
            conn.write_all(b"GET / HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\n\r\n")
                .unwrap();
            conn.write_all(b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n")
                .unwrap();
            let mut reply = String::new();
            conn.read_to_string(&mut reply).unwrap();
            assert_eq!(reply.matches("200 OK").count(), 3, "{backend}: {reply:?}");
            received += reply.len() as u64;
        }
        // A clean exit on SIGTERM completes the trace.
        let killed = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(killed.success());
        let deadline = std::time::Instant::now() + WATCHDOG;
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                panic!("{backend}: http_server did not exit on SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        assert!(status.success(), "{backend}: {status}");

        let replay = evloop::replay::Replay::open(&trace).unwrap();
        assert_eq!(replay.recorded_backend(), backend);
        let mut lp = evloop::Loop::with_backend(replay.backend());
        let acceptor = http_server::serve(&mut lp, replay.listener(listener_fd)).unwrap();
        let mut conns = evloop::net::Conns::new();
        http_server::run(&mut lp, acceptor, &mut conns).unwrap();
        drop(lp);
        let summary = replay.finish().unwrap_or_else(|d| panic!("{backend}: {d}"));
        assert!(summary.complete, "{backend}: {summary:?}");
        assert_eq!(summary.bytes_written, received, "{backend}: {summary:?}");
        std::fs::remove_file(&trace).unwrap();
    }
}

#[test]
fn three_connections_prints_its_trace_and_ends() {
    let exe = example("three_connections");
    let child = Command::new(&exe).stdout(Stdio::piped()).spawn().unwrap();
    let (status, out) = wait_with_watchdog(child, "three_connections");
    assert!(status.success(), "{status}\n{out}");
    // The simulator's trace: polls and dispatches on virtual time, ending
    // when nothing can happen any more.
    assert!(out.contains("dispatch fd3 r"), "{out}");
    assert!(out.trim_end().ends_with("stalled"), "{out}");
}

#[test]
fn the_demo_tells_its_simulated_story_then_measures_every_backend() {
    let exe = example("demo");
    let child = Command::new(&exe).stdout(Stdio::piped()).spawn().unwrap();
    let (status, out) = wait_with_watchdog(child, "demo");
    assert!(status.success(), "{status}\n{out}");
    // Part 1, on the simulator: the same callbacks, replies and trace on
    // every run (the lines the README's description promises).
    for line in [
        "     3ms  carol  read \"hi there\\n\", answered \"HI THERE\\n\"",
        "     7ms  alice  closed: end of file",
        "    13ms  carol  closed: idle for 10ms",
        "    19ms  bob    closed: idle for 10ms",
        "  run returned NoActiveWatchers at 19ms, after 7 iterations",
        "    bob    \"PING\\nSTILL HERE\\n\"",
        "    t=3ms poll {fd4:r, fd5:r}",
        "    t=7ms dispatch fd3 r|hup",
    ] {
        assert!(
            out.lines().any(|l| l == line),
            "no line {line:?} in:\n{out}"
        );
    }
    // Part 2: a row per backend of this build, and the simulator's.
    for backend in backends().into_iter().chain(["sim"]) {
        assert!(
            out.lines()
                .any(|l| l.trim_start().starts_with(&format!("{backend} "))),
            "no row for {backend} in:\n{out}"
        );
    }
    assert!(out.contains("3. Next:"), "{out}");
    // The comparison's load report, and the command of the full one.
    assert!(out.contains("load average"), "{out}");
    assert!(
        out.contains("cargo run --release --example compare"),
        "{out}"
    );
}

/// The user-facing comparison (examples/compare/), at its smallest: every
/// workload for one round on every backend, with a table per metric, the
/// load, and the figures and CSVs written where asked.
#[test]
fn compare_runs_every_workload_on_every_backend_and_draws_them() {
    let exe = example("compare");
    let dir = std::env::temp_dir().join(format!("evloop-compare-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let run = |args: &[&str]| {
        let child = Command::new(&exe)
            .args(args)
            .args(["--quick", "--rounds", "1", "--csv", "--svg"])
            .arg(&dir)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let (status, out) = wait_with_watchdog(child, "compare");
        assert!(status.success(), "{status}\n{out}");
        out
    };
    let out = run(&[
        "all",
        "--pairs",
        "20",
        "--active",
        "2",
        "--writes",
        "500",
        "--idle",
        "100",
        "--timers",
        "1000",
        "--connections",
        "20",
        "--seconds",
        "0.2",
        "--load",
        "builtin",
    ]);
    assert!(out.contains("load average"), "{out}");
    // A round alone has no spread: the report says so.
    assert!(out.contains("1 round(s) only"), "{out}");
    for workload in ["chains", "timers", "idle", "churn", "http"] {
        assert!(
            out.lines().any(|l| l.starts_with(&format!("{workload}: "))),
            "no {workload} report in:\n{out}"
        );
        let svg = std::fs::read_to_string(dir.join(format!("{workload}.svg")))
            .unwrap_or_else(|e| panic!("{workload}.svg: {e}\n{out}"));
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        let csv = std::fs::read_to_string(dir.join(format!("{workload}.csv"))).unwrap();
        // Every backend has a value for the workload's first metric.
        for backend in backends() {
            assert!(
                csv.lines().any(|l| l.contains(&format!(",{backend},1,"))),
                "{workload}: no value for {backend} in\n{csv}\n{out}"
            );
        }
    }
    // Under wrk too, where it is installed.
    let wrk = std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join("wrk").is_file()));
    if wrk {
        let out = run(&[
            "http",
            "--load",
            "wrk",
            "--seconds",
            "1",
            "--connections",
            "8",
        ]);
        assert!(out.contains("under wrk"), "{out}");
        for backend in backends() {
            assert!(
                out.lines()
                    .any(|l| l.trim_start().starts_with(&format!("{backend} "))
                        && !l.contains("refused")),
                "no http row for {backend} in:\n{out}"
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
