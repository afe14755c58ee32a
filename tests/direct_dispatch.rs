//! Direct dispatch of io events (src/direct_batch.rs) must be invisible: random
//! programs on the simulator, run once with it and once without
//! (`Loop::set_direct_dispatch(false)`, every io event queued first), must
//! produce the same callbacks in the same order with the same readiness,
//! the same answers to every pending-state query, and the same backend
//! trace.
//!
//! The programs mix what could tell the two paths apart: several io
//! watchers on one fd, non-default priorities, one-shot watchers (mostly
//! one-shot in a second test), invalid
//! fds, and callbacks that stop, start, remove, feed, clear, re-prioritise
//! and re-target other io watchers, ask `is_pending` / `pending_count` /
//! `is_active` / `backend_timeout`,
//! feed timers at other priorities, and run the loop nested.

mod common;

use std::io::Read;
use std::time::Duration;

use common::outcome;
use common::settle_points::{self, Act};
use evloop::{Check, Idle, Interest, Io, Loop, Ready, RunMode, RunOutcome, Sim, SimSocket, Timer};
use proptest::prelude::*;

const SOCKETS: usize = 8;

#[derive(Debug, Clone, Copy)]
enum Action {
    Nothing,
    Stop(usize),
    Start(usize),
    Remove(usize),
    Feed(usize),
    Clear(usize),
    IsPending(usize),
    IsActive(usize),
    PendingCount,
    SetPriority(usize, i32),
    SetInterest(usize, bool),
    FeedTimer(usize),
    StopTimer(usize),
    NestedRun,
    /// A new io watcher on this socket, from inside a callback.
    CreateIo(usize),
    BackendTimeout,
}

fn action(watchers: usize) -> impl Strategy<Value = Action> {
    prop_oneof![
        6 => Just(Action::Nothing),
        2 => (0..watchers).prop_map(Action::Stop),
        2 => (0..watchers).prop_map(Action::Start),
        1 => (0..watchers).prop_map(Action::Remove),
        2 => (0..watchers).prop_map(Action::Feed),
        1 => (0..watchers).prop_map(Action::Clear),
        2 => (0..watchers).prop_map(Action::IsPending),
        1 => (0..watchers).prop_map(Action::IsActive),
        2 => Just(Action::PendingCount),
        1 => (0..watchers, -1i32..=1).prop_map(|(w, p)| Action::SetPriority(w, p)),
        1 => (0..watchers, any::<bool>()).prop_map(|(w, b)| Action::SetInterest(w, b)),
        1 => (0..2usize).prop_map(Action::FeedTimer),
        1 => (0..2usize).prop_map(Action::StopTimer),
        1 => Just(Action::NestedRun),
        1 => (0..SOCKETS).prop_map(Action::CreateIo),
        1 => Just(Action::BackendTimeout),
    ]
}

/// One io watcher of the program.
#[derive(Debug, Clone)]
struct WatcherSpec {
    socket: usize,
    priority: i32,
    oneshot: bool,
    /// What its n-th invocation does, in order: `script[n % len]` (a few
    /// actions per invocation, so that sequences such as stop-then-start
    /// of another watcher happen inside one callback).
    script: Vec<Vec<Action>>,
}

/// Something the simulated world does to a socket.
#[derive(Debug, Clone, Copy)]
enum WorldEvent {
    Deliver(usize, u64),
    ClosePeer(usize, u64),
    Invalidate(usize, u64),
    Spurious(u64),
}

#[derive(Debug, Clone)]
struct Program {
    watchers: Vec<WatcherSpec>,
    world: Vec<WorldEvent>,
    timer_priorities: [i32; 2],
    /// An idle watcher, for the first few iterations (it runs only when
    /// nothing else is pending, io events of a direct batch included).
    idle: bool,
}

fn program() -> impl Strategy<Value = Program> {
    program_with(1)
}

