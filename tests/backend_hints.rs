//! Wall-clock step reports and path change hints at the backend level, on
//! every OS backend of the host (`evloop::backends::AVAILABLE`, kqueue
//! included with `--features emulated-kqueue`): `watch_clock_steps`,
//! `watch_path`, `take_notices`, `reinit` after a fork.
//!
//! What each backend is expected to provide is in [`expect`]. A clock step
//! needs the machine's clock set, which a test must not do unasked:
//! [`a_set_of_the_clock_is_reported`] sets it (to the time it reads, a
//! step of microseconds) only with `EVLOOP_TEST_SET_CLOCK=1` and the
//! privilege (`CAP_SYS_TIME`); otherwise it says so and passes. `.ci/run`
//! sets `EVLOOP_TEST_SET_CLOCK=try`: run it where the clock may be set,
//! skip loudly where `clock_settime` says `EPERM`. The fork
//! tests take `common::FORK` for writing, so that no other test is inside a
//! backend when they fork (or when the clock is set); every other test
//! holds it for reading. Anything that waits runs under a watchdog.
#![cfg(unix)]

mod common;

use std::collections::BTreeSet;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{
    alone, gather, may_set_clock, on_each_kernel, open, set_clock_to_now, watchdog, Served, TempDir,
};
use evloop::backends;

/// How long a scenario may take.
const LIMIT: Duration = Duration::from_secs(20);
/// How long a hint may take to arrive.
const PROMPT: Duration = Duration::from_secs(2);

/// What a backend of this host provides.
struct Expect {
    clock_steps: bool,
}

fn expect(name: &str) -> Expect {
    let linux = cfg!(any(target_os = "linux", target_os = "android"));
    Expect {
        // A timerfd on Linux for the backends that embed the shared
        // notifier; kqueue has no such filter (over the emulation too: it
        // runs the kqueue backend's code).
        clock_steps: linux && name != "kqueue",
    }
}

/// Whether `name` hints at path changes on this host: inotify on Linux,
/// `EVFILT_VNODE` on kqueue; poll and select elsewhere have none.
fn hints(name: &str) -> bool {
    cfg!(any(target_os = "linux", target_os = "android")) || name == "kqueue"
}

/// The tokens hinted at within `limit` (everything noticed, for `limit`).
fn hinted_for(b: &mut Served, limit: Duration) -> BTreeSet<u64> {
    gather(b, limit, |_| false).paths.into_iter().collect()
}

