//! The scenarios, written once against [`Fixture`] and run on every backend.
//!
//! Each scenario drives the loop in steps (see `record.rs`) with peer actions
//! between them, asserts what every backend must do, and returns its
//! [`Record`]. The *compared* scenarios ([`Scenario::compared`](super::Scenario::compared))
//! must also produce the same canonical record on every backend (the
//! differential check compares each OS backend with the simulator); the
//! others assert the differences a backend declares in its
//! [`Capabilities`](crate::backend::Capabilities), never by its name.

use std::cell::Cell;
use std::rc::Rc;
use std::time::Duration;

use crate::backend::{ClosedFd, Hangup, Level};
use crate::{Error, Interest, Io, IoEvent, Loop, Ready, RunMode, RunOutcome, Trigger};

use super::fixture::{Fixture, SharedStream};
use super::record::{drain, fill, try_write, write_all, End, Log, Record};

use RunMode::{NoWait, Once};

/// What `regular_file` checks on every platform, once the handles exist:
/// `file` and `dir` (handles of a file and a directory, given as sources)
/// are refused at the first flush (`ERROR`, stopped, the modifies failed),
/// and a pipe next to `file_again` (the file once more) still works.
/// Returns the loop with the record, for the caller to drop in the order
/// its handles need.
pub fn refused_beside_a_pipe<'s, T, P, W>(
    f: &P,
    (file, dir, file_again): (T, T, T),
    (r, w): (W, W),
) -> (Loop<'s, Log>, Record)
where
    T: crate::Source + 'static,
    P: Fixture,
    W: SharedStream + crate::Source + 'static,
{
    let backend = f.backend();
    let (mut lp, mut log) = start(f);
    log.name_fd(&file, "file");
    log.name_fd(&dir, "dir");
    let a = lp.io(file, Interest::READABLE, sleeper("file")).unwrap();
    let b = lp.io(dir, Interest::READABLE, sleeper("dir")).unwrap();
    log.step(&mut lp, NoWait);
    log.expect(&["dir:r killed", "file:r killed"], &[]);
    log.expect_modifies(&["file: - => r failed", "dir: - => r failed"]);
    assert_eq!(log.last().raw("file"), Ready::ERROR | Ready::READABLE);
    let stopped = !lp.is_active(a).unwrap() && !lp.is_active(b).unwrap();
    assert!(stopped, "{backend}: refused watchers are stopped");
    log.step(&mut lp, NoWait);
    log.expect_outcome(RunOutcome::NoActiveWatchers);

    lp.io(file_again, Interest::WRITABLE, sleeper("file"))
        .unwrap();
    lp.io(r, Interest::READABLE, reader("pipe")).unwrap();
    write_all(&w, b"x");
    log.step(&mut lp, NoWait);
    log.expect(
        &["file:w killed", "pipe:r"],
        &["pipe read \"x\" then would-block"],
    );
    drop(w);
    (lp, log.into_record())
}

/// A loop on the fixture's backend, and the log that is its state.
pub fn start<'s, F: Fixture>(f: &F) -> (Loop<'s, Log>, Log) {
    let (lp, modifies) = f.new_loop();
    (lp, Log::new(f.backend(), modifies))
}

/// A callback that logs the dispatch and reads everything available; on EOF
/// it removes its watcher.
pub fn reader<'s, T: SharedStream + 's>(
    name: &'static str,
) -> impl FnMut(&mut Loop<'s, Log>, &mut Log, IoEvent<'_, T>) + 's {
    move |lp, log, ev| {
        log.seen(lp, name, &ev);
        let (note, end) = drain(&*ev.source);
        log.note(format!("{name} {note}"));
        if end == End::Eof {
            lp.remove(ev.watcher).unwrap();
        }
    }
}

/// A callback that only logs the dispatch (never reads or writes).
pub fn sleeper<'s, T: 's>(
    name: &'static str,
) -> impl FnMut(&mut Loop<'s, Log>, &mut Log, IoEvent<'_, T>) + 's {
    move |lp, log, ev| log.seen(lp, name, &ev)
}

// ------------------------------------------- what legitimately differs
//
// What the scenarios assert of a hang-up, by the backend's declaration
// (`Capabilities::hangup`).

/// Whether a report that comes after the peer hung up must carry
/// `Ready::HUP`: `hung_up_before_armed` says whether the hang-up came
/// before the fd was registered (or re-armed), so that a backend that
/// reports readiness as of its wake-up saw it too. `None`: either is
/// right.
fn hup_expected(hangup: Hangup, hung_up_before_armed: bool) -> Option<bool> {
    match hangup {
        Hangup::Always => Some(true),
        Hangup::Never => Some(false),
        Hangup::AsOfWakeup if hung_up_before_armed => Some(true),
        Hangup::AsOfWakeup => None,
    }
}

/// Asserts the `HUP` bit of `raw` against [`hup_expected`].
#[track_caller]
fn check_hup(log: &Log, what: &str, raw: Ready, hangup: Hangup, before_armed: bool) {
    if let Some(want) = hup_expected(hangup, before_armed) {
        log.require(raw.is_hup() == want, || {
            let must = if want { "must carry" } else { "must not carry" };
            format!("{what}: {raw}: with Hangup::{hangup:?} declared, this report {must} HUP")
        });
    }
}

// ------------------------------------------------------------------ compared

/// Readable: once per step while unread data is there, never without data;
/// a socketpair and a pipe.
pub fn readable<F: Fixture>(f: &F) -> Record {
    let (a, peer) = f.pair("a");
    let (r, w) = f.pipe("p");
    let (mut lp, mut log) = start(f);
    log.name_fd(&a, "a");
    log.name_fd(&r, "p");
    lp.io(a, Interest::READABLE, reader("a")).unwrap();
    lp.io(r, Interest::READABLE, reader("p")).unwrap();

    log.step(&mut lp, NoWait);
    log.expect(&[], &[]);
    log.expect_modifies(&["a: - => r", "p: - => r"]);

    write_all(&peer, b"ping");
    log.step(&mut lp, NoWait);
    log.expect(&["a:r"], &["a read \"ping\" then would-block"]);
    log.expect_modifies(&[]);

    log.step(&mut lp, NoWait);
    log.expect(&[], &[]);

    // Two writes, one report.
    write_all(&peer, b"pon");
    write_all(&peer, b"g!");
    write_all(&w, b"through the pipe");
    log.step(&mut lp, NoWait);
    log.expect(
        &["a:r", "p:r"],
        &[
            "a read \"pong!\" then would-block",
            "p read \"through the pipe\" then would-block",
        ],
    );
    log.step(&mut lp, NoWait);
    log.expect(&[], &[]);
    drop((peer, w));
    log.into_record()
}

