//! An HTTP/1.1 keep-alive server answering `GET /` with a small fixed
//! body, on `evloop::net`: the acceptor, buffered connections (requests
//! are parsed straight from the connection's input buffer, pipelined
//! requests answered in order), an idle timeout, a graceful close for
//! `Connection: close` and HTTP/1.0.
//!
//! Run with: `cargo run --release --example http_server [ADDR]`
//! (default `127.0.0.1:8080`; `EVLOOP_BACKEND=poll` for another backend),
//! then `wrk -t2 -c1000 -d10s http://127.0.0.1:8080/`.

use std::net::{SocketAddr, TcpListener};
use std::time::Duration;

use evloop::net::{Acceptor, ConnEvent, ConnId, ConnOptions, Conns, ListenOptions};
use evloop::{Loop, RunMode};

const OK: &[u8] =
    b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 14\r\n\r\nHello, world!\n";
const OK_CLOSE: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 14\r\nConnection: close\r\n\r\nHello, world!\n";
const NOT_FOUND: &[u8] =
    b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
/// The answer to a head this server does not take (also to one larger
/// than its read buffer).
pub const BAD: &[u8] =
    b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";

/// Starts serving HTTP on `listener`; the loop's state is the connections.
pub fn serve(lp: &mut Loop<Conns<()>>, listener: TcpListener) -> evloop::Result<Acceptor> {
    let opts = ConnOptions::new()
        .read_buffer(8192)
        .max_read_buffer(8192) // the largest request head we take
        .idle_timeout(Some(Duration::from_secs(30)));
    Acceptor::start(lp, listener, move |lp, conns, accepted| match accepted {
        Ok(stream) => {
            let _ = stream.set_nodelay(true);
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

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr: SocketAddr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:8080".into())
        .parse()?;
    evloop::net::raise_fd_limit()?;
    let listener = ListenOptions::new().backlog(4096).bind(addr)?;
    let mut lp: Loop<Conns<()>> = Loop::new()?;
    let acceptor = serve(&mut lp, listener)?;
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
    lp.run(RunMode::Default, &mut Conns::new())?;
    Ok(())
}