/// Waits for a hint at `token`, failing after [`PROMPT`].
fn expect_hint(b: &mut Served, token: u64, what: &str) {
    let t = Instant::now();
    let got = gather(b, PROMPT, |n| n.paths.contains(&token));
    assert!(
        got.paths.contains(&token),
        "{}: no hint for {what} within {:?} (got {:?})",
        b.name(),
        t.elapsed(),
        got.paths
    );
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

// ---- clock steps -------------------------------------------------------------

#[test]
fn clock_steps_are_watched_where_the_kernel_reports_them_and_stay_quiet() {
    on_each_kernel("clock quiet", |name| {
        let mut b = open(name);
        assert_eq!(b.watch_clock_steps(), expect(name).clock_steps, "{name}");
        assert_eq!(
            b.watch_clock_steps(),
            expect(name).clock_steps,
            "{name}: twice"
        );
        // Several polls: each blocks for its whole timeout (the timer is
        // not readable) and reports no step.
        for _ in 0..5 {
            let t = Instant::now();
            let got = gather(&mut b, Duration::from_millis(40), |_| false);
            let took = t.elapsed();
            assert!(!got.clock_stepped, "{name}: a spurious step");
            assert!(got.is_empty(), "{name}: {got:?}");
            assert!(
                took >= Duration::from_millis(35),
                "{name}: returned after {took:?}"
            );
        }
        b.unwatch_clock_steps();
        assert!(!gather(&mut b, Duration::from_millis(20), |_| false).clock_stepped);
        // Watched again after an unwatch: a new timer, as quiet.
        assert_eq!(b.watch_clock_steps(), expect(name).clock_steps, "{name}");
        assert!(gather(&mut b, Duration::from_millis(40), |_| false).is_empty());
        b.unwatch_clock_steps();
        // Unwatching what is not watched is harmless.
        b.unwatch_clock_steps();
    });
}

/// The real thing, when asked for: `EVLOOP_TEST_SET_CLOCK=1` (it sets the
/// machine's clock, to the time it reads). Every backend that watches
/// steps reports the set once, re-arms and reports the next one; in a
/// forked child that called `reinit`, the child and the parent each hear
/// it (a timer shared with the parent would tell only one of them).
#[test]
fn a_set_of_the_clock_is_reported() {
    if !may_set_clock("clock steps") {
        return;
    }
    let _alone = alone();
    for &name in backends::AVAILABLE {
        watchdog(&format!("clock set on {name}"), LIMIT, move || {
            let mut b = open(name);
            if !b.watch_clock_steps() {
                assert!(!expect(name).clock_steps, "{name}");
                return;
            }
            for round in 0..2 {
                set_clock_to_now().expect("clock_settime (CAP_SYS_TIME?)");
                let got = gather(&mut b, PROMPT, |n| n.clock_stepped);
                assert!(
                    got.clock_stepped,
                    "{name}: round {round}: the set was not reported"
                );
                let again = gather(&mut b, Duration::from_millis(50), |_| false);
                assert!(!again.clock_stepped, "{name}: reported twice");
            }
            // A forked child with its own timer.
            let (mut ready_r, mut ready_w) = std::os::unix::net::UnixStream::pair().unwrap();
            // SAFETY: the child only runs the backend's code and leaves
            // with `_exit`.
            let pid = unsafe { libc::fork() };
            assert!(pid >= 0);
            if pid == 0 {
                let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    if b.reinit().is_err() {
                        return 10;
                    }
                    let _ = ready_w.write_all(b"r");
                    if gather(&mut b, Duration::from_secs(3), |n| n.clock_stepped).clock_stepped {
                        0
                    } else {
                        11
                    }
                }))
                .unwrap_or(12);
                // SAFETY: ends the child without running the harness.
                unsafe { libc::_exit(code) };
            }
            let mut byte = [0u8];
            std::io::Read::read_exact(&mut ready_r, &mut byte).unwrap();
            set_clock_to_now().unwrap();
            let got = gather(&mut b, PROMPT, |n| n.clock_stepped);
            let mut status = 0;
            // SAFETY: reaps our own child.
            assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
            assert!(got.clock_stepped, "{name}: the parent missed the set");
            assert!(
                libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
                "{name}: the child failed ({status:#x}; 10 reinit, 11 missed the set, 12 panic)"
            );
            b.unwatch_clock_steps();
        });
    }
}

// ---- path hints --------------------------------------------------------------

