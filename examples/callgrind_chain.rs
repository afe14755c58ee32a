//! One run of the bench.c workload, for instruction counting under
//! callgrind (see `benches/callgrind.sh`, which runs it twice with different
//! write counts and divides the difference).
//!
//! Usage: `callgrind_chain <backend> <writes> [timers|edge|oneshot|record|async]`
//! (`oneshot`: one-shot read watchers, re-armed by `Loop::start` in every
//! callback; `record`: the plain workload with the loop recorded, as
//! `Builder::record_to` does, to a file in the temporary directory that is
//! removed after the run; `async`: the plain workload on a loop that also
//! has an async watcher, which is never sent: the loop then has an
//! internal fd, its wake fd, among the backend's)

#[path = "../benches/chain_workload.rs"]
mod chain_workload;

use chain_workload::{on_builder, on_loop, on_os, on_sim, raise_fd_limit, Shape};

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
    let outcome = if mode == "record" {
        let path =
            std::env::temp_dir().join(format!("evloop-callgrind-{}.trace", std::process::id()));
        let builder = evloop::Loop::builder().backend(backend).record_to(&path);
        let outcome = match on_builder(&builder, shape) {
            Ok(mut b) => b.run(),
            Err(e) => {
                eprintln!("{e}");
                std::process::exit(2);
            }
        };
        let _ = std::fs::remove_file(&path);
        outcome
    } else if mode == "async" {
        let made = evloop::Loop::builder()
            .backend(backend)
            .build()
            .and_then(|mut lp| {
                evloop::Async::new(&mut lp, |_, _, _| {})?;
                on_loop(lp, shape)
            });
        match made {
            Ok(mut b) => b.run(),
            Err(e) => {
                eprintln!("{e}");
                std::process::exit(2);
            }
        }
    } else if backend == "sim" {
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
