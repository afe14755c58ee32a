//! A small RESP server on `evloop::net` (PING, SET, GET, SHUTDOWN;
//! anything else `+OK`), enough for redis-benchmark's `-t ping,set,get`.
//!
//! `resp_server [ADDR] [--record PATH] [--lose-reply-at-buffer-end]`
//! (default 127.0.0.1:6390; port 0 takes a free one, the line it prints
//! once it listens says which); `--record PATH` records the run to PATH
//! (`evloop::replay`; the trace is complete once the server has stopped;
//! the line names the listener's fd); `--lose-reply-at-buffer-end` plants
//! a bug (a reply lost when a pipelined batch ends exactly at the 16 KiB
//! input buffer's end); `BACKLOG=n` for another listen backlog than
//! `ListenOptions`'s default; `EVLOOP_BACKEND` for another backend
//! (io_uring included); exits 0 on SIGTERM, SIGINT or the command
//! SHUTDOWN.
//!
//! `resp_server --replay PATH [--listener-fd N] [--lose-reply-at-buffer-end]`
//! replays a recording (the listener's fd as recorded, default 3) and
//! prints the replay's summary, or its first divergence (exit status 1).
//! docs/replay.md, "A RESP server under redis-benchmark", has an example.
//!
//! The serving code is `../server.rs` (shared with tests/replay_resp.rs),
//! its protocol side `../resp.rs` (shared with the tokio twin in
//! benches/peers/rust).

use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::path::PathBuf;

use evloop::net::ListenOptions;
use evloop::replay::{Divergence, Recorded, Replay};
use evloop::{Loop, RunMode};

#[path = "../../../resp/server.rs"]
mod server;

use server::Server;

struct Args {
    addr: SocketAddr,
    record: Option<PathBuf>,
    replay: Option<PathBuf>,
    listener_fd: i32,
    buggy: bool,
}

fn args() -> Result<Args, Box<dyn std::error::Error>> {
    let mut a = Args {
        addr: "127.0.0.1:6390".parse()?,
        record: None,
        replay: None,
        listener_fd: 3,
        buggy: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or(format!("{arg} needs a value"));
        match arg.as_str() {
            "--record" => a.record = Some(value()?.into()),
            "--replay" => a.replay = Some(value()?.into()),
            "--listener-fd" => a.listener_fd = value()?.parse()?,
            "--lose-reply-at-buffer-end" => a.buggy = true,
            _ => a.addr = arg.parse()?,
        }
    }
    Ok(a)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = args()?;
    let mut server = Server::default();
    server.lose_reply_at_buffer_end = args.buggy;
    if let Some(path) = &args.replay {
        return replay(path, args.listener_fd, server);
    }
    evloop::net::raise_fd_limit()?;
    let mut listen = ListenOptions::new();
    if let Ok(n) = std::env::var("BACKLOG") {
        listen = listen.backlog(n.parse()?);
    }
    let listener = listen.bind(args.addr)?;
    let listener_fd = listener.as_raw_fd();
    let (mut lp, local): (Loop<Server>, SocketAddr) = match &args.record {
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
    let recording = match &args.record {
        Some(path) => format!(
            ", recording to {}, listener fd {listener_fd}",
            path.display()
        ),
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
    report(&server);
    Ok(())
}

/// Replays the recording at `path` through the same serving code.
fn replay(
    path: &PathBuf,
    listener_fd: i32,
    mut server: Server,
) -> Result<(), Box<dyn std::error::Error>> {
    let replay = Replay::open(path)?;
    println!(
        "resp_server replaying {} (recorded on {}, listener fd {listener_fd})",
        path.display(),
        replay.recorded_backend()
    );
    let run = {
        let mut lp: Loop<Server> = Loop::with_backend(replay.backend());
        server::serve(&mut lp, &mut server, replay.listener(listener_fd), |_| {})?;
        server::stop_on_signals(&mut lp, &mut server)?;
        lp.run(RunMode::Default, &mut server)
    };
    report(&server);
    match (run, replay.finish()) {
        (Err(e), _) if Divergence::of(&e).is_none() => Err(e.into()),
        (_, Ok(summary)) => {
            println!("replayed with no divergence: {summary:?}");
            Ok(())
        }
        (_, Err(d)) => {
            println!("{d}");
            std::process::exit(1);
        }
    }
}

/// What the server did (on stderr: the benchmarks read stdout's first line).
fn report(s: &Server) {
    eprintln!(
        "resp_server: {} connections, {} requests, {} keys, {} replies lost",
        s.accepted,
        s.requests,
        s.db.len(),
        s.lost.len()
    );
    for l in &s.lost {
        eprintln!(
            "  lost a reply at iteration {} on fd{} (accept #{}, at iteration {})",
            l.iteration, l.fd, l.accept, l.accepted_at
        );
    }
}
