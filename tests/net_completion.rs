//! evloop::net on io_uring's completion path (backends/io_uring/completion.rs),
//! where the ring's buffers, sends and accepts are the backend's: reading
//! paused while clients send, a peer that resets in the middle of a
//! send, a reply to a peer that reset right after its request, and ten
//! thousand connections opened and closed. Every other net
//! test runs on this path too (they run on every backend); these are the
//! cases only it has. Skipped, loudly, where io_uring or its completion
//! I/O is not available.
#![cfg(all(target_os = "linux", feature = "io-uring"))]

mod common;

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use evloop::net::{Acceptor, CloseReason, Conn, ConnEvent, ConnOptions, Conns, ListenOptions};
use evloop::{Loop, RunMode};

/// A loop on io_uring with completion I/O, or `None` (said why).
fn completion_loop<'s, S>() -> Option<Loop<'s, S>> {
    let lp: Loop<'s, S> = match Loop::builder().backend("io_uring").build() {
        Ok(lp) => lp,
        Err(e) => {
            eprintln!("SKIPPED: the io_uring backend does not start here: {e}");
            return None;
        }
    };
    if !lp.capabilities().completion {
        eprintln!("SKIPPED: io_uring has no completion I/O here (Linux 6.0 needed)");
        return None;
    }
    Some(lp)
}

fn listener() -> TcpListener {
    ListenOptions::new()
        .backlog(4096)
        .bind("127.0.0.1:0".parse().unwrap())
        .unwrap()
}

fn pattern(client: usize, offset: usize) -> u8 {
    (client.wrapping_mul(131) ^ offset.wrapping_mul(7) ^ (offset >> 8)) as u8
}

/// Client `c` of an echo server: sends `len` bytes of its pattern (from a
/// thread of its own, then shuts down its write side) while it reads
/// everything back until the server's end of file.
fn echo_client(addr: std::net::SocketAddr, c: usize, len: usize) -> Vec<u8> {
    let mut s = TcpStream::connect(addr).unwrap();
    let data: Vec<u8> = (0..len).map(|i| pattern(c, i)).collect();
    let mut w = s.try_clone().unwrap();
    let writer = std::thread::spawn(move || {
        w.write_all(&data).unwrap();
        w.shutdown(Shutdown::Write).unwrap();
    });
    let mut back = Vec::with_capacity(len);
    s.read_to_end(&mut back).unwrap();
    writer.join().unwrap();
    back
}

/// Every byte of client `c`'s `len` came back, in order.
fn check_echo(c: usize, len: usize, back: Vec<u8>) {
    assert_eq!(back.len(), len, "client {c}");
    assert!(
        back.iter().enumerate().all(|(i, &b)| b == pattern(c, i)),
        "client {c}"
    );
}

