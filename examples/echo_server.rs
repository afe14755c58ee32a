//! A TCP echo server on the platform's default backend: an accept watcher,
//! one io watcher per connection with write backpressure (Writable is
//! watched only while output is queued), and an inactivity timeout per
//! connection pushed back with `again` on every read.
//!
//! To keep the example self-contained it also starts a few clients on
//! another thread (loopback only), waits for their echoes, and stops.
//!
//! Run with: `cargo run --example echo_server`
//! (`EVLOOP_BACKEND=poll cargo run --example echo_server` for another backend)

use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

use evloop::{Break, Interest, Io, Loop, RunMode, Timer};

/// Server state shared by all callbacks.
#[derive(Default)]
struct Server {
    conns: HashMap<Io, Conn>,
    served: usize,
    expected: usize,
}

struct Conn {
    unsent: Vec<u8>,
    timeout: Timer,
}

const CLIENTS: usize = 8;
const IDLE_TIMEOUT: Duration = Duration::from_secs(5);

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    listener.set_nonblocking(true)?;
    let addr = listener.local_addr()?;

    let mut lp: Loop<Server> = Loop::new()?;
    println!("echo server on {addr}, backend {}", lp.backend_name());

    lp.io(listener, Interest::READABLE, |lp, server, ev| loop {
        match ev.source.accept() {
            Ok((stream, peer)) => {
                stream.set_nonblocking(true).unwrap();
                accept(lp, server, stream);
                println!("  accepted {peer}");
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(e) => panic!("accept: {e}"),
        }
    })?;

    // Clients: each sends a message, reads the echo, and closes.
    let clients = std::thread::spawn(move || {
        let mut echoed = 0;
        for i in 0..CLIENTS {
            let mut s = TcpStream::connect(addr).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let msg = format!("hello from client {i} ").repeat(1000);
            s.write_all(msg.as_bytes()).unwrap();
            s.shutdown(std::net::Shutdown::Write).unwrap();
            let mut back = Vec::new();
            s.read_to_end(&mut back).unwrap();
            assert_eq!(back, msg.as_bytes());
            echoed += back.len();
        }
        echoed
    });

    let mut server = Server {
        expected: CLIENTS,
        ..Server::default()
    };
    lp.run(RunMode::Default, &mut server)?;
    let echoed = clients.join().unwrap();
    println!(
        "served {} connections, {echoed} bytes echoed, {} iterations",
        server.served,
        lp.iteration()
    );
    Ok(())
}

fn accept(lp: &mut Loop<Server>, server: &mut Server, stream: TcpStream) {
    let io = lp.io(stream, Interest::READABLE, on_conn).unwrap();
    let timeout = lp
        .timer(Duration::ZERO, IDLE_TIMEOUT, move |lp, server, _| {
            println!("  connection idle for {IDLE_TIMEOUT:?}: closing");
            close(lp, server, io);
        })
        .unwrap();
    lp.again(timeout).unwrap();
    server.conns.insert(
        io,
        Conn {
            unsent: Vec::new(),
            timeout,
        },
    );
}

fn on_conn(lp: &mut Loop<Server>, server: &mut Server, ev: evloop::IoEvent<'_, TcpStream>) {
    let conn = server.conns.get_mut(&ev.watcher).expect("known connection");
    let mut eof = false;
    if ev.ready.is_readable() {
        lp.again(conn.timeout).unwrap();
        let mut buf = [0u8; 4096];
        // Read until WouldBlock (or until enough is queued: backpressure).
        while conn.unsent.len() < 64 * 1024 {
            match ev.source.read(&mut buf) {
                Ok(0) => {
                    eof = true;
                    break;
                }
                Ok(n) => conn.unsent.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) => panic!("read: {e}"),
            }
        }
    }
    while !conn.unsent.is_empty() {
        match ev.source.write(&conn.unsent) {
            Ok(n) => {
                conn.unsent.drain(..n);
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(e) => panic!("write: {e}"),
        }
    }
    if eof && conn.unsent.is_empty() {
        close(lp, server, ev.watcher);
        return;
    }
    // Watch Writable only while output is queued; otherwise the loop
    // would wake on every iteration for a socket that is always writable.
    let want = match (conn.unsent.is_empty(), eof) {
        (true, _) => Interest::READABLE,
        (false, true) => Interest::WRITABLE,
        (false, false) => Interest::BOTH,
    };
    lp.set_interest(ev.watcher, want).unwrap();
}

fn close(lp: &mut Loop<Server>, server: &mut Server, io: Io) {
    if let Some(conn) = server.conns.remove(&io) {
        lp.remove(conn.timeout).unwrap();
        lp.remove(io).unwrap(); // deregisters, then closes the socket
        server.served += 1;
        if server.served == server.expected {
            lp.break_loop(Break::All);
        }
    }
}
