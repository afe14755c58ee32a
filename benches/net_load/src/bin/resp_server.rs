//! A small RESP server on `evloop::net` (PING, SET, GET, SHUTDOWN;
//! anything else `+OK`), enough for redis-benchmark's `-t ping,set,get`.
//!
//! `resp_server [ADDR] [--record PATH]` (default 127.0.0.1:6390; port 0
//! takes a free one, the line it prints once it listens says which);
//! `--record PATH` records the run to PATH (`evloop::replay`; the trace
//! is complete once the server has stopped: docs/replay.md, "A RESP
//! server under redis-benchmark"); `BACKLOG=n` for another listen backlog
//! than `ListenOptions`'s default; `EVLOOP_BACKEND` for another backend
//! (io_uring included); exits 0 on SIGTERM, SIGINT or the command
//! SHUTDOWN. The serving code is `../server.rs` (shared with
//! tests/replay_resp.rs), its protocol side `../resp.rs` (shared with the
//! tokio twin in benches/peers/rust).

use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;

use evloop::net::ListenOptions;
use evloop::replay::Recorded;
use evloop::{Loop, RunMode};

#[path = "../server.rs"]
mod server;

use server::Server;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut addr: SocketAddr = "127.0.0.1:6390".parse()?;
    let mut record: Option<PathBuf> = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        if arg == "--record" {
            record = Some(args.next().ok_or("--record needs a PATH")?.into());
        } else {
            addr = arg.parse()?;
        }
    }
    evloop::net::raise_fd_limit()?;
    let mut listen = ListenOptions::new();
    if let Ok(n) = std::env::var("BACKLOG") {
        listen = listen.backlog(n.parse()?);
    }
    let listener = listen.bind(addr)?;
    let mut server = Server::default();
    let (mut lp, local): (Loop<Server>, SocketAddr) = match &record {
        Some(path) => {
            let mut lp = Loop::builder().record_to(path).build()?;
            let local = server::serve(&mut lp, &mut server, Recorded::new(listener), |s| {
                let _ = s.get_ref().set_nodelay(true);
            })?;
            (lp, local)
        }
        None => {
            let mut lp = Loop::new()?;
            let local = server::serve(&mut lp, &mut server, listener, |s: &TcpStream| {
                let _ = s.set_nodelay(true);
            })?;
            (lp, local)
        }
    };
    server::stop_on_signals(&mut lp, &mut server)?;
    let completion = if lp.capabilities().completion {
        ", completion I/O"
    } else {
        ""
    };
    let recording = match &record {
        Some(path) => format!(", recording to {}", path.display()),
        None => String::new(),
    };
    println!(
        "resp_server on {local} (backend {}{completion}, backlog {}{recording}) pid {}",
        lp.backend_name(),
        listen.backlog_len(),
        std::process::id()
    );
    lp.run(RunMode::Default, &mut server)?;
    drop(lp); // completes a recording
    Ok(())
}