/// Writable: reported at once on a fresh socket; a watcher that stops
/// itself is not called again until started.
pub fn writable<F: Fixture>(f: &F) -> Record {
    let (a, peer) = f.pair("a");
    let (keep, keep_peer) = f.pair("k");
    let (mut lp, mut log) = start(f);
    log.name_fd(&a, "a");
    log.name_fd(&keep, "k");
    // An idle watcher, so that every step is an iteration.
    lp.io(keep, Interest::READABLE, sleeper("k")).unwrap();
    let io = lp
        .io(a, Interest::WRITABLE, |lp, log, ev| {
            log.seen(lp, "a", &ev);
            log.note(format!("a {}", try_write(&*ev.source, b"hello")));
            lp.stop(ev.watcher).unwrap();
        })
        .unwrap();
    log.step(&mut lp, NoWait);
    log.expect(&["a:w"], &["a wrote 5"]);
    log.expect_modifies(&["k: - => r", "a: - => w"]);

    log.step(&mut lp, NoWait);
    log.expect(&[], &[]);
    log.expect_modifies(&["a: w => -"]);

    let (got, _) = drain(&peer);
    log.note(format!("peer {got}"));
    lp.start(io).unwrap();
    log.step(&mut lp, NoWait);
    log.expect(
        &["a:w"],
        &["a wrote 5", "peer read \"hello\" then would-block"],
    );
    log.expect_modifies(&["a: - => w"]);
    drop(keep_peer);
    log.into_record()
}

/// Backpressure: a full socket (and a full pipe) is not writable, not even
/// spuriously; it is again once the peer has drained it.
pub fn writable_after_full<F: Fixture>(f: &F) -> Record {
    let (a, peer) = f.pair("a");
    let (pr, pw) = f.pipe("p");
    let (mut lp, mut log) = start(f);
    log.name_fd(&a, "a");
    log.name_fd(&pw, "p");
    lp.io(a, Interest::WRITABLE, |lp, log, ev| {
        log.seen(lp, "a", &ev);
        fill(&*ev.source);
        log.note("a filled");
    })
    .unwrap();
    lp.io(pw, Interest::WRITABLE, |lp, log, ev| {
        log.seen(lp, "p", &ev);
        fill(&*ev.source);
        log.note("p filled");
    })
    .unwrap();
    log.step(&mut lp, NoWait);
    log.expect(&["a:w", "p:w"], &["a filled", "p filled"]);
    for _ in 0..3 {
        log.step(&mut lp, NoWait);
        log.expect(&[], &[]);
    }
    let (got, end) = drain(&peer);
    assert_eq!(end, End::WouldBlock, "{got}");
    log.note("peer drained a");
    log.step(&mut lp, NoWait);
    log.expect(&["a:w"], &["a filled", "peer drained a"]);
    let (got, end) = drain(&pr);
    assert_eq!(end, End::WouldBlock, "{got}");
    log.note("peer drained p");
    log.step(&mut lp, NoWait);
    log.expect(&["p:w"], &["p filled", "peer drained p"]);
    log.step(&mut lp, NoWait);
    log.expect(&[], &[]);
    log.into_record()
}

/// Both directions on one watcher.
pub fn both<F: Fixture>(f: &F) -> Record {
    let (a, peer) = f.pair("a");
    let (mut lp, mut log) = start(f);
    log.name_fd(&a, "a");
    let io = lp
        .io(a, Interest::BOTH, |lp, log, ev| {
            log.seen(lp, "a", &ev);
            if ev.ready.is_readable() {
                let (note, _) = drain(&*ev.source);
                log.note(format!("a {note}"));
            }
        })
        .unwrap();
    log.step(&mut lp, NoWait);
    log.expect(&["a:w"], &[]);
    log.expect_modifies(&["a: - => rw"]);
    write_all(&peer, b"x");
    log.step(&mut lp, NoWait);
    log.expect(&["a:rw"], &["a read \"x\" then would-block"]);
    log.step(&mut lp, NoWait);
    log.expect(&["a:w"], &[]);
    io.set_interest(&mut lp, Interest::READABLE).unwrap();
    log.step(&mut lp, NoWait);
    log.expect(&[], &[]);
    log.expect_modifies(&["a: rw => r"]);
    write_all(&peer, b"y");
    log.step(&mut lp, NoWait);
    log.expect(&["a:r"], &["a read \"y\" then would-block"]);
    log.into_record()
}

/// Several watchers on one fd: the backend sees the union of their
/// interests, each watcher gets its own part of the readiness.
pub fn several_watchers_one_fd<F: Fixture>(f: &F) -> Record {
    let (sock, peer) = f.pair("s");
    let (mut lp, mut log) = start(f);
    log.name_fd(&sock, "s");
    let r1 = Io::borrowed(&mut lp, &sock, Interest::READABLE, reader("r1")).unwrap();
    let r2 = Io::borrowed(&mut lp, &sock, Interest::READABLE, sleeper("r2")).unwrap();
    let w = Io::borrowed(&mut lp, &sock, Interest::WRITABLE, |lp, log, ev| {
        log.seen(lp, "w", &ev);
        lp.stop(ev.watcher).unwrap();
    })
    .unwrap();
    log.step(&mut lp, NoWait);
    log.expect(&["w:w"], &[]);
    log.expect_modifies(&["s: - => rw"]);

    write_all(&peer, b"data");
    log.step(&mut lp, NoWait);
    log.expect(&["r1:r", "r2:r"], &["r1 read \"data\" then would-block"]);
    log.expect_modifies(&["s: rw => r"]);

    log.step(&mut lp, NoWait);
    log.expect(&[], &[]);

    lp.stop(r1).unwrap();
    write_all(&peer, b"more");
    log.step(&mut lp, NoWait);
    log.expect(&["r2:r"], &[]);
    log.expect_modifies(&[]);

    lp.start(w).unwrap();
    log.step(&mut lp, NoWait);
    log.expect(&["r2:r", "w:w"], &[]);
    log.expect_modifies(&["s: r => rw"]);

    lp.start(r1).unwrap();
    lp.remove(r2).unwrap();
    log.step(&mut lp, NoWait);
    log.expect(&["r1:r"], &["r1 read \"more\" then would-block"]);
    log.expect_modifies(&["s: rw => r"]);
    drop(lp);
    log.into_record()
}

