//! `chains`: libevent's bench.c (benches/chain_workload.rs): socket pairs,
//! chains of callbacks that read a byte and write one to the next pair,
//! with and without a timer restarted per event.

use evloop::{Builder, Trigger};

use crate::chain_workload::{on_builder, on_sim, Outcome, Shape};
use crate::harness::{Metric, Workload};

pub struct Chains {
    pub pairs: usize,
    pub active: usize,
    pub writes: usize,
}

/// ns per event of one run after a warm-up run.
fn per_event(mut run: impl FnMut() -> Outcome) -> f64 {
    run();
    let o = run();
    o.elapsed.as_nanos() as f64 / o.events as f64
}

impl Chains {
    fn shape(&self, timers: bool) -> Shape {
        Shape {
            pairs: self.pairs,
            active: self.active,
            writes: self.writes,
            timers,
            trigger: Trigger::Level,
        }
    }

    fn one(&self, builder: &Builder, backend: &str, timers: bool) -> Result<f64, String> {
        let shape = self.shape(timers);
        if backend == "sim" {
            let mut b = on_sim(shape);
            return Ok(per_event(|| b.run()));
        }
        let mut b =
            on_builder(&builder.clone().backend(backend), shape).map_err(|e| e.to_string())?;
        Ok(per_event(|| b.run()))
    }
}

impl Workload for Chains {
    fn name(&self) -> &'static str {
        "chains"
    }

    fn describe(&self) -> String {
        format!(
            "libevent's bench.c: {} socket pairs, {} active chains, {} writes per run \
             (one warm-up run, then one timed)",
            self.pairs, self.active, self.writes
        )
    }

    fn metrics(&self) -> Vec<Metric> {
        vec![
            Metric::lower("chains, plain", "ns/event"),
            Metric::lower("chains, a timer restarted per event", "ns/event"),
        ]
    }

    fn on_sim(&self) -> bool {
        true
    }

    fn run(&mut self, builder: &Builder, backend: &str) -> Vec<Result<f64, String>> {
        vec![
            self.one(builder, backend, false),
            self.one(builder, backend, true),
        ]
    }
}
