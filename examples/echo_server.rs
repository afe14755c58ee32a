//! A TCP echo server on `evloop::net`: the acceptor (which backs off
//! instead of spinning when the process is out of descriptors),
//! buffered connections with backpressure (reading stops while the peer
//! is slow to take its echo), an idle timeout, a graceful close at the
//! peer's half-close, and a clean shutdown on SIGTERM or SIGINT (on
//! Windows, Ctrl-C or Ctrl-Break): stop accepting, close every connection
//! (flushing what is queued), exit 0.
//!
//! Run with: `cargo run --example echo_server [ADDR]` (default
//! `127.0.0.1:7878`; `EVLOOP_BACKEND=poll` for another backend), then
//! `nc 127.0.0.1 7878`.

use std::net::{SocketAddr, TcpListener};
use std::time::Duration;

use evloop::net::{Acceptor, ConnEvent, ConnId, ConnOptions, Conns, ListenOptions};
use evloop::{Loop, RunMode, Signal};

/// The server: its connections, its acceptor while it accepts, and its
/// signal watchers.
#[derive(Default)]
pub struct Server {
    pub conns: Conns<()>,
    acceptor: Option<Acceptor>,
    signals: Vec<Signal>,
    pub served: u64,
}

impl AsMut<Conns<()>> for Server {
    fn as_mut(&mut self) -> &mut Conns<()> {
        &mut self.conns
    }
}

/// The signals that shut the server down.
#[cfg(unix)]
pub const SHUTDOWN_SIGNALS: [i32; 2] = [Signal::TERM, Signal::INT];
/// The console events that shut the server down.
#[cfg(windows)]
pub const SHUTDOWN_SIGNALS: [i32; 2] = [Signal::INT, Signal::BREAK];

/// The idle timeout `main` serves with: a connection with no traffic
/// either way for this long is closed.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// Starts accepting on `listener`; connections idle for `idle_timeout`
/// are closed (`None`: never).
pub fn start(
    lp: &mut Loop<Server>,
    server: &mut Server,
    listener: TcpListener,
    idle_timeout: Option<Duration>,
) -> evloop::Result<()> {
    let opts = ConnOptions::new()
        .watermarks(64 * 1024, 256 * 1024)
        .idle_timeout(idle_timeout);
    let acceptor = Acceptor::start(lp, listener, move |lp, server: &mut Server, accepted| {
        match accepted {
            Ok(stream) => {
                if let Err(e) = server.conns.open(lp, stream, opts, (), on_event) {
                    eprintln!("connection refused by the loop: {e}");
                }
            }
            // Once per episode; the acceptor retries by itself.
            Err(e) => eprintln!("accept: {e} (backing off)"),
        }
    })?;
    server.acceptor = Some(acceptor);
    Ok(())
}

fn on_event(lp: &mut Loop<Server>, server: &mut Server, id: ConnId, ev: ConnEvent) {
    let c = &mut server.conns[id];
    match ev {
        ConnEvent::Data => {
            let n = c.input().len();
            c.write_from_input(lp, n);
        }
        ConnEvent::Eof => c.close(lp), // echo what is queued, then close
        ConnEvent::Closed(_) => server.served += 1,
        _ => {}
    }
}

/// Stops accepting and closes every connection gracefully; once they are
/// closed the loop has nothing left and `run` returns.
pub fn shutdown(lp: &mut Loop<Server>, server: &mut Server) {
    if let Some(acceptor) = server.acceptor.take() {
        let _ = acceptor.close(lp);
    }
    server.conns.close_all(lp);
    for s in server.signals.drain(..) {
        let _ = lp.remove(s);
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr: SocketAddr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:7878".into())
        .parse()?;
    evloop::net::raise_fd_limit()?;
    let listener = ListenOptions::new().backlog(4096).bind(addr)?;
    let addr = listener.local_addr()?;
    let mut lp: Loop<Server> = Loop::new()?;
    let mut server = Server::default();
    start(&mut lp, &mut server, listener, Some(IDLE_TIMEOUT))?;
    for signal in SHUTDOWN_SIGNALS {
        match Signal::new(&mut lp, signal, |lp, server: &mut Server, _| {
            eprintln!("signal: shutting down");
            shutdown(lp, server);
        }) {
            Ok(s) => server.signals.push(s),
            Err(e) => eprintln!("no shutdown on signal {signal}: {e}"),
        }
    }
    // Tests read this line for the address.
    println!("echo on {addr} (backend {})", lp.backend_name());
    lp.run(RunMode::Default, &mut server)?;
    eprintln!("served {} connections", server.served);
    Ok(())
}
