//! `idle`: many idle fds and a few active ones (benches/idle_workload.rs):
//! the cost per event of one loop iteration as the idle fds grow. epoll,
//! kqueue and io_uring are told only of the ready fds; poll and select
//! hand the kernel, and scan, the whole set on every iteration.

use std::time::Instant;

use evloop::{Builder, RunMode};

use crate::harness::{Metric, Workload};
use crate::idle_workload::{does_not_fit, setup};

pub struct Idle {
    /// The numbers of idle fds, one metric each.
    pub sizes: Vec<usize>,
    /// Always-ready fds among them.
    pub active: usize,
    /// Timed iterations per size and round.
    pub iterations: usize,
    /// The process's fd limit (raised to its hard limit).
    pub fd_limit: u64,
}

impl Idle {
    fn one(&self, builder: &Builder, backend: &str, idle: usize) -> Result<f64, String> {
        if let Some(why) = does_not_fit(builder, backend, idle, self.active, self.fd_limit) {
            return Err(why);
        }
        let mut s = setup(builder, backend, idle, self.active)?;
        // The first iterations register every fd and size the backend's
        // buffers.
        let mut fired = 0u64;
        for _ in 0..8 {
            s.lp.run(RunMode::NoWait, &mut fired)
                .map_err(|e| e.to_string())?;
        }
        if let Some(sim) = &s.sim {
            sim.clear_trace();
        }
        fired = 0;
        let start = Instant::now();
        for _ in 0..self.iterations {
            s.lp.run(RunMode::NoWait, &mut fired)
                .map_err(|e| e.to_string())?;
        }
        let elapsed = start.elapsed();
        let expected = (self.iterations * self.active) as u64;
        if fired != expected {
            return Err(format!("{fired} events, {expected} expected"));
        }
        Ok(elapsed.as_nanos() as f64 / fired as f64)
    }
}

impl Workload for Idle {
    fn name(&self) -> &'static str {
        "idle"
    }

    fn describe(&self) -> String {
        format!(
            "{} always-ready fds among {:?} idle ones, all watched for reading; {} \
             iterations (RunMode::NoWait) timed per size; fd limit {}",
            self.active, self.sizes, self.iterations, self.fd_limit
        )
    }

    fn metrics(&self) -> Vec<Metric> {
        self.sizes
            .iter()
            .map(|n| Metric::lower(format!("idle, {n} idle fds"), "ns/event"))
            .collect()
    }

    fn on_sim(&self) -> bool {
        true
    }

    fn run(&mut self, builder: &Builder, backend: &str) -> Vec<Result<f64, String>> {
        self.sizes
            .iter()
            .map(|&n| self.one(builder, backend, n))
            .collect()
    }
}
