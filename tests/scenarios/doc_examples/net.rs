//! The doc examples of `evloop::net`: on every backend where a socket
//! pair serves, on the OS backends where the example needs real TCP
//! sockets or a half-close, which the simulator has not.

use std::cell::{Cell, RefCell};
use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::unix::net::UnixStream;
use std::rc::Rc;
use std::time::Duration;

use crate::common::{echo, ms, Peer, RunTo, World};
use evloop::net::{Acceptor, CloseReason, ConnEvent, ConnOptions, Conns, ListenOptions};
use evloop::{Break, Loop, RunMode, RunOutcome};

tests_on!(
    every_backend,
    crate::common::backends(),
    [
        conn_example,
        conn_abort_example,
        conn_close_example,
        conn_consume_example,
        conn_input_example,
        conn_write_from_input_example,
        conns_example,
        conns_close_all_example,
    ]
);

tests_on!(
    os_backends,
    evloop::backends::AVAILABLE,
    [net_module_example, acceptor_example, conns_open_example,]
);

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

/// `Conn`: "ping" in, "pong" out, then a graceful close. The peer sends at
/// 1 ms and closes once it has the reply (the simulated one never closed:
/// its run lasted the 5 s linger).
fn conn_example(w: &World) {
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
    lp.run_to_end(&mut conns);
    assert_eq!(*received.borrow(), b"pong\n");
    assert!(conns.is_empty());
}

/// `Conn::abort`: closed at once, its entry still there for its last event.
fn conn_abort_example(w: &World) {
    let (sock, _peer) = w.pair();
    let mut lp: Loop<Conns<bool>> = w.new_loop();
    let mut conns = Conns::new();
    let events = Rc::new(RefCell::new(Vec::new()));
    let log = events.clone();
    let id = conns
        .open(
            &mut lp,
            sock,
            ConnOptions::new(),
            false,
            move |_, conns, id, ev| {
                conns[id].data = true; // there for its last event
                let aborted = matches!(ev, ConnEvent::Closed(CloseReason::Aborted));
                log.borrow_mut().push(aborted);
            },
        )
        .unwrap();
    conns[id].abort(&mut lp);
    lp.run_to_end(&mut conns);
    assert_eq!(*events.borrow(), [true], "one event: closed, aborted");
    assert!(conns.is_empty());
}

/// `Conn::close`: "last words" are flushed before the half-close; the peer
/// closes too at 3 ms (once it has them), and the close is clean.
fn conn_close_example(w: &World) {
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
    lp.run_to_end(&mut conns);
    assert!(closed.get());
    assert_eq!(*received.borrow(), b"last words");
}

/// `Conn::consume`: "ab" at 1 ms is kept until "cd" arrives at 2 ms; the
/// four bytes go back in capitals, then a graceful close (the peer closes
/// once it has them).
fn conn_consume_example(w: &World) {
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
    lp.run_to_end(&mut conns);
    assert_eq!(*received.borrow(), b"ABCD");
}

/// `Conn::input`: what has arrived is there; the handler ends the run
/// (`Broken`: a `Default` run that must return), having sent nothing.
fn conn_input_example(w: &World) {
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
    lp.run_expect(RunMode::Default, &mut conns, RunOutcome::Broken);
    let c = &conns[id];
    assert_eq!((c.data, c.input().len()), (1, 7));
    assert_eq!(peer.receive(), b"");
}

/// `Conn::write_from_input`: an echo; the peer closes at 2 ms once it has
/// it, and the connection closes on its end of file.
fn conn_write_from_input_example(w: &World) {
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
        .open(&mut lp, sock, ConnOptions::new(), (), echo)
        .unwrap();
    lp.run_to_end(&mut conns);
    assert_eq!(*received.borrow(), b"echo me");
    assert!(conns.is_empty());
}

/// `Conns`: a server state with more than its connections counts the
/// lines a peer sends before it closes; the connection closes on its end
/// of file.
fn conns_example(w: &World) {
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
    lp.run_to_end(&mut server);
    assert_eq!(server.lines, 2);
    assert!(server.conns.is_empty());
}

/// `Conns::close_all`: three connections whose peers never close each
/// close after their linger (20 ms here, the default 5 s there).
fn conns_close_all_example(w: &World) {
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
    lp.run_to_end(&mut conns);
    assert!(conns.is_empty());
    assert!(lp.now() >= ms(20), "{:?}", lp.now());
    drop(peers);
}

/// The `net` module's example: a TCP echo server for one client on
/// loopback (a thread), accepted in a first run (ended `Broken`), served
/// to the end in a second one once the acceptor is closed.
fn net_module_example(w: &World) {
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
    let mut lp: Loop<Conns<()>> = w.new_loop();
    let acceptor = Acceptor::start(&mut lp, listener, |lp, conns, accepted| {
        let stream = accepted.expect("accept");
        conns
            .open(lp, stream, ConnOptions::new(), (), echo)
            .unwrap();
        lp.break_loop(Break::One);
    })
    .unwrap();
    let mut conns = Conns::new();
    lp.run_expect(RunMode::Default, &mut conns, RunOutcome::Broken);
    acceptor.close(&mut lp).unwrap();
    lp.run_to_end(&mut conns);
    assert_eq!(client.join().unwrap(), "hello, echo");
    assert!(conns.is_empty());
}

/// `Acceptor`: one client connects; the run ends `Broken` once it is
/// accepted (a `Default` run that must return).
fn acceptor_example(w: &World) {
    let listener = ListenOptions::new()
        .bind("127.0.0.1:0".parse().unwrap())
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let mut lp: Loop<Vec<TcpStream>> = w.new_loop();
    let acceptor = Acceptor::start(&mut lp, listener, |lp, accepted, res| {
        accepted.push(res.expect("accept"));
        lp.break_loop(Break::One);
    })
    .unwrap();
    let _client = TcpStream::connect(addr).unwrap();
    let mut accepted = Vec::new();
    lp.run_expect(RunMode::Default, &mut accepted, RunOutcome::Broken);
    assert_eq!((accepted.len(), acceptor.accepted()), (1, 1));
    acceptor.close(&mut lp).unwrap();
}

/// `Conns::open`: an echo over a socket pair whose peer half-closes (so
/// not on the simulator, whose pairs have no half-close); the run ends
/// when the connection is done, and the peer reads its echo to the end.
fn conns_open_example(w: &World) {
    let (mine, mut peer) = UnixStream::pair().unwrap();
    mine.set_nonblocking(true).unwrap();
    let mut lp: Loop<Conns<()>> = w.new_loop();
    let mut conns = Conns::new();
    conns
        .open(&mut lp, mine, ConnOptions::new(), (), echo)
        .unwrap();
    peer.write_all(b"over a socket pair").unwrap();
    peer.shutdown(Shutdown::Write).unwrap();
    lp.run_to_end(&mut conns);
    let mut back = String::new();
    peer.read_to_string(&mut back).unwrap();
    assert_eq!(back, "over a socket pair");
}