/// Programs whose watchers are one-shot `oneshot` times in 13 (the fd's
/// first watcher decides for the fd).
fn program_with(oneshot: u32) -> impl Strategy<Value = Program> {
    (2usize..=7).prop_flat_map(move |n| {
        let watcher = (
            0..SOCKETS,
            prop_oneof![12 => Just(0i32), 1 => Just(1), 1 => Just(-1)],
            prop_oneof![13 - oneshot => Just(false), oneshot => Just(true)],
            prop::collection::vec(prop::collection::vec(action(n), 0..4), 1..4),
        )
            .prop_map(|(socket, priority, oneshot, script)| WatcherSpec {
                socket,
                priority,
                oneshot,
                script,
            });
        let world = prop_oneof![
            8 => (0..SOCKETS, 0u64..3).prop_map(|(s, t)| WorldEvent::Deliver(s, t)),
            1 => (0..SOCKETS, 0u64..3).prop_map(|(s, t)| WorldEvent::ClosePeer(s, t)),
            1 => (0..SOCKETS, 0u64..3).prop_map(|(s, t)| WorldEvent::Invalidate(s, t)),
            1 => (0u64..3).prop_map(WorldEvent::Spurious),
        ];
        (
            prop::collection::vec(watcher, n),
            prop::collection::vec(world, 2..16),
            (-1i32..=1, -1i32..=1),
            prop_oneof![3 => Just(false), 1 => Just(true)],
        )
            .prop_map(|(watchers, world, (t0, t1), idle)| Program {
                watchers,
                world,
                timer_priorities: [t0, t1],
                idle,
            })
    })
}

/// What the callbacks see and record.
struct State<'s> {
    sockets: &'s [SimSocket],
    /// Watchers created by `CreateIo` (bounded, so programs end).
    created: usize,
    log: Vec<String>,
    ios: Vec<Io>,
    timers: Vec<Timer>,
    scripts: Vec<Vec<Vec<Action>>>,
    calls: Vec<usize>,
}

fn perform<'s>(lp: &mut Loop<'s, State<'s>>, st: &mut State<'s>, me: usize, a: Action) {
    let line = match a {
        Action::Nothing => return,
        Action::Stop(w) => outcome(format!("stop {w}"), lp.stop(st.ios[w])),
        Action::Start(w) => outcome(format!("start {w}"), lp.start(st.ios[w])),
        Action::Remove(w) if w != me => outcome(format!("remove {w}"), lp.remove(st.ios[w])),
        Action::Remove(_) => return,
        Action::Feed(w) => outcome(
            format!("feed {w}"),
            lp.feed_event(st.ios[w], Ready::WRITABLE),
        ),
        Action::Clear(w) => outcome(format!("clear {w}"), lp.clear_pending(st.ios[w])),
        Action::IsPending(w) => outcome(format!("is_pending {w}"), lp.is_pending(st.ios[w])),
        Action::IsActive(w) => outcome(
            format!("is_active {w} (active count {})", lp.active_count()),
            lp.is_active(st.ios[w]),
        ),
        Action::PendingCount => format!("pending_count: {}", lp.pending_count()),
        Action::SetPriority(w, p) => {
            outcome(format!("priority {w} {p}"), lp.set_priority(st.ios[w], p))
        }
        Action::SetInterest(w, both) => {
            let i = if both {
                Interest::BOTH
            } else {
                Interest::READABLE
            };
            let i = match (st.ios[w]).interest(lp) {
                Ok(old) => i.with_trigger(old.trigger()),
                Err(_) => i,
            };
            outcome(format!("interest {w}"), (st.ios[w]).set_interest(lp, i))
        }
        Action::FeedTimer(t) => outcome(
            format!("feed timer {t}"),
            lp.feed_event(st.timers[t], Ready::EMPTY),
        ),
        Action::StopTimer(t) => outcome(format!("stop timer {t}"), lp.stop(st.timers[t])),
        Action::NestedRun if lp.depth() == 1 => {
            outcome("nested".to_string(), lp.run(RunMode::NoWait, st))
        }
        Action::NestedRun => return,
        Action::CreateIo(s) if st.created < 4 => {
            st.created += 1;
            let n = st.created;
            let sockets: &'s [SimSocket] = st.sockets;
            let made = Io::borrowed(
                lp,
                &sockets[s],
                Interest::READABLE,
                move |_, st: &mut State, ev| {
                    st.log.push(format!("io new{n} {:?}", ev.ready));
                    let _ = ev.source.read(&mut [0u8; 8]);
                },
            );
            outcome(format!("create io {n} on s{s}"), made)
        }
        Action::CreateIo(_) => return,
        Action::BackendTimeout => format!("backend_timeout: {:?}", lp.backend_timeout()),
    };
    st.log.push(line);
}

