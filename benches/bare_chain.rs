//! Baselines for the per-event cost of the bench.c chains (1,000 socket
//! pairs, 100 chains), outside evloop:
//!
//! - `bare`: no event loop at all, only the one-byte reads and writes on the
//!   same socket pairs, visited round-robin, with the same calls as the
//!   loop's callbacks (`Read::read`, `Write::write_all`). It is the floor
//!   of the per-event cost.
//! - `libc`: the same with `libc::read` / `libc::write` called directly, as
//!   a C program (bench.c) does.
//! - `fdio`: the same with `evloop::backends::fd_io::{read, write}`, the
//!   calls the loop's callbacks make on OS sockets: the floor for them.
//! - `mio`: the same workload on mio 1.x (plain; mio has no timers).
//!
//! `benches/callgrind.sh bare` (`libc`, `mio`) counts their
//! user-space instructions the same way as the loop's (two runs, the
//! difference divided by the difference in events).
//!
//! Usage: `bare_chain [bare|libc|fdio|mio] [writes]` (default: bare, 100,000 writes);
//! prints `events N` and the wall time per event. `cargo bench --bench
//! bare_chain` runs `bare` once (flags such as `--bench` are ignored).

#[path = "chain_workload.rs"]
mod chain_workload;
#[path = "mio_chain.rs"]
mod mio_chain;

use chain_workload::{bare, bare_fd, raise_fd_limit, Shape};

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let which = args
        .iter()
        .find(|a| a.parse::<usize>().is_err())
        .map_or("bare", String::as_str);
    let writes: usize = args.iter().find_map(|a| a.parse().ok()).unwrap_or(100_000);
    raise_fd_limit();
    let shape = Shape {
        pairs: 1000,
        active: 100,
        writes,
        timers: false,
        trigger: evloop::Trigger::Level,
    };
    let outcome = match which {
        "bare" => bare(shape).run(),
        "libc" => bare(shape).run_libc(),
        "fdio" => bare_fd(shape).run_fd_io(),
        "mio" => mio_chain::build(shape).expect("mio setup").run(),
        other => {
            eprintln!("unknown baseline {other:?}: use bare, libc, fdio or mio");
            std::process::exit(2);
        }
    };
    println!("events {}", outcome.events);
    println!(
        "{which} chain: {:.0} ns/event (wall time, one run)",
        outcome.elapsed.as_nanos() as f64 / outcome.events as f64
    );
}
