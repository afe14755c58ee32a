//! evloop's HTTP example server (`examples/http_server.rs`, included as it
//! is), with the mio backend registered for the process first: run with
//! `EVLOOP_BACKEND=mio` and every `Loop::new()` of the program, the
//! example's included, runs on mio.
//!
//! ```sh
//! EVLOOP_BACKEND=mio cargo run --release -- 127.0.0.1:8080
//! wrk -t2 -c64 -d5s http://127.0.0.1:8080/
//! ```
//!
//! Prints `http on ADDR (backend NAME)` once it listens (an address with
//! port 0 takes a free port: the line says which).

use std::net::SocketAddr;

use evloop::net::{Conns, ListenOptions};
use evloop::{Loop, RunMode};

// The example, unchanged; its own `main` is not used here.
#[allow(dead_code)]
#[path = "../../../examples/http_server.rs"]
mod http_server;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    mio_backend::register()?;
    let addr: SocketAddr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:8080".into())
        .parse()?;
    evloop::net::raise_fd_limit()?;
    let listener = ListenOptions::new().backlog(4096).bind(addr)?;
    // The platform's default backend, or mio with EVLOOP_BACKEND=mio.
    let mut lp: Loop<Conns<()>> = Loop::new()?;
    let acceptor = http_server::serve(&mut lp, listener)?;
    println!(
        "http on {} (backend {})",
        acceptor.local_addr(),
        lp.backend_name()
    );
    lp.run(RunMode::Default, &mut Conns::new())?;
    Ok(())
}
