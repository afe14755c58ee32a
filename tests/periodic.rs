//! Periodic watchers across wall-clock steps of plus and minus one hour,
//! for the three schedules: an absolute time never fires early; interval
//! and custom schedules are realigned; a missed tick fires once; a custom
//! schedule is asked once per firing (and once per realignment).
//!
//! On the simulator (exact virtual times), both with the backend reporting
//! steps (as a Linux timerfd does) and without (the loop notices them,
//! waking at least once a minute); and on every OS backend through a
//! wrapper that shifts its wall clock (a test cannot step the machine's).

mod common;

use std::cell::Cell;
use std::rc::Rc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use common::{RunTo, Shifted};
use evloop::{Loop, Periodic, Schedule, Sim, Stat};

const MIN: u64 = 60;
const HOUR: u64 = 3600;

fn at(secs: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
}

fn secs(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs()
}

/// A simulated world whose wall clock reads 10:00:00 (on day 0) at start.
fn ten_oclock(report_steps: bool) -> Sim {
    let sim = Sim::new();
    sim.set_wall_clock(at(10 * HOUR));
    sim.report_clock_steps(report_steps);
    sim
}

/// Runs until the watcher in `log` fired `n` times; the log holds
/// (monotonic minutes, wall-clock minutes of the day) per firing.
type Log = Vec<(u64, u64)>;

fn record(lp: &mut Loop<'_, Log>, log: &mut Log) {
    let wall = secs(lp.read_wall_clock());
    log.push((lp.now().as_secs() / 60, wall / 60));
}

#[test]
fn an_absolute_periodic_never_fires_early_and_fires_once_when_stepped_over() {
    for report in [true, false] {
        // Step back: due at 10:30 wall; at 10:10 the clock goes back to
        // 9:10, so 10:30 comes 80 minutes later, at monotonic 90 min.
        let sim = ten_oclock(report);
        sim.step_wall_clock_back(Duration::from_secs(10 * MIN), Duration::from_secs(HOUR));
        let mut lp: Loop<Log> = Loop::with_backend(sim.backend());
        Periodic::new(
            &mut lp,
            Schedule::At(at(10 * HOUR + 30 * MIN)),
            |lp, log, _| record(lp, log),
        )
        .unwrap();
        let log = lp.finish(vec![]);
        assert_eq!(log, [(90, 10 * 60 + 30)], "report={report}");

        // Step forward over it: fires at once, late, once.
        let sim = ten_oclock(report);
        sim.step_wall_clock_forward(Duration::from_secs(10 * MIN), Duration::from_secs(HOUR));
        let mut lp: Loop<Log> = Loop::with_backend(sim.backend());
        Periodic::new(
            &mut lp,
            Schedule::At(at(10 * HOUR + 30 * MIN)),
            |lp, log, _| record(lp, log),
        )
        .unwrap();
        let log = lp.finish(vec![]);
        let (mono, wall) = log[0];
        assert_eq!(log.len(), 1, "report={report}");
        assert!(
            wall >= 11 * 60 + 10 && mono <= 11,
            "report={report}: {log:?}"
        );
    }
}

#[test]
fn an_interval_periodic_is_realigned_after_a_step_back() {
    for report in [true, false] {
        // Hourly on the hour, started at 10:05: next 11:00. At 10:15 the
        // clock goes back to 9:15: realigned, the next tick is 10:00 (45
        // minutes on, monotonic 60), then 11:00 (without the realignment
        // the first would come at 11:00 wall, monotonic 120).
        let sim = ten_oclock(report);
        sim.step_wall_clock_back(Duration::from_secs(15 * MIN), Duration::from_secs(HOUR));
        let mut lp: Loop<Log> = Loop::with_backend(sim.backend());
        lp.timer(Duration::from_secs(5 * MIN), Duration::ZERO, |lp, _, _| {
            Periodic::new(
                lp,
                Schedule::every(Duration::from_secs(HOUR)),
                |lp, log, me| {
                    record(lp, log);
                    if log.len() == 2 {
                        lp.stop(me).unwrap();
                    }
                },
            )
            .unwrap();
        })
        .unwrap();
        assert_eq!(
            lp.finish(vec![]),
            [(60, 10 * 60), (120, 11 * 60)],
            "report={report}"
        );
    }
}

