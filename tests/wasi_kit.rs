//! The conformance kit on the `wasi` backend, under wasmtime: starts the
//! guest `tests/wasi_kit_guest.rs` (built for `wasm32-wasip1`) with a
//! preopened listener, is the relay its fixture needs
//! (backends/conformance/fixture_wasi.rs), and asserts that the guest
//! passed every check that applies on WASI (the others skipped with a
//! reason that names WASI), under a watchdog.
//!
//! The relay: the first connection to the guest's listener is the control
//! connection; for each `P` the guest writes there, the relay connects
//! twice more and copies what either connection brings to the other, with
//! backpressure (a connection is read only when what it brought before
//! has been written), an EOF as `shutdown(SHUT_WR)` and a reset as a reset
//! (`SO_LINGER` 0, then close); for each `S`, it answers `S` once it has
//! had nothing to move for [`QUIET`] (how the fixture knows that a full
//! stream stays full).
//!
//! Skips loudly without wasmtime or the built guest, unless
//! `EVLOOP_REQUIRE_WASMTIME=1` (see tests/common/wasmtime.rs).
#![cfg(target_os = "linux")]

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::wasmtime::{wasmtime_and_guest, Guest};
use evloop::conformance::Scenario;

/// The whole run, guest and relay; the watchdog kills the guest after it.
const WATCHDOG: Duration = Duration::from_secs(300);

/// The scenarios that do not apply on WASI (`Scenario::not_applicable`
/// there: no signals, no dup).
const NOT_ON_WASI: [Scenario; 2] = [Scenario::WaitInterrupted, Scenario::ClosedFdReuse];

/// What the relay reads from a connection at a time.
const CHUNK: usize = 16 * 1024;

/// The socket buffers of the relay's connections, fixed so that they do
/// not grow (autotuning) while a scenario keeps one full.
const BUFFER: libc::c_int = 64 * 1024;

/// One of the relay's connections to the guest.
struct Conn {
    stream: Option<TcpStream>,
    /// Bytes read from this connection, not yet written to its partner.
    pending: Vec<u8>,
    /// An EOF was read from it.
    eof: bool,
    /// `shutdown(SHUT_WR)` was done on it.
    shut: bool,
}

impl Conn {
    fn new(stream: TcpStream) -> Conn {
        Conn {
            stream: Some(stream),
            pending: Vec::new(),
            eof: false,
            shut: false,
        }
    }
}

fn set_int(fd: libc::c_int, level: libc::c_int, name: libc::c_int, value: libc::c_int) {
    // SAFETY: one int option on an open socket.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(r, 0, "setsockopt: {}", std::io::Error::last_os_error());
}

/// Closes `stream` with a reset (`SO_LINGER` 0).
fn abort(stream: TcpStream) {
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: the linger option, on an open socket.
    unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        );
    }
    drop(stream);
}

/// `TCP_QUICKACK` on `s`: no delayed ACK until Linux turns it off again.
fn quickack(s: &TcpStream) {
    set_int(s.as_raw_fd(), libc::IPPROTO_TCP, libc::TCP_QUICKACK, 1);
}

/// A connection to the guest's listener, for a pair.
fn connect(addr: SocketAddr) -> Conn {
    let s = TcpStream::connect(addr).expect("connect to the guest for a pair");
    s.set_nodelay(true).unwrap();
    let fd = s.as_raw_fd();
    set_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, BUFFER);
    set_int(fd, libc::SOL_SOCKET, libc::SO_SNDBUF, BUFFER);
    quickack(&s);
    s.set_nonblocking(true).unwrap();
    Conn::new(s)
}

/// How long the relay must have had nothing to move before it answers a
/// sync request (`S`): bytes it moved may bring more a while later (an ACK
/// the guest's side delayed, up to Linux's 200 ms, frees room in a send
/// buffer; a zero window is probed after 200 ms). Shorter, a stream the
/// fixture filled found room again steps later under load.
const QUIET: Duration = Duration::from_millis(250);

