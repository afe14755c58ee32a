//! Stat watchers through a file's life: missing, created, modified twice
//! within one second (same size: only the modification time's
//! nanoseconds change), saved by rename, deleted. Each change is made only
//! after the previous one was seen, so the sequence is deterministic; on
//! the simulator with and without change hints (exact times), and on every
//! OS backend with a real file under a watchdog.

mod common;

use std::path::PathBuf;
use std::time::Duration;

use common::{on_every_backend, on_every_world, RunTo, TempDir, World};
use evloop::{FileStat, Loop, RunMode, RunOutcome, Sim, Stat, StatEvent};

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
    Stat::new(lp, path.clone(), interval, move |lp, log, ev| {
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
    assert_eq!(lp.finish(vec![]), EXPECTED);
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
    assert_eq!(lp.finish(vec![]), EXPECTED);
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
        let log = lp.finish(vec![]);
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
    let s = Stat::new(&mut lp, "/x", Duration::from_millis(1), |lp, log, ev| {
        log.push(format!("{} at {:?}", describe(&ev), lp.now()));
        lp.remove(ev.watcher).unwrap();
    })
    .unwrap();
    assert_eq!(s.file_stat(&lp).unwrap(), FileStat::MISSING);
    assert_eq!(lp.finish(vec![]), ["created, 1 bytes at 100ms"]);
}

// ---- change hints on the kernels ---------------------------------------------

/// An interval no test waits for: a change seen within [`PROMPTLY`] was
/// seen through the backend's hint, not by polling.
const LONG_INTERVAL: Duration = Duration::from_secs(60);
/// The watchdog of the hint tests: each change is made 10 ms after the
/// previous one was seen.
const PROMPTLY: Duration = Duration::from_secs(2);

/// The OS backends that hint at path changes on this host (inotify on
/// Linux, `EVFILT_VNODE` on kqueue; poll and select elsewhere poll only).
fn hinting_backends() -> Vec<&'static str> {
    evloop::backends::AVAILABLE
        .iter()
        .copied()
        .filter(|&name| cfg!(any(target_os = "linux", target_os = "android")) || name == "kqueue")
        .collect()
}