#[test]
fn an_interval_periodic_fires_a_missed_tick_once_after_a_step_forward() {
    for report in [true, false] {
        // Hourly, started at 10:05. At 10:15 the clock jumps 3 hours to
        // 13:15: the 11:00, 12:00 and 13:00 ticks were missed; one fires
        // now, and the next is 14:00.
        let sim = ten_oclock(report);
        sim.step_wall_clock_forward(Duration::from_secs(15 * MIN), Duration::from_secs(3 * HOUR));
        let mut lp: Loop<Log> = Loop::with_backend(sim.backend());
        lp.timer(Duration::from_secs(5 * MIN), Duration::ZERO, |lp, _, _| {
            Periodic::new(
                lp,
                Schedule::every(Duration::from_secs(HOUR)),
                |lp, log, me| {
                    record(lp, log);
                    if log.len() == 2 {
                        lp.stop(me).unwrap();
                    }
                },
            )
            .unwrap();
        })
        .unwrap();
        let log = lp.finish(vec![]);
        assert_eq!(log.len(), 2, "report={report}: {log:?}");
        let (first_mono, first_wall) = log[0];
        // At the step (reported) or within a minute of it (noticed).
        assert!((15..=16).contains(&first_mono), "report={report}: {log:?}");
        assert!(
            (13 * 60 + 15..=13 * 60 + 16).contains(&first_wall),
            "{log:?}"
        );
        assert_eq!(log[1].1, 14 * 60, "report={report}: {log:?}");
    }
}

#[test]
fn a_custom_schedule_is_asked_once_per_firing_and_once_per_realignment() {
    for report in [true, false] {
        let sim = ten_oclock(report);
        // Back one hour at 10:25, while the next firing (10:30) waits.
        sim.step_wall_clock_back(Duration::from_secs(25 * MIN), Duration::from_secs(HOUR));
        let asked = Rc::new(Cell::new(0));
        let count = asked.clone();
        let mut lp: Loop<Log> = Loop::with_backend(sim.backend());
        let every_ten = Schedule::custom(move |now| {
            count.set(count.get() + 1);
            now + Duration::from_secs(10 * MIN)
        });
        Periodic::new(&mut lp, every_ten, |lp, log, me| {
            record(lp, log);
            if log.len() == 3 {
                lp.stop(me).unwrap();
            }
        })
        .unwrap();
        let log = lp.finish(vec![]);
        // 10:10 and 10:20 as planned; then the step at 10:25 (to 9:25)
        // realigns to 9:35: never early, never lost.
        assert_eq!(
            log[..2],
            [(10, 10 * 60 + 10), (20, 10 * 60 + 20)],
            "report={report}"
        );
        let (mono, wall) = log[2];
        if report {
            assert_eq!((mono, wall), (35, 9 * 60 + 35));
            // Once at the start, once per firing, once for the realignment.
            assert_eq!(asked.get(), 1 + 3 + 1);
        } else {
            // Noticed within a minute, then realigned from that moment.
            assert!((35..=36).contains(&mono), "{log:?}");
        }
    }
}

#[test]
fn a_custom_schedule_that_returns_the_past_stops_the_watcher() {
    let sim = ten_oclock(true);
    let mut lp: Loop<Log> = Loop::with_backend(sim.backend());
    let p = Periodic::new(&mut lp, Schedule::custom(|now| now), |lp, log, _| {
        record(lp, log)
    })
    .unwrap();
    assert!(!lp.is_active(p).unwrap());
    assert_eq!(p.next_at(&lp).unwrap(), None);
    let zero = Periodic::new(&mut lp, Schedule::every(Duration::ZERO), |_, _, _| {});
    assert!(matches!(zero, Err(evloop::Error::InvalidSchedule { .. })));
}