/// fd_reify: any number of interest changes to one fd within an iteration
/// cost at most one backend call, and none when they cancel out.
pub fn interest_changes_within_an_iteration<F: Fixture>(f: &F) -> Record {
    let (sock, peer) = f.pair("s");
    let (mut lp, mut log) = start(f);
    log.name_fd(&sock, "s");
    let other: Rc<Cell<Option<crate::Io>>> = Rc::default();
    let first = Rc::new(Cell::new(true));
    let (other_a, other_b) = (other.clone(), other.clone());
    let a = Io::borrowed(&mut lp, &sock, Interest::READABLE, move |lp, log, ev| {
        log.seen(lp, "A", &ev);
        let (note, _) = drain(*ev.source);
        log.note(format!("A {note}"));
        if first.replace(false) {
            // Changes that cancel out: no backend call at all.
            let b = other_a.get().unwrap();
            lp.start(b).unwrap();
            lp.stop(b).unwrap();
            let me = ev.watcher;
            me.set_interest(lp, Interest::BOTH).unwrap();
            me.set_interest(lp, Interest::WRITABLE).unwrap();
            me.set_interest(lp, Interest::READABLE).unwrap();
        }
    })
    .unwrap();
    let b = Io::borrowed(&mut lp, &sock, Interest::WRITABLE, move |lp, log, ev| {
        log.seen(lp, "B", &ev);
        lp.stop(ev.watcher).unwrap();
        let a = other_b.get().unwrap();
        a.set_interest(lp, Interest::READABLE).unwrap();
    })
    .unwrap();
    lp.stop(b).unwrap();
    other.set(Some(b));

    log.step(&mut lp, NoWait);
    log.expect(&[], &[]);
    log.expect_modifies(&["s: - => r"]);

    write_all(&peer, b"x");
    log.step(&mut lp, NoWait);
    log.expect(&["A:r"], &["A read \"x\" then would-block"]);
    log.expect_modifies(&[]);

    log.step(&mut lp, NoWait);
    log.expect(&[], &[]);
    log.expect_modifies(&[]);

    // B's callback gives A its readable interest back: one call each way.
    other.set(Some(a));
    a.set_interest(&mut lp, Interest::WRITABLE).unwrap();
    lp.start(b).unwrap();
    log.step(&mut lp, NoWait);
    log.expect(&["A:w", "B:w"], &["A read \"\" then would-block"]);
    log.expect_modifies(&["s: r => w"]);

    log.step(&mut lp, NoWait);
    log.expect(&[], &[]);
    log.expect_modifies(&["s: w => r"]);

    // Between iterations too.
    a.set_interest(&mut lp, Interest::BOTH).unwrap();
    lp.stop(a).unwrap();
    lp.start(a).unwrap();
    a.set_interest(&mut lp, Interest::READABLE).unwrap();
    log.step(&mut lp, NoWait);
    log.expect(&[], &[]);
    log.expect_modifies(&[]);

    // Removing the last watcher tells the backend at once.
    lp.remove(a).unwrap();
    lp.remove(b).unwrap();
    log.step(&mut lp, NoWait);
    log.expect_outcome(RunOutcome::NoActiveWatchers);
    log.expect_modifies(&["s: r => -"]);
    drop(lp);
    log.into_record()
}

/// A peer that closes a socketpair: the reader gets readable (and HUP where
/// the backend can say so) and then EOF; a writer gets the error on its
/// next write.
pub fn hangup_socket<F: Fixture>(f: &F) -> Record {
    let (a, pa) = f.pair("a");
    let (b, pb) = f.pair("b");
    let (mut lp, mut log) = start(f);
    log.name_fd(&a, "a");
    log.name_fd(&b, "b");
    lp.io(a, Interest::READABLE, reader("a")).unwrap();
    log.step(&mut lp, NoWait);
    log.expect(&[], &[]);

    write_all(&pa, b"bye");
    drop(pa);
    log.step(&mut lp, NoWait);
    log.expect(&["a:r"], &["a read \"bye\" then eof"]);
    log.expect_modifies(&["a: r => -"]);
    // select has no way to say "hang-up": it shows as readability. A
    // backend reporting as of its wake-up may have woken at the data.
    let hangup = lp.capabilities().hangup;
    let raw = log.last().raw("a");
    check_hup(&log, "a, data then a close", raw, hangup, false);
    log.require(!raw.is_error(), || format!("a: {raw}: an error"));

    drop(pb);
    f.settle_peer_close(&b);
    lp.io(b, Interest::WRITABLE, |lp, log, ev| {
        log.seen(lp, "b", &ev);
        log.note(format!("b {}", try_write(&*ev.source, b"x")));
        lp.remove(ev.watcher).unwrap();
    })
    .unwrap();
    log.step(&mut lp, NoWait);
    log.expect(&["b:w"], &["b write error BrokenPipe"]);
    log.expect_modifies(&["b: - => w", "b: w => -"]);
    let raw = log.last().raw("b");
    check_hup(&log, "b, closed before it was watched", raw, hangup, true);

    log.step(&mut lp, NoWait);
    log.expect_outcome(RunOutcome::NoActiveWatchers);
    log.into_record()
}

