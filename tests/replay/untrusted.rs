//! Traces are untrusted input: whatever bytes a trace holds, neither the
//! decoder nor the replay panics, loops forever, or allocates more than
//! the trace's size justifies; once diverged, every later call that can
//! fail fails. One test per defect a hostile audit found (each trace
//! written by hand in the format of `evloop::replay`'s module
//! documentation, or a real recording fed through a hostile reader), then
//! a property: arbitrary bytes and mutated recordings, replayed through a
//! small program, under a watchdog and a count of the bytes held.

use std::io::{self, Read};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::time::Duration;

use evloop::conformance::CountingAllocator;
use evloop::net::Listener;
use evloop::replay::{Divergence, Replay};
use evloop::{Async, Interest, Loop, RunMode, Sim};
use proptest::prelude::*;

use crate::common::{watchdog, WATCHDOG};

/// The program a trace is replayed through, its recording, the bound
/// (shared with the fuzz target, tests/fuzz).
#[path = "program.rs"]
mod program;
use program::{bound, recording, replay_checked, seeds, SLACK};

/// Runs `f` on a thread of its own under the watchdog (a hang or a spin
/// fails the test), with the most memory it held at once.
fn measured<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> (T, u64) {
    watchdog(what, WATCHDOG, move || {
        let mut out = None;
        let peak = CountingAllocator::peak_bytes_in(|| out = Some(f()));
        (out.expect("ran"), peak)
    })
}

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

/// The header: the magic and the version.
fn header() -> Vec<u8> {
    let mut v = b"EVLOOPRC".to_vec();
    v.extend_from_slice(&1u16.to_le_bytes());
    v
}

/// A trace written record by record: what a corrupt or hostile file can
/// hold and no recording would.
struct Craft(Vec<u8>);

impl Craft {
    /// The header and the `Begin` of a backend with virtual fds.
    fn new() -> Craft {
        Craft(header()).record(1, |p| {
            varint(p, 3);
            p.extend_from_slice(b"sim");
            p.extend_from_slice(&[4, 0, 0, 0]); // virtual fds; hang-up etc.
        })
    }

    fn record(mut self, tag: u8, payload: impl FnOnce(&mut Vec<u8>)) -> Craft {
        let mut p = Vec::new();
        payload(&mut p);
        self.0.push(tag);
        varint(&mut self.0, p.len() as u64);
        self.0.extend_from_slice(&p);
        self
    }

    /// A monotonic clock reading of zero (what making a loop reads).
    fn now0(self) -> Craft {
        self.record(3, |p| p.extend_from_slice(&[0, 0]))
    }

    /// `check_fd(fd) -> ok`.
    fn check_fd(self, fd: i64) -> Craft {
        self.record(7, |p| {
            varint(p, zigzag(fd));
            p.push(0);
        })
    }

    /// An accept on `listener` that returned the fd `new`.
    fn accept(self, listener: i64, new: i64) -> Craft {
        self.record(34, |p| {
            varint(p, zigzag(listener));
            p.push(0);
            varint(p, zigzag(new));
        })
    }

    /// A read of up to `asked` bytes on `fd` that returned `data`.
    fn read(self, fd: i64, asked: u64, data: &[u8]) -> Craft {
        self.record(32, |p| {
            varint(p, zigzag(fd));
            varint(p, asked);
            p.push(0);
            varint(p, data.len() as u64);
            p.extend_from_slice(data);
        })
    }

    /// A `stat` of `path`: an existing file modified `secs` seconds after
    /// the epoch.
    fn stat(self, path: &str, secs: u64) -> Craft {
        self.record(16, |p| {
            varint(p, path.len() as u64);
            p.extend_from_slice(path.as_bytes());
            p.push(1); // exists
            varint(p, 10); // size
            p.push(0); // after the epoch
            varint(p, secs);
            varint(p, 0);
            p.extend_from_slice(&[1, 1, 1]); // inode, device, links
            varint(p, 0o644);
        })
    }

    fn end(self) -> Vec<u8> {
        self.record(255, |_| {}).0
    }
}

#[test]
fn a_record_claiming_a_gigabyte_costs_only_the_bytes_there_are() {
    // 16 bytes: the header, a tag and a length of 2^30, and nothing more.
    let mut first = header();
    first.push(1);
    varint(&mut first, 1 << 30);
    assert_eq!(first.len(), 16);
    // The same length for a later record, decoded during the replay.
    let mut later = Craft::new().now0().0;
    later.push(2);
    varint(&mut later, 1 << 30);
    let ((err, d), peak) = measured("a gigabyte claimed", move || {
        let err = Replay::from_bytes(first).unwrap_err().to_string();
        let replay = Replay::from_bytes(later).unwrap();
        let lp: Loop = Loop::with_backend(replay.backend());
        drop(lp);
        (err, replay.finish().unwrap())
    });
    assert!(
        peak <= 4 * 64 * 1024,
        "{peak} bytes held for a 16-byte trace"
    );
    assert!(err.contains("ends after its header"), "{err}");
    // The record claimed is not there: the trace is cut off before it.
    assert!(!d.complete && d.records == 1, "{d:?}");
}