/// The relay, until the control connection ends or `stop` is set; the
/// number of pairs made.
fn relay(mut control: TcpStream, addr: SocketAddr, stop: &AtomicBool) -> usize {
    control.set_nonblocking(true).unwrap();
    // Connections 2k and 2k+1 are pair k's.
    let mut conns: Vec<Conn> = Vec::new();
    let mut buf = vec![0u8; CHUNK];
    // Sync requests waiting for the relay to be quiet, and when it last
    // moved anything.
    let mut syncs = 0;
    let mut last_progress = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        let mut fds = vec![libc::pollfd {
            fd: control.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        let mut which = Vec::new();
        for (i, c) in conns.iter().enumerate() {
            let Some(s) = &c.stream else { continue };
            let partner = &conns[i ^ 1];
            let mut events = 0;
            // Read only what the partner has taken (backpressure).
            if !c.eof && c.pending.is_empty() {
                events |= libc::POLLIN;
            }
            if !partner.pending.is_empty() {
                events |= libc::POLLOUT;
            }
            // Errors (a reset) are reported whatever the events.
            fds.push(libc::pollfd {
                fd: s.as_raw_fd(),
                events,
                revents: 0,
            });
            which.push(i);
        }
        let wait = if syncs > 0 { 5 } else { 100 };
        // SAFETY: `fds` is a valid array of initialised pollfds.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, wait) };
        let mut progress = false;
        if n > 0 && fds[0].revents != 0 {
            match control.read(&mut buf) {
                Ok(0) => return conns.len() / 2,
                Ok(k) => {
                    for &b in &buf[..k] {
                        match b {
                            b'P' => {
                                conns.push(connect(addr));
                                conns.push(connect(addr));
                            }
                            b'S' => syncs += 1,
                            _ => panic!("unknown request {b} on the control connection"),
                        }
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(_) => return conns.len() / 2,
            }
        }
        if n > 0 {
            for (p, &i) in fds[1..].iter().zip(&which) {
                if p.revents != 0 && conns[i].stream.is_some() {
                    progress |= step(&mut conns, i, p.revents, &mut buf);
                }
            }
        }
        if progress {
            last_progress = Instant::now();
        } else if syncs > 0 && last_progress.elapsed() >= QUIET {
            // Nothing moved for a while: all that could arrive has.
            control.set_nonblocking(false).unwrap();
            control
                .write_all(&vec![b'S'; syncs])
                .expect("answer the guest's sync");
            control.set_nonblocking(true).unwrap();
            syncs = 0;
        }
    }
    conns.len() / 2
}

/// What a poll reported of connection `i`: its bytes read, its partner's
/// written, an EOF passed on, a reset passed on as a reset; whether
/// anything moved.
fn step(conns: &mut [Conn], i: usize, revents: libc::c_short, buf: &mut [u8]) -> bool {
    let j = i ^ 1;
    let reset = |conns: &mut [Conn]| {
        // This connection was reset: so is its partner.
        drop(conns[i].stream.take());
        if let Some(s) = conns[j].stream.take() {
            abort(s);
        }
        true
    };
    let mut progress = false;
    let s = conns[i].stream.as_ref().unwrap();
    if revents & libc::POLLERR != 0 || matches!(s.take_error(), Ok(Some(_))) {
        return reset(conns);
    }
    if revents & libc::POLLIN != 0 && !conns[i].eof && conns[i].pending.is_empty() {
        match (&mut conns[i].stream.as_ref().unwrap()).read(buf) {
            Ok(0) => conns[i].eof = true,
            Ok(k) => conns[i].pending.extend_from_slice(&buf[..k]),
            Err(e) if e.kind() == ErrorKind::WouldBlock => return false,
            Err(_) => return reset(conns),
        }
        // What the guest sent is acknowledged at once (Linux turns quick
        // ACKs off again by itself), so that its send buffer never frees
        // room late.
        quickack(conns[i].stream.as_ref().unwrap());
        progress = true;
    }
    if revents & libc::POLLOUT != 0 && !conns[j].pending.is_empty() {
        match (&mut conns[i].stream.as_ref().unwrap()).write(&conns[j].pending) {
            Ok(k) => {
                conns[j].pending.drain(..k);
                progress = true;
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            Err(_) => return reset(conns),
        }
    }
    // An EOF is passed on once what came before it has been.
    for (from, to) in [(i, j), (j, i)] {
        if conns[from].eof && conns[from].pending.is_empty() && !conns[to].shut {
            if let Some(s) = &conns[to].stream {
                let _ = s.shutdown(Shutdown::Write);
                conns[to].shut = true;
                progress = true;
            }
        }
    }
    // A connection done both ways (its EOF passed on, its partner's EOF
    // given to it) is closed: polled on, it would report its hang-up at
    // every turn.
    for k in [i, j] {
        let c = &mut conns[k];
        if c.eof && c.shut && c.pending.is_empty() && c.stream.is_some() {
            drop(c.stream.take());
            progress = true;
        }
    }
    progress
}

/// The outcome lines of the guest (`RESULT name: ...`), by name.
fn results(out: &str) -> Vec<(&str, &str)> {
    out.lines()
        .filter_map(|l| l.split_once("RESULT ").map(|(_, r)| r))
        .filter_map(|l| l.split_once(": "))
        .collect()
}

#[test]
fn kit_on_wasi_under_wasmtime() {
    let Some((wasmtime, wasm)) = wasmtime_and_guest("wasi_kit_guest") else {
        return;
    };
    // The kit's directory (regular_file makes a file there), preopened
    // after the listener (the fixture finds both by fstat).
    let dir = std::env::temp_dir().join(format!("evloop-wasi-kit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let preopen = format!("{}::/kit", dir.display());
    let runtime = ["--dir", &preopen];
    let started = Instant::now();
    let args = ["--nocapture", "--test-threads=1"];
    let mut guest = Guest::start_with(&wasmtime, &wasm, &runtime, &args);
    let control = guest.connect(Duration::from_secs(30));
    let addr = guest.addr;
    let stop = Arc::new(AtomicBool::new(false));
    let stopping = stop.clone();
    let relay = std::thread::spawn(move || relay(control, addr, &stopping));
    let (status, out, err) = guest.wait(WATCHDOG);
    stop.store(true, Ordering::Relaxed);
    let pairs = relay.join().expect("the relay panicked");
    let _ = std::fs::remove_dir_all(&dir);
    eprintln!(
        "wasi kit: guest ran {:?}, {pairs} pairs relayed",
        started.elapsed()
    );
    print!("{out}");
    let all = results(&out);
    let shown = format!("exit {status}\nstdout:\n{out}\nstderr:\n{err}");
    // The guest names each check before it runs it (`BEGIN name` for the
    // simulator's, `running  name` in the kit's `run`).
    let last = out
        .lines()
        .rev()
        .find_map(|l| l.split_once("BEGIN ").or_else(|| l.split_once("running  ")))
        .map(|(_, name)| name);
    assert!(
        status.success() && out.contains("DONE 0 failed"),
        "the guest failed (last check begun: {last:?}): {shown}"
    );
    let outcome = |name: &str| {
        all.iter()
            .find(|(n, _)| *n == name)
            .map(|(_, o)| *o)
            .unwrap_or_else(|| panic!("no outcome for {name}: {shown}"))
    };
    for &s in Scenario::ALL {
        let o = outcome(s.name());
        if NOT_ON_WASI.contains(&s) {
            assert!(
                o.starts_with("skipped: not") && o.contains("WASI"),
                "{s}: {o}, not skipped with a reason naming WASI"
            );
        } else {
            assert_eq!(o, "passed", "{s}");
        }
        let sim = outcome(&format!("sim/{s}"));
        if s.kernel_only() {
            assert!(sim.starts_with("skipped"), "sim/{s}: {sim}");
        } else {
            assert_eq!(sim, "passed", "sim/{s}");
        }
    }
    for (name, o) in &all {
        assert!(!o.starts_with("FAILED"), "{name}: {o}");
    }
}
