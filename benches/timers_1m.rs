//! Timers at a million, on evloop: the evloop side of benches/timers_1m.c
//! (same phases, same pseudo-random sequence, same CSV; the phases are
//! described there). benches/timers_1m.sh builds and runs both, in
//! interleaved rounds; docs/benchmarks.md has the numbers.
//!
//! Usage: `timers_1m [N [OPS [PHASES]]]` (default 1,000,000 timers,
//! N operations per phase, every phase; flags such as cargo's `--bench`
//! are ignored, so `cargo bench --bench timers_1m` runs one round).
//! `timers_1m N 0 idle_memory` measures the memory of N idle watchers
//! instead: the size of a registry entry, from outside the crate.
//!
//! evloop's counterpart of each libev call:
//!
//! - arm: `Loop::timer(d, d, cb)` (the callback captures nothing, so its
//!   box allocates nothing);
//! - restart: `Timer::set(t, d, d)`;
//! - again: `t.again(&mut lp)`;
//! - stop_start: `Loop::stop`, `Timer::set(t, d, d)` (the timer is
//!   inactive: only its delay and period change), `Loop::start`;
//! - mixed: the same mix as libev's, the park operation being a `stop`
//!   (and a `Timer::set` + `start` of the oldest parked timer);
//! - expire: `Timer::set_repeat(t, 0)` on every timer (untimed), the clock
//!   moved 10^6 s on, one `run(RunMode::NoWait)`;
//! - rearm: `set_timer(t, d, 0)` + `start` on every (stopped) timer;
//! - stop_all: `Loop::stop` on every timer, in a random order.
//!
//! The loop runs on a backend of this file's (`Warp`): no fds, a real
//! monotonic clock plus an offset, which the expire phase moves on (libev's
//! side interposes on `clock_gettime` for the same effect). Nothing polls
//! before that phase, so the backend plays no part in the others.

use std::cell::Cell;
use std::io;
use std::os::fd::RawFd;
use std::rc::Rc;
use std::time::{Duration, Instant};

use evloop::backend::{Backend, Capabilities, PollEvent, PollStatus};
use evloop::{Idle, Interest, Loop, RunMode, Timer};

#[path = "timer_workload.rs"]
mod timer_workload;
use timer_workload::{Rng, NANOS};

// ---- the shared workload (identical in timers_1m.c) ----

const PARKED_MAX: usize = 1024;
const REFRESH_MASK: usize = 1023;
const NONE: u32 = u32::MAX;

/// Every random number, drawn up front in the C program's order; the
/// timeouts already converted to what the API takes (`Duration`; the C
/// program's are doubles), so that the timed loops convert nothing.
struct Plan {
    arm_d: Vec<Duration>,
    restart: Vec<(u32, Duration)>,
    again: Vec<u32>,
    stop_start: Vec<(u32, Duration)>,
    /// (kind, timer, other timer or NONE, timeout)
    mixed: Vec<(u8, u32, u32, Duration)>,
    unpark: Vec<(u32, Duration)>,
    rearm_d: Vec<Duration>,
    perm: Vec<u32>,
    checksum: u64,
}

