//! A small RESP server on `evloop::net` (PING, SET, GET; anything else
//! `+OK`), enough for redis-benchmark's `-t ping,set,get`.
//!
//! `resp_server [ADDR]` (default 127.0.0.1:6390; port 0 takes a free one,
//! the line it prints once it listens says which); `BACKLOG=n` for another
//! listen backlog than `ListenOptions`'s default; `EVLOOP_BACKEND` for
//! another backend (io_uring included); exits 0 on SIGTERM. The protocol
//! side is `../resp.rs`, shared with the tokio twin in benches/peers/rust.

use std::net::SocketAddr;
use std::time::Duration;

use evloop::net::{Acceptor, ConnEvent, ConnId, ConnOptions, Conns, ListenOptions};
use evloop::{Loop, RunMode, Signal};

// Parsing and answering, shared with the tokio twin (benches/peers/rust).
#[path = "../resp.rs"]
mod resp;

#[derive(Default)]
struct Server {
    conns: Conns<()>,
    db: resp::Db,
    acceptor: Option<Acceptor>,
    signals: Vec<Signal>,
    out: Vec<u8>,
}

impl AsMut<Conns<()>> for Server {
    fn as_mut(&mut self) -> &mut Conns<()> {
        &mut self.conns
    }
}

fn on_event(lp: &mut Loop<Server>, s: &mut Server, id: ConnId, ev: ConnEvent) {
    match ev {
        ConnEvent::Data => {
            let c = &mut s.conns[id];
            s.out.clear();
            match resp::answer(&mut s.db, c.input(), &mut s.out) {
                Ok(used) => {
                    c.consume(used);
                    c.write(lp, &s.out);
                }
                Err(()) => {
                    c.write(lp, &s.out);
                    c.close(lp);
                }
            }
        }
        ConnEvent::Eof => s.conns[id].close(lp),
        _ => {}
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr: SocketAddr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:6390".into())
        .parse()?;
    evloop::net::raise_fd_limit()?;
    let mut listen = ListenOptions::new();
    if let Ok(n) = std::env::var("BACKLOG") {
        listen = listen.backlog(n.parse()?);
    }
    let listener = listen.bind(addr)?;
    let mut lp: Loop<Server> = Loop::new()?;
    let mut server = Server::default();
    let acceptor = Acceptor::start(
        &mut lp,
        listener,
        |lp, s: &mut Server, accepted| match accepted {
            Ok(stream) => {
                let _ = stream.set_nodelay(true);
                if let Err(e) = s.conns.open(lp, stream, ConnOptions::new(), (), on_event) {
                    eprintln!("connection refused by the loop: {e}");
                }
            }
            Err(e) => eprintln!("accept: {e} (backing off)"),
        },
    )?;
    let completion = if lp.capabilities().completion {
        ", completion I/O"
    } else {
        ""
    };
    println!(
        "resp_server on {} (backend {}{completion}, backlog {}) pid {}",
        acceptor.local_addr(),
        lp.backend_name(),
        listen.backlog_len(),
        std::process::id()
    );
    server.acceptor = Some(acceptor);
    for signal in [Signal::TERM, Signal::INT] {
        let w = Signal::new(&mut lp, signal, |lp, s: &mut Server, _| {
            if let Some(a) = s.acceptor.take() {
                let _ = a.close(lp);
            }
            s.conns.close_all_with_linger(lp, Duration::ZERO);
            for w in s.signals.drain(..) {
                let _ = lp.remove(w);
            }
        })?;
        server.signals.push(w);
    }
    lp.run(RunMode::Default, &mut server)?;
    Ok(())
}