#[test]
fn async_sends_claiming_2_to_the_62_watchers_cost_only_the_bytes_there_are() {
    // An `Async` record (sends taken) whose count is 2^62, in 11 bytes.
    let trace = Craft::new()
        .now0()
        .record(19, |p| {
            p.push(1);
            varint(p, 1 << 62);
            p.push(0);
        })
        .end();
    let ((made, d), peak) = measured("2^62 async sends claimed", move || {
        let replay = Replay::from_bytes(trace).unwrap();
        let made = {
            let mut lp: Loop = Loop::with_backend(replay.backend());
            Async::new(&mut lp, |_, _, _| {}).is_ok()
        };
        (made, replay.finish().unwrap_err())
    });
    assert!(peak < SLACK, "{peak} bytes held");
    assert!(
        !made,
        "the async watcher's waker was answered from a corrupt trace"
    );
    assert!(d.expected.contains("unreadable record"), "{d}");
}

#[test]
fn an_accepted_fd_of_thirty_million_is_refused_before_it_sizes_anything() {
    const FD: i64 = 30_000_000;
    let trace = Craft::new().now0().accept(5, FD).check_fd(FD).end();
    let ((accepted, run, d), peak) = measured("an accept of fd 30M", move || {
        let replay = Replay::from_bytes(trace).unwrap();
        let mut lp: Loop = Loop::with_backend(replay.backend());
        let accepted = match replay.listener(5).accept_stream() {
            Ok(s) => {
                let fd = s.fd();
                Some((fd, lp.io(s, Interest::READABLE, |_, _, _| {}).is_ok()))
            }
            Err(e) => {
                assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
                None
            }
        };
        lp.timer(Duration::from_millis(1), Duration::ZERO, |_, _, _| {})
            .unwrap();
        let run = lp.run(RunMode::Default, &mut ()).unwrap_err();
        let run = Divergence::of(&run).cloned();
        (accepted, run, replay.divergence())
    });
    assert!(peak < SLACK, "{peak} bytes held");
    assert_eq!(accepted, None, "the accept of fd {FD} went ahead");
    let d = d.expect("a divergence");
    assert_eq!(run.as_ref(), Some(&d), "run fails with it");
    assert!(d.hint.unwrap().contains("fd number"), "{d}");
}

#[test]
fn a_divergence_in_check_fd_is_an_error_and_stops_the_registration() {
    // The trace ends where the program registers an fd.
    let trace = Craft::new().now0().end();
    let replay = Replay::from_bytes(trace).unwrap();
    let mut lp: Loop = Loop::with_backend(replay.backend());
    let err = lp
        .io(replay.socket(7), Interest::READABLE, |_, _, _| {})
        .unwrap_err();
    assert!(err.to_string().contains("diverged"), "{err}");
    let d = replay.divergence().expect("a divergence");
    assert_eq!(d.fd, Some(7));
    // Once diverged, every later call fails, with the same divergence.
    assert!(lp
        .io(replay.socket(8), Interest::READABLE, |_, _, _| {})
        .is_err());
    lp.timer(Duration::from_millis(1), Duration::ZERO, |_, _, _| {})
        .unwrap();
    let run = lp.run(RunMode::Default, &mut ()).unwrap_err();
    assert_eq!(Divergence::of(&run), Some(&d));
    drop(lp);
    assert_eq!(replay.finish().unwrap_err(), d);
}

#[test]
fn a_registered_fd_beyond_the_bound_is_refused_before_it_sizes_anything() {
    const FD: i32 = 30_000_000;
    let trace = Craft::new().now0().check_fd(FD.into()).end();
    let ((registered, d), peak) = measured("a check_fd of fd 30M", move || {
        let replay = Replay::from_bytes(trace).unwrap();
        let mut lp: Loop = Loop::with_backend(replay.backend());
        let r = lp.io(replay.socket(FD), Interest::READABLE, |_, _, _| {});
        (r.is_ok(), replay.divergence())
    });
    assert!(peak < SLACK, "{peak} bytes held");
    assert!(!registered);
    let d = d.expect("a divergence");
    assert_eq!(d.fd, Some(FD));
    assert!(d.hint.unwrap().contains("fd number"), "{d}");
}