fn plan(n: u32, ops: usize) -> Plan {
    // splitmix64, seeded with the number.
    let mut rng = Rng(12);
    let all = n as usize;
    let arm_d = (0..n).map(|_| rng.timeout(NANOS)).collect();
    let restart: Vec<_> = (0..ops).map(|_| rng.pick(all, NANOS)).collect();
    let again: Vec<_> = (0..ops).map(|_| rng.index(all)).collect();
    let stop_start: Vec<_> = (0..ops).map(|_| rng.pick(all, NANOS)).collect();
    let mut parked = vec![false; n as usize];
    let mut fifo = std::collections::VecDeque::with_capacity(PARKED_MAX + 1);
    let mut mixed = Vec::with_capacity(ops);
    for _ in 0..ops {
        let kind = (rng.next_u64() % 4) as u8;
        let mut i = rng.index(all);
        let d = rng.timeout(NANOS);
        while parked[i as usize] {
            i = if i + 1 == n { 0 } else { i + 1 };
        }
        let mut other = NONE;
        if kind == 3 {
            parked[i as usize] = true;
            fifo.push_back(i);
            if fifo.len() > PARKED_MAX {
                other = fifo.pop_front().unwrap();
                parked[other as usize] = false;
            }
        }
        mixed.push((kind, i, other, d));
    }
    let unpark: Vec<_> = fifo.into_iter().map(|i| (i, rng.timeout(NANOS))).collect();
    let rearm_d = (0..n).map(|_| rng.timeout(NANOS)).collect();
    let mut perm: Vec<u32> = (0..n).collect();
    for i in (1..n as usize).rev() {
        let j = (rng.next_u64() % (i as u64 + 1)) as usize;
        perm.swap(i, j);
    }
    // A checksum of the plan (every index drawn, then the generator's final
    // state), which the script compares with libev's: the same sequence on
    // both sides.
    let mut sum = 0xcbf2_9ce4_8422_2325u64;
    let mut mix = |v: u64| sum = (sum ^ v).wrapping_mul(0x100_0000_01b3);
    restart.iter().for_each(|&(i, _)| mix(i as u64));
    again.iter().for_each(|&i| mix(i as u64));
    stop_start.iter().for_each(|&(i, _)| mix(i as u64));
    for &(kind, i, other, _) in &mixed {
        mix(kind as u64);
        mix(i as u64);
        mix(other as u64);
    }
    unpark.iter().for_each(|&(i, _)| mix(i as u64));
    perm.iter().for_each(|&i| mix(i as u64));
    mix(rng.0);
    Plan {
        checksum: sum,
        arm_d,
        restart,
        again,
        stop_start,
        mixed,
        unpark,
        rearm_d,
        perm,
    }
}

// ---- the backend: no fds, a clock that can be moved on ----

struct Warp {
    origin: Instant,
    offset: Rc<Cell<Duration>>,
}

impl Backend for Warp {
    fn name(&self) -> &'static str {
        "warp"
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities::default()
    }
    fn modify(&mut self, _fd: RawFd, _old: Interest, _new: Interest) -> io::Result<()> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "warp watches no fds",
        ))
    }
    fn poll(
        &mut self,
        _timeout: Option<Duration>,
        _: &mut Vec<PollEvent>,
    ) -> io::Result<PollStatus> {
        Ok(PollStatus::Done)
    }
    fn now(&mut self) -> Duration {
        self.origin.elapsed() + self.offset.get()
    }
}

// ---- measuring ----

/// A field of /proc/self/status (VmRSS, VmHWM), in bytes.
fn status_bytes(key: &str) -> i64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<i64>().ok())
        .map_or(-1, |kb| kb * 1024)
}

/// Resets VmHWM to the current RSS (Linux >= 4.0).
fn reset_peak() {
    if let Err(e) = std::fs::write("/proc/self/clear_refs", "5") {
        eprintln!("clear_refs: {e}");
    }
}

struct Report {
    n: u32,
}

impl Report {
    fn line(&self, phase: &str, ops: usize, value: f64, unit: &str) {
        println!("evloop,{phase},{},{ops},{value:.2},{unit}", self.n);
    }
    fn time(&self, phase: &str, ops: usize, since: Instant) {
        self.line(
            phase,
            ops,
            since.elapsed().as_nanos() as f64 / ops as f64,
            "ns/op",
        );
    }
}

fn check_active(lp: &Loop<'_, u64>, expected: usize, after: &str) {
    let active = lp.active_count();
    if active != expected {
        eprintln!("after {after}: {active} active timers, expected {expected}");
        std::process::exit(1);
    }
}

type Lp = Loop<'static, u64>;

// One function per phase, never inlined, so that a profile (callgrind's
// `--toggle-collect=*phase_*`) can count each phase's instructions alone.

#[inline(never)]
fn phase_arm(lp: &mut Lp, h: &mut Vec<Timer>, arm_d: &[Duration]) {
    for (i, &a) in arm_d.iter().enumerate() {
        if i & REFRESH_MASK == 0 {
            lp.update_now();
        }
        h.push(lp.timer(a, a, |_, fired, _| *fired += 1).unwrap());
    }
}

