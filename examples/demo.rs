//! The main demo: libevent's bench.c workload on every backend this machine
//! has, side by side, plus the simulator.
//!
//! Run with: `cargo run --release --example demo`
//! (pass `quick` for a shorter run: `cargo run --release --example demo -- quick`)

#[path = "../benches/chain_workload.rs"]
mod chain_workload;

use chain_workload::{on_os, on_sim, raise_fd_limit, Outcome, Shape};

/// Best (lowest) time per event over `runs` runs.
fn best(mut run: impl FnMut() -> Outcome, runs: usize) -> (usize, f64) {
    let mut best = f64::INFINITY;
    let mut events = 0;
    for _ in 0..runs {
        let o = run();
        events = o.events;
        best = best.min(o.elapsed.as_nanos() as f64 / o.events as f64);
    }
    (events, best)
}

fn measure(backend: &str, shape: Shape, runs: usize) -> Result<(usize, f64), String> {
    if backend == "sim" {
        let mut b = on_sim(shape);
        return Ok(best(|| b.run(), runs));
    }
    match on_os(backend, shape) {
        Ok(mut b) => Ok(best(|| b.run(), runs)),
        Err(e) => Err(e.to_string()),
    }
}

fn table(shape: Shape, runs: usize) {
    println!(
        "\n{} socket pairs, {} active chains, {} writes per run (best of {runs} runs):",
        shape.pairs, shape.active, shape.writes
    );
    println!(
        "  {:<8} {:>10} {:>16} {:>26}",
        "backend", "events", "ns/event", "ns/event (+ timer again)"
    );
    let mut names: Vec<&str> = evloop::backends::AVAILABLE.to_vec();
    names.push("sim");
    for name in names {
        let plain = measure(name, shape, runs);
        let timed = measure(
            name,
            Shape {
                timers: true,
                trigger: evloop::Trigger::Level,
                ..shape
            },
            runs,
        );
        match (plain, timed) {
            (Ok((events, ns)), Ok((_, ns_t))) => {
                println!("  {name:<8} {events:>10} {ns:>16.0} {ns_t:>26.0}")
            }
            (Err(e), _) | (_, Err(e)) => println!("  {name:<8} refused: {e}"),
        }
    }
}

fn main() {
    let quick = std::env::args().any(|a| a == "quick");
    let limit = raise_fd_limit();
    println!("evloop demo: the same callback-driven workload on every backend");
    println!(
        "default backend here: {} (EVLOOP_BACKEND overrides it); fd limit {limit}",
        evloop::Builder::new().backend_name()
    );
    let (runs, writes) = if quick { (2, 20_000) } else { (5, 100_000) };
    // Small enough for select (fds below FD_SETSIZE).
    table(
        Shape {
            pairs: 200,
            active: 20,
            writes,
            timers: false,
            trigger: evloop::Trigger::Level,
        },
        runs,
    );
    // The bench.c shape used for the per-event instruction counts; select
    // refuses it, and says why.
    table(
        Shape {
            pairs: 1000,
            active: 100,
            writes,
            timers: false,
            trigger: evloop::Trigger::Level,
        },
        runs,
    );
    println!("\n(sim: the loop plus in-memory simulated sockets, no syscalls, virtual time)");
}
