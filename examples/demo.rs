//! The README's first command: what evloop is for, in a few seconds.
//!
//! 1. **A server on the simulator.** Three clients' bytes arrive at
//!    chosen virtual times; the server's callbacks answer each line in
//!    upper case, restart the connection's idle timer, and close the
//!    connection at its end of file or after 10 ms of silence. Printed:
//!    what each callback did at which virtual time, what each client got,
//!    then the simulator's exact trace (every poll, what it reported,
//!    every dispatch). No socket and no real time: the same program gives
//!    the same trace on every run, which is how evloop's tests pin
//!    behaviour down, and how yours can.
//! 2. **The kernel's backends side by side.** libevent's bench.c
//!    workload (socket pairs, chains of callbacks that write to the next
//!    pair) on every backend of this machine and on the simulator:
//!    nanoseconds per event, with and without a timer restarted per
//!    event, as the comparison example (examples/compare/) runs it in
//!    quick mode: interleaved rounds, median and min..max, the machine's
//!    load, and a warning where the spread or the load makes the ranking
//!    meaningless. About a second.
//! 3. **Where to go next**, the full comparison first.
//!
//! Run with: `cargo run --release --example demo` (pass `full` for the
//! comparison's default size: `cargo run --release --example demo -- full`).
//!
//! The backends of the table are those of a [`Builder`]: the crate's own,
//! and any registered with it. A backend of another crate is measured the
//! same way: `Loop::builder().register("mine", my_crate::open)` in `main`
//! puts it in the table.

#[path = "../benches/chain_workload.rs"]
mod chain_workload;
// The comparison's method and its bench.c workload (examples/compare/).
#[path = "compare/chains.rs"]
mod chains;
#[path = "compare/harness.rs"]
mod harness;
#[path = "compare/svg.rs"]
mod svg;

use std::io::{ErrorKind, Read, Write};
use std::time::Duration;

use chain_workload::raise_fd_limit;
use chains::Chains;
use evloop::{Interest, Io, Loop, RunMode, Sim, Timer};
use harness::{Machine, Plan};

const IDLE: Duration = Duration::from_millis(10);

/// One client's connection, as the server keeps it.
struct Conn {
    name: &'static str,
    io: Option<Io>,
    idle: Option<Timer>,
}

/// The server's state: its connections, by index.
struct Server {
    conns: Vec<Conn>,
}

/// Closes connection `i`: its io watcher (which drops the socket) and its
/// idle timer.
fn close(lp: &mut Loop<Server>, server: &mut Server, i: usize, why: &str) {
    let c = &mut server.conns[i];
    println!("  {:>6?}  {:<6} closed: {why}", lp.now(), c.name);
    if let Some(io) = c.io.take() {
        lp.remove(io).expect("the io watcher is live");
    }
    if let Some(t) = c.idle.take() {
        lp.remove(t).expect("the timer is live");
    }
}

