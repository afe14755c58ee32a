//! The doc examples of the timer, once, periodic and stat watchers, on
//! every backend (the simulator's wall clock set where the example sets
//! it; a kernel's real one).

use std::io::Write;
use std::path::PathBuf;
use std::rc::Rc;
use std::time::{Duration, SystemTime};

use crate::common::{ms, RunTo, World};
use evloop::{Interest, Loop, Once, OnceEvent, Periodic, Schedule, Sim, Stat};

tests_on!(
    every_backend,
    crate::common::backends(),
    [
        loop_set_repeat_example,
        loop_once_example,
        once_example,
        loop_periodic_example,
        schedule_every_example,
        loop_now_wall_example,
        loop_stat_example,
        stat_event_example,
    ]
);

fn since_epoch(t: SystemTime) -> Duration {
    t.duration_since(SystemTime::UNIX_EPOCH).unwrap()
}

/// Runs a periodic watcher of `schedule` for `ticks` ticks (it stops
/// itself then) until the run ends; returns the wall time of each tick.
fn wall_ticks<'s>(
    lp: &mut Loop<'s, Vec<Duration>>,
    schedule: Schedule,
    ticks: usize,
) -> Vec<Duration> {
    Periodic::new(lp, schedule, move |lp, log, me| {
        log.push(since_epoch(lp.read_wall_clock()));
        if log.len() == ticks {
            lp.stop(me).unwrap();
        }
    })
    .unwrap();
    lp.finish(vec![])
}

/// Asserts that tick `k` came at or after its slot, `first + k * interval`
/// nanoseconds after the epoch.
fn assert_on_or_after_slots(log: &[Duration], first: u128, interval: u128) {
    for (k, at) in log.iter().enumerate() {
        let slot = first + k as u128 * interval;
        assert!(
            at.as_nanos() >= slot,
            "tick {k} at {at:?}, before {slot} ns"
        );
    }
}

/// `Timer::set_repeat`: a 10 ms repeating timer set to 50 ms at its second
/// tick; the tick after the change was already due 10 ms on.
fn loop_set_repeat_example(w: &World) {
    let mut lp: Loop<Vec<Duration>> = w.new_loop();
    lp.timer(ms(10), ms(10), |lp, log, me| {
        log.push(lp.now());
        if log.len() == 2 {
            me.set_repeat(lp, ms(50)).unwrap();
        }
        if log.len() == 4 {
            lp.stop(me).unwrap();
        }
    })
    .unwrap();
    let log = lp.finish(vec![]);
    assert_eq!(log.len(), 4);
    for (at, least) in log.iter().zip([10, 20, 30, 80]) {
        assert!(*at >= ms(least), "{log:?}");
    }
    if w.sim().is_some() {
        assert_eq!(log, [ms(10), ms(20), ms(30), ms(80)]);
    }
}

/// `Once::new`: a quiet socket (its peer stays open and silent) times
/// out at 20 ms; the source comes back and nothing is left behind.
fn loop_once_example(w: &World) {
    let (quiet, _peer) = w.pair();
    let mut lp: Loop<Vec<String>> = w.new_loop();
    Once::new(
        &mut lp,
        Some((quiet, Interest::READABLE)),
        Some(ms(20)),
        |lp, log, what| match what {
            OnceEvent::Ready { ready, .. } => log.push(format!("ready {ready}")),
            OnceEvent::TimedOut { source } => {
                assert!(lp.now() >= ms(20), "timed out at {:?}", lp.now());
                log.push(format!("timed out, source back: {}", source.is_some()))
            }
        },
    )
    .unwrap();
    assert_eq!(lp.finish(vec![]), ["timed out, source back: true"]);
    assert_eq!(lp.active_count(), 0);
}

