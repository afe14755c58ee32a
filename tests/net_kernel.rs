//! The `net` helpers on real kernels, over loopback TCP, on every OS
//! backend, each under a watchdog: the echo server with 1,000 concurrent
//! clients, every byte checked; replies queued before a half-close are
//! not lost (pipelined HTTP requests then FIN); the acceptor accepts a
//! burst until WouldBlock; the echo example shuts down on SIGTERM and
//! SIGINT and exits 0.

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use common::{example, watchdog, RunTo};
use evloop::net::{Acceptor, ConnEvent, ConnOptions, Conns, ListenOptions};
use evloop::{Async, Interest, Loop, RunMode};

#[allow(dead_code)] // its `main` is the example's
#[path = "../examples/echo_server.rs"]
mod echo_server;

#[allow(dead_code)]
#[path = "../examples/http_server.rs"]
mod http_server;

fn listener() -> TcpListener {
    ListenOptions::new()
        .backlog(4096)
        .bind("127.0.0.1:0".parse().unwrap())
        .unwrap()
}

fn kernel_loop<'s, S>(backend: &str) -> Loop<'s, S> {
    Loop::builder().backend(backend).build().unwrap()
}

/// The byte at `offset` of client `client`'s stream: every client sends
/// different bytes, so a mix-up between connections is caught too.
fn pattern(client: usize, offset: usize) -> u8 {
    (client.wrapping_mul(131) ^ offset.wrapping_mul(7) ^ (offset >> 8)) as u8
}

struct Client {
    id: usize,
    sent: usize,
    received: usize,
}

