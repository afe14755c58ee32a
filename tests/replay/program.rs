//! The program an untrusted trace is replayed through, shared by the
//! property of tests/replay/untrusted.rs and the fuzz target of
//! tests/fuzz (each includes this file with `#[path]`): an echo over
//! `net::Conns` on one socket, a repeating timer that sends to an async
//! watcher, a periodic and a stat watcher; its recording on the
//! simulator; and the bound on what a replay of a trace may hold.

use std::time::Duration;

use evloop::net::{ConnEvent, ConnOptions, Conns, Stream};
use evloop::replay::{MemoryTrace, Recorded, Recorder, Replay, ReplaySummary};
use evloop::{Async, Loop, Periodic, RunMode, Schedule, Sim, Stat};

/// The most a replay here may hold beyond a multiple of its trace's size:
/// the decoder's read buffer (64 KiB), the loop, the connections'
/// buffers (about 150 KiB in all, measured). (An fd table for fd numbers
/// up to the replay's floor, 65,536, would add 1.5 MiB: none here.)
pub const SLACK: u64 = 512 << 10;

/// The most a replay of a trace of `len` bytes may hold at once.
pub fn bound(len: usize) -> u64 {
    16 * len as u64 + SLACK
}

/// The program: an echo over `net::Conns` on one socket, a repeating
/// timer that sends to an async watcher (the timer removes both at its
/// end), a periodic and a stat watcher (which ends at its first change),
/// each ending by itself. Every call that may fail on a bad trace is
/// allowed to.
pub fn program<T: Stream + 'static>(
    lp: &mut Loop<'static, Conns<()>>,
    conns: &mut Conns<()>,
    sock: T,
) {
    let _ = conns.open(lp, sock, ConnOptions::new(), (), |lp, conns, id, ev| {
        let c = &mut conns[id];
        match ev {
            ConnEvent::Data => {
                let n = c.input().len();
                c.write_from_input(lp, n);
            }
            ConnEvent::Eof => c.close(lp),
            _ => {}
        }
    });
    let sent = Async::new(lp, |_, _, _| {}).ok();
    let _ = lp.timer(
        Duration::from_millis(3),
        Duration::from_millis(3),
        move |lp, _, me| {
            if let Some((a, sender)) = &sent {
                let _ = sender.send();
                if lp.now() >= Duration::from_millis(15) {
                    let _ = lp.remove(*a);
                }
            }
            if lp.now() >= Duration::from_millis(15) {
                let _ = lp.remove(me);
            }
        },
    );
    let _ = Periodic::new(
        lp,
        Schedule::every(Duration::from_millis(4)),
        |lp, _, me| {
            if lp.now() >= Duration::from_millis(12) {
                let _ = lp.remove(me);
            }
        },
    );
    let _ = Stat::new(lp, "/data", Duration::from_millis(5), |lp, _, ev| {
        let _ = lp.remove(ev.watcher);
    });
}

/// The program recorded on the simulator: a peer that sends three
/// messages and closes, a file written meanwhile. The trace, and the
/// socket's fd.
pub fn recording() -> (Vec<u8>, i32) {
    record(|sim, sock| {
        for (ms, msg) in [(1, &b"one"[..]), (4, b"two"), (9, b"three")] {
            sim.deliver(Duration::from_millis(ms), sock, msg);
        }
        sim.close_peer(Duration::from_millis(11), sock);
        sim.write_file(Duration::from_millis(6), "/data", 100);
    })
}

/// The fuzz target's seeds, each a run of the program on the simulator:
/// [`recording`], and a peer whose message (200 bytes, more than a
/// record keeps inline and than the socket's send buffer) arrives in two
/// parts, with the wall clock stepped forward and the file removed. The
/// name of each, its trace, and the socket's fd (the same in all).
pub fn seeds() -> Vec<(&'static str, Vec<u8>, i32)> {
    let (echo, fd) = recording();
    let (long, long_fd) = record(|sim, sock| {
        sim.write_file(Duration::ZERO, "/data", 1);
        sim.deliver(Duration::from_millis(2), sock, &[b'a'; 120]);
        sim.deliver(Duration::from_millis(3), sock, &[b'b'; 80]);
        sim.step_wall_clock_forward(Duration::from_millis(5), Duration::from_secs(3600));
        sim.remove_file(Duration::from_millis(7), "/data");
        sim.close_peer(Duration::from_millis(8), sock);
    });
    vec![("echo", echo, fd), ("long-message", long, long_fd)]
}

/// The program recorded on the simulator `script` sets up (given the
/// peer's socket's fd): the trace and the socket's fd.
fn record(script: impl FnOnce(&Sim, i32)) -> (Vec<u8>, i32) {
    let sim = Sim::new();
    let sock = sim.socket("peer", 64);
    let fd = sock.fd();
    script(&sim, fd);
    let trace = MemoryTrace::new();
    {
        let rec = Recorder::new(Box::new(sim.backend()), trace.clone()).unwrap();
        let mut lp: Loop<'static, Conns<()>> = Loop::with_backend(rec);
        let mut conns = Conns::new();
        program(&mut lp, &mut conns, Recorded::new(sock));
        lp.run(RunMode::Default, &mut conns).unwrap();
    }
    (trace.bytes(), fd)
}

/// Replays `trace` through the program on the socket `fd`, whatever it
/// holds: a trace the decoder refuses, a divergence, and a run that fails
/// are all fine here; a panic, a hang or a held allocation beyond
/// [`bound`] is what the callers look for.
pub fn replay(trace: Vec<u8>, fd: i32) {
    let _ = replay_checked(trace, fd);
}

/// Replays `trace` through the program on the socket `fd`: the summary,
/// or what stopped it first (the decoder's refusal, a failed run, the
/// divergence `finish` reports).
pub fn replay_checked(trace: Vec<u8>, fd: i32) -> Result<ReplaySummary, String> {
    let replay = Replay::from_bytes(trace).map_err(|e| e.to_string())?;
    {
        let mut lp: Loop<'static, Conns<()>> = Loop::with_backend(replay.backend());
        let mut conns = Conns::new();
        program(&mut lp, &mut conns, replay.socket(fd));
        lp.run(RunMode::Default, &mut conns)
            .map_err(|e| e.to_string())?;
    }
    replay.finish().map_err(|d| d.to_string())
}