/// `Once`: a once cancelled by `remove` reports nothing, and the
/// run ends at once (its one-second timeout went with it).
fn once_example(w: &World) {
    let (quiet, _peer) = w.pair();
    let mut lp: Loop<u32> = w.new_loop();
    let once = Once::new(
        &mut lp,
        Some((quiet, Interest::READABLE)), // An hour: a run that waited for it would be stopped by
        // the watchdog, however fast or slow the machine is.
        Some(Duration::from_secs(3600)),
        |_, n, _| *n += 1,
    )
    .unwrap();
    assert!(lp.is_active(once).unwrap());
    lp.remove(once).unwrap();
    let n = lp.finish(0);
    assert_eq!((n, lp.active_count()), (0, 0));
    assert!(lp.is_active(once).is_err());
}

/// `Periodic::new`: `Schedule::every_from` (there every 10 minutes at 5
/// past, here every 20 ms at 5 ms past, on the real wall clock) fires
/// three times, each at or after its slot: the first slot at or after the
/// start, then one interval after the other (a late tick fires once, so
/// the slots never repeat).
fn loop_periodic_example(w: &World) {
    let (offset, interval) = (ms(5), ms(20));
    if let Some(sim) = &w.sim {
        sim.set_wall_clock(SystemTime::UNIX_EPOCH + Duration::from_secs(3600));
    }
    let mut lp: Loop<Vec<Duration>> = w.new_loop();
    let start = since_epoch(lp.read_wall_clock()).as_nanos();
    let (o, i) = (offset.as_nanos(), interval.as_nanos());
    let first = o + (start - o).div_ceil(i) * i;
    let log = wall_ticks(&mut lp, Schedule::every_from(offset, interval), 3);
    assert_eq!(log.len(), 3);
    assert_on_or_after_slots(&log, first, i);
    if w.sim().is_some() {
        let at = |ms: u64| Duration::from_millis(3_600_000 + ms);
        assert_eq!(log, [at(5), at(25), at(45)]);
    }
}

/// `Schedule::every`: aligned to multiples of the interval on the wall
/// clock, not counted from the start (there every minute from 45 s past
/// one, so first after 15 s; here every 20 ms on the real wall clock, on
/// the simulator from 5 ms past a multiple, so first after 15 ms):
/// each tick at or after its multiple, the first one the first multiple
/// at or after the start.
fn schedule_every_example(w: &World) {
    let interval = ms(20);
    if let Some(sim) = &w.sim {
        let start = Duration::from_secs(12 * 3600 + 45) + ms(5);
        sim.set_wall_clock(SystemTime::UNIX_EPOCH + start);
    }
    let mut lp: Loop<Vec<Duration>> = w.new_loop();
    let start = since_epoch(lp.read_wall_clock()).as_nanos();
    let i = interval.as_nanos();
    let first = start.div_ceil(i) * i;
    let log = wall_ticks(&mut lp, Schedule::every(interval), 2);
    assert_on_or_after_slots(&log, first, i);
    if w.sim().is_some() {
        let at = |ms: u64| Duration::from_millis((12 * 3600 + 45) * 1000 + ms);
        assert_eq!(log, [at(20), at(40)]);
    }
}

/// `Loop::now_wall`: a periodic's callback sees a wall time at or after
/// its slot (there the minute after 100 s on the simulator's wall clock,
/// here the next 20 ms slot of the real one), and the watcher stops.
fn loop_now_wall_example(w: &World) {
    let mut lp: Loop<Vec<Duration>> = w.new_loop();
    let interval = ms(20);
    let start = since_epoch(lp.read_wall_clock()).as_nanos();
    let slot = start.div_ceil(interval.as_nanos()) * interval.as_nanos();
    Periodic::new(&mut lp, Schedule::every(interval), |lp, log, me| {
        log.push(since_epoch(lp.now_wall()));
        lp.stop(me).unwrap();
    })
    .unwrap();
    let log = lp.finish(vec![]);
    assert_eq!(log.len(), 1);
    assert!(log[0].as_nanos() >= slot, "{log:?}, slot {slot}");
}