/// `clients` connections to `addr`, each sending `per_client` bytes, then
/// half-closing, reading its echo and checking every byte, until EOF; all
/// driven by one loop of their own (poll: the clients' fds may be many).
fn run_clients(addr: SocketAddr, clients: usize, per_client: usize) -> usize {
    let mut lp: Loop<usize> = kernel_loop("poll");
    for id in 0..clients {
        let stream = TcpStream::connect(addr).unwrap();
        stream.set_nonblocking(true).unwrap();
        let mut me = Client {
            id,
            sent: 0,
            received: 0,
        };
        let mut out = vec![0u8; 16 * 1024];
        lp.io(stream, Interest::BOTH, move |lp, done, ev| {
            if me.sent < per_client && ev.ready.is_writable() {
                while me.sent < per_client {
                    let n = (per_client - me.sent).min(out.len());
                    for (i, b) in out[..n].iter_mut().enumerate() {
                        *b = pattern(me.id, me.sent + i);
                    }
                    match ev.source.write(&out[..n]) {
                        Ok(k) => me.sent += k,
                        Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                        Err(e) => panic!("client {} write: {e}", me.id),
                    }
                }
                if me.sent == per_client {
                    ev.source.shutdown(Shutdown::Write).unwrap();
                    ev.watcher.set_interest(lp, Interest::READABLE).unwrap();
                }
            }
            let mut buf = [0u8; 16 * 1024];
            loop {
                match ev.source.read(&mut buf) {
                    Ok(0) => {
                        assert_eq!(me.received, per_client, "client {}: early EOF", me.id);
                        *done += 1;
                        return lp.remove(ev.watcher).unwrap();
                    }
                    Ok(n) => {
                        for (i, &b) in buf[..n].iter().enumerate() {
                            assert_eq!(
                                b,
                                pattern(me.id, me.received + i),
                                "client {} byte {}",
                                me.id,
                                me.received + i
                            );
                        }
                        me.received += n;
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                    Err(e) => panic!("client {} read: {e}", me.id),
                }
            }
        })
        .unwrap();
    }
    lp.finish(0)
}

/// The echo example's server on `backend` in a thread, `clients` clients
/// on a second loop in this one; returns the server's count of served
/// connections.
fn echo_many(backend: &'static str, clients: usize, per_client: usize) -> u64 {
    let l = listener();
    let addr = l.local_addr().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let server = std::thread::spawn(move || {
        let mut lp: Loop<echo_server::Server> = kernel_loop(backend);
        let mut server = echo_server::Server::default();
        // No idle timeout: a client that a loaded machine leaves waiting
        // for a minute is slow, not idle, and must still be served.
        echo_server::start(&mut lp, &mut server, l, None).unwrap();
        // How the test tells the server to shut down: an async watcher.
        let (_, stop) = Async::new(&mut lp, |lp, s: &mut echo_server::Server, me| {
            echo_server::shutdown(lp, s);
            lp.remove(me).unwrap();
        })
        .unwrap();
        tx.send(stop).unwrap();
        lp.run(RunMode::Default, &mut server).unwrap();
        assert!(server.conns.is_empty());
        server.served
    });
    let stop = rx.recv().unwrap();
    let done = run_clients(addr, clients, per_client);
    assert_eq!(done, clients);
    stop.send().unwrap();
    server.join().unwrap()
}

#[test]
fn echo_server_serves_1000_concurrent_clients_every_byte_checked() {
    let limit = evloop::net::raise_fd_limit().unwrap();
    assert!(
        limit >= 2_100,
        "the fd limit ({limit}) is too low for 1,000 clients"
    );
    // One backend after another: select's fds must stay below
    // FD_SETSIZE, so it serves fewer clients, and alone.
    for backend in evloop::backends::AVAILABLE {
        let clients = if *backend == "select" { 200 } else { 1000 };
        let per_client = 100 * 1024; // 100 MiB each way on epoll and poll
        let started = Instant::now();
        let served = watchdog(
            &format!("echo, {clients} clients on {backend}"),
            // Only a hang: it takes seconds, and a loaded machine many more.
            Duration::from_secs(600),
            move || echo_many(backend, clients, per_client),
        );
        assert_eq!(served, clients as u64);
        eprintln!(
            "{backend}: {clients} clients x {per_client} bytes echoed in {:?}",
            started.elapsed()
        );
    }
}

#[test]
fn pipelined_requests_then_a_half_close_get_every_reply() {
    common::on_backends("http half-close", evloop::backends::AVAILABLE, |backend| {
        let l = listener();
        let addr = l.local_addr().unwrap();
        let mut lp: Loop<Conns<()>> = kernel_loop(backend);
        let acceptor = http_server::serve(&mut lp, l).unwrap();
        let client = std::thread::spawn(move || {
            let mut s = TcpStream::connect(addr).unwrap();
            let req = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".repeat(100);
            s.write_all(&req).unwrap();
            s.shutdown(Shutdown::Write).unwrap(); // FIN right behind
            let mut back = Vec::new();
            s.read_to_end(&mut back).unwrap(); // until the server closes
            back
        });
        let mut conns = Conns::new();
        // Until the connection is accepted and done.
        while acceptor.accepted() == 0 || !conns.is_empty() {
            lp.run(RunMode::Once, &mut conns).unwrap();
        }
        let back = client.join().unwrap();
        let replies = back.windows(15).filter(|w| w == b"HTTP/1.1 200 OK").count();
        assert_eq!(replies, 100, "{backend}: replies lost at the half-close");
        assert!(back.ends_with(b"Hello, world!\n"));
        acceptor.close(&mut lp).unwrap();
    });
}

#[test]
fn the_acceptor_takes_a_burst_in_one_event() {
    common::on_backends("accept burst", evloop::backends::AVAILABLE, |backend| {
        let l = listener();
        let addr = l.local_addr().unwrap();
        // All connected (in the backlog) before the loop looks.
        let clients: Vec<TcpStream> = (0..50).map(|_| TcpStream::connect(addr).unwrap()).collect();
        let mut lp: Loop<Vec<TcpStream>> = kernel_loop(backend);
        let acceptor = Acceptor::start(&mut lp, l, |_, got, s| got.push(s.unwrap())).unwrap();
        let mut got = Vec::new();
        lp.run(RunMode::Once, &mut got).unwrap();
        assert_eq!(got.len(), 50, "{backend}: accepted until WouldBlock");
        for s in &got {
            // Non-blocking: a read with nothing there does not wait.
            let err = (&*s).read(&mut [0u8; 1]).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::WouldBlock);
        }
        assert_eq!(acceptor.errors_reported(), 0);
        acceptor.close(&mut lp).unwrap();
        drop(clients);
    });
}

