//! One run of the bench.c workload, for instruction counting under
//! callgrind (see `benches/callgrind.sh`, which runs it twice with different
//! write counts and divides the difference).
//!
//! Usage: `callgrind_chain <backend> <writes> [timers|edge|oneshot]`
//! (`oneshot`: one-shot read watchers, re-armed by `Loop::start` in every
//! callback)

#[path = "../benches/chain_workload.rs"]
mod chain_workload;

use chain_workload::{on_os, on_sim, raise_fd_limit, Shape};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let backend = args.get(1).map(String::as_str).unwrap_or("epoll");
    let writes: usize = args.get(2).and_then(|w| w.parse().ok()).unwrap_or(100_000);
    let mode = args.get(3).map(String::as_str).unwrap_or("");
    let timers = mode == "timers";
    let trigger = match mode {
        "edge" => evloop::Trigger::Edge,
        "oneshot" => evloop::Trigger::Oneshot,
        _ => evloop::Trigger::Level,
    };
    raise_fd_limit();
    let shape = Shape {
        pairs: 1000,
        active: 100,
        writes,
        timers,
        trigger,
    };
    let outcome = if backend == "sim" {
        on_sim(shape).run()
    } else {
        match on_os(backend, shape) {
            Ok(mut b) => b.run(),
            Err(e) => {
                eprintln!("{e}");
                std::process::exit(2);
            }
        }
    };
    println!("events {}", outcome.events);
}