/// Pipes: the writer's close gives the reader EOF; the reader's close gives
/// a (full) writer an event and `EPIPE` on its next write.
pub fn hangup_pipe<F: Fixture>(f: &F) -> Record {
    let (r, w) = f.pipe("p");
    let (e, ew) = f.pipe("e");
    let (r2, w2) = f.pipe("q");
    let (mut lp, mut log) = start(f);
    log.name_fd(&r, "r");
    log.name_fd(&e, "e");
    log.name_fd(&w2, "w");
    lp.io(r, Interest::READABLE, reader("r")).unwrap();
    lp.io(e, Interest::READABLE, reader("e")).unwrap();
    write_all(&w, b"last");
    drop(w);
    // An empty pipe's writer leaves: POLLHUP / EPOLLHUP alone on a kernel.
    drop(ew);
    log.step(&mut lp, NoWait);
    log.expect(
        &["e:r", "r:r"],
        &["e read \"\" then eof", "r read \"last\" then eof"],
    );
    let hangup = lp.capabilities().hangup;
    for name in ["r", "e"] {
        let raw = log.last().raw(name);
        if name == "r"
            && !raw.is_hup()
            && f.as_os().is_some()
            && super::fixture::fin_hidden_by_data()
        {
            // Wine finds a hang-up with a peek, which returns the data
            // first: the FIN behind unread data shows only once the data
            // is read. (`e`, with nothing before its FIN, is still
            // checked.)
            eprintln!(
                "{}: hangup_pipe: WINE DIFFERS FROM WINDOWS: a FIN behind unread data is not \
                 reported (no AFD_POLL_DISCONNECT) until the data is read; r's report ({raw}) is \
                 not required to carry HUP",
                f.backend()
            );
            continue;
        }
        check_hup(&log, name, raw, hangup, true);
    }

    let filled = Rc::new(Cell::new(false));
    lp.io(w2, Interest::WRITABLE, move |lp, log, ev| {
        log.seen(lp, "w", &ev);
        if !filled.replace(true) {
            fill(&*ev.source);
            log.note("w filled");
        } else {
            log.note(format!("w {}", try_write(&*ev.source, b"x")));
            lp.remove(ev.watcher).unwrap();
        }
    })
    .unwrap();
    log.step(&mut lp, NoWait);
    log.expect(&["w:w"], &["w filled"]);
    log.step(&mut lp, NoWait);
    log.expect(&[], &[]);

    drop(r2);
    log.step(&mut lp, NoWait);
    log.expect(&["w:w"], &["w write error BrokenPipe"]);
    // What a backend says when a full pipe's reader leaves (normalised in
    // the comparison: every one of them wakes the writer, whose write then
    // fails): an error (epoll, poll: `EPOLLERR` / `POLLERR` alone, with no
    // room for `WRITABLE`; kqueue: `EV_EOF` with the error; the simulator:
    // a reset, `HUP | ERROR`), or plain writability where the mechanism
    // has no error bit (select).
    let raw = log.last().raw("w");
    match hangup {
        Hangup::Never => log.require(raw == Ready::WRITABLE, || {
            format!("full pipe, reader gone: {raw}, not plain writability (hangup {hangup:?})")
        }),
        Hangup::Always | Hangup::AsOfWakeup => log.require(raw.is_error(), || {
            format!("full pipe, reader gone: {raw}, without ERROR (hangup {hangup:?})")
        }),
    }
    log.step(&mut lp, NoWait);
    log.expect_outcome(RunOutcome::NoActiveWatchers);
    log.into_record()
}

/// Level-triggered: reported on every iteration while the data is unread,
/// and while a socket has room; for every fd that a wait reported, not
/// only the first; again at once for a watcher restarted after it stopped
/// itself. A backend over an edge-only mechanism that re-arms each
/// reported fd (`Level::Rearmed`) is told so when it fails here.
pub fn level<F: Fixture>(f: &F) -> Record {
    let (a, peer) = f.pair("a");
    let (b, b_peer) = f.pair("b");
    let (c, c_peer) = f.pair("c");
    let (w, w_peer) = f.pair("w");
    let (mut lp, mut log) = start(f);
    let level = lp.capabilities().level;
    log.name_fd(&a, "a");
    log.name_fd(&b, "b");
    log.name_fd(&c, "c");
    log.name_fd(&w, "w");
    let read_now = Rc::new(Cell::new(false));
    let read = read_now.clone();
    lp.io(a, Interest::READABLE, move |lp, log, ev| {
        log.seen(lp, "a", &ev);
        if read.get() {
            let (note, _) = drain(&*ev.source);
            log.note(format!("a {note}"));
        }
    })
    .unwrap();
    write_all(&peer, b"x");
    for _ in 0..3 {
        log.step(&mut lp, NoWait);
        expect_level(&log, level, &["a:r"], &[]);
    }
    read_now.set(true);
    log.step(&mut lp, NoWait);
    expect_level(&log, level, &["a:r"], &["a read \"x\" then would-block"]);
    log.step(&mut lp, NoWait);
    expect_level(&log, level, &[], &[]);

    // Several fds in one wait, each reported on every iteration; and a
    // socket with room, writable on every iteration.
    lp.io(b, Interest::READABLE, sleeper("b")).unwrap();
    lp.io(c, Interest::READABLE, sleeper("c")).unwrap();
    let wio = lp.io(w, Interest::WRITABLE, sleeper("w")).unwrap();
    write_all(&b_peer, b"y"); // never read
    write_all(&c_peer, b"z"); // never read
    for _ in 0..3 {
        log.step(&mut lp, NoWait);
        expect_level(&log, level, &["b:r", "c:r", "w:w"], &[]);
    }
    // A watcher that stops itself and is started again is reported again
    // at once (its fd still ready): the restart registers it afresh.
    lp.stop(wio).unwrap();
    log.step(&mut lp, NoWait);
    expect_level(&log, level, &["b:r", "c:r"], &[]);
    lp.start(wio).unwrap();
    log.step(&mut lp, NoWait);
    expect_level(&log, level, &["b:r", "c:r", "w:w"], &[]);
    drop((b_peer, c_peer, w_peer));
    log.into_record()
}

/// `Log::expect` for [`level`], with what the backend declared about level
/// triggering in the message when it fails: a backend that re-arms
/// (`Level::Rearmed`) and misses a re-arm fails here first.
#[track_caller]
fn expect_level(log: &Log, level: Level, dispatched: &[&str], notes: &[&str]) {
    let mut want: Vec<String> = dispatched.iter().map(|s| s.to_string()).collect();
    want.sort();
    let got = log.last().canonical_dispatched();
    log.require(level != Level::Rearmed || got == want, || {
        format!(
            "dispatched {got:?}, not {want:?}, with Level::Rearmed declared: each fd that a \
             wait reports with level interest must be re-armed before the next wait, and \
             nothing else (docs/porting.md, \"Edge-only mechanisms\")"
        )
    });
    log.expect(dispatched, notes);
}