#[test]
fn a_stat_record_with_a_huge_mtime_is_an_unreadable_record() {
    let trace = Craft::new().stat("/x", u64::MAX).end();
    let replay = Replay::from_bytes(trace).unwrap();
    let d = replay.finish().unwrap_err();
    assert!(d.expected.contains("modification time"), "{d}");
}

#[test]
fn a_read_record_holding_more_than_was_asked_for_is_a_divergence() {
    let trace = Craft::new().read(7, 4, &[b'x'; 16]).end();
    let replay = Replay::from_bytes(trace).unwrap();
    let mut buf = [0u8; 4];
    let err = replay.socket(7).read(&mut buf).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::WouldBlock);
    assert_eq!(buf, [0; 4], "no data made up");
    let d = replay.divergence().expect("a divergence");
    assert!(
        d.hint
            .unwrap()
            .contains("more bytes than the read asked for"),
        "{d}"
    );
    assert!(replay.socket(7).read(&mut buf).is_err());
}

/// A reader of `bytes` that gives the first `first` in one read, then is
/// interrupted `interruptions` times in a row, then gives the rest.
struct Stutter {
    bytes: Vec<u8>,
    pos: usize,
    first: usize,
    interruptions: u32,
}

impl Read for Stutter {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let end = if self.pos < self.first {
            self.first
        } else if self.interruptions > 0 {
            self.interruptions -= 1;
            return Err(io::ErrorKind::Interrupted.into());
        } else {
            self.bytes.len()
        };
        let n = (end - self.pos).min(buf.len());
        buf[..n].copy_from_slice(&self.bytes[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

#[test]
fn a_hundred_thousand_interrupted_reads_in_a_row_are_retried_without_recursion() {
    let (trace, _, log) = super::record_on_sim(super::ticks::<3>);
    let bytes = trace.bytes();
    // The header (10 bytes), then the Begin record: its tag, its one-byte
    // length, its payload. The first record after it starts a read.
    assert!(bytes[11] < 0x80);
    let first = 12 + usize::from(bytes[11]);
    let (replayed, summary) = watchdog("interrupted reads", WATCHDOG, move || {
        let replay = Replay::from_reader(Stutter {
            bytes,
            pos: 0,
            first,
            interruptions: 100_000,
        })
        .unwrap();
        let mut lp: Loop<'static, Vec<String>> = Loop::with_backend(replay.backend());
        super::ticks::<3>(&mut lp, Sim::new().socket("unused", 0));
        let mut replayed = Vec::new();
        lp.run(RunMode::Default, &mut replayed).unwrap();
        drop(lp);
        (replayed, replay.finish().unwrap())
    });
    assert_eq!(replayed, log);
    assert!(summary.complete);
}

// --- the property ---

/// Replays `trace` through the program, on a thread of its own under the
/// watchdog: whether it panicked (and where), and the most it held.
fn replay_untrusted(trace: Vec<u8>, fd: i32) -> (Result<(), String>, u64) {
    measured("a replay of an untrusted trace", move || {
        catch_unwind(AssertUnwindSafe(|| program::replay(trace, fd))).map_err(|panic| {
            panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default()
        })
    })
}

fn assert_contained(trace: Vec<u8>, fd: i32) -> Result<(), TestCaseError> {
    let len = trace.len();
    let (outcome, peak) = replay_untrusted(trace, fd);
    prop_assert!(outcome.is_ok(), "the replay panicked: {:?}", outcome);
    prop_assert!(
        peak <= bound(len),
        "{} bytes held for a trace of {} bytes",
        peak,
        len
    );
    Ok(())
}

thread_local! {
    static RECORDING: (Vec<u8>, i32) = recording();
}

#[test]
fn the_recording_replays_clean_within_the_bound() {
    let (trace, fd) = RECORDING.with(Clone::clone);
    let len = trace.len();
    let (outcome, peak) = measured("the recording replayed", move || replay_checked(trace, fd));
    let summary = outcome.unwrap();
    assert!(
        summary.complete && summary.bytes_read == 11 && summary.polls > 5,
        "{summary:?}"
    );
    assert!(peak <= bound(len), "{peak} bytes for {len}");
}

/// The fuzz target's seed corpus, tests/fuzz/seeds/: the program's runs
/// on the simulator ([`seeds`]), each replaying clean within the bound.
/// The committed files are today's recordings; rewrite them with
/// `EVLOOP_WRITE_FUZZ_SEEDS=1 cargo test --test replay fuzz_seeds`.
#[test]
fn the_fuzz_seeds_are_todays_recordings_and_replay_clean() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz/seeds");
    let write = std::env::var_os("EVLOOP_WRITE_FUZZ_SEEDS").is_some();
    for (name, trace, fd) in seeds() {
        let path = dir.join(name);
        if write {
            std::fs::write(&path, &trace).unwrap();
        }
        let committed = std::fs::read(&path).unwrap_or_default();
        assert!(
            committed == trace,
            "{} is not today's recording: rewrite the seeds with \
             EVLOOP_WRITE_FUZZ_SEEDS=1 cargo test --test replay fuzz_seeds",
            path.display()
        );
        let len = trace.len();
        let (summary, peak) = measured("a seed replayed", move || replay_checked(trace, fd));
        let summary = summary.unwrap_or_else(|d| panic!("{name}: {d}"));
        assert!(summary.complete && summary.polls > 3, "{name}: {summary:?}");
        assert!(peak <= bound(len), "{name}: {peak} bytes for {len}");
    }
}

/// The inputs that made a replay panic, hang or hold too much, found by
/// the property or the fuzz target (tests/fuzz/regressions/, each named
/// after how it was found), replayed through the program: none may again.
#[test]
fn the_fuzz_regressions_stay_contained() {
    let fd = RECORDING.with(|r| r.1);
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz/regressions");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let trace = std::fs::read(&path).unwrap();
        if let Err(e) = assert_contained(trace, fd) {
            panic!("{}: {e}", path.display());
        }
        n += 1;
    }
    assert!(n >= 2, "{n} regressions in {}", dir.display());
}

/// A change to a trace: flip a byte's bits, insert a byte, delete one;
/// or, knowing the format, insert a record of any tag with an arbitrary
/// payload between two records.
#[derive(Debug, Clone)]
enum Mutation {
    Flip(prop::sample::Index, u8),
    Insert(prop::sample::Index, u8),
    Delete(prop::sample::Index),
    Record(prop::sample::Index, u8, Vec<u8>),
}

/// The tags of the format's records.
const TAGS: [u8; 26] = [
    1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 32, 33, 34, 35, 255,
];

/// Where the records of `trace` start (after the header), and its end.
fn boundaries(trace: &[u8]) -> Vec<usize> {
    let mut at = vec![];
    let mut i = 10;
    while i < trace.len() {
        at.push(i);
        let (mut len, mut shift) = (0usize, 0);
        i += 1;
        while let Some(&b) = trace.get(i) {
            len |= usize::from(b & 0x7F) << shift;
            shift += 7;
            i += 1;
            if b & 0x80 == 0 {
                break;
            }
        }
        i += len;
    }
    at.push(trace.len());
    at
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<prop::sample::Index>(), 1..=255u8).prop_map(|(i, b)| Mutation::Flip(i, b)),
        (any::<prop::sample::Index>(), any::<u8>()).prop_map(|(i, b)| Mutation::Insert(i, b)),
        any::<prop::sample::Index>().prop_map(Mutation::Delete),
        (
            any::<prop::sample::Index>(),
            prop::sample::select(&TAGS[..]),
            prop::collection::vec(any::<u8>(), 0..24)
        )
            .prop_map(|(i, t, p)| Mutation::Record(i, t, p)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// Arbitrary bytes, after the header and the recording's `Begin` half
    /// the time (else nearly every case stops at the magic).
    #[test]
    fn arbitrary_bytes_never_panic_hang_or_overallocate(
        begin in any::<bool>(),
        bytes in prop::collection::vec(any::<u8>(), 0..600),
    ) {
        let (rec, fd) = RECORDING.with(Clone::clone);
        let mut trace = Vec::new();
        if begin {
            trace.extend_from_slice(&rec[..12 + usize::from(rec[11])]);
        }
        trace.extend_from_slice(&bytes);
        assert_contained(trace, fd)?;
    }

    /// A real recording with a few bytes flipped, inserted or deleted, or
    /// records inserted.
    #[test]
    fn mutated_recordings_never_panic_hang_or_overallocate(
        mutations in prop::collection::vec(mutation(), 1..6),
    ) {
        let (mut trace, fd) = RECORDING.with(Clone::clone);
        for m in mutations {
            match m {
                Mutation::Flip(i, b) => {
                    let i = i.index(trace.len());
                    trace[i] ^= b;
                }
                Mutation::Insert(i, b) => {
                    let i = i.index(trace.len() + 1);
                    trace.insert(i, b);
                }
                Mutation::Delete(i) => {
                    if !trace.is_empty() {
                        let i = i.index(trace.len());
                        trace.remove(i);
                    }
                }
                Mutation::Record(i, tag, payload) => {
                    let at = boundaries(&trace);
                    let i = at[i.index(at.len())].min(trace.len());
                    let mut rec = vec![tag];
                    varint(&mut rec, payload.len() as u64);
                    rec.extend_from_slice(&payload);
                    trace.splice(i..i, rec);
                }
            }
        }
        assert_contained(trace, fd)?;
    }
}