#[test]
fn a_slow_reader_makes_the_echo_stop_reading_and_nothing_is_lost() {
    common::on_backends("backpressure", evloop::backends::AVAILABLE, |backend| {
        let l = listener();
        let addr = l.local_addr().unwrap();
        let mut lp: Loop<Conns<()>> = kernel_loop(backend);
        let opts = ConnOptions::new().watermarks(16 * 1024, 64 * 1024);
        let acceptor = Acceptor::start(&mut lp, l, move |lp, conns, s| {
            conns
                .open(lp, s.unwrap(), opts, (), |lp, conns, id, ev| match ev {
                    ConnEvent::Data => {
                        let n = conns[id].input().len();
                        conns[id].write_from_input(lp, n);
                        // Never much more than the high watermark
                        // (plus one read) is queued.
                        assert!(conns[id].queued() <= 64 * 1024 + 16 * 1024);
                    }
                    ConnEvent::Eof => conns[id].close(lp),
                    _ => {}
                })
                .unwrap();
        })
        .unwrap();
        const TOTAL: usize = 8 << 20;
        let client = std::thread::spawn(move || {
            let s = TcpStream::connect(addr).unwrap();
            let mut w = s.try_clone().unwrap();
            // Writes 8 MiB while the reader below takes its time.
            let writer = std::thread::spawn(move || {
                let data: Vec<u8> = (0..TOTAL).map(|i| pattern(1, i)).collect();
                w.write_all(&data).unwrap();
                w.shutdown(Shutdown::Write).unwrap();
            });
            let mut r = s;
            let mut got = 0;
            let mut buf = [0u8; 4096];
            loop {
                let n = r.read(&mut buf).unwrap();
                if n == 0 {
                    break;
                }
                for (i, &b) in buf[..n].iter().enumerate() {
                    assert_eq!(b, pattern(1, got + i));
                }
                got += n;
            }
            writer.join().unwrap();
            got
        });
        let mut conns = Conns::new();
        while acceptor.accepted() == 0 || !conns.is_empty() {
            lp.run(RunMode::Once, &mut conns).unwrap();
        }
        assert_eq!(client.join().unwrap(), TOTAL);
        acceptor.close(&mut lp).unwrap();
    });
}

#[test]
fn the_echo_example_exits_0_on_sigterm_or_sigint_after_closing_its_connections() {
    for signal in ["-TERM", "-INT"] {
        shutdown_on(signal);
    }
}

