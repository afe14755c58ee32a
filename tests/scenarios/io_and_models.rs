//! io watchers on every backend: several on one fd, one-shot, fed
//! events, a source handed back; the hand-built programs of the property
//! tests that run on the simulator only (tests/timer_model.rs,
//! tests/pending_model.rs, tests/direct_dispatch.rs), run by `Default`
//! until out of watchers; and the loop's trace-level events.
//!
//! What the simulator-only tests here do not mirror, one line each:
//! - fd_reify `many_changes_on_one_fd_make_one_backend_call`, `changes_that_cancel_out_make_no_backend_call`: `NoWait` runs that count the simulator's backend calls.
//! - fd_reify `removing_an_owned_source_deregisters_before_it_is_closed`: a `NoWait` run, then the simulator's registration table.
//! - fd_reify `into_source_hands_the_socket_back`, `os_descriptor_on_the_simulator_is_refused`, `edge_trigger_is_refused_where_unsupported_and_modes_cannot_mix`: no run (the second is about the simulator itself).
//! - timer_model `loop_timers_match_the_model`: random programs checked against exact virtual times; its out-of-watchers branch is mirrored by hand below.
//! - pending_model `pending_queues_match_the_model`: `NoWait` only, which cannot block; a `Default` run over fed watchers is mirrored by hand below.
//! - direct_dispatch `direct_dispatch_is_invisible`: random programs of simulator-only events (arrivals at virtual times, invalidation, spurious wakeups) compared by backend trace; they end `Stalled`.
//! - direct_dispatch `each_settle_point_is_needed`, case "invalid fd": `Sim::invalidate`; the other cases are mirrored below.

use std::io::Read;
use std::time::Duration;

use crate::common::settle_points::{self, Act, Case};
use crate::common::{drain, ms, outcome, Conn, RunTo, World};
use evloop::{Check, Idle, Interest, Io, Loop, Ready, RunMode, RunOutcome, Source, Timer, Trigger};

tests_on!(
    every_backend,
    crate::common::backends(),
    [
        several_watchers_on_one_fd_share_one_registration,
        into_source_from_its_own_callback_is_busy,
        oneshot_fires_once_until_rearmed,
        feed_event_merges_with_a_queued_event,
        timers_inactive_by_every_means_leave_run_once_nothing_to_wait_for,
        fed_events_of_inactive_watchers_run_in_priority_order_and_the_run_ends,
        pending_queries_see_the_rest_of_a_direct_batch,
        each_settle_point_program_behaves_alike_with_and_without_direct_dispatch,
        iteration_poll_and_dispatch_are_traced,
    ]
);

// ---- io watchers on one fd ---------------------------------------------------

/// Three watchers on one fd (reader, writer, both) make one registration,
/// the union of their interests. The byte arrives from a zero timer, which
/// runs after the first iteration's io callbacks.
fn several_watchers_on_one_fd_share_one_registration(w: &World) {
    let (conn, peer) = w.pair();
    let mut lp: Loop<Vec<String>> = w.new_loop();
    let log_as = |who: &'static str| {
        move |lp: &mut Loop<'_, Vec<String>>,
              log: &mut Vec<String>,
              ev: evloop::IoEvent<'_, &Conn>| {
            log.push(format!("{who} {}", ev.ready));
            lp.stop(ev.watcher).unwrap();
        }
    };
    let reader = Io::borrowed(&mut lp, &conn, Interest::READABLE, log_as("reader")).unwrap();
    let writer = Io::borrowed(&mut lp, &conn, Interest::WRITABLE, log_as("writer")).unwrap();
    let both = Io::borrowed(&mut lp, &conn, Interest::BOTH, log_as("both")).unwrap();
    let mut peer = Some(peer);
    lp.timer(Duration::ZERO, Duration::ZERO, move |_, log, _| {
        log.push("sends".into());
        peer.as_mut().unwrap().send(b"x");
    })
    .unwrap();
    assert_eq!(
        lp.finish(vec![]),
        ["writer w", "both w", "sends", "reader r"]
    );
    for io in [reader, writer, both] {
        assert!(!lp.is_active(io).unwrap());
    }
    if let Some(sim) = w.sim() {
        // Iteration 1 (t=0): writable only. Iteration 2: the reader.
        assert_eq!(
            sim.trace_lines(),
            [
                "t=0ns modify fd3 - => rw",
                "t=0ns poll {fd3:w}",
                "t=0ns dispatch fd3 w",
                "t=0ns dispatch fd3 w",
                "t=0ns modify fd3 rw => r",
                "t=0ns poll {fd3:r}",
                "t=0ns dispatch fd3 r",
                // The last stop is sent at the next reify, if the loop runs
                // again.
            ]
        );
    }
    drop(lp);
}