/// 96 clients send 96 KiB each while the server has paused reading on
/// every connection (its receives cancelled: the data waits in the
/// sockets, not in the ring's buffers); then the server echoes
/// everything: every byte comes back, in order. (The ring itself running
/// dry, `ENOBUFS`, is the backend's unit test
/// `completion_io_loses_nothing_when_the_buffer_ring_runs_out`.)
#[test]
fn paused_connections_lose_nothing() {
    common::watchdog("paused while clients send", Duration::from_secs(60), || {
        let Some(mut lp) = completion_loop::<Conns<()>>() else {
            return;
        };
        const CLIENTS: usize = 96;
        const EACH: usize = 96 * 1024;
        let l = listener();
        let addr = l.local_addr().unwrap();
        let acceptor = Acceptor::start(&mut lp, l, |lp, conns, s| {
            let id = conns
                .open(
                    lp,
                    s.unwrap(),
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
            conns[id].pause_reading(lp); // until every client has sent
        })
        .unwrap();
        let clients: Vec<_> = (0..CLIENTS)
            .map(|c| std::thread::spawn(move || check_echo(c, EACH, echo_client(addr, c, EACH))))
            .collect();
        let mut conns = Conns::new();
        while acceptor.accepted() < CLIENTS as u64 {
            lp.run(RunMode::Once, &mut conns).unwrap();
        }
        // Let the kernel fill the ring while nobody reads.
        for _ in 0..20 {
            lp.run(RunMode::NoWait, &mut conns).unwrap();
            std::thread::sleep(Duration::from_millis(5));
        }
        let ids: Vec<_> = conns.iter().map(|(id, _)| id).collect();
        for id in ids {
            conns[id].resume_reading(&mut lp);
        }
        while !conns.is_empty() {
            lp.run(RunMode::Once, &mut conns).unwrap();
        }
        for c in clients {
            c.join().unwrap();
        }
        acceptor.close(&mut lp).unwrap();
    });
}

/// A client reads a little of a large reply and resets the connection:
/// the server's connection ends with an error, and the loop goes on
/// serving the next client.
#[test]
fn a_peer_that_resets_in_the_middle_of_a_send() {
    common::watchdog("reset mid-send", Duration::from_secs(60), || {
        let Some(mut lp) = completion_loop::<Server>() else {
            return;
        };
        let big = vec![7u8; 8 << 20];
        let (acceptor, addr) = serve(&mut lp, move |lp, c| {
            c.consume(c.input().len());
            c.write(lp, &big);
        });
        let mut state = Server(Conns::new(), Vec::new());
        for round in 0..3 {
            let client = std::thread::spawn(move || {
                let mut s = TcpStream::connect(addr).unwrap();
                s.write_all(b"go").unwrap();
                let mut buf = vec![0u8; 256 * 1024];
                s.read_exact(&mut buf).unwrap();
                // SO_LINGER 0: the close resets the connection.
                socket2::SockRef::from(&s)
                    .set_linger(Some(Duration::ZERO))
                    .unwrap();
                drop(s);
            });
            while state.1.len() <= round {
                lp.run(RunMode::Once, &mut state).unwrap();
            }
            client.join().unwrap();
            assert!(
                !state.1[round],
                "round {round}: the reset ends it with an error"
            );
        }
        assert!(state.0.is_empty());
        acceptor.close(&mut lp).unwrap();
    });
}

/// A client resets its connection right after its request, while the
/// server reads it: the reply the server then sends fails, and the
/// connection ends with that error, not in a graceful close (the
/// receive's end of input, completed after the failed send, used to
/// cover the send's error).
#[test]
fn a_reply_to_a_peer_that_reset_ends_in_an_error() {
    common::watchdog("reply to a reset peer", Duration::from_secs(30), || {
        let Some(mut lp) = completion_loop::<Server>() else {
            return;
        };
        let client = std::rc::Rc::new(std::cell::RefCell::new(None::<TcpStream>));
        let held = client.clone();
        let (acceptor, addr) = serve(&mut lp, move |lp, c| {
            // The client resets now (SO_LINGER 0, close): on loopback the
            // reset is here before the reply is sent.
            let peer = held.borrow_mut().take().unwrap();
            socket2::SockRef::from(&peer)
                .set_linger(Some(Duration::ZERO))
                .unwrap();
            drop(peer);
            c.consume(c.input().len());
            c.write(lp, b"reply\n");
        });
        let mut c = TcpStream::connect(addr).unwrap();
        c.write_all(b"request\n").unwrap();
        *client.borrow_mut() = Some(c);
        let mut state = Server(Conns::new(), Vec::new());
        while state.1.is_empty() {
            lp.run(RunMode::Once, &mut state).unwrap();
        }
        assert_eq!(state.1, [false], "the reply was lost: not a clean close");
        acceptor.close(&mut lp).unwrap();
    });
}

/// Connections, and whether each one closed cleanly.
struct Server(Conns<()>, Vec<bool>);

/// A server on a new listener: each read calls `on_data`, the peer's end
/// of input closes, and each close pushes whether it was clean. Its
/// acceptor and address.
fn serve<F>(lp: &mut Loop<'static, Server>, on_data: F) -> (Acceptor, SocketAddr)
where
    F: Fn(&mut Loop<'static, Server>, &mut Conn<()>) + Clone + 'static,
{
    let l = listener();
    let addr = l.local_addr().unwrap();
    let acceptor = Acceptor::start(lp, l, move |lp, state: &mut Server, s| {
        let on_data = on_data.clone();
        state
            .0
            .open(
                lp,
                s.unwrap(),
                ConnOptions::new(),
                (),
                move |lp, st, id, ev| match ev {
                    ConnEvent::Data => on_data(lp, &mut st.0[id]),
                    ConnEvent::Eof => st.0[id].close(lp),
                    ConnEvent::Closed(reason) => st.1.push(reason.is_clean()),
                    _ => {}
                },
            )
            .unwrap();
    })
    .unwrap();
    (acceptor, addr)
}

impl AsMut<Conns<()>> for Server {
    fn as_mut(&mut self) -> &mut Conns<()> {
        &mut self.0
    }
}

/// A client that sends requests and never reads the replies: the
/// server's queue stops growing at its high watermark (the connection is
/// congested and stays so; what the backend took beyond it is bounded by
/// its own limit, 256 KiB, or the queue would drain), and the client's
/// close ends the connection.
#[test]
fn a_peer_that_never_reads_holds_a_bounded_queue() {
    common::watchdog("a peer that never reads", Duration::from_secs(60), || {
        let Some(mut lp) = completion_loop::<Server>() else {
            return;
        };
        const HIGH: usize = 256 * 1024;
        let l = listener();
        let addr = l.local_addr().unwrap();
        let opts = ConnOptions::new().watermarks(64 * 1024, HIGH);
        let acceptor = Acceptor::start(&mut lp, l, move |lp, st: &mut Server, s| {
            st.0.open(lp, s.unwrap(), opts, (), |lp, st, id, ev| match ev {
                ConnEvent::Data => {
                    let c = &mut st.0[id];
                    let n = c.input().len();
                    c.consume(n);
                    // 64 KiB per request, while not congested.
                    if !c.is_congested() {
                        c.write(lp, &[9u8; 64 * 1024]);
                    }
                    assert!(c.queued() <= HIGH + 64 * 1024, "queued {}", c.queued());
                    if c.is_congested() {
                        st.1.push(true);
                    }
                }
                ConnEvent::Closed(_) => st.1.push(false),
                _ => {}
            })
            .unwrap();
        })
        .unwrap();
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let client = std::thread::spawn(move || {
            let mut s = TcpStream::connect(addr).unwrap();
            s.set_nonblocking(true).unwrap();
            // Requests until told to stop; never a read.
            while stopped.try_recv().is_err() {
                let _ = s.write(b"GET\r\n");
                std::thread::sleep(Duration::from_millis(1));
            }
            drop(s);
        });
        let mut state = Server(Conns::new(), Vec::new());
        while !state.1.contains(&true) {
            lp.run(RunMode::Once, &mut state).unwrap();
        }
        // Congested: more requests make no more replies.
        for _ in 0..50 {
            lp.run(RunMode::NoWait, &mut state).unwrap();
            std::thread::sleep(Duration::from_millis(1));
        }
        let (_, c) = state.0.iter().next().expect("the connection");
        assert!(c.is_congested());
        assert!(c.queued() <= HIGH + 64 * 1024);
        stop.send(()).unwrap();
        client.join().unwrap();
        while !state.0.is_empty() {
            lp.run(RunMode::Once, &mut state).unwrap();
        }
        acceptor.close(&mut lp).unwrap();
    });
}

/// Ten thousand connections, one after another, each sending a line and
/// closing: every one is accepted, echoed and closed, nothing is left.
#[test]
fn ten_thousand_connects_and_closes() {
    common::watchdog("10,000 connections", Duration::from_secs(120), || {
        let Some(mut lp) = completion_loop::<Conns<()>>() else {
            return;
        };
        const N: usize = 10_000;
        let l = listener();
        let addr = l.local_addr().unwrap();
        let acceptor = Acceptor::start(&mut lp, l, |lp, conns, s| {
            conns
                .open(
                    lp,
                    s.unwrap(),
                    ConnOptions::new(),
                    (),
                    |lp, conns, id, ev| match ev {
                        ConnEvent::Data => {
                            let n = conns[id].input().len();
                            conns[id].write_from_input(lp, n);
                        }
                        ConnEvent::Eof => conns[id].close(lp),
                        ConnEvent::Closed(CloseReason::Error(e)) => {
                            panic!("connection {id:?}: {e}")
                        }
                        _ => {}
                    },
                )
                .unwrap();
        })
        .unwrap();
        let client = std::thread::spawn(move || {
            for i in 0..N {
                let mut s = TcpStream::connect(addr).unwrap();
                let line = format!("hello {i}\n");
                s.write_all(line.as_bytes()).unwrap();
                s.shutdown(Shutdown::Write).unwrap();
                let mut back = String::new();
                s.read_to_string(&mut back).unwrap();
                assert_eq!(back, line);
            }
        });
        let mut conns = Conns::new();
        while acceptor.accepted() < N as u64 || !conns.is_empty() {
            lp.run(RunMode::Once, &mut conns).unwrap();
        }
        client.join().unwrap();
        assert_eq!(acceptor.accepted(), N as u64);
        acceptor.close(&mut lp).unwrap();
    });
}

/// The executor's sockets on the completion path: a stream that hyper's
/// `HyperIo` adopted is read, written and shut down through the loop's
/// completion I/O (an echo, then the half-close, every byte checked),
/// and reading it behind the completion I/O's back (`read_with`) is an
/// error that says so, not lost data.
#[cfg(feature = "hyper")]
#[test]
fn an_executor_socket_adopted_by_hyper_io() {
    use evloop::exec::hyper::HyperIo;
    use evloop::exec::{block_on, AsyncFd};
    common::watchdog("exec on completion I/O", Duration::from_secs(60), || {
        let Some(mut lp) = completion_loop::<()>() else {
            return;
        };
        let l = listener();
        let addr = l.local_addr().unwrap();
        let client = std::thread::spawn(move || echo_client(addr, 3, 300_000));
        let echoed = block_on(&mut lp, &mut (), async move {
            let l = AsyncFd::new(l)?;
            let (stream, _) = l.accept().await?;
            let io = HyperIo::new(stream);
            let s = io.inner();
            let refused = s.read_with(|_| Ok(())).await.unwrap_err();
            assert_eq!(refused.kind(), std::io::ErrorKind::Unsupported, "{refused}");
            assert!(refused.to_string().contains("completion I/O"), "{refused}");
            let mut buf = vec![0u8; 10_000];
            let mut total = 0;
            loop {
                let n = s.read(&mut buf).await?;
                if n == 0 {
                    break;
                }
                s.write_all(&buf[..n]).await?;
                total += n;
            }
            let mut io = io;
            std::future::poll_fn(|cx| {
                hyper::rt::Write::poll_shutdown(std::pin::Pin::new(&mut io), cx)
            })
            .await?;
            Ok::<_, std::io::Error>(total)
        })
        .unwrap()
        .unwrap();
        assert_eq!(echoed, 300_000);
        check_echo(3, 300_000, client.join().unwrap());
    });
}