#[inline(never)]
fn phase_restart(lp: &mut Lp, h: &[Timer], ops: &[(u32, Duration)]) {
    for (k, &(i, a)) in ops.iter().enumerate() {
        if k & REFRESH_MASK == 0 {
            lp.update_now();
        }
        (h[i as usize]).set(lp, a, a).unwrap();
    }
}

#[inline(never)]
fn phase_again(lp: &mut Lp, h: &[Timer], ops: &[u32]) {
    for (k, &i) in ops.iter().enumerate() {
        if k & REFRESH_MASK == 0 {
            lp.update_now();
        }
        (h[i as usize]).again(lp).unwrap();
    }
}

#[inline(never)]
fn phase_stop_start(lp: &mut Lp, h: &[Timer], ops: &[(u32, Duration)]) {
    for (k, &(i, a)) in ops.iter().enumerate() {
        if k & REFRESH_MASK == 0 {
            lp.update_now();
        }
        let t = h[i as usize];
        lp.stop(t).unwrap();
        t.set(lp, a, a).unwrap();
        lp.start(t).unwrap();
    }
}

#[inline(never)]
fn phase_mixed(lp: &mut Lp, h: &[Timer], ops: &[(u8, u32, u32, Duration)]) {
    for (k, &(kind, i, other, a)) in ops.iter().enumerate() {
        if k & REFRESH_MASK == 0 {
            lp.update_now();
        }
        let t = h[i as usize];
        match kind {
            0 => t.set(lp, a, a).unwrap(),
            1 => t.again(lp).unwrap(),
            2 => {
                lp.stop(t).unwrap();
                t.set(lp, a, a).unwrap();
                lp.start(t).unwrap();
            }
            _ => {
                lp.stop(t).unwrap();
                if other != NONE {
                    let o = h[other as usize];
                    o.set(lp, a, a).unwrap();
                    lp.start(o).unwrap();
                }
            }
        }
    }
}

#[inline(never)]
fn phase_expire(lp: &mut Lp, fired: &mut u64) {
    lp.run(RunMode::NoWait, fired).unwrap();
}

#[inline(never)]
fn phase_rearm(lp: &mut Lp, h: &[Timer], rearm_d: &[Duration]) {
    for (i, (&t, &a)) in h.iter().zip(rearm_d).enumerate() {
        if i & REFRESH_MASK == 0 {
            lp.update_now();
        }
        t.set(lp, a, Duration::ZERO).unwrap();
        lp.start(t).unwrap();
    }
}

#[inline(never)]
fn phase_stop_all(lp: &mut Lp, h: &[Timer], perm: &[u32]) {
    for &i in perm {
        lp.stop(h[i as usize]).unwrap();
    }
}

