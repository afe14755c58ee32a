//! Conformance, fork: `Loop::reinit_after_fork` in a child re-creates the
//! backend's kernel object and registers every active fd again, so that the
//! child's loop works and the parent's is left alone.
//!
//! An epoll (or kqueue) handle is shared with the parent after `fork()`: a
//! child that changed registrations through it would change the parent's.
//! The child here reads through its loop and then removes its watcher (a
//! `EPOLL_CTL_DEL` on its own kernel object if it was re-created, on the
//! parent's if not); the parent then checks that its own registration
//! survived.
//!
//! Its own test binary, with a single test, so that no other test thread
//! runs when it forks; the child does little and leaves with `_exit`, and
//! the parent checks its exit status. `EVLOOP_CONFORMANCE_BACKEND=name`
//! restricts it to one backend, as for `tests/conformance`.
#![cfg(unix)]

use std::io::{ErrorKind, Read, Write};
use std::os::unix::net::UnixStream;
use std::panic::AssertUnwindSafe;
use std::time::Duration;

use evloop::{backends, Interest, Io, Loop, RunMode};

/// The child's exit statuses.
const OK: i32 = 0;
const REINIT_FAILED: i32 = 10;
const WRITE_FAILED: i32 = 11;
const RUN_FAILED: i32 = 12;
const NOTHING_READ: i32 = 13;
const WRONG_DATA: i32 = 14;
const REMOVE_FAILED: i32 = 15;
const PANICKED: i32 = 16;

fn explain(code: i32) -> &'static str {
    match code {
        REINIT_FAILED => "reinit_after_fork failed",
        WRITE_FAILED => "the child could not write to the peer",
        RUN_FAILED => "run failed in the child",
        NOTHING_READ => "the child's loop did not report the fd: not re-registered after reinit",
        WRONG_DATA => "the child read something else",
        REMOVE_FAILED => "removing the watcher failed in the child",
        PANICKED => "the child panicked",
        _ => "unexpected status",
    }
}

/// How long a blocking iteration may wait (only reached when a test fails).
const GUARD: Duration = Duration::from_secs(2);

/// Whether `backend` runs (the variable of `tests/conformance`).
fn selected(backend: &str) -> bool {
    match std::env::var("EVLOOP_CONFORMANCE_BACKEND") {
        Ok(want) if !want.is_empty() => {
            let known = backends::AVAILABLE.contains(&want.as_str()) || want == "sim";
            assert!(
                known,
                "EVLOOP_CONFORMANCE_BACKEND={want:?}: no such backend"
            );
            want == backend
        }
        _ => true,
    }
}

#[test]
fn reinit_after_fork_gives_the_child_its_own_kernel_object() {
    for &name in backends::AVAILABLE {
        if selected(name) {
            fork_case(name);
        }
    }
    // The simulator has no kernel object: `reinit` is the default no-op.
}

fn fork_case(name: &'static str) {
    let (a, peer) = UnixStream::pair().unwrap();
    a.set_nonblocking(true).unwrap();
    let mut lp: Loop<'static, Vec<u8>> = Loop::builder().backend(name).build().unwrap();
    let io = lp
        .io(a, Interest::READABLE, |_, got, ev| {
            let mut buf = [0u8; 64];
            loop {
                match ev.source.read(&mut buf) {
                    Ok(0) => return,
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                    Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                    Err(e) => panic!("read: {e}"),
                }
            }
        })
        .unwrap();
    let guard = lp.timer(GUARD, GUARD, |_, _, _| {}).unwrap();
    // Registered with the kernel before the fork.
    lp.run(RunMode::NoWait, &mut Vec::new()).unwrap();

    std::io::stdout().flush().unwrap();
    std::io::stderr().flush().unwrap();
    // SAFETY: this binary holds one test, so the only other thread is the
    // test harness's main thread, blocked waiting for it. The child does a
    // few syscalls and small allocations, then leaves with `_exit` (no
    // destructors, no atexit handlers).
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
    if pid == 0 {
        let code = std::panic::catch_unwind(AssertUnwindSafe(|| child(&mut lp, io, &peer)));
        // SAFETY: ends the child at once, as a forked child should.
        unsafe { libc::_exit(code.unwrap_or(PANICKED)) };
    }

    let mut status = 0;
    // SAFETY: waits for the child just forked; `status` is a valid int.
    let r = unsafe { libc::waitpid(pid, &mut status, 0) };
    assert_eq!(r, pid, "waitpid: {}", std::io::Error::last_os_error());
    assert!(
        libc::WIFEXITED(status),
        "{name}: the child died: {status:#x}"
    );
    let code = libc::WEXITSTATUS(status);
    assert_eq!(code, OK, "{name}: child: {}", explain(code));

    // The parent's registration survived what the child did.
    (&peer).write_all(b"parent").unwrap();
    let mut got = Vec::new();
    lp.run(RunMode::Once, &mut got).unwrap();
    assert_eq!(
        got, b"parent",
        "{name}: the parent's loop lost its registration: the child changed a kernel object \
         shared with the parent"
    );
    lp.remove(io).unwrap();
    lp.remove(guard).unwrap();
}

/// The child's work: reinit, read through the loop, then change the
/// registration (remove the watcher).
fn child(lp: &mut Loop<'static, Vec<u8>>, io: Io, peer: &UnixStream) -> i32 {
    if lp.reinit_after_fork().is_err() {
        return REINIT_FAILED;
    }
    if (&*peer).write_all(b"child").is_err() {
        return WRITE_FAILED;
    }
    let mut got = Vec::new();
    if lp.run(RunMode::Once, &mut got).is_err() {
        return RUN_FAILED;
    }
    if got.is_empty() {
        return NOTHING_READ;
    }
    if got != b"child" {
        return WRONG_DATA;
    }
    // With a kernel object still shared with the parent, this would remove
    // the parent's registration too.
    if lp.remove(io).is_err() || lp.run(RunMode::NoWait, &mut got).is_err() {
        return REMOVE_FAILED;
    }
    OK
}
