//! The select backend near `FD_SETSIZE`: its internal fds must be below
//! it, and the fds of the whole process count. In a test binary of their
//! own (each test takes the process's fds or children by the thousand),
//! and one at a time ([`ALONE`]).
//!
//! - A hub slot whose wake fd was made while every low fd was taken (by
//!   an epoll loop, which can watch any fd) is given a usable one when a
//!   select loop claims it once low fds are free again; and a select loop
//!   that could not set up its wake fd then (a clear error) can later.
//! - More children than select can watch pidfds for (a pidfd numbered
//!   1024 or more): those are watched through `SIGCHLD` instead, and every
//!   exit is reported, on every OS backend.
#![allow(clippy::zombie_processes)] // the loops reap the children

mod common;

use std::os::fd::{AsRawFd, RawFd};
use std::sync::Mutex;
use std::time::Duration;

use common::watchdog;
use evloop::{Async, Child, ExitStatus, Loop, RunMode, RunOutcome};

/// One test at a time: each takes fds or processes by the thousand.
static ALONE: Mutex<()> = Mutex::new(());

/// `FD_SETSIZE`.
const SETSIZE: RawFd = libc::FD_SETSIZE as RawFd;

/// Raises the soft limit of open files to at least `need` (up to the hard
/// limit); false, said loudly, if the hard limit is lower.
fn allow_fds(need: u64, test: &str) -> bool {
    // SAFETY: `lim` is written by getrlimit and read by setrlimit.
    unsafe {
        let mut lim: libc::rlimit = std::mem::zeroed();
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim), 0);
        if lim.rlim_cur >= need as libc::rlim_t {
            return true;
        }
        if lim.rlim_max < need as libc::rlim_t {
            eprintln!(
                "SKIPPED {test}: needs {need} open files, the hard limit (RLIMIT_NOFILE) is {}",
                lim.rlim_max
            );
            return false;
        }
        lim.rlim_cur = lim.rlim_max;
        assert_eq!(
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim),
            0,
            "raising RLIMIT_NOFILE: {}",
            std::io::Error::last_os_error()
        );
    }
    true
}

/// Every free fd below `FD_SETSIZE`, taken (duplicates of `/dev/null`)
/// until dropped.
struct LowFdsTaken(Vec<RawFd>);

impl LowFdsTaken {
    fn new() -> LowFdsTaken {
        let null = std::fs::File::open("/dev/null").unwrap();
        let mut fds = Vec::new();
        loop {
            // SAFETY: duplicates an open descriptor to the lowest free
            // number; the copy is owned by the returned value.
            let fd = unsafe { libc::fcntl(null.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 0) };
            assert!(fd >= 0, "dup: {}", std::io::Error::last_os_error());
            fds.push(fd);
            if fd >= SETSIZE {
                return LowFdsTaken(fds);
            }
        }
    }
}

impl Drop for LowFdsTaken {
    fn drop(&mut self) {
        for &fd in &self.0 {
            // SAFETY: duplicates made by `new`, owned here.
            unsafe { libc::close(fd) };
        }
    }
}

fn select_loop<S>() -> Loop<'static, S> {
    Loop::builder().backend("select").build().unwrap()
}

/// A signal watcher and an async watcher on `lp`, each of which removes
/// itself: a run hears the signal (raised here) and the send, and ends.
fn hears_a_signal_and_a_send(lp: &mut Loop<'static, Vec<&'static str>>, signal: i32) {
    evloop::Signal::new(lp, signal, |lp, log, me| {
        log.push("signal");
        lp.remove(me).unwrap();
    })
    .unwrap_or_else(|e| panic!("a signal watcher on select: {e}"));
    let (_, sender) = Async::new(lp, |lp, log, me| {
        log.push("async");
        lp.remove(me).unwrap();
    })
    .unwrap_or_else(|e| panic!("an async watcher on select: {e}"));
    // SAFETY: the hub's handler is installed for `signal`.
    unsafe { libc::raise(signal) };
    sender.send().unwrap();
    let mut log = vec![];
    assert_eq!(
        lp.run(RunMode::Default, &mut log).unwrap(),
        RunOutcome::NoActiveWatchers
    );
    log.sort();
    assert_eq!(log, ["async", "signal"]);
}