/// One-shot: reported once, then disarmed (though still readable) until
/// `start` re-arms it, from outside or inside the callback. Native on
/// epoll (and kqueue), emulated by the loop elsewhere: same behaviour.
pub fn oneshot<F: Fixture>(f: &F) -> Record {
    let backend = f.backend();
    let (a, peer) = f.pair("a");
    let (keep, keep_peer) = f.pair("k");
    let (mut lp, mut log) = start(f);
    log.name_fd(&a, "a");
    // An idle watcher, so that every step is an iteration.
    lp.io(keep, Interest::READABLE, sleeper("k")).unwrap();
    let native = lp.capabilities().oneshot;
    // Native and emulated one-shot legitimately make different calls.
    log.dont_compare_modifies();
    let rearm = Rc::new(Cell::new(false));
    let again = rearm.clone();
    let io = lp
        .io(
            a,
            Interest::READABLE.with_trigger(Trigger::Oneshot),
            move |lp, log, ev| {
                log.seen(lp, "a", &ev);
                if again.get() {
                    lp.start(ev.watcher).unwrap();
                }
            },
        )
        .unwrap();
    write_all(&peer, b"x"); // never read
    log.step(&mut lp, NoWait);
    log.expect(&["a:r stopped"], &[]);
    assert!(!lp.is_active(io).unwrap());
    // Native: the backend is handed the one-shot registration itself;
    // emulated: a level one, which the loop stops after the report.
    let first = log.last().modifies.iter().find(|m| m.starts_with("a: "));
    let want = if native {
        "a: - => r/oneshot"
    } else {
        "a: - => r"
    };
    log.require(first.map(String::as_str) == Some(want), || {
        format!("native one-shot {native}: the first modify of a is {first:?}, not {want:?}")
    });
    for _ in 0..2 {
        log.step(&mut lp, NoWait);
        log.expect_outcome(RunOutcome::IterationDone);
        log.expect(&[], &[]);
    }
    lp.start(io).unwrap();
    log.step(&mut lp, NoWait);
    log.expect(&["a:r stopped"], &[]);
    log.step(&mut lp, NoWait);
    log.expect(&[], &[]);

    rearm.set(true);
    lp.start(io).unwrap();
    for _ in 0..2 {
        log.step(&mut lp, NoWait);
        log.expect(&["a:r stopped"], &[]);
        assert!(
            lp.is_active(io).unwrap(),
            "{backend}: re-armed by the callback"
        );
    }
    rearm.set(false);
    log.step(&mut lp, NoWait);
    log.expect(&["a:r stopped"], &[]);
    log.step(&mut lp, NoWait);
    log.expect(&[], &[]);
    assert!(!lp.is_active(io).unwrap());
    drop((peer, keep_peer));
    log.into_record()
}

/// Native one-shot at the backend itself (only where
/// [`Capabilities::oneshot`](crate::backend::Capabilities::oneshot) is
/// declared; an emulating backend never sees a one-shot registration): a
/// one-shot registration is reported once, then not again, though still
/// readable, until a `modify` from `NONE.with_trigger(Oneshot)` re-arms
/// it. Run on a bare backend ([`Fixture::bare_backend`]), for the loop
/// re-arms or forgets a reported one-shot fd before its next wait: through
/// a loop, a backend that declares native one-shot and keeps reporting
/// (a level registration) looks the same as one that disarms. `None`
/// where the fixture has no bare backend.
pub fn oneshot_disarms<F: Fixture>(f: &F) -> Option<Record> {
    let mut backend = f.bare_backend()?;
    let name = f.backend();
    let record = Record {
        backend: name,
        steps: Vec::new(),
        compare_modifies: false,
    };
    if !backend.capabilities().oneshot {
        return Some(record); // emulated: the `oneshot` scenario's
    }
    let (a, peer) = f.pair("a");
    let fd = super::fixture::fd_of(&a);
    let one = Interest::READABLE.with_trigger(Trigger::Oneshot);
    let disarmed = Interest::NONE.with_trigger(Trigger::Oneshot);
    let mut events = Vec::new();
    // Polls until `fd` is reported (at most a few seconds), or once
    // without waiting; whether `fd` was reported.
    let mut poll = |backend: &mut dyn crate::backend::Backend, wait: bool| -> bool {
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        loop {
            events.clear();
            let timeout = if wait {
                deadline.saturating_duration_since(std::time::Instant::now())
            } else {
                Duration::ZERO
            };
            backend
                .poll(Some(timeout), &mut events)
                .unwrap_or_else(|e| panic!("{name}: poll failed: {e}"));
            let seen = events.iter().any(|e| e.fd == fd);
            if seen || !wait || timeout.is_zero() {
                return seen;
            }
        }
    };
    backend
        .modify(fd, Interest::NONE, one)
        .unwrap_or_else(|e| panic!("{name}: a one-shot registration failed: {e}"));
    write_all(&peer, b"x"); // never read
    for round in ["registered", "re-armed"] {
        assert!(
            poll(&mut *backend, true),
            "{name}: a one-shot registration ({round}) of a readable fd was not reported"
        );
        for _ in 0..2 {
            assert!(
                !poll(&mut *backend, false),
                "{name} declares native one-shot, but reported a one-shot registration \
                 ({round}) again after its report, before any re-arm: the kernel must disarm \
                 it when it reports it (docs/porting.md, one-shot)"
            );
        }
        backend
            .modify(fd, disarmed, one)
            .unwrap_or_else(|e| panic!("{name}: re-arming a one-shot registration failed: {e}"));
    }
    backend
        .modify(fd, one, Interest::NONE)
        .unwrap_or_else(|e| panic!("{name}: forgetting a one-shot registration failed: {e}"));
    drop(backend); // before the source, as a loop does
    drop((a, peer));
    Some(record)
}

