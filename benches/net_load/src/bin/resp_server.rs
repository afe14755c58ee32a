//! A small RESP server on `evloop::net` (PING, SET, GET; anything else
//! `+OK`), enough for redis-benchmark's `-t ping,set,get`.
//!
//! `resp_server [ADDR]` (default 127.0.0.1:6390); `BACKLOG=n` for another
//! listen backlog than `ListenOptions`'s default; exits 0 on SIGTERM.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use evloop::net::{Acceptor, ConnEvent, ConnId, ConnOptions, Conns, ListenOptions};
use evloop::{Loop, RunMode, Signal};

#[derive(Default)]
struct Server {
    conns: Conns<()>,
    db: HashMap<Vec<u8>, Vec<u8>>,
    acceptor: Option<Acceptor>,
    signals: Vec<Signal>,
    out: Vec<u8>,
}

impl AsMut<Conns<()>> for Server {
    fn as_mut(&mut self) -> &mut Conns<()> {
        &mut self.conns
    }
}

/// A line ending in CRLF at `at`: its text and where the next begins.
fn line(input: &[u8], at: usize) -> Option<(&[u8], usize)> {
    let rest = input.get(at..)?;
    let n = rest.windows(2).position(|w| w == b"\r\n")?;
    Some((&rest[..n], at + n + 2))
}

fn number(text: &[u8]) -> Option<usize> {
    std::str::from_utf8(text).ok()?.parse().ok()
}

/// A command's arguments, and its length in bytes.
type Command<'a> = (Vec<&'a [u8]>, usize);

/// One command (`*N` of `$len` bulk strings, or an inline line);
/// `Ok(None)` if incomplete.
fn parse(input: &[u8]) -> Result<Option<Command<'_>>, &'static str> {
    let Some((head, mut at)) = line(input, 0) else {
        return Ok(None);
    };
    if head.first() != Some(&b'*') {
        let args = head
            .split(|&b| b == b' ')
            .filter(|a| !a.is_empty())
            .collect();
        return Ok(Some((args, at)));
    }
    let count = number(&head[1..]).ok_or("bad array length")?;
    let mut args = Vec::with_capacity(count);
    for _ in 0..count {
        let Some((len, next)) = line(input, at) else {
            return Ok(None);
        };
        if len.first() != Some(&b'$') {
            return Err("expected a bulk string");
        }
        let len = number(&len[1..]).ok_or("bad bulk length")?;
        if input.len() < next + len + 2 {
            return Ok(None);
        }
        args.push(&input[next..next + len]);
        at = next + len + 2;
    }
    Ok(Some((args, at)))
}

fn on_event(lp: &mut Loop<Server>, s: &mut Server, id: ConnId, ev: ConnEvent) {
    match ev {
        ConnEvent::Data => {
            let c = &mut s.conns[id];
            let input = c.input();
            let mut used = 0;
            s.out.clear();
            loop {
                match parse(&input[used..]) {
                    Ok(Some((args, n))) => {
                        used += n;
                        let cmd = args.first().map(|a| a.to_ascii_uppercase());
                        match (cmd.as_deref(), args.len()) {
                            (Some(b"PING"), _) => s.out.extend_from_slice(b"+PONG\r\n"),
                            (Some(b"SET"), 3..) => {
                                s.db.insert(args[1].to_vec(), args[2].to_vec());
                                s.out.extend_from_slice(b"+OK\r\n");
                            }
                            (Some(b"GET"), 2) => match s.db.get(args[1]) {
                                Some(v) => {
                                    s.out
                                        .extend_from_slice(format!("${}\r\n", v.len()).as_bytes());
                                    s.out.extend_from_slice(v);
                                    s.out.extend_from_slice(b"\r\n");
                                }
                                None => s.out.extend_from_slice(b"$-1\r\n"),
                            },
                            _ => s.out.extend_from_slice(b"+OK\r\n"),
                        }
                    }
                    Ok(None) => break,
                    Err(e) => {
                        s.out.extend_from_slice(format!("-ERR {e}\r\n").as_bytes());
                        c.write(lp, &s.out);
                        return c.close(lp);
                    }
                }
            }
            c.consume(used);
            c.write(lp, &s.out);
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
    println!(
        "resp_server on {} (backend {}, backlog {}) pid {}",
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
