//! `resp_server`'s serving code, generic over `evloop::net::Listener`: a
//! `TcpListener`, one wrapped in `evloop::replay::Recorded` (a recording),
//! or a replay's `ReplayListener`. Included by path by `resp_server` and
//! by the main crate's `tests/replay_resp.rs`, so it uses evloop's `net`
//! and std only.
//!
//! With `lose_reply_at_buffer_end` set it has a planted bug: when a read
//! filled the input buffer to its last byte and the last command of the
//! pipelined batch ends exactly there, that command's reply is lost (the
//! client waits for it forever).

use std::net::SocketAddr;
use std::time::Duration;

use evloop::net::{Acceptor, ConnEvent, ConnId, ConnOptions, Conns, Listener, Stream};
use evloop::{Loop, Signal};

// Parsing and answering, shared with the tokio twin (benches/peers/rust).
#[path = "resp.rs"]
pub mod resp;

/// The connections' input buffer (`ConnOptions`'s default, set here
/// because the planted bug is about its end).
pub const READ_BUFFER: usize = 16 * 1024;

/// A reply the planted bug lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lost {
    /// The loop iteration ([`Loop::iteration`]) whose callback lost it.
    pub iteration: u64,
    /// The connection: the n-th accepted (from 1).
    pub accept: u64,
    /// The connection's fd.
    pub fd: i32,
}

/// The server's state.
#[derive(Default)]
pub struct Server {
    /// The connections, each with its accept number (from 1).
    conns: Conns<u64>,
    acceptor: Option<Acceptor>,
    signals: Vec<Signal>,
    out: Vec<u8>,
    /// The keys and values SET stored.
    pub db: resp::Db,
    /// The planted bug (above).
    pub lose_reply_at_buffer_end: bool,
    /// Connections accepted.
    pub accepted: u64,
    /// Commands answered (SHUTDOWN not counted).
    pub requests: u64,
    /// The replies the planted bug lost, in order.
    pub lost: Vec<Lost>,
}

impl AsMut<Conns<u64>> for Server {
    fn as_mut(&mut self) -> &mut Conns<u64> {
        &mut self.conns
    }
}

/// Serves RESP on `listener` until [`stop`]; `prepare` is given each
/// accepted stream first (`set_nodelay` on a real one). Returns the
/// listener's address.
pub fn serve<L>(
    lp: &mut Loop<'static, Server>,
    server: &mut Server,
    listener: L,
    prepare: fn(&L::Stream),
) -> evloop::Result<SocketAddr>
where
    L: Listener,
    L::Stream: Stream,
{
    let acceptor = Acceptor::start(
        lp,
        listener,
        move |lp, s: &mut Server, accepted| match accepted {
            Ok(stream) => {
                prepare(&stream);
                s.accepted += 1;
                let options = ConnOptions::new().read_buffer(READ_BUFFER);
                if let Err(e) = s.conns.open(lp, stream, options, s.accepted, on_event) {
                    eprintln!("connection refused by the loop: {e}");
                }
            }
            Err(e) => eprintln!("accept: {e} (backing off)"),
        },
    )?;
    let addr = acceptor.local_addr();
    server.acceptor = Some(acceptor);
    Ok(addr)
}

/// Stops the server on SIGTERM and SIGINT ([`stop`]).
pub fn stop_on_signals(lp: &mut Loop<'static, Server>, server: &mut Server) -> evloop::Result<()> {
    for signal in [Signal::TERM, Signal::INT] {
        let w = Signal::new(lp, signal, |lp, s: &mut Server, _| stop(lp, s))?;
        server.signals.push(w);
    }
    Ok(())
}

/// Stops serving: the listener closed, the connections aborted, the
/// signal watchers removed, so that the loop's run returns (and a
/// recording is completed when the loop is dropped).
pub fn stop(lp: &mut Loop<'static, Server>, s: &mut Server) {
    if let Some(a) = s.acceptor.take() {
        let _ = a.close(lp);
    }
    s.conns.close_all_with_linger(lp, Duration::ZERO);
    for w in s.signals.drain(..) {
        let _ = lp.remove(w);
    }
}

fn on_event(lp: &mut Loop<'static, Server>, s: &mut Server, id: ConnId, ev: ConnEvent) {
    match ev {
        ConnEvent::Data => {
            let c = &mut s.conns[id];
            let input = c.input();
            s.out.clear();
            let (mut used, mut last_reply) = (0, 0);
            let mut end = None;
            loop {
                let at = s.out.len();
                match resp::step(&mut s.db, &input[used..], &mut s.out) {
                    resp::Step::Answered(n) => {
                        used += n;
                        last_reply = at;
                        s.requests += 1;
                    }
                    resp::Step::Incomplete => break,
                    end_step => {
                        end = Some(end_step);
                        break;
                    }
                }
            }
            if s.lose_reply_at_buffer_end
                && end.is_none()
                && input.len() == READ_BUFFER
                && used == input.len()
            {
                // The planted bug: the batch ended at the buffer's end.
                s.out.truncate(last_reply);
                let fd = c.watcher().fd(lp).unwrap_or(-1);
                s.lost.push(Lost {
                    iteration: lp.iteration(),
                    accept: c.data,
                    fd,
                });
            }
            c.consume(used);
            if !s.out.is_empty() {
                c.write(lp, &s.out);
            }
            match end {
                Some(resp::Step::Shutdown(_)) => stop(lp, s),
                Some(_) => c.close(lp), // a protocol error, its reply sent
                None => {}
            }
        }
        ConnEvent::Eof => s.conns[id].close(lp),
        _ => {}
    }
}