/// Spurious readiness: a report whose data another callback already took,
/// and an event fed by hand; the read says `WouldBlock` and the loop goes
/// on.
pub fn spurious_readiness<F: Fixture>(f: &F) -> Record {
    let (sock, peer) = f.pair("s");
    let (mut lp, mut log) = start(f);
    log.name_fd(&sock, "s");
    let r1 = Io::borrowed(&mut lp, &sock, Interest::READABLE, reader("r1")).unwrap();
    Io::borrowed(&mut lp, &sock, Interest::READABLE, reader("r2")).unwrap();
    write_all(&peer, b"x");
    log.step(&mut lp, NoWait);
    // Both were ready when the backend reported; the first took the data.
    log.expect(
        &["r1:r", "r2:r"],
        &[
            "r1 read \"x\" then would-block",
            "r2 read \"\" then would-block",
        ],
    );
    lp.feed_event(r1, Ready::READABLE).unwrap();
    log.step(&mut lp, NoWait);
    log.expect(&["r1:r"], &["r1 read \"\" then would-block"]);
    log.step(&mut lp, NoWait);
    log.expect(&[], &[]);
    drop(lp);
    log.into_record()
}

/// A wait interrupted again and again (`EINTR` from a signal whose handler
/// does nothing, on a kernel; injected spurious wakeups on the simulator):
/// the backend waits again for the time left (one rule: docs/porting.md,
/// `poll`), never reports an error, and the loop neither fires the timer
/// early nor takes the interruption for "nothing left to watch". On a
/// kernel the whole wait is one iteration: a backend that returned with no
/// events at an interruption would make it several (and a
/// `RunMode::Once` return having done nothing). The simulator's injected
/// wakeups are the faults a user's code is tested against, not a backend's
/// conduct: there the loop polls again.
pub fn wait_interrupted<F: Fixture>(f: &F) -> Record {
    let backend = f.backend();
    let after = Duration::from_millis(200);
    let (a, peer) = f.pair("a");
    let (mut lp, mut log) = start(f);
    log.name_fd(&a, "a");
    let io = lp.io(a, Interest::READABLE, reader("a")).unwrap();
    // The stopwatch starts before the loop's time is read: the timer is
    // due `after` from that reading, so however long this thread is
    // preempted in between, the stopwatch cannot read less than `after`
    // when it fires (started after, it could: a loaded machine made this
    // scenario report a timer that was not early as early).
    let sw = f.stopwatch();
    lp.update_now();
    let fired = Rc::new(Cell::new(0));
    let count = fired.clone();
    lp.timer(after, Duration::ZERO, move |lp, log, _| {
        count.set(count.get() + 1);
        let e = sw.elapsed();
        if e >= after {
            log.note("timer fired, not early");
        } else {
            log.note(format!("timer fired EARLY, after {e:?}"));
        }
        // The io watcher kept the loop alive until now.
        lp.remove(io).unwrap();
    })
    .unwrap();
    let sw = f.stopwatch();
    let ((), interrupts) = f.interrupt_waits(after, || {
        log.step(&mut lp, RunMode::Default);
    });
    log.expect(&[], &["timer fired, not early"]);
    log.expect_outcome(RunOutcome::NoActiveWatchers);
    assert_eq!(fired.get(), 1, "{backend}: the timer fires once");
    assert!(interrupts > 0, "{backend}: no wait was interrupted");
    let iterations = lp.iteration();
    assert!(
        iterations <= 1 + interrupts as u64,
        "{backend}: {iterations} iterations for {interrupts} interruptions"
    );
    if !f.is_virtual() {
        assert_eq!(
            iterations, 1,
            "{backend}: {iterations} iterations for one 200 ms wait interrupted {interrupts} times: \
             an interrupted wait must go on for the time left, not return with no events \
             (docs/porting.md, poll: EINTR)"
        );
    }
    if f.is_virtual() {
        assert_eq!(sw.elapsed(), after, "{backend}");
    }
    drop(peer);
    log.into_record()
}

/// Timeouts: a timer never fires early (the backend rounds its wait up, not
/// down), and a sub-millisecond remainder does not turn into a busy loop.
pub fn timeouts<F: Fixture>(f: &F) -> Record {
    let backend = f.backend();
    let (a, peer) = f.pair("a");
    let (mut lp, mut log) = start(f);
    log.name_fd(&a, "a");
    // An idle fd, so that the backend waits on something.
    lp.io(a, Interest::READABLE, reader("a")).unwrap();
    log.step(&mut lp, NoWait);
    log.expect(&[], &[]);
    let mut outcome = RunOutcome::IterationDone;
    for after in [300, 1500, 2500, 15_000].map(Duration::from_micros) {
        // Started before the loop reads its time (see wait_interrupted).
        let sw = f.stopwatch();
        lp.update_now();
        let fired = Rc::new(Cell::new(None));
        let at = fired.clone();
        lp.timer(after, Duration::ZERO, move |_, _, _| {
            at.set(Some(sw.elapsed()))
        })
        .unwrap();
        let before = lp.iteration();
        while fired.get().is_none() {
            outcome = lp.run(Once, &mut log).unwrap();
            let n = lp.iteration() - before;
            assert!(
                n < 100,
                "{backend}: busy loop waiting for a {after:?} timer"
            );
        }
        let iterations = lp.iteration() - before;
        let elapsed = fired.get().unwrap();
        assert!(
            elapsed >= after,
            "{backend}: a {after:?} timer fired early, after {elapsed:?}"
        );
        if f.is_virtual() {
            assert_eq!((elapsed, iterations), (after, 1), "{backend}");
        } else {
            // One poll rounded up; a second if the kernel woke up a hair
            // early by its own clock. Hundreds would be a busy loop.
            assert!(
                iterations <= 3,
                "{backend}: {iterations} iterations for a {after:?} timer"
            );
        }
        log.note(format!("{after:?} timer fired"));
    }
    log.end_step(Once, outcome);
    log.expect(
        &[],
        &[
            "300µs timer fired",
            "1.5ms timer fired",
            "2.5ms timer fired",
            "15ms timer fired",
        ],
    );
    drop(peer);
    log.into_record()
}