/// Runs `scenario(backend)` on every hinting backend under a watchdog of
/// [`PROMPTLY`].
fn promptly_on_every_hinting_backend(what: &str, scenario: fn(&'static str)) {
    for name in hinting_backends() {
        common::watchdog(&format!("{what} on {name}"), PROMPTLY, move || {
            scenario(name)
        });
    }
}

/// What changed between two looks, for the hint scenarios.
fn what_changed(ev: &StatEvent) -> String {
    let (p, c) = (ev.previous, ev.current);
    match (p.exists, c.exists) {
        (false, true) => "created".into(),
        (true, false) => "deleted".into(),
        (true, true) if p.inode != c.inode => "replaced".into(),
        (true, true) if p.mode != c.mode => format!("mode {:o}", c.mode & 0o777),
        (true, true) if p.size != c.size => format!("{} bytes", c.size),
        _ => format!("changed: {p:?} -> {c:?}"),
    }
}

fn chmod(path: &std::path::Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

#[test]
fn on_every_kernel_backend_hints_make_each_change_seen_at_once() {
    promptly_on_every_hinting_backend("hinted life", |name| {
        let dir = TempDir::new("hinted", name);
        let path = dir.0.join("app.conf");
        let tmp = dir.0.join("app.conf.new");
        std::fs::write(&path, "one").unwrap();
        let mut lp: Loop<Log> = World::new(name).new_loop();
        let mut step = 0;
        let change = move |step: usize, path: &PathBuf, tmp: &PathBuf| match step {
            0 => {
                use std::io::Write;
                let mut f = std::fs::OpenOptions::new().append(true).open(path).unwrap();
                f.write_all(b" two").unwrap();
            }
            1 => chmod(path, 0o600),
            2 => {
                std::fs::write(tmp, "replacement").unwrap();
                std::fs::rename(tmp, path).unwrap();
            }
            3 => std::fs::remove_file(path).unwrap(),
            4 => std::fs::write(path, "again").unwrap(),
            5 => chmod(path, 0o640),
            _ => unreachable!(),
        };
        let (p, t) = (path.clone(), tmp.clone());
        lp.timer(Duration::from_millis(10), Duration::ZERO, move |_, _, _| {
            change(0, &p, &t)
        })
        .unwrap();
        Stat::new(&mut lp, path.clone(), LONG_INTERVAL, move |lp, log, ev| {
            log.push(what_changed(&ev));
            step += 1;
            if step == 6 {
                lp.remove(ev.watcher).unwrap();
                return;
            }
            let (p, t) = (path.clone(), tmp.clone());
            lp.timer(Duration::from_millis(10), Duration::ZERO, move |_, _, _| {
                change(step, &p, &t)
            })
            .unwrap();
        })
        .unwrap();
        let log = lp.finish(vec![]);
        assert_eq!(
            log,
            ["7 bytes", "mode 600", "replaced", "deleted", "created", "mode 640"],
            "{name}"
        );
    });
}

#[test]
fn on_every_kernel_backend_a_siblings_changes_do_not_call_the_watcher() {
    promptly_on_every_hinting_backend("siblings", |name| {
        let dir = TempDir::new("siblings", name);
        let (mine, sibling) = (dir.0.join("mine"), dir.0.join("sibling"));
        std::fs::write(&mine, "mine").unwrap();
        std::fs::write(&sibling, "s").unwrap();
        let mut lp: Loop<Log> = World::new(name).new_loop();
        let d = dir.0.clone();
        lp.timer(
            Duration::from_millis(10),
            Duration::ZERO,
            move |_, log, _| {
                std::fs::write(d.join("sibling"), "changed").unwrap();
                chmod(&d.join("sibling"), 0o600);
                std::fs::write(d.join("new"), "x").unwrap();
                std::fs::rename(d.join("new"), d.join("renamed")).unwrap();
                std::fs::remove_file(d.join("renamed")).unwrap();
                log.push("siblings changed".into());
            },
        )
        .unwrap();
        let m = mine.clone();
        lp.timer(
            Duration::from_millis(200),
            Duration::ZERO,
            move |_, log, _| {
                std::fs::write(&m, "mine, changed").unwrap();
                log.push("mine changed".into());
            },
        )
        .unwrap();
        Stat::new(&mut lp, mine, LONG_INTERVAL, |lp, log, ev| {
            log.push(format!("watcher: {}", what_changed(&ev)));
            lp.remove(ev.watcher).unwrap();
        })
        .unwrap();
        let log = lp.finish(vec![]);
        assert_eq!(
            log,
            ["siblings changed", "mine changed", "watcher: 13 bytes"],
            "{name}"
        );
    });
}

#[test]
fn on_every_kernel_backend_a_hundred_watchers_in_one_directory() {
    promptly_on_every_hinting_backend("hundred", |name| {
        let dir = TempDir::new("hundred", name);
        let paths: Vec<PathBuf> = (0..100).map(|i| dir.0.join(format!("f{i}"))).collect();
        for p in &paths {
            std::fs::write(p, "0").unwrap();
        }
        let mut lp: Loop<Log> = World::new(name).new_loop();
        for (i, p) in paths.iter().enumerate() {
            Stat::new(&mut lp, p.clone(), LONG_INTERVAL, move |lp, log, ev| {
                log.push(format!("{i}: {}", what_changed(&ev)));
                lp.remove(ev.watcher).unwrap();
            })
            .unwrap();
        }
        lp.timer(Duration::from_millis(10), Duration::ZERO, move |_, _, _| {
            for (i, p) in paths.iter().enumerate() {
                std::fs::write(p, "x".repeat(i + 2)).unwrap();
            }
        })
        .unwrap();
        let mut log = lp.finish(vec![]);
        log.sort_by_key(|l| l.split(':').next().unwrap().parse::<usize>().unwrap());
        let want: Vec<String> = (0..100).map(|i| format!("{i}: {} bytes", i + 2)).collect();
        assert_eq!(log, want, "{name}");
    });
}

/// An interval of zero means the default, 5 s (libev's `ev_stat` default):
/// without hints a change is seen at the first poll 5 s on, not before.
#[test]
fn an_interval_of_zero_polls_every_five_seconds() {
    let sim = Sim::new();
    sim.path_hints(false);
    let mut lp: Loop<Log> = Loop::with_backend(sim.backend());
    sim.write_file(Duration::from_millis(30), "/x", 1);
    Stat::new(&mut lp, "/x", Duration::ZERO, |lp, log, ev| {
        log.push(format!("{} at {:?}", describe(&ev), lp.now()));
        lp.remove(ev.watcher).unwrap();
    })
    .unwrap();
    assert_eq!(lp.finish(vec![]), ["created, 1 bytes at 5s"]);
}

/// Each event names the watcher's path (`StatEvent::path`), as given to
/// `Stat::new`: one callback, a plain function that captures nothing,
/// serves two watchers and tells their files apart by it, reading it
/// after removing its own watcher.
#[test]
fn on_every_backend_the_event_carries_the_watched_path() {
    fn on_change(lp: &mut Loop<'_, Log>, log: &mut Log, ev: StatEvent<'_>) {
        lp.remove(ev.watcher).unwrap();
        let name = ev.path.file_name().unwrap().to_string_lossy();
        log.push(format!("{name}: {} bytes", ev.current.size));
    }
    on_every_world("the event's path", |w| {
        let dir = TempDir::new("event-path", w.backend);
        let (a, b) = (dir.0.join("a.conf"), dir.0.join("b.conf"));
        let mut lp: Loop<Log> = w.new_loop();
        let wa = Stat::new(&mut lp, &a, Duration::from_millis(100), on_change).unwrap();
        Stat::new(&mut lp, &b, Duration::from_millis(100), on_change).unwrap();
        assert!(lp.is_active(wa).unwrap());
        // b first, then a, each once the previous change was seen.
        let sim = w.sim.clone();
        let write = move |lp: &Loop<'_, Log>, path: &PathBuf, bytes: &[u8]| match &sim {
            Some(sim) => sim.write_file(lp.now(), path, bytes.len() as u64),
            None => std::fs::write(path, bytes).unwrap(),
        };
        let (first, second) = (write.clone(), write);
        let bb = b.clone();
        lp.timer(
            Duration::from_millis(10),
            Duration::ZERO,
            move |lp, _, _| first(lp, &bb, b"bb"),
        )
        .unwrap();
        let mut log = vec![];
        while log.is_empty() {
            lp.run(RunMode::Once, &mut log).unwrap();
        }
        second(&lp, &a, b"aaa");
        lp.run_to_end(&mut log);
        assert_eq!(log, ["b.conf: 2 bytes", "a.conf: 3 bytes"]);
    });
}

/// A polling interval no test outlives: a change seen at all was seen
/// through a hint.
const AN_HOUR: Duration = Duration::from_secs(3600);

/// The directories of a watched path removed and made again, a level at a
/// time and all at once: each time the path's file comes back, the
/// watcher hears of it, and of its later changes, through hints alone
/// (its polling interval is an hour). The backend watches the nearest
/// directory that still exists for the missing one's name.
#[test]
fn on_every_kernel_backend_a_removed_and_recreated_directory_is_hinted_at_again() {
    for name in hinting_backends() {
        common::watchdog(
            &format!("recreated directory on {name}"),
            common::WATCHDOG,
            move || recreated_directory(name),
        );
    }
}

fn recreated_directory(name: &'static str) {
    let root = TempDir::new("recreated", name);
    let path = root.0.join("a/b/f");
    std::fs::create_dir_all(root.0.join("a/b")).unwrap();
    std::fs::write(&path, "x").unwrap();
    // Each step: what it does, and whether the watcher is to see a change
    // (the next step follows that change, or else 10 ms after this one).
    type Step = (fn(&std::path::Path), bool);
    let steps: Vec<Step> = vec![
        (|r| std::fs::remove_dir_all(r.join("a")).unwrap(), true),
        (|r| std::fs::create_dir(r.join("a")).unwrap(), false),
        (|r| std::fs::create_dir(r.join("a/b")).unwrap(), false),
        (|r| std::fs::write(r.join("a/b/f"), "one").unwrap(), true),
        (
            |r| {
                use std::io::Write;
                let mut f = std::fs::OpenOptions::new()
                    .append(true)
                    .open(r.join("a/b/f"))
                    .unwrap();
                f.write_all(b" two").unwrap();
            },
            true,
        ),
        (|r| std::fs::remove_dir_all(r.join("a/b")).unwrap(), true),
        (
            |r| {
                std::fs::create_dir_all(r.join("a/b")).unwrap();
                std::fs::write(r.join("a/b/f"), "three").unwrap();
            },
            true,
        ),
        (|r| std::fs::write(r.join("a/b/f"), "four!!").unwrap(), true),
    ];
    let steps = std::rc::Rc::new(steps);
    let root_path = root.0.clone();
    /// Runs step `i` in 10 ms, and the one after it too if it is not to
    /// be seen.
    fn schedule(
        lp: &mut Loop<'static, Log>,
        steps: std::rc::Rc<Vec<Step>>,
        root: PathBuf,
        i: usize,
    ) {
        if i == steps.len() {
            return;
        }
        lp.timer(
            Duration::from_millis(10),
            Duration::ZERO,
            move |lp, log, _| {
                let (act, seen) = steps[i];
                act(&root);
                log.push(format!("step {i}"));
                if !seen {
                    schedule(lp, steps.clone(), root.clone(), i + 1);
                }
            },
        )
        .unwrap();
    }
    let mut lp: Loop<Log> = World::new(name).new_loop();
    schedule(&mut lp, steps.clone(), root_path.clone(), 0);
    Stat::new(&mut lp, path, AN_HOUR, move |lp, log, ev| {
        log.push(what_changed(&ev));
        // The step that made this change, and the next one to make.
        let last = log
            .iter()
            .rev()
            .find_map(|l| l.strip_prefix("step ").map(|n| n.parse::<usize>().unwrap()))
            .unwrap();
        if last + 1 == steps.len() {
            lp.remove(ev.watcher).unwrap();
        } else {
            schedule(lp, steps.clone(), root_path.clone(), last + 1);
        }
    })
    .unwrap();
    let mut log = vec![];
    assert_eq!(
        lp.run(RunMode::Default, &mut log).unwrap(),
        RunOutcome::NoActiveWatchers,
        "{name}: {log:?}"
    );
    assert_eq!(
        log,
        [
            "step 0", "deleted", "step 1", "step 2", "step 3", "created", "step 4", "7 bytes",
            "step 5", "deleted", "step 6", "created", "step 7", "6 bytes"
        ],
        "{name}"
    );
}
