//! Connection churn on evloop's raw io watchers (`../../churn.sh`): an io
//! watcher on the non-blocking listener accepts until `WouldBlock`
//! (`evloop::net::Listener::accept_stream`, one `accept4`), each accepted
//! socket gets an io watcher that owns it; on readable it reads the
//! request, writes the reply and removes itself (closing the socket).
//!
//!     churn_evloop_io PORT WARMUP COUNT

#[path = "../churn.rs"]
mod churn;

use std::io::{ErrorKind, Read, Write};

use evloop::net::{ListenOptions, Listener};
use evloop::{Interest, Loop, RunMode};

fn main() {
    let args = churn::ServerArgs::parse("evloop_io");
    let listener = ListenOptions::new()
        .backlog(churn::BACKLOG)
        .bind(args.addr())
        .expect("bind");
    let mut lp: Loop<'static, churn::Meter> = Loop::new().expect("loop");
    let mut meter = churn::Meter::new("evloop-io", &args);
    lp.io(listener, Interest::READABLE, |lp, _, ev| loop {
        match ev.source.accept_stream() {
            Ok(stream) => {
                lp.io(
                    stream,
                    Interest::READABLE,
                    |lp, meter: &mut churn::Meter, ev| {
                        let mut buf = [0u8; churn::READ_BUF];
                        match ev.source.read(&mut buf) {
                            Ok(n) if n > 0 => {
                                let _ = ev.source.write(churn::REPLY);
                            }
                            Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                            _ => {}
                        }
                        lp.remove(ev.watcher).expect("remove"); // closes the socket
                        meter.closed();
                    },
                )
                .expect("io");
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => return,
            Err(e) => eprintln!("accept: {e}"),
        }
    })
    .expect("listener");
    lp.run(RunMode::Default, &mut meter).expect("run");
}
