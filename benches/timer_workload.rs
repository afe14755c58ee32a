//! The random draws of the timer workloads, shared by benches/timers_1m.rs,
//! the criterion bench benches/timers.rs and the comparison example
//! (examples/compare/timers.rs), included with `#[path]`: splitmix64, the
//! far timeouts the armed timers get, and the (timer, new timeout) picks of
//! the restarts. benches/timers_1m.c draws the same sequence as
//! benches/timers_1m.rs, which compares the two by a checksum.

#![allow(dead_code)]

use std::time::Duration;

/// The benches' timeouts are whole nanoseconds (as timers_1m.c's are).
pub const NANOS: Duration = Duration::from_nanos(1);
/// The comparison example's timeouts are whole milliseconds.
pub const MILLIS: Duration = Duration::from_millis(1);

const SECOND_NS: u64 = 1_000_000_000;

/// splitmix64; the field is the state (timers_1m's checksum takes its
/// final value).
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A timer's index, below `n`.
    pub fn index(&mut self, n: usize) -> u32 {
        (self.next_u64() % n as u64) as u32
    }

    /// 1000 s plus a whole number of `tick`s below 1000 s: never due
    /// during a run.
    pub fn timeout(&mut self, tick: Duration) -> Duration {
        let tick = tick.as_nanos() as u64;
        let span = 1000 * SECOND_NS / tick;
        Duration::from_nanos(tick * (span + self.next_u64() % span))
    }

    /// A timer (below `n`) and its new timeout, drawn in that order.
    pub fn pick(&mut self, n: usize, tick: Duration) -> (u32, Duration) {
        let i = self.index(n);
        (i, self.timeout(tick))
    }
}
