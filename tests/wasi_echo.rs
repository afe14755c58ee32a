//! The echo example built for WASI (wasm32-wasip1), run under wasmtime on
//! a preopened listener, served from Linux: 100 connections, 10 at a
//! time, payloads from empty to 256 KiB (some written in pieces), each
//! half-closed at its end and every byte of its echo checked; then the
//! guest, started with `--connections 100`, must exit 0. The same clients
//! for the async echo server of tests/wasi_net_guest.rs (`exec::AsyncFd`
//! on the preopened listener and its accepted sockets).
//!
//! tests/wasi/run.sh builds the guests into one directory and runs this;
//! by hand (tests/common/wasmtime.rs documents the environment):
//!
//! ```sh
//! cargo build --target wasm32-wasip1 --example echo_server
//! EVLOOP_WASMTIME=/path/to/wasmtime \
//!     EVLOOP_WASI_DIR="${CARGO_TARGET_DIR:-target}/wasm32-wasip1/debug/examples" \
//!     cargo test --test wasi_echo -- --nocapture
//! ```
//!
//! (the async server's guest, `wasi_net_guest.wasm`, is the test binary
//! of tests/wasi_net_guest.rs, copied there by run.sh.)
//!
//! Without wasmtime or the guest it says "SKIPPED: ..." and passes,
//! unless `EVLOOP_REQUIRE_WASMTIME=1`.
#![cfg(target_os = "linux")]

mod common;

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::time::Duration;

use common::wasmtime::{wasmtime_and_guest, Guest};
use common::watchdog;

const CLIENTS: usize = 100;
/// Clients connected at once.
const AT_ONCE: usize = 10;
const MAX_PAYLOAD: usize = 256 * 1024;

/// Client `i`'s payload size: empty, a few bytes, a page, beyond a socket
/// buffer, up to 256 KiB.
fn size(i: usize) -> usize {
    match i % 5 {
        0 => (i / 5) % 2 * 3, // 0 or 3 bytes
        1 => 1 + i,
        2 => 4096 + 37 * i,
        3 => 64 * 1024 + 101 * i,
        _ => MAX_PAYLOAD - 7 * i,
    }
}

/// Client `i`'s bytes: distinct per client and per offset, so that a byte
/// from another connection or from the wrong place is caught.
fn pattern(i: usize) -> Vec<u8> {
    (0..size(i))
        .map(|k| ((k * 31 + i * 7 + k / 251) % 251) as u8)
        .collect()
}

/// One client on `c`: writes its pattern (odd clients in pieces of
/// varied size, with a pause now and then) while reading the echo,
/// half-closes, reads to the end; returns what came back.
fn client(c: TcpStream, i: usize) -> (Vec<u8>, Vec<u8>) {
    c.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let data = pattern(i);
    let mut reader = c.try_clone().unwrap();
    let got = std::thread::spawn(move || {
        let mut got = Vec::with_capacity(MAX_PAYLOAD);
        reader
            .read_to_end(&mut got)
            .unwrap_or_else(|e| panic!("client {i}: read: {e}"));
        got
    });
    let mut w = &c;
    if i % 2 == 1 {
        let piece = 1 + (i * 997) % 20_000;
        for (n, chunk) in data.chunks(piece).enumerate() {
            w.write_all(chunk)
                .unwrap_or_else(|e| panic!("client {i}: write: {e}"));
            if n % 8 == 7 {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    } else {
        w.write_all(&data)
            .unwrap_or_else(|e| panic!("client {i}: write: {e}"));
    }
    c.shutdown(Shutdown::Write).unwrap();
    (data, got.join().unwrap())
}

/// Clients `from..from + AT_ONCE` (and below `total`) at once (the first
/// on `first`, if given); every echo checked.
fn batch(addr: SocketAddr, from: usize, total: usize, mut first: Option<TcpStream>) {
    let clients: Vec<_> = (from..(from + AT_ONCE).min(total))
        .map(|i| {
            let c = first.take().unwrap_or_else(|| {
                TcpStream::connect(addr).unwrap_or_else(|e| panic!("client {i}: connect: {e}"))
            });
            std::thread::spawn(move || (i, client(c, i)))
        })
        .collect();
    for c in clients {
        let (i, (sent, got)) = c.join().unwrap();
        assert_eq!(got.len(), sent.len(), "client {i}: echo length");
        if let Some(k) = (0..sent.len()).find(|&k| sent[k] != got[k]) {
            panic!(
                "client {i}: byte {k} echoed as {} (sent {})",
                got[k], sent[k]
            );
        }
    }
}

/// `total` clients of the guest, [`AT_ONCE`] at a time, under a watchdog;
/// then the guest's exit status and output.
fn serve(mut guest: Guest, total: usize) -> (std::process::ExitStatus, String, String) {
    // The first connection waits for the runtime to listen.
    let first = guest.connect(Duration::from_secs(30));
    let addr = guest.addr;
    let clients = std::panic::catch_unwind(|| {
        watchdog("wasi echo clients", Duration::from_secs(180), move || {
            let mut first = Some(first);
            for from in (0..total).step_by(AT_ONCE) {
                batch(addr, from, total, first.take());
            }
        })
    });
    if let Err(panic) = clients {
        // What the guest said tells why (it panics with it if the guest
        // is still running).
        let (status, out, err) = guest.wait(Duration::from_secs(5));
        eprintln!("the guest exited {status}\nstdout:\n{out}\nstderr:\n{err}");
        std::panic::resume_unwind(panic);
    }
    guest.wait(Duration::from_secs(30))
}

#[test]
fn the_wasi_echo_server_answers_100_linux_clients_byte_for_byte_then_exits_0() {
    let Some((wasmtime, wasm)) = wasmtime_and_guest("echo_server") else {
        return;
    };
    let total = CLIENTS.to_string();
    let guest = Guest::start(&wasmtime, &wasm, &["--connections", &total]);
    let (status, out, err) = serve(guest, CLIENTS);
    assert!(
        status.success(),
        "the guest exited {status}\nstdout:\n{out}\nstderr:\n{err}"
    );
    assert!(
        out.starts_with("echo on fd 3 (backend wasi)"),
        "stdout: {out}"
    );
    assert!(
        err.contains(&format!("served {CLIENTS} connections")),
        "stderr: {err}"
    );
}

/// The async echo server of tests/wasi_net_guest.rs (its ignored test,
/// which serves 30 connections and returns).
#[test]
fn the_wasi_async_echo_server_answers_30_linux_clients_byte_for_byte() {
    const CONNECTIONS: usize = 30;
    let Some((wasmtime, wasm)) = wasmtime_and_guest("wasi_net_guest") else {
        return;
    };
    let test = "exec_echo_on_the_preopened_listener";
    let guest = Guest::start(&wasmtime, &wasm, &["--ignored", "--exact", test]);
    let (status, out, err) = serve(guest, CONNECTIONS);
    assert!(
        status.success(),
        "the guest exited {status}\nstdout:\n{out}\nstderr:\n{err}"
    );
    assert!(
        out.contains(&format!("test {test} ... ok")) && out.contains("1 passed"),
        "stdout: {out}"
    );
}
