//! The main demo: libevent's bench.c workload on every backend this machine
//! has, side by side, plus the simulator.
//!
//! Run with: `cargo run --release --example demo`
//! (pass `quick` for a shorter run: `cargo run --release --example demo -- quick`)
//!
//! The backends are those of a [`Builder`]: the crate's own, and any
//! registered with it. A backend of another crate is measured the same way:
//! `Loop::builder().register("mine", my_crate::open)` in `main` puts it in
//! the table.

#[path = "../benches/chain_workload.rs"]
mod chain_workload;

use chain_workload::{on_builder, on_sim, raise_fd_limit, Outcome, Shape};
use evloop::{Builder, Loop};

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

/// The backends of the table: those of the builder, and the simulator.
enum Subject<'b> {
    Os(&'b Builder, &'static str),
    Sim,
}

impl Subject<'_> {
    fn name(&self) -> &'static str {
        match self {
            Subject::Os(_, name) => name,
            Subject::Sim => "sim",
        }
    }
}

fn measure(subject: &Subject<'_>, shape: Shape, runs: usize) -> Result<(usize, f64), String> {
    match subject {
        Subject::Sim => {
            let mut b = on_sim(shape);
            Ok(best(|| b.run(), runs))
        }
        Subject::Os(builder, name) => match on_builder(&(*builder).clone().backend(name), shape) {
            Ok(mut b) => Ok(best(|| b.run(), runs)),
            Err(e) => Err(e.to_string()),
        },
    }
}

fn table(builder: &Builder, shape: Shape, runs: usize) {
    println!(
        "\n{} socket pairs, {} active chains, {} writes per run (best of {runs} runs):",
        shape.pairs, shape.active, shape.writes
    );
    println!(
        "  {:<8} {:>10} {:>16} {:>26}",
        "backend", "events", "ns/event", "ns/event (+ timer again)"
    );
    let mut subjects: Vec<Subject<'_>> = builder
        .available()
        .into_iter()
        .map(|name| Subject::Os(builder, name))
        .collect();
    subjects.push(Subject::Sim);
    for subject in &subjects {
        let name = subject.name();
        let plain = measure(subject, shape, runs);
        let timed = measure(
            subject,
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
    // The crate's backends; `.register(name, factory)` adds another.
    let builder = Loop::builder();
    println!("evloop demo: the same callback-driven workload on every backend");
    println!(
        "default backend here: {} (EVLOOP_BACKEND overrides it); fd limit {limit}",
        builder.backend_name()
    );
    let (runs, writes) = if quick { (2, 20_000) } else { (5, 100_000) };
    // Small enough for select (fds below FD_SETSIZE).
    table(
        &builder,
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
        &builder,
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
    figures_note();
}

/// Where the comparison with the other libraries is drawn, and how to
/// draw it again from measurements on this machine.
fn figures_note() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    println!(
        "\nfigures against libev, libevent, libuv, mio and polling (every backend, time and \
         instructions per event against the number of fds; a million timers): {}/ \
         (shown in docs/benchmarks.md, drawn from the CSVs in docs/figures/data/)",
        root.join("docs/figures").display()
    );
    println!(
        "redraw them for this machine: cd {} && benches/figures.sh \
         (measures here, then draws; QUICK=1 for a short sweep; --draw-only redraws from the CSVs)",
        root.display()
    );
}
