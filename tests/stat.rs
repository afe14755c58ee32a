//! Stat watchers through a file's life: missing, created, modified twice
//! within one second (same size: only the modification time's
//! nanoseconds change), saved by rename, deleted. Each change is made only
//! after the previous one was seen, so the sequence is deterministic; on
//! the simulator with and without change hints (exact times), and on every
//! OS backend with a real file under a watchdog.

mod common;

use std::path::PathBuf;
use std::time::Duration;

use common::{on_every_backend, World};
use evloop::{FileStat, Loop, RunMode, RunOutcome, Sim, StatEvent};

/// Makes the file changes, on the simulator or for real.
enum Fs {
    Sim(Sim),
    Real,
}

impl Fs {
    fn write(&self, lp: &Loop<'_, Log>, path: &PathBuf, bytes: &[u8]) {
        match self {
            Fs::Sim(sim) => sim.write_file(lp.now(), path, bytes.len() as u64),
            Fs::Real => std::fs::write(path, bytes).unwrap(),
        }
    }
    fn rename(&self, lp: &Loop<'_, Log>, from: &PathBuf, to: &PathBuf) {
        match self {
            Fs::Sim(sim) => sim.rename_file(lp.now(), from, to),
            Fs::Real => std::fs::rename(from, to).unwrap(),
        }
    }
    fn remove(&self, lp: &Loop<'_, Log>, path: &PathBuf) {
        match self {
            Fs::Sim(sim) => sim.remove_file(lp.now(), path),
            Fs::Real => std::fs::remove_file(path).unwrap(),
        }
    }
}

type Log = Vec<String>;

fn describe(ev: &StatEvent) -> String {
    let (p, c) = (ev.previous, ev.current);
    match (p.exists, c.exists) {
        (false, true) => format!("created, {} bytes", c.size),
        (true, false) => "deleted".into(),
        (true, true) if p.inode != c.inode => format!("replaced, {} bytes", c.size),
        (true, true) if p.size == c.size && p.modified != c.modified => "touched, same size".into(),
        _ => format!("changed: {p:?} -> {c:?}"),
    }
}

/// The scenario: each step made 10 ms after the previous change was seen.
fn life_of_a_file(lp: &mut Loop<'static, Log>, fs: Fs, dir: PathBuf, interval: Duration) {
    let path = dir.join("app.conf");
    let tmp = dir.join("app.conf.new");
    let fs = std::rc::Rc::new(fs);
    let start = {
        let (fs, path) = (fs.clone(), path.clone());
        move |lp: &mut Loop<'static, Log>, _: &mut Log, _| fs.write(lp, &path, b"aaaa")
    };
    lp.timer(Duration::from_millis(10), Duration::ZERO, start)
        .unwrap();
    let mut step = 0;
    lp.stat(path.clone(), interval, move |lp, log, ev| {
        log.push(describe(&ev));
        step += 1;
        let (fs, path, tmp) = (fs.clone(), path.clone(), tmp.clone());
        let next = move |lp: &mut Loop<'static, Log>, _: &mut Log, _| match step {
            1 | 2 => fs.write(lp, &path, b"bbbb"),
            3 => {
                fs.write(lp, &tmp, b"new content");
                fs.rename(lp, &tmp, &path);
            }
            4 => fs.remove(lp, &path),
            _ => {}
        };
        if step == 5 {
            lp.remove(ev.watcher).unwrap();
        } else {
            lp.timer(Duration::from_millis(10), Duration::ZERO, next)
                .unwrap();
        }
    })
    .unwrap();
}

const EXPECTED: [&str; 5] = [
    "created, 4 bytes",
    "touched, same size",
    "touched, same size",
    "replaced, 11 bytes",
    "deleted",
];

#[test]
fn with_hints_the_simulator_sees_each_change_at_once() {
    let sim = Sim::new();
    let mut lp: Loop<Log> = Loop::with_backend(sim.backend());
    life_of_a_file(
        &mut lp,
        Fs::Sim(sim.clone()),
        "/srv".into(),
        Duration::from_secs(5),
    );
    let mut log = vec![];
    assert_eq!(
        lp.run(RunMode::Default, &mut log).unwrap(),
        RunOutcome::NoActiveWatchers
    );
    assert_eq!(log, EXPECTED);
    // Each seen when made: 10 ms apart, well inside one second, while the
    // polling interval is 5 s.
    assert_eq!(lp.now(), Duration::from_millis(50));
}

#[test]
fn without_hints_the_simulator_polls_and_still_sees_each_change() {
    let sim = Sim::new();
    sim.path_hints(false);
    let mut lp: Loop<Log> = Loop::with_backend(sim.backend());
    life_of_a_file(
        &mut lp,
        Fs::Sim(sim.clone()),
        "/srv".into(),
        Duration::from_millis(100),
    );
    let mut log = vec![];
    lp.run(RunMode::Default, &mut log).unwrap();
    assert_eq!(log, EXPECTED);
    // Each change waits for the next look, 100 ms after the previous one.
    assert_eq!(lp.now(), Duration::from_millis(500));
}

#[test]
fn on_every_kernel_backend_a_real_file_goes_through_the_same_life() {
    on_every_backend("stat a real file", |name| {
        if name == "sim" {
            return; // above
        }
        let dir = std::env::temp_dir().join(format!(
            "evloop-stat-{}-{name}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let mut lp: Loop<Log> = World::new(name).new_loop();
        life_of_a_file(&mut lp, Fs::Real, dir.clone(), Duration::from_millis(100));
        let mut log = vec![];
        lp.run(RunMode::Default, &mut log).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(log, EXPECTED, "{name}");
    });
}

#[test]
fn the_interval_is_clamped_and_a_missing_path_is_a_state() {
    let sim = Sim::new();
    sim.path_hints(false);
    let mut lp: Loop<Log> = Loop::with_backend(sim.backend());
    sim.write_file(Duration::from_millis(30), "/x", 1);
    // Asked for 1 ms: polled every 100 ms (the minimum).
    let s = lp
        .stat("/x", Duration::from_millis(1), |lp, log, ev| {
            log.push(format!("{} at {:?}", describe(&ev), lp.now()));
            lp.remove(ev.watcher).unwrap();
        })
        .unwrap();
    assert_eq!(lp.file_stat(s).unwrap(), FileStat::MISSING);
    let mut log = vec![];
    lp.run(RunMode::Default, &mut log).unwrap();
    assert_eq!(log, ["created, 1 bytes at 100ms"]);
}