/// The memory of N idle watchers (the `idle_memory` phase, run alone): an
/// idle watcher keeps nothing outside its registry entry (its list links
/// are in the entry), so this, minus the 12-byte handle, is the size of a
/// registry entry, which a timer has too, measured from outside the crate.
fn idle_memory(n: u32) {
    let mut lp: Loop = Loop::with_backend(Warp {
        origin: Instant::now(),
        offset: Rc::new(Cell::new(Duration::ZERO)),
    });
    lp.reserve(n as usize);
    let mut h: Vec<Idle> = Vec::with_capacity(n as usize);
    println!("impl,phase,n,ops,value,unit");
    reset_peak();
    let rss0 = status_bytes("VmRSS");
    for _ in 0..n {
        h.push(Idle::new(&mut lp, |_, _, _| {}).unwrap());
    }
    let hwm = status_bytes("VmHWM");
    let per = (hwm - rss0) as f64 / n as f64;
    println!("evloop,mem_idle_peak,{n},{n},{per:.2},B/watcher");
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let n: u32 = args.first().map_or(1_000_000, |a| a.parse().expect("N"));
    let ops: usize = args.get(1).map_or(n as usize, |a| a.parse().expect("OPS"));
    let phases = args.get(2).map_or("all", String::as_str);
    let wanted = |p: &str| phases == "all" || phases.split(',').any(|q| q == p);
    assert!(n >= 2, "N must be at least 2");
    if phases == "idle_memory" {
        return idle_memory(n);
    }
    let plan = plan(n, ops);
    let all = n as usize;

    let offset = Rc::new(Cell::new(Duration::ZERO));
    let mut lp: Lp = Loop::with_backend(Warp {
        origin: Instant::now(),
        offset: offset.clone(),
    });
    // The watchers' storage, reserved as libev's side mallocs its ev_timer
    // array up front (Loop::reserve: the registry's entries and the heap's
    // nodes), and the user's storage for the handles (12 bytes each):
    // allocated here, resident only as the timers are armed, so that both
    // count in the memory per timer, as libev's ev_timer array does.
    lp.reserve(all);
    let mut h: Vec<Timer> = Vec::with_capacity(all);
    let report = Report { n };
    println!("impl,phase,n,ops,value,unit");

    // (a) arm
    reset_peak();
    let rss0 = status_bytes("VmRSS");
    let t0 = Instant::now();
    phase_arm(&mut lp, &mut h, &plan.arm_d);
    report.time("arm", all, t0);
    let (hwm, rss1) = (status_bytes("VmHWM"), status_bytes("VmRSS"));
    check_active(&lp, all, "arm");

    // (b) restart with a new timeout
    if wanted("restart") {
        let t0 = Instant::now();
        phase_restart(&mut lp, &h, &plan.restart);
        report.time("restart", ops, t0);
        check_active(&lp, all, "restart");
    }

    // (c) again with the same period
    if wanted("again") {
        let t0 = Instant::now();
        phase_again(&mut lp, &h, &plan.again);
        report.time("again", ops, t0);
        check_active(&lp, all, "again");
    }

    // (d) stop, then start with a new timeout
    if wanted("stop_start") {
        let t0 = Instant::now();
        phase_stop_start(&mut lp, &h, &plan.stop_start);
        report.time("stop_start", ops, t0);
        check_active(&lp, all, "stop_start");
    }

    // (e) mixed
    if wanted("mixed") {
        let t0 = Instant::now();
        phase_mixed(&mut lp, &h, &plan.mixed);
        report.time("mixed", ops, t0);
        for &(i, a) in &plan.unpark {
            let o = h[i as usize];
            o.set(&mut lp, a, a).unwrap();
            lp.start(o).unwrap();
        }
        check_active(&lp, all, "mixed");
    }

    // (f) expire: every timer fires once
    if wanted("expire") {
        for &t in &h {
            t.set_repeat(&mut lp, Duration::ZERO).unwrap();
        }
        offset.set(offset.get() + Duration::from_secs(1_000_000));
        let mut fired = 0u64;
        let t0 = Instant::now();
        phase_expire(&mut lp, &mut fired);
        report.time("expire", all, t0);
        if fired != n as u64 {
            eprintln!("expire: {fired} of {n} timers fired");
            std::process::exit(1);
        }
        check_active(&lp, 0, "expire");

        // (g) rearm: set and start every (stopped) timer
        if wanted("rearm") {
            lp.update_now();
            let t0 = Instant::now();
            phase_rearm(&mut lp, &h, &plan.rearm_d);
            report.time("rearm", all, t0);
            check_active(&lp, all, "rearm");
        }
    }

    // (h) stop every armed timer, in a random order
    if wanted("stop_all") && lp.active_count() == all {
        let t0 = Instant::now();
        phase_stop_all(&mut lp, &h, &plan.perm);
        report.time("stop_all", all, t0);
        check_active(&lp, 0, "stop_all");
    }

    // Memory of the arm phase: the peak and the resident set after it,
    // minus the resident set before (the handles' Vec included).
    println!("evloop,plan_checksum,{n},{ops},{},fnv1a", plan.checksum);
    report.line("mem_peak", all, (hwm - rss0) as f64 / n as f64, "B/timer");
    report.line("handle_size", all, std::mem::size_of::<Timer>() as f64, "B");
    report.line("mem_rss", all, (rss1 - rss0) as f64 / n as f64, "B/timer");
}