#[test]
fn a_wake_fd_made_while_low_fds_were_taken_does_not_stay_with_the_slot() {
    let _alone = ALONE.lock().unwrap_or_else(|e| e.into_inner());
    if !allow_fds(SETSIZE as u64 + 256, "high wake fds") {
        return;
    }
    watchdog("high wake fds", common::WATCHDOG, || {
        let taken = LowFdsTaken::new();
        // Epoll loops take hub slots whose wake fds are 1024 and up (the
        // signal and async watchers need one).
        let mut epolls: Vec<Loop<'static, ()>> = Vec::new();
        for _ in 0..4 {
            let mut lp: Loop<'static, ()> = Loop::builder().backend("epoll").build().unwrap();
            evloop::Signal::new(&mut lp, libc::SIGUSR1, |_, _, _| {}).unwrap();
            Async::new(&mut lp, |_, _, _| {}).unwrap();
            epolls.push(lp);
        }
        // A select loop cannot now: a clear error, and nothing kept.
        let mut early: Loop<'static, Vec<&str>> = select_loop();
        let err = evloop::Signal::new(&mut early, libc::SIGUSR2, |_, _, _| {}).unwrap_err();
        assert!(err.to_string().contains("FD_SETSIZE"), "{err}");
        assert!(Async::new(&mut early, |_, _, _| {}).is_err());
        drop(epolls);
        drop(taken);
        // Low fds are free: the loop that failed, and new ones (which get
        // the slots the epoll loops left), work.
        hears_a_signal_and_a_send(&mut early, libc::SIGUSR2);
        let mut later: Vec<Loop<'static, Vec<&str>>> = (0..4).map(|_| select_loop()).collect();
        for lp in &mut later {
            hears_a_signal_and_a_send(lp, libc::SIGUSR1);
        }
    });
}

/// How many children the test below watches at once: more than select
/// has room for as pidfds.
const CHILDREN: usize = 1100;

#[test]
fn more_children_than_select_has_fds_for_are_all_heard() {
    let _alone = ALONE.lock().unwrap_or_else(|e| e.into_inner());
    if !allow_fds(CHILDREN as u64 + 512, "many children") {
        return;
    }
    // SAFETY: `lim` is written by getrlimit.
    let nproc = unsafe {
        let mut lim: libc::rlimit = std::mem::zeroed();
        assert_eq!(libc::getrlimit(libc::RLIMIT_NPROC, &mut lim), 0);
        lim.rlim_cur
    };
    if nproc < (CHILDREN * 4) as libc::rlim_t {
        eprintln!(
            "SKIPPED many children: RLIMIT_NPROC is {nproc}, want {}",
            CHILDREN * 4
        );
        return;
    }
    for &name in evloop::backends::AVAILABLE {
        watchdog(
            &format!("{CHILDREN} children on {name}"),
            Duration::from_secs(300),
            move || many_children(name),
        );
    }
}

fn many_children(name: &'static str) {
    let mut lp: Loop<'static, Vec<ExitStatus>> = Loop::builder().backend(name).build().unwrap();
    // Every child spawned first, then watched: exited or not, each is
    // watched while the others are (1100 at once).
    let mut pids = Vec::with_capacity(CHILDREN);
    for _ in 0..CHILDREN {
        match std::process::Command::new("true").spawn() {
            Ok(child) => pids.push(child.id()),
            Err(err) => {
                for &pid in &pids {
                    // SAFETY: reaps a child spawned above.
                    unsafe { libc::waitpid(pid as libc::pid_t, std::ptr::null_mut(), 0) };
                }
                eprintln!(
                    "SKIPPED many children on {name}: spawned {} of {CHILDREN}: {err}",
                    pids.len()
                );
                return;
            }
        }
    }
    for &pid in &pids {
        Child::new(&mut lp, pid, |_, got, ev| got.push(ev.status.unwrap()))
            .unwrap_or_else(|e| panic!("{name}: watching child {pid}: {e}"));
    }
    let mut got = Vec::new();
    assert_eq!(
        lp.run(RunMode::Default, &mut got).unwrap(),
        RunOutcome::NoActiveWatchers,
        "{name}"
    );
    assert_eq!(got.len(), CHILDREN, "{name}");
    assert!(
        got.iter().all(|s| *s == ExitStatus::Exited(0)),
        "{name}: {got:?}"
    );
}