/// The removal rule: [`Loop::remove`] tells the backend to forget the fd
/// (`modify(fd, old, NONE)`) *before* the source is closed, and the forget
/// must have taken effect when `modify` returns: nothing the backend keeps
/// may hold the file open. An owned source is closed by `remove` itself;
/// one taken back with [`Io::into_source`] by its owner right after.
/// Either way the peer sees EOF at once, before the loop runs again. A
/// backend whose registrations hold a reference to the file (an io_uring
/// poll request does) and that puts its removal off to the next wait
/// fails here: the peer sees nothing until the loop happens to run.
pub fn remove_then_close<F: Fixture>(f: &F) -> Record {
    let (a, pa) = f.pair("a");
    let (b, pb) = f.pair("b");
    let (r, w) = f.pipe("p");
    let (mut lp, mut log) = start(f);
    log.name_fd(&a, "a");
    log.name_fd(&b, "b");
    log.name_fd(&w, "w");
    let ia = lp.io(a, Interest::READABLE, reader("a")).unwrap();
    let ib = lp.io(b, Interest::READABLE, sleeper("b")).unwrap();
    let iw = lp
        .io(w, Interest::WRITABLE, |lp, log, ev| {
            log.seen(lp, "w", &ev);
            lp.stop(ev.watcher).unwrap();
        })
        .unwrap();
    write_all(&pa, b"x");
    log.step(&mut lp, NoWait);
    log.expect(&["a:r", "w:w"], &["a read \"x\" then would-block"]);
    log.expect_modifies(&["a: - => r", "b: - => r", "w: - => w"]);
    // Reported again (so that a backend that re-arms after a report has),
    // and w started again. (Nothing is left unread: closing a socket with
    // data unread would reset the connection, not end it.)
    write_all(&pa, b"y");
    lp.start(iw).unwrap();
    log.step(&mut lp, NoWait);
    log.expect(&["a:r", "w:w"], &["a read \"y\" then would-block"]);

    lp.remove(ia).unwrap(); // closes a
    let b: F::Sock = ib.into_source(&mut lp).unwrap();
    drop(b); // the owner closes b
    lp.remove(iw).unwrap(); // closes w
                            // No step in between: the files must be closed now.
    for (peer, name) in [(&pa as &dyn SharedStream, "a"), (&pb, "b"), (&r, "w")] {
        let (note, _) = drain(peer);
        log.require(note == "read \"\" then eof", || {
            format!(
                "the peer of {name} {note} after the watcher was removed and its source \
                 closed, instead of EOF: the backend still holds the file (a forget must take \
                 effect before modify returns: the removal rule, docs/porting.md)"
            )
        });
        log.note(format!("peer of {name} {note}"));
    }
    log.step(&mut lp, NoWait);
    log.expect(
        &[],
        &[
            "peer of a read \"\" then eof",
            "peer of b read \"\" then eof",
            "peer of w read \"\" then eof",
        ],
    );
    log.expect_modifies(&["a: r => -", "b: r => -", "w: w => -"]);
    log.expect_outcome(RunOutcome::NoActiveWatchers);
    log.into_record()
}

/// A forget leaves nothing behind. A watcher removed while its fd is
/// ready both ways (data unread, the file still open) is not reported
/// again: the probe fails a poll that reports an fd the loop has not
/// registered (a backend that never deregisters, or whose forget does not
/// reach the kernel, reports it at every wait, and the loop drops those
/// reports silently). The same fd watched again, for reading only, starts
/// clean: readable, never writable (an entry kept from the first
/// registration, its interest merged into the new one, shows as
/// writability, which the probe fails too).
pub fn forget<F: Fixture>(f: &F) -> Record {
    let (s, peer) = f.pair("s");
    let (keep, keep_peer) = f.pair("k");
    let (mut lp, mut log) = start(f);
    log.name_fd(&s, "s");
    log.name_fd(&keep, "k");
    // An idle watcher, so that every step polls.
    lp.io(keep, Interest::READABLE, sleeper("k")).unwrap();
    let first = Io::borrowed(&mut lp, &s, Interest::BOTH, sleeper("s")).unwrap();
    write_all(&peer, b"unread");
    log.step(&mut lp, NoWait);
    log.expect(&["s:rw"], &[]);
    log.expect_modifies(&["k: - => r", "s: - => rw"]);

    lp.remove(first).unwrap();
    log.step(&mut lp, NoWait);
    log.expect(&[], &[]);
    log.expect_modifies(&["s: rw => -"]);
    log.step(&mut lp, NoWait);
    log.expect(&[], &[]);

    Io::borrowed(&mut lp, &s, Interest::READABLE, reader("s")).unwrap();
    log.step(&mut lp, NoWait);
    log.expect(&["s:r"], &["s read \"unread\" then would-block"]);
    log.expect_modifies(&["s: - => r"]);
    log.step(&mut lp, NoWait);
    log.expect(&[], &[]);
    drop(lp);
    drop((peer, keep_peer));
    log.into_record()
}

// ------------------------------------------------------------- per backend

/// The peer closes with data we sent still unread: the connection is reset
/// (`ERROR`, then `ECONNRESET` on the next read, then EOF), on the kernels
/// and on the simulator alike; select cannot report `HUP`/`ERROR`, only
/// readability.
pub fn reset_by_peer<F: Fixture>(f: &F) -> Record {
    let (a, peer) = f.pair("a");
    let (mut lp, mut log) = start(f);
    write_all(&a, b"never read");
    lp.io(a, Interest::READABLE, reader("a")).unwrap();
    drop(peer);
    log.step(&mut lp, NoWait);
    let raw = log.last().raw("a");
    // Wine's recv returns 0 after a reset where Windows (and every Unix)
    // returns the reset: the backend's report is still checked below.
    let reset_read_as_eof = f.as_os().is_some() && super::fixture::reset_reads_as_eof();
    if reset_read_as_eof {
        eprintln!(
            "{}: reset_by_peer: WINE DIFFERS FROM WINDOWS: recv after a reset returns 0 (EOF), \
             not WSAECONNRESET; the read is checked as Wine does it",
            f.backend()
        );
        log.expect(&["a:r"], &["a read \"\" then eof"]);
    } else {
        log.expect(&["a:r"], &["a read \"\" then error ConnectionReset"]);
    }
    // The reset came before the fd was watched: a backend that reports
    // hang-ups at all (as of its wake-up too) reports it whole.
    let hangup = lp.capabilities().hangup;
    let want = match hangup {
        Hangup::Always | Hangup::AsOfWakeup => Ready::READABLE | Ready::HUP | Ready::ERROR,
        Hangup::Never => Ready::READABLE,
    };
    log.require(raw == want, || {
        format!("a reset: {raw}, not {want} (hangup {hangup:?})")
    });
    // The error is reported once; then the hang-up (where the EOF came at
    // once, the reader has removed its watcher already).
    if !reset_read_as_eof {
        log.step(&mut lp, NoWait);
        log.expect(&["a:r"], &["a read \"\" then eof"]);
    }
    log.step(&mut lp, NoWait);
    log.expect_outcome(RunOutcome::NoActiveWatchers);
    log.into_record()
}