/// Runs the program and returns everything observable.
fn observe(p: &Program, direct: bool) -> (Vec<String>, Vec<String>) {
    let sim = Sim::new();
    let sockets: Vec<SimSocket> = (0..SOCKETS)
        .map(|i| sim.socket(&format!("s{i}"), 64))
        .collect();
    for ev in &p.world {
        match *ev {
            WorldEvent::Deliver(s, t) => sim.deliver(Duration::from_millis(t), &sockets[s], b"x"),
            WorldEvent::ClosePeer(s, t) => sim.close_peer(Duration::from_millis(t), &sockets[s]),
            WorldEvent::Invalidate(s, t) => sim.invalidate(Duration::from_millis(t), &sockets[s]),
            WorldEvent::Spurious(t) => sim.spurious_wakeup(Duration::from_millis(t)),
        }
    }
    let mut st = State {
        sockets: &sockets,
        created: 0,
        log: Vec::new(),
        ios: Vec::new(),
        timers: Vec::new(),
        scripts: p.watchers.iter().map(|w| w.script.clone()).collect(),
        calls: vec![0; p.watchers.len()],
    };
    let mut lp: Loop<'_, State<'_>> = Loop::with_backend(sim.backend());
    lp.set_direct_dispatch(direct);
    // Every watcher on one fd shares the trigger mode of the first one.
    let mut oneshot_of = [None; SOCKETS];
    for (i, w) in p.watchers.iter().enumerate() {
        let oneshot = *oneshot_of[w.socket].get_or_insert(w.oneshot);
        let interest = settle_points::interest(oneshot);
        let io = Io::borrowed(
            &mut lp,
            &sockets[w.socket],
            interest,
            move |lp, st: &mut State, ev| {
                st.log.push(format!("io {i} {:?}", ev.ready));
                let mut buf = [0u8; 8];
                let _ = ev.source.read(&mut buf);
                let n = st.calls[i];
                st.calls[i] += 1;
                if n >= 20 {
                    // A watcher that never drains (EOF, error), or two
                    // that feed each other, would run forever: retire.
                    let _ = lp.stop(ev.watcher);
                    return;
                }
                let script = &st.scripts[i];
                let step = script[n % script.len()].clone();
                for a in step {
                    perform(lp, st, i, a);
                }
            },
        )
        .unwrap();
        lp.set_priority(io, w.priority).unwrap();
        st.ios.push(io);
    }
    for (t, &prio) in p.timer_priorities.iter().enumerate() {
        let timer = lp
            .timer(
                Duration::from_millis(3 + t as u64),
                Duration::ZERO,
                move |_, st: &mut State, _| {
                    st.log.push(format!("timer {t}"));
                },
            )
            .unwrap();
        lp.set_priority(timer, prio).unwrap();
        st.timers.push(timer);
    }
    if p.idle {
        let mut runs = 0;
        Idle::new(&mut lp, move |lp, st: &mut State, me| {
            st.log.push("idle".to_string());
            runs += 1;
            if runs == 3 {
                lp.stop(me).unwrap();
            }
        })
        .unwrap();
    }
    for _ in 0..30 {
        match lp.run(RunMode::Once, &mut st) {
            Ok(RunOutcome::IterationDone) => {}
            other => {
                st.log.push(format!("run: {other:?}"));
                break;
            }
        }
        st.log.push(format!("-- pending {}", lp.pending_count()));
    }
    (st.log, sim.trace_lines())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    #[test]
    fn direct_dispatch_is_invisible(p in program()) {
        let eager = observe(&p, false);
        let direct = observe(&p, true);
        prop_assert_eq!(&direct.0, &eager.0, "callback log differs");
        prop_assert_eq!(&direct.1, &eager.1, "backend trace differs");
    }

    /// Mostly one-shot watchers, whose events the direct path disarms one
    /// by one and whose re-arm from their own callback takes a shortcut
    /// (`Loop::rearm`).
    #[test]
    fn direct_dispatch_of_oneshot_watchers_is_invisible(p in program_with(11)) {
        let eager = observe(&p, false);
        let direct = observe(&p, true);
        prop_assert_eq!(&direct.0, &eager.0, "callback log differs");
        prop_assert_eq!(&direct.1, &eager.1, "backend trace differs");
    }
}

