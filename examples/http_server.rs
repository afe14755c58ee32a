//! An HTTP/1.1 keep-alive server answering `GET /` with a small fixed
//! body, on `evloop::net`: the acceptor, buffered connections (requests
//! are parsed straight from the connection's input buffer, pipelined
//! requests answered in order), an idle timeout, a graceful close for
//! `Connection: close` and HTTP/1.0.
//!
//! SIGTERM or SIGINT (Ctrl-C or Ctrl-Break on Windows) ends it cleanly:
//! it stops accepting, drops its connections and exits 0.
//!
//! Run with: `cargo run --release --example http_server [--record PATH] [ADDR]`
//! (default `127.0.0.1:8080`; `EVLOOP_BACKEND=poll` for another backend),
//! then `wrk -t2 -c1000 -d10s http://127.0.0.1:8080/`. With `--record
//! PATH` the run is recorded to PATH (`evloop::replay`: the loop's inputs
//! and every byte read and written), complete at the clean exit; a
//! loop on `Replay::open(PATH)?.backend()`, [`serve`] on
//! `replay.listener(FD)` (FD: the listener's number, printed on the second
//! line) and [`run`] replay it (tests/examples_run.rs does);
//! benches/replay_overhead.sh measures what recording costs.

use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use evloop::net::{
    Acceptor, ConnEvent, ConnId, ConnOptions, Conns, ListenOptions, Listener, Stream,
};
use evloop::replay::{Recorded, ReplaySocket};
use evloop::{Break, Loop, RunMode, Signal};

const OK: &[u8] =
    b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 14\r\n\r\nHello, world!\n";
const OK_CLOSE: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 14\r\nConnection: close\r\n\r\nHello, world!\n";
const NOT_FOUND: &[u8] =
    b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
/// The answer to a head this server does not take (also to one larger
/// than its read buffer).
pub const BAD: &[u8] =
    b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";

/// A connection's socket as this server sets it up: TCP_NODELAY on a
/// TCP one (replies go out at once); a replay's socket has no options.
pub trait NoDelay {
    /// Sets TCP_NODELAY where there is one to set.
    fn no_delay(&self) {}
}

impl NoDelay for TcpStream {
    fn no_delay(&self) {
        let _ = self.set_nodelay(true);
    }
}

impl<T: NoDelay> NoDelay for Recorded<T> {
    fn no_delay(&self) {
        self.get_ref().no_delay();
    }
}

impl NoDelay for ReplaySocket {}

/// Starts serving HTTP on `listener` (a `TcpListener`, a `Recorded` one,
/// a replay's); the loop's state is the connections.
pub fn serve<L>(lp: &mut Loop<Conns<()>>, listener: L) -> evloop::Result<Acceptor>
where
    L: Listener,
    L::Stream: Stream + NoDelay,
{
    let opts = ConnOptions::new()
        .read_buffer(8192)
        .max_read_buffer(8192) // the largest request head we take
        .idle_timeout(Some(Duration::from_secs(30)));
    Acceptor::start(lp, listener, move |lp, conns, accepted| match accepted {
        Ok(stream) => {
            stream.no_delay();
            if let Err(e) = conns.open(lp, stream, opts, (), on_event) {
                eprintln!("connection refused by the loop: {e}");
            }
        }
        Err(e) => eprintln!("accept: {e} (backing off)"),
    })
}

fn on_event(lp: &mut Loop<Conns<()>>, conns: &mut Conns<()>, id: ConnId, ev: ConnEvent) {
    let c = &mut conns[id];
    match ev {
        ConnEvent::Data => loop {
            let input = c.input();
            let Some(end) = find(input, b"\r\n\r\n") else {
                if input.len() == 8192 {
                    c.write(lp, BAD); // a head larger than the buffer
                    c.close(lp);
                }
                return; // wait for the rest of the head
            };
            let (reply, close) = answer(&input[..end]);
            c.consume(end + 4);
            c.write(lp, reply);
            if close {
                return c.close(lp);
            }
        },
        ConnEvent::Eof => c.close(lp), // answers already queued still go out
        _ => {}
    }
}

