//! Connection churn on evloop::net (`../../churn.sh`): an `Acceptor` on a
//! `ListenOptions` listener, each connection opened in `Conns`; on its
//! request the handler queues the reply and closes the connection. With a
//! zero linger, as the other servers: the reply is sent, the writing side
//! shut down and the socket closed at once, without waiting for the
//! client's end of file (the default linger would wait up to 5 s for it).
//!
//!     churn_evloop_net PORT WARMUP COUNT

#[path = "../churn.rs"]
mod churn;

use evloop::net::{Acceptor, ConnEvent, ConnOptions, Conns, ListenOptions};
use evloop::{Loop, RunMode};
use std::time::Duration;

struct Server {
    conns: Conns<()>,
    meter: churn::Meter,
}

impl AsMut<Conns<()>> for Server {
    fn as_mut(&mut self) -> &mut Conns<()> {
        &mut self.conns
    }
}

fn main() {
    let args = churn::ServerArgs::parse("evloop_net");
    let listener = ListenOptions::new()
        .backlog(churn::BACKLOG)
        .bind(args.addr())
        .expect("bind");
    let mut lp: Loop<'static, Server> = Loop::new().expect("loop");
    let opts = ConnOptions::new()
        .read_buffer(churn::READ_BUF)
        .linger(Duration::ZERO);
    Acceptor::start(
        &mut lp,
        listener,
        move |lp, server: &mut Server, accepted| {
            let Ok(stream) = accepted else { return };
            let opened = server.conns.open(
                lp,
                stream,
                opts,
                (),
                |lp, server: &mut Server, id, ev| match ev {
                    ConnEvent::Data => {
                        let c = &mut server.conns[id];
                        c.consume(c.input().len());
                        c.write(lp, churn::REPLY);
                        c.close(lp);
                    }
                    ConnEvent::Eof => server.conns[id].close(lp),
                    ConnEvent::Closed(_) => server.meter.closed(),
                    _ => {}
                },
            );
            opened.expect("open");
        },
    )
    .expect("acceptor");
    let mut server = Server {
        conns: Conns::new(),
        meter: churn::Meter::new("evloop-net", &args),
    };
    lp.run(RunMode::Default, &mut server).expect("run");
}
