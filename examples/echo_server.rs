//! A TCP echo server on `evloop::net`: the acceptor (which backs off
//! instead of spinning when the process is out of descriptors),
//! buffered connections with backpressure (reading stops while the peer
//! is slow to take its echo), an idle timeout, a graceful close at the
//! peer's half-close, and a clean shutdown on SIGTERM or SIGINT (on
//! Windows, Ctrl-C or Ctrl-Break): stop accepting, close every connection
//! (flushing what is queued), exit 0.
//!
//! Run with: `cargo run --example echo_server [ADDR] [--connections N]`
//! (default `127.0.0.1:7878`; `EVLOOP_BACKEND=poll` for another backend),
//! then `nc 127.0.0.1 7878`. `--connections N`: accept N connections,
//! serve them to their end, exit 0.
//!
//! On WASI (wasm32-wasip1) a guest cannot bind: the server takes the
//! listener the runtime preopened (`--fd N`: the one that is fd N), and has
//! no signals to stop on (WASI has none; `--connections N` ends it):
//!
//! ```text
//! cargo build --target wasm32-wasip1 --example echo_server
//! wasmtime run -S preview2=n -S tcplisten=127.0.0.1:7878 \
//!     target/wasm32-wasip1/debug/examples/echo_server.wasm --connections 100
//! ```

use std::net::TcpListener;
use std::time::Duration;

use evloop::net::{Acceptor, ConnEvent, ConnId, ConnOptions, Conns};
use evloop::{Loop, RunMode, Signal};

/// The server: its connections, its acceptor while it accepts, and its
/// signal watchers; with a limit, how many connections it accepts before
/// it stops accepting and shuts down once they are served.
#[derive(Default)]
pub struct Server {
    pub conns: Conns<()>,
    acceptor: Option<Acceptor>,
    signals: Vec<Signal>,
    /// Connections served to their end (or refused by the loop).
    pub served: u64,
    pub limit: Option<u64>,
}

impl AsMut<Conns<()>> for Server {
    fn as_mut(&mut self) -> &mut Conns<()> {
        &mut self.conns
    }
}

/// The signals that shut the server down (none on WASI, which has no
/// signals).
#[cfg(unix)]
pub const SHUTDOWN_SIGNALS: [i32; 2] = [Signal::TERM, Signal::INT];
/// The console events that shut the server down.
#[cfg(windows)]
pub const SHUTDOWN_SIGNALS: [i32; 2] = [Signal::INT, Signal::BREAK];
/// WASI has no signals.
#[cfg(target_os = "wasi")]
pub const SHUTDOWN_SIGNALS: [i32; 0] = [];

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
                    served_one(lp, server);
                }
                let accepted = server.acceptor.as_ref().map_or(0, Acceptor::accepted);
                if server.limit.is_some_and(|n| accepted >= n) {
                    // The last one accepted: stop accepting, serve them.
                    if let Some(acceptor) = server.acceptor.take() {
                        let _ = acceptor.close(lp);
                    }
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
        ConnEvent::Closed(_) => served_one(lp, server),
        _ => {}
    }
}

/// One more connection done; the last one of the limit shuts down.
fn served_one(lp: &mut Loop<Server>, server: &mut Server) {
    server.served += 1;
    if server.limit.is_some_and(|n| server.served >= n) {
        shutdown(lp, server);
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

/// The command line: `[ADDR] [--connections N] [--fd N]`.
struct Args {
    addr: Option<String>,
    connections: Option<u64>,
    fd: Option<i32>,
}

fn args() -> Result<Args, Box<dyn std::error::Error>> {
    let mut args = Args {
        addr: None,
        connections: None,
        fd: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--connections" => {
                args.connections = Some(it.next().ok_or("--connections N")?.parse()?);
            }
            "--fd" => args.fd = Some(it.next().ok_or("--fd N")?.parse()?),
            _ if args.addr.is_none() && !arg.starts_with("--") => args.addr = Some(arg),
            _ => {
                return Err(format!(
                    "unexpected argument {arg:?}; usage: [ADDR] [--connections N] [--fd N]"
                )
                .into())
            }
        }
    }
    Ok(args)
}

/// The listener, bound to ADDR; and how to name it.
#[cfg(not(target_os = "wasi"))]
fn listener(args: &Args) -> Result<(TcpListener, String), Box<dyn std::error::Error>> {
    if args.fd.is_some() {
        return Err("--fd N: for WASI only, whose runtime preopens the listener".into());
    }
    let addr: std::net::SocketAddr = args.addr.as_deref().unwrap_or("127.0.0.1:7878").parse()?;
    evloop::net::raise_fd_limit()?;
    let listener = evloop::net::ListenOptions::new().backlog(4096).bind(addr)?;
    let addr = listener.local_addr()?;
    Ok((listener, addr.to_string()))
}

/// The listener the runtime preopened (the first; `--fd N`: the one that
/// is fd N): a WASI guest cannot bind one.
#[cfg(target_os = "wasi")]
fn listener(args: &Args) -> Result<(TcpListener, String), Box<dyn std::error::Error>> {
    use std::os::fd::AsRawFd;
    if let Some(addr) = &args.addr {
        return Err(format!(
            "{addr}: WASI cannot bind; the runtime preopens the listener (--fd N for another than the first)"
        )
        .into());
    }
    let listener = evloop::backends::wasi::preopened_listeners()?
        .into_iter()
        .find(|l| args.fd.is_none_or(|fd| l.as_raw_fd() == fd))
        .ok_or("no such preopened listener (wasmtime run -S preview2=n -S tcplisten=ADDR)")?;
    let name = format!("fd {}", listener.as_raw_fd());
    Ok((listener, name))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = args()?;
    let (listener, name) = listener(&args)?;
    let mut lp: Loop<Server> = Loop::new()?;
    let mut server = Server {
        limit: args.connections,
        ..Server::default()
    };
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
    println!("echo on {name} (backend {})", lp.backend_name());
    lp.run(RunMode::Default, &mut server)?;
    eprintln!("served {} connections", server.served);
    Ok(())
}