/// The echo example started with `args`, the address it prints (`echo
/// on ADDR`), and its stderr.
fn start_echo_example(
    args: &[&str],
) -> (std::process::Child, SocketAddr, std::process::ChildStderr) {
    use std::io::BufRead;
    use std::process::{Command, Stdio};
    let mut child = Command::new(example("echo_server"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    let addr: SocketAddr = line
        .split_whitespace()
        .nth(2)
        .expect("echo on ADDR")
        .parse()
        .unwrap();
    (child, addr, stderr)
}

fn shutdown_on(signal: &'static str) {
    use std::process::Command;
    let (mut child, addr, stderr) = start_echo_example(&["127.0.0.1:0"]);
    let pid = child.id();
    let result = watchdog(
        &format!("echo example, kill {signal}"),
        common::WATCHDOG,
        move || {
            let mut errors = String::new();
            // Before the signal: a connection with an echo in flight.
            let mut c = TcpStream::connect(addr).unwrap();
            c.write_all(b"still there?").unwrap();
            let mut buf = [0u8; 12];
            c.read_exact(&mut buf).unwrap();
            let status = Command::new("kill")
                .args([signal, &pid.to_string()])
                .status()
                .unwrap();
            assert!(status.success());
            // The server closes our connection (gracefully: EOF, no reset).
            let mut rest = Vec::new();
            c.read_to_end(&mut rest).unwrap();
            drop(c);
            let exit = child.wait().unwrap();
            std::io::BufReader::new(stderr)
                .read_to_string(&mut errors)
                .unwrap();
            (buf, rest, exit, errors)
        },
    );
    let (buf, rest, exit, errors) = result;
    assert_eq!(&buf, b"still there?");
    assert!(rest.is_empty());
    assert!(exit.success(), "{signal}: {exit:?}; stderr: {errors}");
    assert!(errors.contains("served 1 connections"), "{errors}");
}

/// The echo example with `--connections 3`: it serves three connections
/// (two at once) to their end, then exits 0 by itself, as it does on WASI,
/// where no signal can stop it.
#[test]
fn the_echo_example_exits_0_after_serving_its_connections_limit() {
    let (mut child, addr, stderr) = start_echo_example(&["127.0.0.1:0", "--connections", "3"]);
    let (exit, errors) = watchdog(
        "echo example, --connections 3",
        common::WATCHDOG,
        move || {
            let echo = |c: &mut TcpStream, msg: &[u8]| {
                c.write_all(msg).unwrap();
                c.shutdown(Shutdown::Write).unwrap();
                let mut back = Vec::new();
                c.read_to_end(&mut back).unwrap();
                assert_eq!(back, msg);
            };
            let mut a = TcpStream::connect(addr).unwrap();
            let mut b = TcpStream::connect(addr).unwrap();
            echo(&mut b, b"second");
            echo(&mut a, b"first");
            echo(&mut TcpStream::connect(addr).unwrap(), b"third");
            let exit = child.wait().unwrap();
            let mut errors = String::new();
            std::io::BufReader::new(stderr)
                .read_to_string(&mut errors)
                .unwrap();
            (exit, errors)
        },
    );
    assert!(exit.success(), "{exit:?}; stderr: {errors}");
    assert!(errors.contains("served 3 connections"), "{errors}");
}

/// The chat example: each line goes to every other client, in the order
/// the server read them, and not back to its sender.
#[test]
fn the_chat_example_relays_each_line_to_the_others_in_order() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    let mut child = Command::new(example("chat_server"))
        .arg("127.0.0.1:0")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    let addr: SocketAddr = line
        .split_whitespace()
        .nth(2)
        .expect("chat on ADDR")
        .parse()
        .unwrap();
    let result = std::panic::catch_unwind(|| {
        watchdog("chat example", common::WATCHDOG, move || {
            let mut a = TcpStream::connect(addr).unwrap();
            let b = TcpStream::connect(addr).unwrap();
            let c = TcpStream::connect(addr).unwrap();
            let (mut rb, mut rc) = (BufReader::new(b), BufReader::new(c));
            // Every client is in the room once it has heard a first line
            // (the server accepts them in order, before reading a).
            a.write_all(b"hello\n").unwrap();
            for r in [&mut rb, &mut rc] {
                let mut l = String::new();
                r.read_line(&mut l).unwrap();
                assert_eq!(l, "hello\n");
            }
            // Several lines in one write, and one from b in between.
            a.write_all(b"one\ntwo\nthree\n").unwrap();
            for want in ["one\n", "two\n", "three\n"] {
                for r in [&mut rb, &mut rc] {
                    let mut l = String::new();
                    r.read_line(&mut l).unwrap();
                    assert_eq!(l, want);
                }
            }
            rb.get_mut().write_all(b"from b\n").unwrap();
            let mut l = String::new();
            rc.read_line(&mut l).unwrap();
            assert_eq!(l, "from b\n");
            a.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
            let mut l = String::new();
            BufReader::new(&a).read_line(&mut l).unwrap();
            assert_eq!(l, "from b\n", "a hears b, and never its own lines");
        })
    });
    let _ = child.kill(); // the example serves until killed
    let _ = child.wait();
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

/// The descriptor flags of `fd` in this process, from /proc (Linux).
#[cfg(target_os = "linux")]
fn fd_flags(fd: std::os::fd::RawFd) -> u32 {
    let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}")).unwrap();
    let flags = info
        .lines()
        .find_map(|l| l.strip_prefix("flags:"))
        .expect("a flags line");
    u32::from_str_radix(flags.trim(), 8).unwrap()
}

/// Accepted sockets are non-blocking and close-on-exec from the start
/// (`accept4`), on every backend.
#[cfg(target_os = "linux")]
#[test]
fn accepted_sockets_are_nonblocking_and_close_on_exec() {
    use std::os::fd::AsRawFd;
    for backend in evloop::backends::AVAILABLE {
        let l = listener();
        let addr = l.local_addr().unwrap();
        let _client = TcpStream::connect(addr).unwrap();
        let mut lp: Loop<Vec<TcpStream>> = kernel_loop(backend);
        let acceptor = Acceptor::start(&mut lp, l, |_, got, s| got.push(s.unwrap())).unwrap();
        let mut got = Vec::new();
        while got.is_empty() {
            lp.run(RunMode::Once, &mut got).unwrap();
        }
        let flags = fd_flags(got[0].as_raw_fd());
        assert_ne!(
            flags & libc::O_NONBLOCK as u32,
            0,
            "{backend}: O_NONBLOCK in {flags:o}"
        );
        assert_ne!(
            flags & libc::O_CLOEXEC as u32,
            0,
            "{backend}: O_CLOEXEC in {flags:o}"
        );
        acceptor.close(&mut lp).unwrap();
    }
}

/// The backlog asked for reaches listen(2): `ss` shows a listener's
/// backlog as its Send-Q (std's fixed 128 would show 128). Skipped, with
/// a message, where `ss` is missing.
#[cfg(target_os = "linux")]
#[test]
fn the_listen_backlog_is_the_one_asked_for() {
    let l = ListenOptions::new()
        .backlog(777)
        .bind("127.0.0.1:0".parse().unwrap())
        .unwrap();
    let port = l.local_addr().unwrap().port();
    let out = match std::process::Command::new("ss")
        .args(["-Hltn", &format!("sport = :{port}")])
        .output()
    {
        Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout).into_owned(),
        _ => {
            eprintln!("skipped: `ss` (iproute2) is not available");
            return;
        }
    };
    // "LISTEN 0 777 127.0.0.1:PORT 0.0.0.0:*"
    let send_q: u32 = out
        .split_whitespace()
        .nth(2)
        .unwrap_or_else(|| panic!("ss printed {out:?}"))
        .parse()
        .unwrap();
    let somaxconn: u32 = std::fs::read_to_string("/proc/sys/net/core/somaxconn")
        .map(|s| s.trim().parse().unwrap())
        .unwrap_or(4096);
    assert_eq!(send_q, 777.min(somaxconn), "ss: {out}");
}