/// A file through its life: each change is hinted at promptly (there is no
/// polling at this level: a hint or nothing). After it is re-created, the
/// file is watched itself again: a change through a name in another
/// directory, which the watched directory does not see, is hinted too.
#[test]
fn each_change_of_a_file_is_hinted_at() {
    on_each_kernel("file life", |name| {
        if !hints(name) {
            return;
        }
        let dir = TempDir::new("life", name);
        let elsewhere = TempDir::new("life-elsewhere", name);
        let path = dir.join("app.conf");
        std::fs::write(&path, "one").unwrap();
        let mut b = open(name);
        b.watch_path(&path, 7).unwrap();
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        f.write_all(b" two").unwrap();
        expect_hint(&mut b, 7, "a write");
        drop(f);
        chmod(&path, 0o600);
        expect_hint(&mut b, 7, "a chmod");
        let tmp = dir.join("app.conf.new");
        std::fs::write(&tmp, "new content").unwrap();
        std::fs::rename(&tmp, &path).unwrap();
        expect_hint(&mut b, 7, "a rename over it");
        chmod(&path, 0o640);
        expect_hint(&mut b, 7, "a chmod of the new file");
        std::fs::remove_file(&path).unwrap();
        expect_hint(&mut b, 7, "a delete");
        std::fs::write(&path, "again").unwrap();
        expect_hint(&mut b, 7, "a re-create");
        let link = elsewhere.join("link");
        std::fs::hard_link(&path, &link).unwrap();
        expect_hint(&mut b, 7, "a new link to the re-created file");
        std::fs::OpenOptions::new()
            .append(true)
            .open(&link)
            .unwrap()
            .write_all(b" through the link")
            .unwrap();
        expect_hint(&mut b, 7, "a write through the other name");
        // Unwatched: nothing more.
        b.unwatch_path(7);
        std::fs::write(&path, "unseen").unwrap();
        assert_eq!(
            hinted_for(&mut b, Duration::from_millis(100)),
            BTreeSet::new(),
            "{name}"
        );
    });
}

/// Changes of other files in the same directory do not hint at the
/// watched one (inotify: by name; kqueue: the directory's filter fires,
/// and the backend sees that the path still names the same file).
#[test]
fn siblings_do_not_hint_at_a_watched_file() {
    on_each_kernel("siblings", |name| {
        if !hints(name) {
            return;
        }
        let dir = TempDir::new("siblings", name);
        let (mine, sibling) = (dir.join("mine"), dir.join("sibling"));
        std::fs::write(&mine, "mine").unwrap();
        std::fs::write(&sibling, "s").unwrap();
        let mut b = open(name);
        b.watch_path(&mine, 1).unwrap();
        std::fs::write(&sibling, "changed").unwrap();
        chmod(&sibling, 0o600);
        std::fs::write(dir.join("new"), "x").unwrap();
        std::fs::rename(dir.join("new"), dir.join("renamed")).unwrap();
        std::fs::remove_file(dir.join("renamed")).unwrap();
        std::fs::create_dir(dir.join("sub")).unwrap();
        std::fs::remove_dir(dir.join("sub")).unwrap();
        let got = hinted_for(&mut b, Duration::from_millis(300));
        assert!(
            !got.contains(&1),
            "{name}: a sibling's change hinted at the file: {got:?}"
        );
        // The watched file's own change still is.
        std::fs::write(&mine, "mine, changed").unwrap();
        expect_hint(&mut b, 1, "the file itself");
    });
}

/// One hundred files in one directory, each watched: a change of one
/// hints at that one only.
#[test]
fn a_hundred_files_in_one_directory_are_told_apart() {
    on_each_kernel("hundred", |name| {
        if !hints(name) {
            return;
        }
        let dir = TempDir::new("hundred", name);
        let paths: Vec<PathBuf> = (0..100).map(|i| dir.join(&format!("f{i}"))).collect();
        for p in &paths {
            std::fs::write(p, "0").unwrap();
        }
        let mut b = open(name);
        for (i, p) in paths.iter().enumerate() {
            b.watch_path(p, 1000 + i as u64).unwrap();
        }
        for (i, p) in paths.iter().enumerate() {
            std::fs::write(p, "changed").unwrap();
            let token = 1000 + i as u64;
            let got = gather(&mut b, PROMPT, |n| !n.paths.is_empty());
            let mut got: BTreeSet<u64> = got.paths.into_iter().collect();
            got.extend(hinted_for(&mut b, Duration::from_millis(5)));
            assert_eq!(got, BTreeSet::from([token]), "{name}: file {i}");
        }
        for i in 0..100 {
            b.unwatch_path(1000 + i);
        }
    });
}