/// Within one priority, what expires in one iteration runs in the
/// documented order: timers, periodics, stat watchers, then a kind from
/// outside the crate that expires in the same phase; whichever was
/// created first (here the reverse order).
#[test]
fn timers_then_periodics_then_stat_watchers_then_other_kinds_whatever_the_creation_order() {
    use evloop::{Context, Kind, Phase, Phases, Ready, Watcher};

    /// Queues its watchers once the loop time reaches `at`.
    struct Deadline {
        at: Duration,
        armed: Vec<Watcher<Deadline>>,
    }
    impl Kind for Deadline {
        const NAME: &'static str = "deadline";
        const PHASES: Phases = Phases::EXPIRE;
        fn phase(&mut self, cx: &mut Context<'_>, _: Phase) {
            if cx.now() >= self.at {
                for w in self.armed.drain(..) {
                    cx.queue(w, Ready::EMPTY);
                }
            }
        }
        fn wait(&mut self, cx: &mut Context<'_>) -> Option<Duration> {
            (!self.armed.is_empty()).then(|| self.at.saturating_sub(cx.now()))
        }
    }

    let sim = ten_oclock(true);
    // Changed at 0.5 s, seen by the stat poll at 1 s (no hint).
    sim.path_hints(false);
    sim.write_file(Duration::from_millis(500), "/srv/flag", 1);
    let second = Duration::from_secs(1);
    let mut lp: Loop<Vec<&str>> = Loop::with_backend(sim.backend());
    lp.install(Deadline {
        at: second,
        armed: vec![],
    })
    .unwrap();
    let d = lp
        .watcher::<Deadline, _>(|lp, log, me, _| {
            log.push("other kind");
            lp.remove(me).unwrap();
        })
        .unwrap();
    lp.kind_mut::<Deadline>().unwrap().armed.push(d);
    lp.start(d).unwrap();
    Stat::new(&mut lp, "/srv/flag", second, |lp, log, ev| {
        log.push("stat");
        lp.remove(ev.watcher).unwrap();
    })
    .unwrap();
    Periodic::new(&mut lp, Schedule::At(at(10 * HOUR + 1)), |_, log, _| {
        log.push("periodic")
    })
    .unwrap();
    lp.timer(second, Duration::ZERO, |_, log, _| log.push("timer"))
        .unwrap();
    let mut log = vec![];
    lp.run(evloop::RunMode::Once, &mut log).unwrap();
    assert_eq!(lp.now(), second);
    assert_eq!(log, ["timer", "periodic", "stat", "other kind"]);
}

// ---- on the kernels ---------------------------------------------------------

#[test]
fn on_every_kernel_an_absolute_periodic_is_not_fired_early_by_a_step_back() {
    for &name in evloop::backends::AVAILABLE {
        common::watchdog(
            &format!("periodic on {name}"),
            common::WATCHDOG,
            move || {
                let shift = Arc::new(AtomicI64::new(0));
                let backend = Shifted {
                    inner: evloop::backends::open(name).unwrap(),
                    shift_ns: shift.clone(),
                };
                let mut lp: Loop<Vec<&str>> = Loop::with_backend(backend);
                // The monotonic start is read before the wall clock that
                // `due` counts from: a preemption between the two (under
                // load) would otherwise shorten the span measured below.
                lp.update_now();
                let start = lp.now();
                let due = lp.read_wall_clock() + Duration::from_millis(200);
                Periodic::new(&mut lp, Schedule::At(due), move |lp, log, _| {
                    assert!(lp.read_wall_clock() >= due, "early");
                    log.push("fired");
                })
                .unwrap();
                // 20 ms in, the wall clock goes back 150 ms: the periodic must
                // wait for the wall clock, 150 ms longer than planned.
                let step = shift.clone();
                lp.timer(
                    Duration::from_millis(20),
                    Duration::ZERO,
                    move |_, log, _| {
                        step.store(-150_000_000, Ordering::Relaxed);
                        log.push("stepped back");
                    },
                )
                .unwrap();
                assert_eq!(lp.finish(vec![]), ["stepped back", "fired"], "{name}");
                assert!(lp.now() - start >= Duration::from_millis(350), "{name}");
            },
        );
    }
}

