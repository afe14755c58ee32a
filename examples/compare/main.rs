//! evloop's backends compared on this machine, on named workloads: a table
//! per workload (median, min..max over interleaved rounds, ratio to the
//! best), the machine and its load average before and after, a warning
//! where the spread or the load makes the ranking meaningless, and an SVG.
//!
//! ```text
//! cargo run --release --example compare -- [WORKLOAD...] [OPTIONS]
//! cargo run --release --example compare -- all --quick      # every workload, seconds each
//! cargo run --release --features io-uring --example compare -- chains   # io_uring too
//! ```
//!
//! Workloads (default `all`): `chains` (libevent's bench.c), `timers`,
//! `idle` (idle fds), `churn` (a connection per request), `http`
//! (keep-alive under wrk, or a built-in load generator); `--help` lists
//! the options.
//!
//! The backends are those a [`evloop::Builder`] can open here (epoll,
//! poll, select; io_uring with the `io-uring` feature where the kernel
//! allows it; kqueue on the BSDs and macOS; iocp and select on Windows),
//! and any registered with it: add yours in `main` with
//! `Loop::builder().register("mine", my_crate::open)`.

#[path = "../../benches/chain_workload.rs"]
mod chain_workload;
#[path = "../http_server.rs"]
#[allow(dead_code)] // its `main`
mod http_server;
#[cfg(unix)]
#[path = "../../benches/idle_workload.rs"]
mod idle_workload;
#[path = "../../benches/timer_workload.rs"]
mod timer_workload;

mod chains;
mod harness;
#[cfg(unix)]
mod idle;
mod net;
mod svg;
mod timers;

use std::path::PathBuf;
use std::time::Duration;

use evloop::Loop;
use harness::{Machine, Plan, Workload};

const WORKLOADS: [&str; 5] = ["chains", "timers", "idle", "churn", "http"];

const USAGE: &str = "\
usage: cargo run --release --example compare -- [WORKLOAD...] [OPTIONS]

workloads (default: all):
  chains   libevent's bench.c: socket pairs, active chains of callbacks, with
           and without a timer restarted per event (ns/event)
  timers   many armed timers: restart with a new timeout, expire a due batch
  idle     many idle fds and a few active ones: ns/event as the idle fds grow
  churn    a connection per request on evloop::net: accept, register, read,
           reply, close (server CPU per connection, connections/s)
  http     HTTP/1.1 keep-alive on evloop::net under wrk (if on the PATH) or
           the built-in load generator (requests/s, p99 latency)
  all      every one

backends: every one a Builder opens here (io_uring with --features io-uring,
where the kernel allows it), and the simulator (sim) for chains and idle;
add yours with `.register(name, factory)` on the builder in main.rs

options:
  --quick              small sizes: seconds per workload
  --rounds N           interleaved rounds per backend (default 5)
  --backends A,B       only these backends (default: every one here)
  --svg PATH           the figure: a .svg file (one workload) or a directory
                       (default: target/compare/<workload>.svg)
  --no-svg             no figure
  --csv                also every round's value, beside the figure
  --pairs N --active N --writes N   chains' shape
  --idle N,N,...       idle: the numbers of idle fds
  --timers N           timers: armed timers
  --connections N      churn: connections per round; http: keep-alive connections
  --seconds S          http: load per round (wrk rounds up to whole seconds)
  --load wrk|builtin   http: the load generator (default: wrk if on the PATH)
";

/// The command line.
struct Args {
    workloads: Vec<&'static str>,
    quick: bool,
    rounds: usize,
    backends: Vec<String>,
    svg: Option<PathBuf>,
    csv: bool,
    pairs: Option<usize>,
    active: Option<usize>,
    writes: Option<usize>,
    idle: Option<Vec<usize>>,
    timers: Option<usize>,
    connections: Option<usize>,
    seconds: Option<f64>,
    load: Option<net::Load>,
}

