//! `timers`: many armed timers (far in the future, as connections'
//! inactivity timeouts are): the cost of restarting one with a new
//! timeout, and of expiring a batch of due ones.

use std::time::{Duration, Instant};

use evloop::{Builder, Loop, RunMode, Timer};

use crate::harness::{Metric, Workload};
use crate::timer_workload::{Rng, MILLIS};

pub struct Timers {
    /// Timers armed throughout.
    pub armed: usize,
    /// Restarts timed per round.
    pub restarts: usize,
    /// Timers made due and expired per round.
    pub expire: usize,
}

impl Timers {
    fn measure(&self, builder: &Builder, backend: &str) -> Result<(f64, f64), String> {
        let mut lp: Loop<'static, usize> = builder
            .clone()
            .backend(backend)
            .build()
            .map_err(|e| e.to_string())?;
        // The same timeouts on every backend.
        let mut rng = Rng(36);
        let timers: Vec<Timer> = (0..self.armed)
            .map(|_| {
                let d = rng.timeout(MILLIS);
                lp.timer(d, Duration::ZERO, |_, _, _| {}).unwrap()
            })
            .collect();
        let picks: Vec<(u32, Duration)> = (0..self.restarts)
            .map(|_| rng.pick(timers.len(), MILLIS))
            .collect();
        let start = Instant::now();
        for &(i, d) in &picks {
            timers[i as usize].set(&mut lp, d, Duration::ZERO).unwrap();
        }
        let restart = start.elapsed().as_nanos() as f64 / picks.len() as f64;

        // A batch due within a millisecond, expired by one iteration once
        // it is due (the loop's sleep is not timed).
        let due: Vec<Timer> = (0..self.expire)
            .map(|_| {
                let d = Duration::from_micros(rng.next_u64() % 1000);
                lp.timer(d, Duration::ZERO, |_, fired, _| *fired += 1)
                    .unwrap()
            })
            .collect();
        std::thread::sleep(Duration::from_millis(2));
        let mut fired = 0;
        let start = Instant::now();
        lp.run(RunMode::NoWait, &mut fired)
            .map_err(|e| e.to_string())?;
        let expire = start.elapsed().as_nanos() as f64 / due.len() as f64;
        if fired != due.len() {
            return Err(format!("{fired} of {} due timers fired", due.len()));
        }
        Ok((restart, expire))
    }
}

impl Workload for Timers {
    fn name(&self) -> &'static str {
        "timers"
    }

    fn describe(&self) -> String {
        format!(
            "{} armed timers; {} restarts with a new timeout (Timer::set), then {} more \
             timers due within 1 ms expired by one loop iteration",
            self.armed, self.restarts, self.expire
        )
    }

    fn metrics(&self) -> Vec<Metric> {
        vec![
            Metric::lower("timers, restart", "ns/restart"),
            Metric::lower("timers, expire", "ns/expiry"),
        ]
    }

    fn run(&mut self, builder: &Builder, backend: &str) -> Vec<Result<f64, String>> {
        match self.measure(builder, backend) {
            Ok((r, e)) => vec![Ok(r), Ok(e)],
            Err(e) => vec![Err(e.clone()), Err(e)],
        }
    }
}