/// Where the backend reports wall-clock steps (a timerfd on Linux for
/// epoll, poll and select), the loop needs no once-a-minute wake-up to look
/// for one: a periodic an hour away lets it block for the hour. Elsewhere
/// (kqueue) the wait is capped at a minute.
#[test]
fn on_every_kernel_the_loop_trusts_reported_steps_with_its_wait() {
    for &name in evloop::backends::AVAILABLE {
        let reported = cfg!(any(target_os = "linux", target_os = "android")) && name != "kqueue";
        let mut lp: Loop<()> = Loop::builder().backend(name).build().unwrap();
        let p = Periodic::new(
            &mut lp,
            Schedule::At(SystemTime::now() + Duration::from_secs(HOUR)),
            |_, _, _| {},
        )
        .unwrap();
        let wait = lp.backend_timeout().unwrap();
        if reported {
            assert!(wait > Duration::from_secs(59 * MIN), "{name}: {wait:?}");
        } else {
            assert!(wait <= Duration::from_secs(MIN), "{name}: {wait:?}");
        }
        lp.remove(p).unwrap();
        // The last periodic gone: a timer alone bounds the wait again.
        let t = lp
            .timer(Duration::from_secs(2 * HOUR), Duration::ZERO, |_, _, _| {})
            .unwrap();
        assert!(
            lp.backend_timeout().unwrap() > Duration::from_secs(HOUR),
            "{name}"
        );
        lp.remove(t).unwrap();
    }
}

/// The end of the wall clock: `u64::MAX` nanoseconds after the epoch (in
/// 2554), which the simulator and a replayed trace's `Wall` records can
/// reach (a kernel's clock cannot).
fn end_of_the_wall_clock() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_nanos(u64::MAX)
}

/// A periodic every 10 s counting its firings, started 5 s before the end
/// of the wall clock: its one tick left is 1.3 s away, the next one
/// beyond the end. A one-minute timer drives 20 iterations, then removes
/// both.
fn at_the_end_of_the_wall_clock(lp: &mut Loop<'static, u32>) {
    let p = Periodic::new(
        lp,
        Schedule::every(Duration::from_secs(10)),
        |_, fired, _| *fired += 1,
    )
    .unwrap();
    lp.timer(
        Duration::from_secs(MIN),
        Duration::from_secs(MIN),
        move |lp, _, me| {
            if lp.now() >= Duration::from_secs(20 * MIN) {
                lp.remove(p).unwrap();
                lp.remove(me).unwrap();
            }
        },
    )
    .unwrap();
}

fn sim_at_the_end(report_steps: bool) -> Sim {
    let sim = Sim::new();
    sim.set_wall_clock(end_of_the_wall_clock() - Duration::from_secs(5));
    sim.report_clock_steps(report_steps);
    sim
}

/// Past its last tick a periodic's next time lies beyond the clock: it is
/// parked there (as a timer is), not due again at once forever.
#[test]
fn a_periodic_at_the_end_of_the_wall_clock_fires_its_last_tick_once_and_does_not_spin() {
    for report in [true, false] {
        let (fired, iterations) = common::watchdog(
            "a periodic at the clock's end",
            common::WATCHDOG,
            move || {
                let sim = sim_at_the_end(report);
                let mut lp: Loop<u32> = Loop::with_backend(sim.backend());
                at_the_end_of_the_wall_clock(&mut lp);
                let mut fired = 0;
                lp.run(evloop::RunMode::Default, &mut fired).unwrap();
                (fired, lp.iteration())
            },
        );
        assert_eq!(fired, 1, "reported steps: {report}");
        assert!(iterations <= 25, "{iterations} iterations");
    }
}

/// The same through a trace: recorded on the simulator, replayed from its
/// `Wall` records, with the same firing and no divergence.
#[test]
fn a_periodic_replayed_at_the_end_of_the_wall_clock_does_not_spin() {
    let (recorded, replayed, summary) =
        common::watchdog("a replay at the clock's end", common::WATCHDOG, || {
            use evloop::replay::{MemoryTrace, Recorder, Replay};
            let trace = MemoryTrace::new();
            let mut recorded = 0;
            {
                let rec = Recorder::new(Box::new(sim_at_the_end(false).backend()), trace.clone())
                    .unwrap();
                let mut lp: Loop<u32> = Loop::with_backend(rec);
                at_the_end_of_the_wall_clock(&mut lp);
                lp.run(evloop::RunMode::Default, &mut recorded).unwrap();
            }
            let replay = Replay::from_bytes(trace.bytes()).unwrap();
            let mut replayed = 0;
            {
                let mut lp: Loop<u32> = Loop::with_backend(replay.backend());
                at_the_end_of_the_wall_clock(&mut lp);
                lp.run(evloop::RunMode::Default, &mut replayed).unwrap();
            }
            (recorded, replayed, replay.finish().unwrap())
        });
    assert_eq!((recorded, replayed), (1, 1));
    assert!(summary.complete && summary.polls <= 25, "{summary:?}");
}