fn parse() -> Result<Args, String> {
    let mut a = Args {
        workloads: vec![],
        quick: false,
        rounds: 5,
        backends: vec![],
        svg: Some(harness::default_out_dir()),
        csv: false,
        pairs: None,
        active: None,
        writes: None,
        idle: None,
        timers: None,
        connections: None,
        seconds: None,
        load: None,
    };
    let mut it = std::env::args().skip(1);
    fn value<T: std::str::FromStr>(
        it: &mut impl Iterator<Item = String>,
        flag: &str,
    ) -> Result<T, String> {
        let v = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        v.parse().map_err(|_| format!("{flag}: cannot read {v:?}"))
    }
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "-h" | "--help" => {
                print!("{USAGE}");
                std::process::exit(0);
            }
            "--quick" => a.quick = true,
            "--rounds" => a.rounds = value::<usize>(&mut it, &arg)?.max(1),
            "--backends" => {
                let list: String = value(&mut it, &arg)?;
                a.backends = list.split(',').map(str::to_string).collect();
            }
            "--svg" => a.svg = Some(value::<PathBuf>(&mut it, &arg)?),
            "--no-svg" => a.svg = None,
            "--csv" => a.csv = true,
            "--pairs" => a.pairs = Some(value(&mut it, &arg)?),
            "--active" => a.active = Some(value(&mut it, &arg)?),
            "--writes" => a.writes = Some(value(&mut it, &arg)?),
            "--idle" => {
                let list: String = value(&mut it, &arg)?;
                let sizes = list
                    .split(',')
                    .map(|n| n.parse().map_err(|_| format!("--idle: cannot read {n:?}")))
                    .collect::<Result<_, _>>()?;
                a.idle = Some(sizes);
            }
            "--timers" => a.timers = Some(value(&mut it, &arg)?),
            "--connections" => a.connections = Some(value::<usize>(&mut it, &arg)?.max(1)),
            "--seconds" => a.seconds = Some(value(&mut it, &arg)?),
            "--load" => {
                a.load = Some(match value::<String>(&mut it, &arg)?.as_str() {
                    "wrk" => net::Load::Wrk,
                    "builtin" => net::Load::Builtin,
                    other => return Err(format!("--load: wrk or builtin, not {other:?}")),
                })
            }
            "all" => a.workloads.extend(WORKLOADS),
            w => match WORKLOADS.iter().find(|&&n| n == w) {
                Some(&n) => a.workloads.push(n),
                None => return Err(format!("unknown workload or option {w:?}")),
            },
        }
    }
    if a.workloads.is_empty() {
        a.workloads.extend(WORKLOADS);
    }
    a.workloads.dedup();
    if a.workloads.len() > 1
        && a.svg
            .as_ref()
            .is_some_and(|p| p.extension().is_some_and(|e| e == "svg"))
    {
        return Err(
            "--svg FILE.svg names one figure: run one workload, or give a directory".into(),
        );
    }
    Ok(a)
}

/// The workload called `name` at the size the arguments ask for.
fn workload(name: &str, a: &Args, fd_limit: u64) -> Result<Box<dyn Workload>, String> {
    let q = a.quick;
    Ok(match name {
        "chains" => Box::new(chains::Chains {
            // 400 pairs: 800 fds, within select's FD_SETSIZE.
            pairs: a.pairs.unwrap_or(if q { 200 } else { 400 }),
            active: a.active.unwrap_or(if q { 20 } else { 40 }),
            writes: a.writes.unwrap_or(if q { 20_000 } else { 100_000 }),
        }),
        "timers" => {
            let armed = a.timers.unwrap_or(if q { 10_000 } else { 100_000 });
            Box::new(timers::Timers {
                armed,
                restarts: armed * 10,
                expire: armed / 10,
            })
        }
        #[cfg(unix)]
        "idle" => Box::new(idle::Idle {
            sizes: a.idle.clone().unwrap_or(if q {
                vec![100, 1_000]
            } else {
                vec![100, 1_000, 10_000]
            }),
            active: 10,
            iterations: if q { 200 } else { 1_000 },
            fd_limit,
        }),
        #[cfg(not(unix))]
        "idle" => {
            let _ = fd_limit;
            return Err(
                "not on this platform: it needs Unix fds (eventfds or socket pairs)".into(),
            );
        }
        "churn" => Box::new(net::Churn {
            connections: a.connections.unwrap_or(if q { 500 } else { 5_000 }),
            clients: 2,
        }),
        "http" => Box::new(net::Http {
            load: a.load.unwrap_or_else(net::Load::detect),
            connections: a.connections.unwrap_or(50),
            threads: 2,
            duration: Duration::from_secs_f64(a.seconds.unwrap_or(if q { 1.0 } else { 5.0 })),
        }),
        _ => unreachable!("parse() checked the name"),
    })
}

fn main() {
    let args = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprint!("{e}\n\n{USAGE}");
            std::process::exit(2);
        }
    };
    let fd_limit = chain_workload::raise_fd_limit();
    // The crate's backends; `.register("mine", my_crate::open)` adds yours.
    let builder = Loop::builder();
    let known = builder.available();
    if let Some(b) = args
        .backends
        .iter()
        .find(|b| *b != "sim" && !known.contains(&b.as_str()))
    {
        eprintln!(
            "--backends: no backend {b:?} here (here: {}, sim)",
            known.join(", ")
        );
        std::process::exit(2);
    }
    let machine = Machine::here();
    println!("evloop backends compared on {}", machine.line());
    println!(
        "backends here: {} (default {}); workloads: {}\n",
        builder.available().join(", "),
        builder.backend_name(),
        args.workloads.join(", ")
    );
    let plan = Plan {
        rounds: args.rounds,
        svg: args.svg.clone(),
        csv: args.csv,
        only: args.backends.clone(),
    };
    for name in &args.workloads {
        match workload(name, &args, fd_limit) {
            Ok(mut w) => {
                let report = harness::measure(w.as_mut(), &builder, &plan);
                harness::publish(&report, &machine, &plan);
            }
            Err(why) => println!("{name}: skipped: {why}\n"),
        }
    }
}