fn into_source_from_its_own_callback_is_busy(w: &World) {
    let (conn, _peer) = w.pair();
    let mut lp: Loop<Option<String>> = w.new_loop();
    lp.io(conn, Interest::WRITABLE, |lp, seen, ev| {
        *seen = Some(
            ev.watcher
                .into_source::<Conn, _>(lp)
                .unwrap_err()
                .to_string(),
        );
        lp.remove(ev.watcher).unwrap();
    })
    .unwrap();
    let seen = lp.finish(None);
    assert!(seen.unwrap().contains("callback is running"));
}

/// A one-shot watcher is disarmed after one report (poll and select have
/// no one-shot mode: the loop disarms the watcher itself) until `start`.
fn oneshot_fires_once_until_rearmed(w: &World) {
    let (conn, mut peer) = w.pair();
    peer.send(b"abc");
    let mut lp: Loop<u32> = w.new_loop();
    let io = Io::borrowed(
        &mut lp,
        &conn,
        Interest::READABLE.with_trigger(Trigger::Oneshot),
        |_, n, _| *n += 1,
    )
    .unwrap();
    let mut n = 0;
    // The data stays unread, yet the watcher is disarmed after one report.
    lp.run_to_end(&mut n);
    assert_eq!(n, 1);
    assert!(!lp.is_active(io).unwrap());
    lp.start(io).unwrap();
    lp.run_to_end(&mut n);
    assert_eq!(n, 2);
    drop(lp);
}

/// Two fed events before the run make one pending event: the union.
fn feed_event_merges_with_a_queued_event(w: &World) {
    let (conn, _peer) = w.pair();
    let mut lp: Loop<Vec<Ready>> = w.new_loop();
    let io = lp
        .io(conn, Interest::BOTH, |lp, log, ev| {
            log.push(ev.ready);
            lp.remove(ev.watcher).unwrap();
        })
        .unwrap();
    lp.feed_event(io, Ready::READABLE).unwrap();
    lp.feed_event(io, Ready::WRITABLE).unwrap();
    assert_eq!(lp.pending_count(), 1);
    assert_eq!(lp.finish(vec![]), [Ready::READABLE | Ready::WRITABLE]);
}

// ---- hand-built programs of the model tests ------------------------------------

/// The model's "nothing active" branch of `loop_timers_match_the_model`,
/// by hand: timers made inactive by every means the model has (firing
/// without repeat, `stop`, `again` without repeat, never started) leave
/// `Once` nothing to wait for.
fn timers_inactive_by_every_means_leave_run_once_nothing_to_wait_for(w: &World) {
    let mut lp: Loop<Vec<usize>> = w.new_loop();
    let t: Vec<Timer> = (0..4)
        .map(|i| {
            let t = lp
                .timer(Duration::ZERO, Duration::ZERO, move |_, log, _| log.push(i))
                .unwrap();
            lp.stop(t).unwrap();
            t
        })
        .collect();
    let mut log = vec![];
    (t[0]).set(&mut lp, ms(1), Duration::ZERO).unwrap();
    lp.start(t[0]).unwrap();
    (t[1]).set(&mut lp, ms(7), ms(3)).unwrap();
    lp.start(t[1]).unwrap();
    (t[1]).again(&mut lp).unwrap(); // repeats: stays active
    assert!(lp.is_active(t[1]).unwrap());
    lp.stop(t[1]).unwrap();
    (t[2]).set(&mut lp, ms(2), Duration::ZERO).unwrap();
    lp.start(t[2]).unwrap();
    (t[2]).again(&mut lp).unwrap(); // no repeat: stops it
    lp.run_expect(RunMode::Once, &mut log, RunOutcome::IterationDone);
    assert_eq!(log, [0]);
    for (i, h) in t.iter().enumerate() {
        assert!(!lp.is_active(*h).unwrap(), "timer {i}");
    }
    lp.run_expect(RunMode::Once, &mut log, RunOutcome::NoActiveWatchers);
    assert_eq!(log, [0]);
}