/// A file for a stat mirror: a unique name under the temp directory on a
/// kernel (removed at the drop), the same name in the simulator's files.
struct Files {
    sim: Option<Sim>,
    path: PathBuf,
}

impl Files {
    fn new(w: &World, test: &str) -> Files {
        let file = format!(
            "evloop-doc-mirror-{test}-{}-{}",
            std::process::id(),
            w.backend
        );
        let path = std::env::temp_dir().join(file);
        let _ = std::fs::remove_file(&path);
        Files {
            sim: w.sim.clone(),
            path,
        }
    }

    /// Makes the file `size` bytes long, creating it if need be: bytes
    /// appended in one write (never truncated, so no watcher can see it
    /// shorter on the way); on the simulator, now.
    fn grow(&self, size: u64) {
        match &self.sim {
            Some(sim) => sim.write_file(sim.now(), &self.path, size),
            None => {
                let mut f = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&self.path)
                    .unwrap();
                let have = f.metadata().unwrap().len();
                f.write_all(&vec![b'x'; (size - have) as usize]).unwrap();
            }
        }
    }

    fn remove(&self) {
        match &self.sim {
            Some(sim) => sim.remove_file(sim.now(), &self.path),
            None => std::fs::remove_file(&self.path).unwrap(),
        }
    }
}

impl Drop for Files {
    fn drop(&mut self) {
        if self.sim.is_none() {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// `Stat::new`: a 10-byte file, watched from 1 ms on (1 s interval), grows
/// to 20 bytes at 50 ms (500 ms there) and is removed at 90 ms (900 ms
/// there) once the growth was seen, all from the loop's own timers; the
/// watcher sees both changes, no earlier than they were made.
fn loop_stat_example(w: &World) {
    let files = Rc::new(Files::new(w, "stat"));
    files.grow(10);
    let mut lp: Loop<Vec<String>> = w.new_loop();
    let f = files.clone();
    lp.timer(ms(1), Duration::ZERO, move |lp, _, _| {
        let g = f.clone();
        Stat::new(lp, &f.path, Duration::from_secs(1), move |lp, log, ev| {
            let (from, to, at) = (ev.previous.size, ev.current.size, lp.now());
            log.push(format!("{from} -> {to}"));
            if ev.current.exists {
                assert!(at >= ms(50), "grown at {at:?}");
                let g = g.clone();
                let after = ms(90).saturating_sub(at);
                lp.timer(after, Duration::ZERO, move |_, _, _| g.remove())
                    .unwrap();
            } else {
                assert!(at >= ms(90), "removed at {at:?}");
                lp.remove(ev.watcher).unwrap();
            }
        })
        .unwrap();
    })
    .unwrap();
    let f = files.clone();
    lp.timer(ms(50), Duration::ZERO, move |_, _, _| f.grow(20))
        .unwrap();
    assert_eq!(lp.finish(vec![]), ["10 -> 20", "20 -> 0"]);
}

/// `StatEvent`: a file created at 3 ms is seen appear (the watched path,
/// `previous` missing, `current` there); the watcher then stops itself.
fn stat_event_example(w: &World) {
    let files = Rc::new(Files::new(w, "stat-event"));
    let mut lp: Loop<Vec<(bool, bool)>> = w.new_loop();
    let path = files.path.clone();
    Stat::new(
        &mut lp,
        &files.path,
        Duration::from_secs(1),
        move |lp, log, ev| {
            assert!(lp.now() >= ms(3), "seen at {:?}", lp.now());
            assert_eq!(ev.path, path);
            log.push((ev.previous.exists, ev.current.exists));
            lp.stop(ev.watcher).unwrap();
        },
    )
    .unwrap();
    let f = files.clone();
    lp.timer(ms(3), Duration::ZERO, move |_, _, _| f.grow(12))
        .unwrap();
    assert_eq!(lp.finish(vec![]), [(false, true)]);
}
