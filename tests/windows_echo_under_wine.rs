//! The echo example built for Windows, run under Wine, served from Linux:
//! 100 concurrent loopback clients, every byte checked, then a console
//! Ctrl-C, after which the server closes what is left and exits 0.
//!
//! `.ci/run` builds `echo_server.exe` (`cargo build --target
//! x86_64-pc-windows-gnu --example echo_server`) and runs this test once
//! per Windows backend:
//!
//! ```sh
//! EVLOOP_WINE_ECHO_EXE="${CARGO_TARGET_DIR:-target}/x86_64-pc-windows-gnu/debug/examples/echo_server.exe" \
//!     EVLOOP_BACKEND=iocp cargo test --test windows_echo_under_wine -- --nocapture
//! ```
//!
//! Without `EVLOOP_WINE_ECHO_EXE` the test says loudly that it did not
//! run, and passes (a plain `cargo test` on a machine without Wine).
//!
//! The Ctrl-C: a SIGINT to the Wine loader (which `tests/wine/run.sh`
//! becomes) is delivered by Wine to the program as a `CTRL_C_EVENT`, to
//! the handler the signal watcher installed with `SetConsoleCtrlHandler`:
//! the same path a Ctrl-C typed in a console takes. (Wine cannot deliver
//! `GenerateConsoleCtrlEvent` to a program without a terminal, error 12;
//! the backend tests, `tests/windows_iocp.rs` and `windows_select.rs`,
//! cover that call under a pseudo-terminal.)
#![cfg(target_os = "linux")]

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::watchdog;

const CLIENTS: usize = 100;
/// Bytes each client sends (and must get back): more than a socket buffer,
/// so that the server's backpressure is exercised too.
const PER_CLIENT: usize = 256 * 1024;

/// Client `i`'s bytes: distinct per client and per offset, so that a byte
/// from another connection or from the wrong place is caught.
fn pattern(i: usize) -> Vec<u8> {
    (0..PER_CLIENT)
        .map(|k| ((k * 31 + i * 7 + k / 251) % 251) as u8)
        .collect()
}

/// One client: sends its pattern while reading the echo, half-closes, and
/// reads to the end; returns what came back.
fn client(addr: SocketAddr, i: usize) -> Vec<u8> {
    let mut c = TcpStream::connect(addr).unwrap_or_else(|e| panic!("client {i}: connect: {e}"));
    c.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let data = pattern(i);
    let mut reader = c.try_clone().unwrap();
    let got = std::thread::spawn(move || {
        let mut got = Vec::with_capacity(PER_CLIENT);
        reader
            .read_to_end(&mut got)
            .unwrap_or_else(|e| panic!("client {i}: read: {e}"));
        got
    });
    c.write_all(&data)
        .unwrap_or_else(|e| panic!("client {i}: write: {e}"));
    c.shutdown(std::net::Shutdown::Write).unwrap();
    got.join().unwrap()
}

fn run_once(exe: PathBuf) {
    let runner = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/wine/run.sh");
    let mut server = Command::new(&runner)
        .arg(&exe)
        .arg("127.0.0.1:0")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start tests/wine/run.sh");
    let pid = server.id();
    let mut out = BufReader::new(server.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).expect("the server's first line");
    assert!(
        line.starts_with("echo on "),
        "unexpected first line {line:?}"
    );
    let addr: SocketAddr = line.split_whitespace().nth(2).unwrap().parse().unwrap();
    eprintln!("windows echo server under Wine: {}", line.trim());
    if let Ok(want) = std::env::var("EVLOOP_BACKEND") {
        assert!(line.contains(&format!("(backend {want})")), "{line}");
    }

    let clients: Vec<_> = (0..CLIENTS)
        .map(|i| std::thread::spawn(move || client(addr, i)))
        .collect();
    for (i, c) in clients.into_iter().enumerate() {
        let got = c.join().unwrap();
        assert_eq!(got.len(), PER_CLIENT, "client {i}: echo length");
        assert!(
            got == pattern(i),
            "client {i}: the echo differs from what was sent"
        );
    }

    // A connection still open at shutdown: closed by the server, cleanly.
    let mut open = TcpStream::connect(addr).unwrap();
    open.write_all(b"last").unwrap();
    let mut four = [0u8; 4];
    open.read_exact(&mut four).unwrap();
    assert_eq!(&four, b"last");

    // Ctrl-C: SIGINT to the loader, a CTRL_C_EVENT for the program.
    let sent = Command::new("kill")
        .args(["-INT", &pid.to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    let mut rest = Vec::new();
    open.set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    open.read_to_end(&mut rest)
        .expect("EOF from the server's shutdown");
    assert!(rest.is_empty());

    let status = server.wait().unwrap();
    let mut errors = String::new();
    server
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut errors)
        .unwrap();
    eprint!("{errors}");
    assert!(status.success(), "exit {status:?}; stderr:\n{errors}");
    assert!(errors.contains("signal: shutting down"), "{errors}");
    assert!(
        errors.contains(&format!("served {} connections", CLIENTS + 1)),
        "{errors}"
    );
}

#[test]
fn the_windows_echo_server_serves_100_clients_and_exits_0_on_ctrl_c() {
    let Some(exe) = std::env::var_os("EVLOOP_WINE_ECHO_EXE") else {
        eprintln!("!!! SKIP: EVLOOP_WINE_ECHO_EXE is not set: the Windows echo server was NOT run under Wine");
        eprintln!("!!! (.ci/run sets it; see this file's header)");
        return;
    };
    let exe = PathBuf::from(exe);
    assert!(exe.exists(), "{}: no such file", exe.display());
    watchdog(
        "windows echo under wine",
        Duration::from_secs(240),
        move || run_once(exe),
    );
}