/// The reply to one request head, and whether to close after it.
pub fn answer(head: &[u8]) -> (&'static [u8], bool) {
    let mut lines = head.split(|&b| b == b'\n');
    let request = lines.next().unwrap_or_default();
    let mut parts = trim(request).split(|&b| b == b' ');
    let (method, path, version) = (parts.next(), parts.next(), parts.next());
    let Some(version) = version else {
        return (BAD, true);
    };
    let mut keep_alive = version == b"HTTP/1.1";
    for line in lines {
        let line = trim(line);
        if let Some(value) = header_value(line, b"connection") {
            if value.eq_ignore_ascii_case(b"close") {
                keep_alive = false;
            } else if value.eq_ignore_ascii_case(b"keep-alive") {
                keep_alive = true;
            }
        } else if header_value(line, b"content-length").is_some_and(|v| v != b"0")
            || header_value(line, b"transfer-encoding").is_some()
        {
            return (BAD, true); // no request bodies here
        }
    }
    match (method, path) {
        (Some(b"GET"), Some(b"/")) if keep_alive => (OK, false),
        (Some(b"GET"), Some(b"/")) => (OK_CLOSE, true),
        _ => (NOT_FOUND, true),
    }
}

fn header_value<'a>(line: &'a [u8], name: &[u8]) -> Option<&'a [u8]> {
    let colon = line.iter().position(|&b| b == b':')?;
    line[..colon]
        .eq_ignore_ascii_case(name)
        .then(|| trim(&line[colon + 1..]))
}

/// Without the ASCII whitespace at both ends.
fn trim(mut s: &[u8]) -> &[u8] {
    while let [first, rest @ ..] = s {
        if !first.is_ascii_whitespace() {
            break;
        }
        s = rest;
    }
    while let [rest @ .., last] = s {
        if !last.is_ascii_whitespace() {
            break;
        }
        s = rest;
    }
    s
}

/// Where `needle` first occurs in `haystack`.
pub fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// The signals that end the server.
#[cfg(unix)]
const SHUTDOWN_SIGNALS: [i32; 2] = [Signal::TERM, Signal::INT];
/// The console events that end the server.
#[cfg(windows)]
const SHUTDOWN_SIGNALS: [i32; 2] = [Signal::INT, Signal::BREAK];

/// Runs the loop until a shutdown signal, then stops accepting, drops the
/// connections (no linger) and runs until they are gone: `main`'s run,
/// and what a replay of its recording runs.
pub fn run(
    lp: &mut Loop<Conns<()>>,
    acceptor: Acceptor,
    conns: &mut Conns<()>,
) -> evloop::Result<()> {
    let mut signals = Vec::new();
    for signal in SHUTDOWN_SIGNALS {
        // A backend without signals still serves (until it is killed).
        match Signal::new(lp, signal, |lp, _, _| lp.break_loop(Break::All)) {
            Ok(s) => signals.push(s),
            Err(e) => eprintln!("no shutdown on signal {signal}: {e}"),
        }
    }
    lp.run(RunMode::Default, conns)?;
    acceptor.close(lp)?;
    conns.close_all_with_linger(lp, Duration::ZERO);
    for s in signals {
        lp.remove(s)?;
    }
    lp.run(RunMode::Default, conns)?;
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut addr: SocketAddr = "127.0.0.1:8080".parse()?;
    let mut record = None;
    let mut args = std::env::args_os().skip(1);
    while let Some(arg) = args.next() {
        if arg == "--record" {
            record = Some(std::path::PathBuf::from(
                args.next().ok_or("--record takes a path")?,
            ));
        } else {
            addr = arg.to_str().ok_or("not an address")?.parse()?;
        }
    }
    evloop::net::raise_fd_limit()?;
    let listener = ListenOptions::new().backlog(4096).bind(addr)?;
    #[cfg(unix)]
    let listener_fd = std::os::fd::AsRawFd::as_raw_fd(&listener);
    #[cfg(windows)]
    let listener_fd = std::os::windows::io::AsRawSocket::as_raw_socket(&listener);
    let (mut lp, acceptor): (Loop<Conns<()>>, _) = match &record {
        Some(path) => {
            let mut lp = Loop::builder().record_to(path).build()?;
            let acceptor = serve(&mut lp, Recorded::new(listener))?;
            (lp, acceptor)
        }
        None => {
            let mut lp = Loop::new()?;
            let acceptor = serve(&mut lp, listener)?;
            (lp, acceptor)
        }
    };
    // io_uring's completion path, where the kernel has it: no syscall per
    // request (docs/backends.md).
    let completion = if lp.capabilities().completion {
        ", completion I/O"
    } else {
        ""
    };
    println!(
        "http on {} (backend {}{completion})",
        acceptor.local_addr(),
        lp.backend_name()
    );
    if let Some(path) = &record {
        println!(
            "recording to {} (listener fd {listener_fd})",
            path.display()
        );
    }
    run(&mut lp, acceptor, &mut Conns::new())?;
    drop(lp); // completes the recording
    Ok(())
}