/// The programs built by hand (tests/common/settle_points.rs), one per
/// operation that must settle a direct batch before acting, each arranged
/// so that skipping the settle changes what is observed.
#[test]
fn each_settle_point_is_needed() {
    for case in settle_points::cases() {
        let at = case.at_ms;
        let world = (case.closes.iter().map(|&s| WorldEvent::ClosePeer(s, at)))
            .chain(case.sends.iter().map(|&s| WorldEvent::Deliver(s, at)))
            .chain(case.invalid.iter().map(|&s| WorldEvent::Invalidate(s, at)))
            .collect();
        let watchers = case.watchers.iter().map(|w| WatcherSpec {
            socket: w.socket,
            priority: 0,
            oneshot: w.oneshot,
            script: (w.script.iter())
                .map(|step| step.iter().map(|&a| Action::from(a)).collect())
                .collect(),
        });
        let p = Program {
            watchers: watchers.collect(),
            world,
            timer_priorities: [0, 0],
            idle: false,
        };
        let eager = observe(&p, false);
        let direct = observe(&p, true);
        assert_eq!(direct.0, eager.0, "{}: callback log differs", case.name);
        assert_eq!(direct.1, eager.1, "{}: backend trace differs", case.name);
    }
}

impl From<Act> for Action {
    fn from(a: Act) -> Action {
        match a {
            Act::Stop(w) => Action::Stop(w),
            Act::Start(w) => Action::Start(w),
            Act::SetPriority(w, p) => Action::SetPriority(w, p),
            Act::SetInterest(w, both) => Action::SetInterest(w, both),
            Act::CreateIo(s) => Action::CreateIo(s),
            Act::Feed(w) => Action::Feed(w),
            Act::Clear(w) => Action::Clear(w),
            Act::IsActive(w) => Action::IsActive(w),
            Act::BackendTimeout => Action::BackendTimeout,
        }
    }
}

/// The plain case the optimisation is for, checked to actually take the
/// direct path: three single-watcher fds, all at the default priority, and
/// a callback that asks about the others while the batch is in flight.
#[test]
fn pending_queries_see_the_rest_of_a_direct_batch() {
    let sim = Sim::new();
    let socks: Vec<SimSocket> = (0..3).map(|i| sim.socket(&format!("s{i}"), 0)).collect();
    for s in &socks {
        sim.deliver(Duration::from_millis(1), s, b"x");
    }
    let mut lp: Loop<'_, Vec<String>> = Loop::with_backend(sim.backend());
    let mut ios = Vec::new();
    for (i, s) in socks.iter().enumerate() {
        ios.push(
            Io::borrowed(
                &mut lp,
                s,
                Interest::READABLE,
                move |lp, log: &mut Vec<String>, ev| {
                    let _ = ev.source.read(&mut [0u8; 4]);
                    log.push(format!("io {i} pending_count {}", lp.pending_count()));
                },
            )
            .unwrap(),
        );
    }
    let (a, c) = (ios[0], ios[2]);
    // A check watcher asks too: by then the batch is done.
    Check::new(&mut lp, move |lp, log: &mut Vec<String>, _| {
        log.push(format!(
            "check a={} c={}",
            lp.is_pending(a).unwrap(),
            lp.is_pending(c).unwrap()
        ));
    })
    .unwrap();
    let mut log = Vec::new();
    lp.run(RunMode::Once, &mut log).unwrap();
    // io 0 runs with io 1, io 2 and the check still pending, and so on.
    assert_eq!(
        log,
        [
            "io 0 pending_count 3",
            "io 1 pending_count 2",
            "io 2 pending_count 1",
            "check a=false c=false",
        ]
    );
}
