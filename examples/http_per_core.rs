//! One loop per thread, for when one core is not enough: each thread binds
//! its own listener to the same address with `SO_REUSEPORT`, and the
//! kernel spreads new connections across them. The threads share nothing;
//! each runs `http_server`'s handler on its own loop. (`docs/servers.md`
//! compares this with one acceptor handing connections to worker loops.)
//!
//! Run with: `cargo run --release --example http_per_core [ADDR] [THREADS]`
//! (default `127.0.0.1:8080`, one thread per core).

use std::net::SocketAddr;

use evloop::net::{Conns, ListenOptions};
use evloop::{Loop, RunMode};

#[allow(dead_code)] // its `main` is not this example's
#[path = "http_server.rs"]
mod http_server;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let addr: SocketAddr = args
        .next()
        .unwrap_or_else(|| "127.0.0.1:8080".into())
        .parse()?;
    let threads = match args.next() {
        Some(n) => n.parse()?,
        None => std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    evloop::net::raise_fd_limit()?;
    let opts = ListenOptions::new().backlog(4096).reuse_port(true);
    // Bind every listener before serving, so that port 0 resolves once.
    let first = opts.bind(addr)?;
    let addr = first.local_addr()?;
    let mut listeners = vec![first];
    for _ in 1..threads {
        listeners.push(opts.bind(addr)?);
    }
    println!("http on {addr}, {threads} loops (SO_REUSEPORT)");
    let workers: Vec<_> = listeners
        .into_iter()
        .map(|listener| {
            std::thread::spawn(move || -> evloop::Result<()> {
                let mut lp: Loop<Conns<()>> = Loop::new()?;
                http_server::serve(&mut lp, listener)?;
                lp.run(RunMode::Default, &mut Conns::new())?;
                Ok(())
            })
        })
        .collect();
    for w in workers {
        w.join().expect("a loop panicked")?;
    }
    Ok(())
}
