//! Scenario 1 on the simulated backend: three connections whose bytes arrive
//! at different virtual times. One poll returns several ready fds, they are
//! dispatched in report order, the loop idles (the virtual clock jumps) until
//! the next arrival, and `run` returns when nothing more is scheduled.
//!
//! Run with: `cargo run --example three_connections`

use std::io::{ErrorKind, Read};
use std::time::Duration;

use evloop::{Interest, Loop, RunMode, Sim};

fn main() -> Result<(), evloop::Error> {
    let ms = Duration::from_millis;
    let sim = Sim::new();
    let conns = ["c1", "c2", "c3"].map(|name| sim.socket(name, 64));
    sim.deliver(ms(1), &conns[0], b"hello");
    sim.deliver(ms(1), &conns[1], b"hi");
    sim.deliver(ms(4), &conns[2], b"hey");
    sim.deliver(ms(7), &conns[0], b"again");

    let mut lp: Loop = Loop::with_backend(sim.backend());
    for conn in conns {
        lp.io(conn, Interest::READABLE, |lp, _, ev| {
            let mut buf = [0u8; 64];
            loop {
                match ev.source.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => println!(
                        "  [{:?}] {} (fd{}) read {:?}",
                        lp.now(),
                        ev.source.name(),
                        ev.source.fd(),
                        String::from_utf8_lossy(&buf[..n])
                    ),
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) => panic!("read failed: {e}"),
                }
            }
        })?;
    }

    println!("callbacks:");
    let outcome = lp.run(RunMode::Default, &mut ())?;
    println!(
        "run returned {outcome:?} after {} iterations\n",
        lp.iteration()
    );
    println!("trace:");
    for line in sim.trace_lines() {
        println!("  {line}");
    }
    Ok(())
}