/// A hand-built program of `pending_queues_match_the_model`, run by
/// `Default` instead of `NoWait`: events fed to inactive watchers (merged,
/// cancelled, re-prioritised) are invoked highest priority first, FIFO
/// within one, and then nothing is left: `run` returns.
fn fed_events_of_inactive_watchers_run_in_priority_order_and_the_run_ends(w: &World) {
    let mut lp: Loop<Vec<usize>> = w.new_loop();
    let h: Vec<evloop::Idle> = (0..6)
        .map(|i| {
            let h = Idle::new(&mut lp, move |_, log, _| log.push(i)).unwrap();
            lp.stop(h).unwrap();
            h
        })
        .collect();
    for &w in &[0, 1, 2, 3, 4, 5, 1] {
        lp.feed_event(h[w], Ready::READABLE).unwrap(); // 1 merges
    }
    lp.set_priority(h[4], 2).unwrap();
    lp.set_priority(h[0], -1).unwrap();
    lp.set_priority(h[2], 2).unwrap(); // after 4 in its new queue
    lp.stop(h[3]).unwrap(); // cancelled
    assert_eq!(lp.pending_count(), 5);
    assert_eq!(lp.finish(vec![]), [4, 2, 1, 5, 0]);
    assert_eq!(lp.pending_count(), 0);
    assert_eq!(lp.iteration(), 0, "no iteration was needed");
}

/// `pending_queries_see_the_rest_of_a_direct_batch`, as a `Default` run
/// that ends when the check watcher removes everything. Which fd a kernel
/// reports first is its own business: the order of the indices is not
/// asserted, the pending counts are.
fn pending_queries_see_the_rest_of_a_direct_batch(w: &World) {
    let mut lp: Loop<Vec<String>> = w.new_loop();
    let mut ios = Vec::new();
    let mut peers = Vec::new();
    for i in 0..3 {
        let (conn, mut peer) = w.pair();
        peer.send(b"x");
        peers.push(peer);
        ios.push(
            lp.io(conn, Interest::READABLE, move |lp, log, ev| {
                drain(ev.source);
                log.push(format!("io {i} pending_count {}", lp.pending_count()));
            })
            .unwrap(),
        );
    }
    let all = ios.clone();
    Check::new(&mut lp, move |lp, log, me| {
        log.push(format!(
            "check a={} c={}",
            lp.is_pending(all[0]).unwrap(),
            lp.is_pending(all[2]).unwrap()
        ));
        for &io in &all {
            lp.remove(io).unwrap();
        }
        lp.remove(me).unwrap();
    })
    .unwrap();
    let log = lp.finish(Vec::new());
    assert_eq!(log.len(), 4, "{log:?}");
    let mut seen: Vec<&str> = log[..3].iter().map(|l| &l[3..4]).collect();
    seen.sort();
    assert_eq!(seen, ["0", "1", "2"], "{log:?}");
    for (line, count) in log.iter().zip([3, 2, 1]) {
        assert!(line.ends_with(&format!("pending_count {count}")), "{log:?}");
    }
    assert_eq!(log[3], "check a=false c=false");
    drop(peers);
}

/// What the callbacks of a program see and record.
struct DState<'s> {
    conns: &'s [Conn],
    log: Vec<String>,
    /// The program's watchers, each with its script and how often it ran.
    ios: Vec<(Io, Vec<Vec<Act>>, usize)>,
    /// The watchers its callbacks made.
    created: Vec<Io>,
}