/// Two tokens on one file share what watches it; each goes on its own.
#[test]
fn two_watchers_of_one_file() {
    on_each_kernel("two tokens", |name| {
        if !hints(name) {
            return;
        }
        let dir = TempDir::new("two", name);
        let path = dir.join("f");
        std::fs::write(&path, "x").unwrap();
        let mut b = open(name);
        b.watch_path(&path, 1).unwrap();
        b.watch_path(&path, 2).unwrap();
        std::fs::write(&path, "y").unwrap();
        let got = gather(&mut b, PROMPT, |n| {
            n.paths.contains(&1) && n.paths.contains(&2)
        });
        assert!(
            got.paths.contains(&1) && got.paths.contains(&2),
            "{name}: {:?}",
            got.paths
        );
        b.unwatch_path(1);
        std::fs::write(&path, "z").unwrap();
        expect_hint(&mut b, 2, "the other token's file");
        assert!(!hinted_for(&mut b, Duration::from_millis(20)).contains(&1));
        b.unwatch_path(2);
        std::fs::write(&path, "w").unwrap();
        assert_eq!(
            hinted_for(&mut b, Duration::from_millis(100)),
            BTreeSet::new(),
            "{name}"
        );
    });
}

/// A path that does not exist is watched through its directory; one whose
/// directory does not exist either is accepted and left to polling.
#[test]
fn missing_paths() {
    on_each_kernel("missing", |name| {
        if !hints(name) {
            let mut b = open(name);
            assert!(
                b.watch_path(Path::new("/tmp/x"), 1).is_err(),
                "{name}: no hints here"
            );
            return;
        }
        let dir = TempDir::new("missing", name);
        let mut b = open(name);
        let nowhere = dir.join("no-such-dir").join("f");
        b.watch_path(&nowhere, 1).unwrap();
        let later = dir.join("later");
        b.watch_path(&later, 2).unwrap();
        std::fs::write(&later, "here").unwrap();
        expect_hint(&mut b, 2, "the creation");
        assert!(!hinted_for(&mut b, Duration::from_millis(20)).contains(&1));
        b.unwatch_path(1);
        b.unwatch_path(2);
    });
}

/// In a forked child, `reinit` gives the child its own path hints: it
/// hears a change it makes, and the parent, whose hints the child must
/// not have taken, hears it too.
#[test]
fn reinit_in_a_forked_child_gives_it_its_own_hints() {
    let _alone = alone();
    for &name in backends::AVAILABLE {
        if !hints(name) {
            continue;
        }
        watchdog(&format!("fork on {name}"), LIMIT, move || {
            let dir = TempDir::new("fork", name);
            let path = dir.join("f");
            std::fs::write(&path, "x").unwrap();
            let mut b = open(name);
            b.watch_path(&path, 5).unwrap();
            // SAFETY: the child only runs the backend's code and file
            // operations, and leaves with `_exit`.
            let pid = unsafe { libc::fork() };
            assert!(pid >= 0);
            if pid == 0 {
                let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    if b.reinit().is_err() {
                        return 10;
                    }
                    // What reinit hints at (everything), taken first.
                    let _ = gather(&mut b, Duration::from_millis(20), |_| false);
                    if std::fs::write(&path, "from the child").is_err() {
                        return 11;
                    }
                    let got = gather(&mut b, PROMPT, |n| n.paths.contains(&5));
                    if got.paths.contains(&5) {
                        0
                    } else {
                        12
                    }
                }))
                .unwrap_or(13);
                // SAFETY: ends the child without running the harness.
                unsafe { libc::_exit(code) };
            }
            let mut status = 0;
            // SAFETY: reaps our own child.
            assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
            assert!(
                libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
                "{name}: the child failed ({status:#x}; 10 reinit, 11 write, 12 no hint, \
                 13 panic)"
            );
            let got = gather(&mut b, PROMPT, |n| n.paths.contains(&5));
            assert!(
                got.paths.contains(&5),
                "{name}: the parent did not hear the child's change: the child took it"
            );
        });
    }
}
