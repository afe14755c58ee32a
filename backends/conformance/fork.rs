//! The fork check: `Loop::reinit_after_fork` in a child re-creates the
//! backend's kernel object and registers every active fd again, so that the
//! child's loop works and the parent's is left alone.
//!
//! An epoll (or kqueue) handle is shared with the parent after `fork()`: a
//! child that changed registrations through it would change the parent's.
//! The child here reads through its loop and then removes its watcher (an
//! `EPOLL_CTL_DEL` on its own kernel object if it was re-created, on the
//! parent's if not); the parent then checks that its own registration
//! survived. The child does little and leaves with `_exit`; the parent
//! checks its exit status.
//!
//! Forking copies every descriptor of the process into the child, for as
//! long as the child lives: a test running in another thread at that
//! moment would see its sockets stay open. So the check refuses to fork
//! while another thread than the one waiting for this one runs (on Linux,
//! where it can count them): the kit wants a test binary of its own.

use std::io::{ErrorKind, Read, Write};
use std::os::unix::net::UnixStream;
use std::panic::AssertUnwindSafe;
use std::time::Duration;

use crate::backends::Factory;
use crate::{Interest, Io, Loop, RunMode};

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

/// How long a blocking iteration may wait (only reached when a check fails).
const GUARD: Duration = Duration::from_secs(2);

/// The number of threads of this process, where it can be known.
pub(super) fn threads() -> Option<usize> {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        std::fs::read_dir("/proc/self/task").ok().map(|d| d.count())
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    {
        None
    }
}

/// Forks with a registered fd; panics with the reason if the child or the
/// parent's loop afterwards did not behave.
pub fn check(name: &str, open: Factory) {
    // This thread, and the test harness's main thread waiting for it.
    if let Some(n) = threads() {
        assert!(
            n <= 2,
            "{name}: {n} threads are running: the fork check would copy their descriptors into \
             the child (keeping their sockets open); run the kit in a test binary of its own, \
             with no other test (a file of its own under tests/)"
        );
    }
    let backend = open().unwrap_or_else(|e| panic!("cannot create the {name} backend: {e}"));
    let (a, peer) = UnixStream::pair().unwrap();
    a.set_nonblocking(true).unwrap();
    let mut lp: Loop<'static, Vec<u8>> = Loop::from(backend);
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
    // SAFETY: no other thread runs but the test harness's, blocked waiting
    // for this one (checked above where it can be). The child does a few
    // syscalls and small allocations, then leaves with `_exit` (no
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