fn perform<'s>(lp: &mut Loop<'s, DState<'s>>, st: &mut DState<'s>, a: Act) {
    let line = match a {
        Act::Stop(w) => outcome(format!("stop {w}"), lp.stop(st.ios[w].0)),
        Act::Start(w) => outcome(format!("start {w}"), lp.start(st.ios[w].0)),
        Act::SetPriority(w, p) => {
            outcome(format!("priority {w} {p}"), lp.set_priority(st.ios[w].0, p))
        }
        Act::SetInterest(w, both) => {
            let i = if both {
                Interest::BOTH
            } else {
                Interest::READABLE
            };
            let i = i.with_trigger((st.ios[w].0).interest(lp).unwrap().trigger());
            outcome(format!("interest {w}"), (st.ios[w].0).set_interest(lp, i))
        }
        Act::CreateIo(c) => {
            let n = st.created.len();
            let conn: &'s Conn = &st.conns[c];
            let made = Io::borrowed(
                lp,
                conn,
                Interest::READABLE,
                move |_, st: &mut DState, ev| {
                    let _ = ev.source.read(&mut [0u8; 8]);
                    st.log.push(format!("io new{n} {:?}", ev.ready));
                },
            );
            if let Ok(io) = made {
                st.created.push(io);
            }
            outcome(format!("create io {n} on c{c}"), made)
        }
        Act::Feed(w) => outcome(
            format!("feed {w}"),
            lp.feed_event(st.ios[w].0, Ready::WRITABLE),
        ),
        Act::Clear(w) => outcome(format!("clear {w}"), lp.clear_pending(st.ios[w].0)),
        Act::IsActive(w) => outcome(format!("is_active {w}"), lp.is_active(st.ios[w].0)),
        Act::BackendTimeout => format!("backend_timeout: {:?}", lp.backend_timeout()),
    };
    st.log.push(line);
}

/// Runs the program for three iterations (everything it reacts to is there
/// before the run, so `NoWait` sees it), then removes every watcher, after
/// which `run` must return. Returns the callback log.
fn observe(backend: &'static str, p: &Case, direct: bool) -> Vec<String> {
    let w = World::new(backend);
    // The connections in increasing fd order, as a quiet process gets them:
    // a backend reports in fd order (select, poll), so the two runs
    // compare only if their fds are in the same order, and the binary's
    // other tests open and close fds meanwhile.
    let pairs = loop {
        let pairs: Vec<_> = (0..3).map(|_| w.pair()).collect();
        let fds: Vec<i64> = pairs.iter().map(|(c, _)| fd_number(c)).collect();
        if fds.windows(2).all(|f| f[0] < f[1]) {
            break pairs;
        }
    };
    let mut peers = Vec::new();
    let mut conns = Vec::new();
    for (c, (conn, mut peer)) in pairs.into_iter().enumerate() {
        if p.sends.contains(&c) {
            peer.send(b"x");
        }
        conns.push(conn);
        if !p.closes.contains(&c) {
            peers.push(peer);
        }
    }
    let mut st = DState {
        conns: &conns,
        log: Vec::new(),
        ios: Vec::new(),
        created: Vec::new(),
    };
    let mut lp: Loop<'_, DState<'_>> = w.new_loop();
    lp.set_direct_dispatch(direct);
    for (i, spec) in p.watchers.iter().enumerate() {
        let io = Io::borrowed(
            &mut lp,
            &conns[spec.socket],
            settle_points::interest(spec.oneshot),
            move |lp, st: &mut DState, ev| {
                st.log.push(format!("io {i} {:?}", ev.ready));
                let _ = ev.source.read(&mut [0u8; 8]);
                let (_, script, calls) = &mut st.ios[i];
                *calls += 1;
                if *calls > 20 {
                    let _ = lp.stop(ev.watcher);
                    return;
                }
                let step = script[(*calls - 1) % script.len()].clone();
                for a in step {
                    perform(lp, st, a);
                }
            },
        )
        .unwrap();
        st.ios.push((io, spec.script.clone(), 0));
    }
    for _ in 0..3 {
        let r = lp.run(RunMode::NoWait, &mut st);
        st.log
            .push(format!("-- {r:?}, pending {}", lp.pending_count()));
    }
    let ios = st.ios.iter().map(|w| w.0);
    for io in ios.chain(st.created.iter().copied()).collect::<Vec<_>>() {
        lp.remove(io).unwrap();
    }
    let r = lp.run(RunMode::Default, &mut st);
    assert!(
        matches!(r, Ok(RunOutcome::NoActiveWatchers)),
        "{backend} {}: {r:?}",
        p.name
    );
    drop(lp);
    drop(peers);
    // The connections' fd numbers depend on what the other tests of the
    // binary have open at that moment (an error text names its fd): each
    // is named by its connection instead, so that two runs compare.
    let fds: Vec<String> = conns
        .iter()
        .map(|c| format!("fd {}", fd_number(c)))
        .collect();
    st.log
        .into_iter()
        .map(|mut line| {
            for (c, fd) in fds.iter().enumerate() {
                line = replace_word(&line, fd, &format!("fd c{c}"));
            }
            line
        })
        .collect()
}