/// Edge-triggered: once per arrival on backends that declare it
/// (`Capabilities::edge`: epoll, kqueue); refused with
/// `Error::UnsupportedTrigger` elsewhere.
pub fn edge<F: Fixture>(f: &F) -> Record {
    let backend = f.backend();
    let (a, peer) = f.pair("a");
    let (mut lp, mut log) = start(f);
    let offered = lp.capabilities().edge;
    let edge = Interest::READABLE.with_trigger(Trigger::Edge);
    match lp.io(a, edge, sleeper("a")) {
        Err(Error::UnsupportedTrigger {
            trigger: Trigger::Edge,
            backend: b,
        }) if !offered => {
            assert_eq!(b, lp.backend_name());
            log.note("edge refused");
            log.step(&mut lp, NoWait);
            log.expect(&[], &["edge refused"]);
            log.expect_outcome(RunOutcome::NoActiveWatchers);
        }
        Ok(_) if offered => {
            log.step(&mut lp, NoWait);
            log.expect(&[], &[]);
            for chunk in [b"a", b"b"] {
                write_all(&peer, chunk); // never read
                log.step(&mut lp, NoWait);
                log.expect(&["a:r"], &[]);
                for _ in 0..2 {
                    log.step(&mut lp, NoWait);
                    log.expect(&[], &[]);
                }
            }
        }
        other => panic!(
            "{backend}: edge trigger, declared {offered}: {:?}",
            other.map(|_| ())
        ),
    }
    log.into_record()
}

/// An fd closed behind the loop's back while its watcher is active: its
/// watchers get `Ready::ERROR` and are stopped (libev's `fd_ebadf`), at the
/// point the backend declares (`Capabilities::closed_fd`); the loop neither
/// spins nor fails.
pub fn closed_fd<F: Fixture>(f: &F) -> Record {
    let (x, peer, doom) = f.doomed_pair("x");
    let (mut lp, mut log) = start(f);
    let when = lp.capabilities().closed_fd;
    log.name_fd(&x, "x");
    let io = lp.io(x, Interest::READABLE, sleeper("x")).unwrap();
    log.step(&mut lp, NoWait);
    log.expect(&[], &[]);
    log.expect_modifies(&["x: - => r"]);

    f.close_behind_back(&doom);
    log.step(&mut lp, NoWait);
    let reported = !log.last().dispatched.is_empty();
    log.require(reported == (when == ClosedFd::AtNextWait), || {
        let seen = if reported { "reported" } else { "not reported" };
        format!(
            "an fd closed behind the loop's back was {seen} by the next wait ({:?}), with \
             ClosedFd::{when:?} declared",
            log.last().dispatched
        )
    });
    if when == ClosedFd::AtNextWait {
        log.expect(&["x:r killed"], &[]);
        let raw = log.last().raw("x");
        log.require(raw == Ready::ERROR | Ready::READABLE, || {
            format!("x, closed: {raw}")
        });
        // The loop forgets the fd it killed, best effort.
        log.expect_modifies(&["x: r => -"]);
        log.require(!lp.is_active(io).unwrap(), || {
            format!("closed_fd {when:?}: not stopped at the next wait")
        });
    } else {
        log.expect(&[], &[]);
        log.require(lp.is_active(io).unwrap(), || {
            format!("closed_fd {when:?}: stopped before its interest changed")
        });
    }
    // Neither spins nor dies: a blocking iteration waits for the timer.
    let before = lp.iteration();
    lp.timer(Duration::from_millis(5), Duration::ZERO, |_, log, _| {
        log.note("timer")
    })
    .unwrap();
    log.step(&mut lp, Once);
    log.expect(&[], &["timer"]);
    log.require(lp.iteration() == before + 1, || {
        format!("{} iterations for one timer", lp.iteration() - before)
    });

    io.set_interest(&mut lp, Interest::BOTH).unwrap();
    log.step(&mut lp, NoWait);
    match when {
        ClosedFd::AtNextWait => {
            // A stopped watcher's interest change reaches no backend.
            log.expect(&[], &[]);
            log.expect_modifies(&[]);
        }
        ClosedFd::ModifyFails | ClosedFd::InvalidAfterChange => {
            log.expect(&["x:rw killed"], &[]);
            let raw = log.last().raw("x");
            let want = Ready::ERROR | Ready::READABLE | Ready::WRITABLE;
            log.require(raw == want, || format!("x, closed: {raw}, not {want}"));
            let failed = log
                .last()
                .modifies
                .first()
                .is_some_and(|m| m.ends_with("failed"));
            log.require(failed == (when == ClosedFd::ModifyFails), || {
                format!(
                    "the interest change of an fd closed behind the loop's back {} (modify calls \
                     {:?}), with ClosedFd::{when:?} declared",
                    if failed { "failed" } else { "did not fail" },
                    log.last().modifies
                )
            });
            if when == ClosedFd::ModifyFails {
                // The change fails; the loop forgets the fd as it was.
                log.expect_modifies(&["x: r => rw failed", "x: r => -"]);
            } else {
                // The change is taken; the wait after it says INVALID.
                log.expect_modifies(&["x: r => rw", "x: rw => -"]);
            }
        }
    }
    log.require(!lp.is_active(io).unwrap(), || {
        format!("closed_fd {when:?}: not stopped after its interest changed")
    });
    log.expect_outcome(if when == ClosedFd::AtNextWait {
        RunOutcome::NoActiveWatchers
    } else {
        RunOutcome::IterationDone
    });
    log.step(&mut lp, NoWait);
    log.expect_outcome(RunOutcome::NoActiveWatchers);
    lp.remove(io).unwrap();
    drop(lp);
    drop(peer);
    drop(doom);
    log.into_record()
}
