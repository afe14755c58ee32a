//! Connection churn on mio (`../../churn.sh`): the listener and each
//! accepted socket registered for reading (mio's edge-triggered epoll),
//! the sockets kept in a vector with a free list; on readable a
//! connection reads the request, writes the reply and is dropped (closed).
//!
//!     churn_mio PORT WARMUP COUNT

#[path = "../churn.rs"]
mod churn;

use std::io::{ErrorKind, Read, Write};

use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};

const LISTENER: Token = Token(usize::MAX);

fn main() {
    let args = churn::ServerArgs::parse("mio");
    let std_listener = evloop::net::ListenOptions::new()
        .backlog(churn::BACKLOG)
        .bind(args.addr())
        .expect("bind");
    let mut listener = TcpListener::from_std(std_listener);
    let mut poll = Poll::new().expect("poll");
    let mut events = Events::with_capacity(1024);
    poll.registry()
        .register(&mut listener, LISTENER, Interest::READABLE)
        .expect("register");
    let mut conns: Vec<Option<TcpStream>> = Vec::new();
    let mut free: Vec<usize> = Vec::new();
    let mut meter = churn::Meter::new("mio", &args);
    loop {
        poll.poll(&mut events, None).expect("poll");
        for ev in events.iter() {
            if ev.token() == LISTENER {
                loop {
                    match listener.accept() {
                        Ok((mut s, _)) => {
                            let i = free.pop().unwrap_or_else(|| {
                                conns.push(None);
                                conns.len() - 1
                            });
                            poll.registry()
                                .register(&mut s, Token(i), Interest::READABLE)
                                .expect("register");
                            conns[i] = Some(s);
                        }
                        Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                        Err(e) => eprintln!("accept: {e}"),
                    }
                }
                continue;
            }
            let i = ev.token().0;
            let Some(s) = conns[i].as_mut() else { continue };
            let mut buf = [0u8; churn::READ_BUF];
            match s.read(&mut buf) {
                Ok(n) if n > 0 => {
                    let _ = s.write(churn::REPLY);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => continue,
                _ => {}
            }
            conns[i] = None; // closes; the kernel drops it from the epoll set
            free.push(i);
            meter.closed();
        }
    }
}