/// A connection's fd number, on either kind of backend.
fn fd_number(c: &Conn) -> i64 {
    match c.source_fd() {
        evloop::SourceFd::Os(fd) => i64::from(std::os::fd::AsRawFd::as_raw_fd(&fd)),
        evloop::SourceFd::Virtual(v) => i64::from(v.get()),
    }
}

/// `line` with each `word` that is not followed by a digit (fd 3, not fd
/// 31) replaced.
fn replace_word(line: &str, word: &str, by: &str) -> String {
    let mut out = String::new();
    let mut rest = line;
    while let Some(i) = rest.find(word) {
        let after = &rest[i + word.len()..];
        out.push_str(&rest[..i]);
        if after.starts_with(|c: char| c.is_ascii_digit()) {
            out.push_str(word);
        } else {
            out.push_str(by);
        }
        rest = after;
    }
    out.push_str(rest);
    out
}

/// `each_settle_point_is_needed` (all cases but "invalid fd"): with and
/// without direct dispatch, each backend's callbacks see the same.
fn each_settle_point_program_behaves_alike_with_and_without_direct_dispatch(w: &World) {
    // The invalid fd is the simulator's only (tests/direct_dispatch.rs).
    for p in settle_points::cases()
        .iter()
        .filter(|c| c.invalid.is_empty())
    {
        let eager = observe(w.backend, p, false);
        let direct = observe(w.backend, p, true);
        assert_eq!(direct, eager, "{}: callback log differs", p.name);
        assert!(eager.iter().any(|l| l.starts_with("io ")), "{}", p.name);
    }
}

// ---- trace-level events ---------------------------------------------------------

use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Vec<String>>>);

struct Fields(String);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        let _ = write!(self.0, " {}={:?}", field.name(), value);
    }
}

impl Subscriber for Recorder {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        assert_eq!(
            *event.metadata().level(),
            Level::TRACE,
            "hot-path events are trace level"
        );
        let mut f = Fields(String::new());
        event.record(&mut f);
        self.0.lock().unwrap().push(f.0.trim().to_string());
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

/// The loop reports iteration, poll (ready count, timeout) and dispatch
/// through `tracing` at trace level; a minimal subscriber (the scenario
/// thread's own) records them.
fn iteration_poll_and_dispatch_are_traced(w: &World) {
    // tracing caches each callsite's interest for all threads, and while
    // only one dispatcher is registered it asks the registering thread's
    // default: another test's loop, on a thread without a subscriber, that
    // reached a callsite first would cache "never" for this one too. A
    // second registered dispatcher makes tracing ask every registered one
    // instead.
    let _second = tracing::Dispatch::new(Recorder::default());
    let rec = Recorder::default();
    let (conn, mut peer) = w.pair();
    peer.send(b"x");
    tracing::subscriber::with_default(rec.clone(), || {
        let mut lp: Loop = w.new_loop();
        lp.io(conn, Interest::READABLE, |lp, _, ev| {
            lp.remove(ev.watcher).unwrap()
        })
        .unwrap();
        lp.run_to_end(&mut ());
    });
    let lines = rec.0.lock().unwrap().clone();
    let find = |prefix: &str| lines.iter().find(|l| l.starts_with(prefix)).cloned();
    assert_eq!(
        find("message=iteration").unwrap(),
        "message=iteration iteration=1 depth=1"
    );
    assert_eq!(
        find("message=poll").unwrap(),
        "message=poll ready=1 timeout=None"
    );
    assert!(
        find("message=dispatch").unwrap().contains("ready=r"),
        "{lines:?}"
    );
    assert!(find("message=backend modify").is_some(), "{lines:?}");
    drop(peer);
}