/// Part 1: the scenario, its callbacks' output, the replies and the trace.
fn simulated_server() -> evloop::Result<()> {
    let ms = Duration::from_millis;
    let sim = Sim::new();
    let names = ["alice", "bob", "carol"];
    let socks = names.map(|name| sim.socket(name, 64));
    let fds: Vec<evloop::RawFd> = socks.iter().map(|s| s.fd()).collect();
    // What the clients do, on the simulator's virtual clock.
    sim.deliver(ms(1), &socks[0], b"hello\n");
    sim.deliver(ms(3), &socks[1], b"ping\n");
    sim.deliver(ms(3), &socks[2], b"hi there\n");
    sim.deliver(ms(6), &socks[0], b"bye\n");
    sim.close_peer(ms(7), &socks[0]);
    sim.deliver(ms(9), &socks[1], b"still here\n");

    let mut lp: Loop<Server> = Loop::with_backend(sim.backend());
    let mut server = Server { conns: vec![] };
    for (i, sock) in socks.into_iter().enumerate() {
        // The idle timer, libev's way: a repeat of 10 ms, and every read
        // restarts it at that (`again`); when it fires, the connection has
        // been silent that long.
        let idle = lp.timer(IDLE, IDLE, move |lp, server, _| {
            close(lp, server, i, "idle for 10ms");
        })?;
        let io = lp.io(sock, Interest::READABLE, move |lp, server, ev| {
            let mut buf = [0u8; 64];
            loop {
                match ev.source.read(&mut buf) {
                    Ok(0) => return close(lp, server, i, "end of file"),
                    Ok(n) => {
                        let line = String::from_utf8_lossy(&buf[..n]);
                        let reply = line.to_uppercase();
                        ev.source.write_all(reply.as_bytes()).expect("room to send");
                        println!(
                            "  {:>6?}  {:<6} read {:?}, answered {:?}",
                            lp.now(),
                            server.conns[i].name,
                            line,
                            reply
                        );
                        if let Some(t) = server.conns[i].idle {
                            t.again(lp).expect("the timer is live");
                        }
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                    Err(e) => panic!("read failed: {e}"),
                }
            }
        })?;
        server.conns.push(Conn {
            name: names[i],
            io: Some(io),
            idle: Some(idle),
        });
    }

    println!("1. A server on the simulator (virtual sockets, virtual time):");
    println!("   alice: 'hello' at 1ms, 'bye' at 6ms, hangs up at 7ms");
    println!("   bob:   'ping' at 3ms, 'still here' at 9ms");
    println!("   carol: 'hi there' at 3ms (the same poll as bob's)");
    println!("   the server answers in upper case and closes after 10ms of silence\n");
    println!("  time    conn   what the callbacks did");
    let outcome = lp.run(RunMode::Default, &mut server)?;
    println!(
        "\n  run returned {outcome:?} at {:?}, after {} iterations",
        lp.now(),
        lp.iteration()
    );
    println!("\n  what each client received:");
    for (name, fd) in names.iter().zip(&fds) {
        println!(
            "    {name:<6} {:?}",
            String::from_utf8_lossy(&sim.sent(*fd))
        );
    }
    println!(
        "\n  the simulator's trace, the same on every run (modify: interest sent to the \
         backend; idle until: the loop slept and the virtual clock jumped; poll: what was \
         ready; dispatch: a callback run):"
    );
    for line in sim.trace_lines() {
        println!("    {line}");
    }
    Ok(())
}

/// Part 2: the comparison's `chains` workload (examples/compare/) in
/// quick mode: bench.c on every backend of this machine and on the
/// simulator, interleaved rounds, the spread and the load, and a warning
/// where they make the ranking meaningless; `full` runs the comparison's
/// default size.
fn backends_side_by_side(full: bool) {
    let limit = raise_fd_limit();
    // The crate's backends; `.register(name, factory)` adds another.
    let builder = Loop::builder();
    let machine = Machine::here();
    println!("\n2. The kernel's backends side by side: libevent's bench.c workload");
    println!(
        "   (callbacks that read a byte and write one to the next socket pair) on {};\n   \
         default backend here: {} (EVLOOP_BACKEND overrides it); fd limit {limit}\n",
        machine.line(),
        builder.backend_name()
    );
    let mut chains = Chains {
        pairs: if full { 400 } else { 200 },
        active: if full { 40 } else { 20 },
        writes: if full { 100_000 } else { 20_000 },
    };
    let plan = Plan {
        rounds: if full { 5 } else { 3 },
        svg: Some(harness::default_out_dir()),
        csv: false,
        only: vec![],
    };
    let report = harness::measure(&mut chains, &builder, &plan);
    harness::publish(&report, &machine, &plan);
}

/// Part 3: what to run next, and where the comparison with the other
/// libraries is drawn.
fn next_steps() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    println!("\n3. Next:");
    println!("   cargo run --release --example compare -- all   # every workload (chains, timers, idle, churn, http) on every backend, with figures");
    println!("   cargo run --example echo_server          # a TCP echo server (evloop::net); try: nc 127.0.0.1 7878");
    println!(
        "   cargo run --release --example http_server  # HTTP/1.1 keep-alive on 127.0.0.1:8080"
    );
    println!(
        "   cargo run --example record_replay        # record a server's run, replay it exactly"
    );
    println!("   cargo test                               # the whole suite, the simulator's scenarios included");
    println!(
        "   figures against libev, libevent, libuv, mio and polling: {}/ (docs/benchmarks.md);\n   \
         redraw them here: benches/figures.sh (QUICK=1 for a short sweep)",
        root.join("docs/figures").display()
    );
}

fn main() -> evloop::Result<()> {
    let full = std::env::args().any(|a| a == "full");
    println!("evloop: callbacks on readiness and timers, on any backend, or on a simulator\n");
    simulated_server()?;
    backends_side_by_side(full);
    next_steps();
    Ok(())
}