/// A loop's state for [`burst_then_hang_up`]: the connection, the bytes
/// its handler read, and its other events.
#[derive(Default)]
struct Burst {
    conns: Conns<()>,
    read: usize,
    log: Vec<String>,
}

impl AsMut<Conns<()>> for Burst {
    fn as_mut(&mut self) -> &mut Conns<()> {
        &mut self.conns
    }
}

/// What a connection's handler saw of a peer that sent `len` bytes and
/// closed before the loop looked, read 4 bytes at a time, the handler
/// consuming everything and leaving the connection half-open at the end
/// of file: the bytes read, then the other events.
fn burst_then_hang_up(backend: &'static str, len: usize) -> (usize, Vec<String>) {
    use std::os::unix::net::UnixStream;
    let (mine, mut peer) = UnixStream::pair().unwrap();
    mine.set_nonblocking(true).unwrap();
    peer.write_all(&vec![7u8; len]).unwrap();
    drop(peer);
    let mut lp: Loop<Burst> = kernel_loop(backend);
    let mut st = Burst::default();
    let opts = ConnOptions::new().read_buffer(4);
    st.conns
        .open(
            &mut lp,
            mine,
            opts,
            (),
            |_, st: &mut Burst, id, ev| match ev {
                ConnEvent::Data => {
                    let n = st.conns[id].input().len();
                    st.read += n;
                    st.conns[id].consume(n);
                }
                ConnEvent::Closed(evloop::net::CloseReason::Error(e)) => {
                    st.log.push(format!("closed: error {:?}", e.kind()))
                }
                ev => st.log.push(format!("{ev:?}")),
            },
        )
        .unwrap();
    // Everything is there before the first poll: a few passes suffice.
    for _ in 0..10 {
        if st.conns.is_empty() {
            break;
        }
        lp.run(RunMode::NoWait, &mut st).unwrap();
    }
    (st.read, st.log)
}
/// The kernel side of tests/net_conn_sim.rs's
/// `a_hang_up_read_in_an_events_last_round_still_ends_the_connection`: a
/// hang-up with the end of file read in an event's last round (12 bytes)
/// ends the connection as one read earlier does (8 bytes), on every
/// backend (on those that report hang-ups; select does not, and leaves
/// both half-open).
#[test]
fn a_hang_up_read_in_an_events_last_round_is_not_forgotten() {
    for backend in evloop::backends::AVAILABLE {
        watchdog(
            &format!("hang-up in the last round on {backend}"),
            common::WATCHDOG,
            move || {
                let early = burst_then_hang_up(backend, 8);
                assert_eq!(early.0, 8);
                for len in [12, 14] {
                    let (read, log) = burst_then_hang_up(backend, len);
                    assert_eq!(read, len, "{backend}");
                    assert_eq!(log, early.1, "{backend}, {len} bytes");
                }
                eprintln!("{backend}: {:?}", early.1);
            },
        );
    }
}
