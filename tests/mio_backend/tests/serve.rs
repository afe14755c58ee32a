//! The binary, run as a user would (`EVLOOP_BACKEND=mio`, a free port),
//! answers HTTP on the mio backend: keep-alive, pipelined requests, a
//! `Connection: close`, a 404, many connections at once. Under a watchdog:
//! a thread that kills the server and aborts if the test has not ended in
//! 60 seconds.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const OK: &str =
    "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 14\r\n\r\nHello, world!\n";

/// The server, killed when dropped.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts the binary on a free port; its address, from the line it prints.
fn start() -> (Server, SocketAddr, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_mio_http_server"))
        .arg("127.0.0.1:0")
        .env("EVLOOP_BACKEND", "mio")
        .stdout(Stdio::piped())
        .spawn()
        .expect("the server binary starts");
    let stdout = child.stdout.take().unwrap();
    let server = Server(child);
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).unwrap();
    // "http on 127.0.0.1:PORT (backend mio)"
    let addr = line
        .strip_prefix("http on ")
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("the server's first line: {line:?}"));
    (server, addr, line)
}

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    // Generous: the watchdog is what ends a hung test.
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s
}

/// Reads exactly `want.len()` bytes and compares.
fn expect(s: &mut TcpStream, want: &str) {
    let mut got = vec![0; want.len()];
    s.read_exact(&mut got).unwrap();
    assert_eq!(String::from_utf8_lossy(&got), want);
}

/// Kills the server and aborts the test if it is still running after 60 s.
/// (`done` is set under the lock, and the kill made under it: the server,
/// reaped only after the Watchdog is dropped, is never signalled once
/// reaped.)
struct Watchdog(Arc<Mutex<bool>>);

impl Watchdog {
    fn start(pid: u32) -> Watchdog {
        let done = Arc::new(Mutex::new(false));
        let watching = done.clone();
        std::thread::spawn(move || {
            for _ in 0..600 {
                // A watchdog's tick, not a synchronisation.
                std::thread::sleep(Duration::from_millis(100));
                if *watching.lock().unwrap() {
                    return;
                }
            }
            let done = watching.lock().unwrap();
            if !*done {
                // SAFETY: a plain syscall. The pid is the server's, our
                // child, not yet reaped: `done` is false, and the Server
                // is reaped only after the Watchdog's drop set it.
                unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
                eprintln!("watchdog: the test did not end in 60 s");
                std::process::abort();
            }
        });
        Watchdog(done)
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        // Poisoned only by a panic of the watchdog thread while holding it.
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = true;
    }
}

#[test]
fn the_binary_serves_http_on_the_mio_backend() {
    let (server, addr, line) = start();
    assert!(line.contains("(backend mio)"), "{line:?}");
    // Dropped before the server (declared after it), also when the test
    // fails: the watchdog never signals a reaped pid.
    let _watchdog = Watchdog::start(server.0.id());

    // Keep-alive: three requests on one connection, one by one.
    let mut s = connect(addr);
    for _ in 0..3 {
        s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        expect(&mut s, OK);
    }
    // Pipelined: two heads in one write, answered in order.
    s.write_all(b"GET / HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\n\r\n")
        .unwrap();
    expect(&mut s, &format!("{OK}{OK}"));
    // A head in two writes: the server waits for the rest.
    s.write_all(b"GET / HTTP/1.1\r\nHo").unwrap();
    s.write_all(b"st: x\r\n\r\n").unwrap();
    expect(&mut s, OK);
    // An unknown path: 404, then the server closes (EOF).
    s.write_all(b"GET /nothing HTTP/1.1\r\n\r\n").unwrap();
    let mut rest = String::new();
    s.read_to_string(&mut rest).unwrap();
    assert!(rest.starts_with("HTTP/1.1 404 Not Found\r\n"), "{rest:?}");

    // Connection: close: the answer, then EOF.
    let mut s = connect(addr);
    s.write_all(b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut all = String::new();
    s.read_to_string(&mut all).unwrap();
    assert!(all.contains("Connection: close\r\n"), "{all:?}");
    assert!(all.ends_with("Hello, world!\n"), "{all:?}");

    // Many connections at once, each asking twice.
    let mut many: Vec<TcpStream> = (0..100).map(|_| connect(addr)).collect();
    for round in 0..2 {
        for s in &mut many {
            s.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
        }
        for (i, s) in many.iter_mut().enumerate() {
            let mut got = vec![0; OK.len()];
            s.read_exact(&mut got)
                .unwrap_or_else(|e| panic!("round {round}, connection {i}: {e}"));
            assert_eq!(String::from_utf8_lossy(&got), OK);
        }
    }
}
