//! A chat server on `evloop::net`: every line a client sends goes to all
//! the other clients, in the order the server read them. A client that
//! falls too far behind is dropped rather than buffered without limit.
//!
//! Reaching the other connections needs no shared ownership: the
//! connections live in the loop's state (`Conns`), so the handler of one
//! writes to the others through `conns.iter_mut()`; each write queues the
//! line and wakes that connection's watcher, which sends it in the same
//! iteration.
//!
//! Run with: `cargo run --example chat_server [ADDR]` (default
//! `127.0.0.1:7879`), then `nc 127.0.0.1 7879` in two terminals.

use std::net::SocketAddr;

use evloop::net::{Acceptor, ConnEvent, ConnId, ConnOptions, Conns, ListenOptions};
use evloop::{Loop, RunMode};

/// The longest line taken.
const MAX_LINE: usize = 4096;

/// A client further behind than this is dropped.
const MAX_BACKLOG: usize = 1 << 20;

#[derive(Default)]
struct Chat {
    conns: Conns<()>,
    /// The line being relayed (reused: no allocation per line).
    line: Vec<u8>,
}

impl AsMut<Conns<()>> for Chat {
    fn as_mut(&mut self) -> &mut Conns<()> {
        &mut self.conns
    }
}

fn on_event(lp: &mut Loop<Chat>, chat: &mut Chat, id: ConnId, ev: ConnEvent) {
    match ev {
        ConnEvent::Data => loop {
            let c = &mut chat.conns[id];
            let Some(n) = c.input().iter().position(|&b| b == b'\n') else {
                if c.input().len() == MAX_LINE {
                    c.abort(lp); // a line longer than the buffer
                }
                return;
            };
            chat.line.clear();
            chat.line.extend_from_slice(&c.input()[..=n]);
            c.consume(n + 1);
            for (other, c) in chat.conns.iter_mut() {
                if other == id {
                    continue;
                }
                if c.queued() > MAX_BACKLOG {
                    c.abort(lp); // too slow to keep up
                } else {
                    c.write(lp, &chat.line);
                }
            }
        },
        ConnEvent::Eof => chat.conns[id].close(lp),
        _ => {}
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr: SocketAddr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:7879".into())
        .parse()?;
    let listener = ListenOptions::new().bind(addr)?;
    let mut lp: Loop<Chat> = Loop::new()?;
    let acceptor = Acceptor::start(
        &mut lp,
        listener,
        |lp, chat: &mut Chat, accepted| match accepted {
            Ok(stream) => {
                let _ = chat.conns.open(
                    lp,
                    stream,
                    ConnOptions::new()
                        .read_buffer(MAX_LINE)
                        .max_read_buffer(MAX_LINE),
                    (),
                    on_event,
                );
            }
            Err(e) => eprintln!("accept: {e} (backing off)"),
        },
    )?;
    println!("chat on {}", acceptor.local_addr());
    lp.run(RunMode::Default, &mut Chat::default())?;
    Ok(())
}
