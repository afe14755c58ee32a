//! Loops inside loops: `Loop::pollable_fd`, `Loop::flush_changes` and
//! `Loop::next_timeout` (a loop watched by someone else), and the embed
//! watcher (`Embed::new`, libev's `ev_embed`), under the watchdog.
//!
//! Every scenario of the embed watcher runs on each pair that applies:
//! the outer loop on every OS backend of the host (epoll, poll, select;
//! io_uring and kqueue over the emulation with their features), the inner
//! one on each backend with a pollable fd (epoll; io_uring, on a ring
//! without deferred task work; kqueue over the emulation). The refusals
//! (inner poll, select, simulator; a simulator outside) have their own
//! tests, and so does a loop driven from mio, the "nested in a foreign
//! loop" story.

mod common;

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Duration;

use common::pollable::{driven_from, inner_loop, inners, Driven};
use common::{ms, watchdog, World, WATCHDOG};
use evloop::{
    Async, Cleanup, Embed, Error, Idle, Interest, Loop, PollableLoop, Ready, RunMode, RunOutcome,
    Sim,
};
use mio::unix::SourceFd;
use mio::{Events, Poll, Token};
use std::error::Error as StdError;

/// The OS backends of this host: each can be the outer loop.
fn outers() -> Vec<&'static str> {
    evloop::backends::AVAILABLE.to_vec()
}

/// Runs `scenario(outer, inner)` on every pair, each under the watchdog
/// (whose thread is named after both).
fn on_pairs(what: &str, scenario: fn(&'static str, &'static str)) {
    for outer in outers() {
        for inner in inners() {
            watchdog(
                &format!("{what}: {inner} in {outer}"),
                WATCHDOG,
                move || scenario(outer, inner),
            );
        }
    }
}

/// A socket pair: the end a loop watches (non-blocking), and its peer.
fn pair() -> (UnixStream, UnixStream) {
    let (a, b) = UnixStream::pair().unwrap();
    a.set_nonblocking(true).unwrap();
    (a, b)
}

/// Whether `fd` is readable within `ms` milliseconds (poll(2)).
fn readable(fd: RawFd, ms: i32) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd, for the call only.
    let n = unsafe { libc::poll(&mut p, 1, ms) };
    assert!(n >= 0, "poll: {}", std::io::Error::last_os_error());
    n == 1 && p.revents & libc::POLLIN != 0
}

/// What the embed scenarios' outer loops keep: the inner loop's state
/// (bytes read, times it fired), and how often the embed callback ran.
#[derive(Default)]
struct Outer {
    inner: Inner,
    calls: u32,
}

#[derive(Default)]
struct Inner {
    got: Vec<u8>,
    fired: Vec<Duration>,
}

/// The usual embed callback: one non-blocking run of the inner loop.
fn sweep(_: &mut Loop<Outer>, st: &mut Outer, inner: &mut Loop<'static, Inner>, _: Embed<Inner>) {
    st.calls += 1;
    let name = inner.backend_name();
    inner
        .run(RunMode::NoWait, &mut st.inner)
        .unwrap_or_else(|e| panic!("{name}: {e}"));
}

/// [`sweep`], and the embed watcher stopped once the inner loop has
/// nothing left (so that the outer's run ends).
fn sweep_until_done(
    lp: &mut Loop<Outer>,
    st: &mut Outer,
    inner: &mut Loop<'static, Inner>,
    me: Embed<Inner>,
) {
    sweep(lp, st, inner, me);
    if inner.active_count() == 0 {
        lp.stop(me).unwrap();
    }
}

/// The outer loop on `outer`, and an inner loop on `inner` with one
/// [`read_once`] watcher, whose peer is returned.
fn outer_and_reader(
    outer: &'static str,
    inner: &'static str,
) -> (Loop<'static, Outer>, Loop<'static, Inner>, UnixStream) {
    let (a, peer) = pair();
    let mut inside = inner_loop::<Inner>(inner);
    read_once(&mut inside, a);
    (World::new(outer).new_loop(), inside, peer)
}

/// Runs `lp` until no watcher is active (it must end that way), from a
/// fresh state, which is returned.
fn run_out(lp: &mut Loop<Outer>) -> Outer {
    let mut st = Outer::default();
    assert_eq!(
        lp.run(RunMode::Default, &mut st).unwrap(),
        RunOutcome::NoActiveWatchers
    );
    st
}

/// An io watcher of the inner loop that reads what is there and goes.
fn read_once(lp: &mut Loop<'static, Inner>, a: UnixStream) {
    lp.io(a, Interest::READABLE, |lp, st, ev| {
        let mut buf = [0; 64];
        let n = ev.source.read(&mut buf).unwrap();
        st.got.extend_from_slice(&buf[..n]);
        lp.remove(ev.watcher).unwrap();
    })
    .unwrap();
}

// ---------------------------------------------------------------------
// Every pair.

/// An inner io watcher on a real socket gets its event through the outer
/// loop: the outer blocks (on its own timer, then on the inner's fd), the
/// peer writes from the outer's timer, and the embed callback runs the
/// inner loop, once.
fn io_reaches_the_inner_watcher(outer: &'static str, inner: &'static str) {
    let (mut lp, inside, mut peer) = outer_and_reader(outer, inner);
    let e = Embed::new(&mut lp, inside, sweep_until_done).unwrap();
    lp.timer(ms(10), Duration::ZERO, move |_, _, _| {
        peer.write_all(b"ping").unwrap();
    })
    .unwrap();
    let st = run_out(&mut lp);
    assert_eq!(st.inner.got, b"ping");
    // Once: the inner fd was not readable before the write (the flush
    // made the registration; an unflushed change would have run the
    // callback at once, for nothing).
    assert_eq!(st.calls, 1, "the embed callback ran {} times", st.calls);
    assert!(!lp.is_active(e).unwrap());
}

/// An inner timer fires on time with no io at all: the outer's wait is
/// bounded by the inner's next deadline. Checked with the inner loop's
/// clock: not early, and with few outer iterations (no spin).
fn inner_timer_fires_on_time(outer: &'static str, inner: &'static str) {
    let mut lp: Loop<Outer> = World::new(outer).new_loop();
    let mut inside = inner_loop::<Inner>(inner);
    inside.update_now();
    let start = inside.now();
    inside
        .timer(ms(30), Duration::ZERO, |lp, st, _| st.fired.push(lp.now()))
        .unwrap();
    Embed::new(&mut lp, inside, sweep_until_done).unwrap();
    let st = run_out(&mut lp);
    assert_eq!(st.inner.fired.len(), 1);
    let after = st.inner.fired[0] - start;
    assert!(after >= ms(30), "fired after {after:?}");
    // The outer blocked until the deadline: a handful of iterations (a
    // wait may end early on a signal's EINTR, or on a spurious wake-up),
    // not a spin.
    assert!(lp.iteration() <= 5, "{} iterations", lp.iteration());
    assert!(st.calls <= 3, "{} calls", st.calls);
}

/// A watcher started in the inner loop between its runs (through
/// `Embed::inner_mut`, after the outer ran once) is seen: its fd reaches the
/// inner backend in the outer's prepare phase, before the outer blocks.
fn watcher_started_between_runs_is_seen(outer: &'static str, inner: &'static str) {
    let mut lp: Loop<Outer> = World::new(outer).new_loop();
    let e = Embed::new(&mut lp, inner_loop::<Inner>(inner), sweep_until_done).unwrap();
    // The inner loop has nothing: the outer's iteration does not call it.
    let mut st = Outer::default();
    lp.run(RunMode::NoWait, &mut st).unwrap();
    assert_eq!(st.calls, 0);
    let (a, mut peer) = pair();
    read_once(e.inner_mut(&mut lp).unwrap(), a);
    lp.timer(ms(10), Duration::ZERO, move |_, _, _| {
        peer.write_all(b"late").unwrap();
    })
    .unwrap();
    assert_eq!(
        lp.run(RunMode::Default, &mut st).unwrap(),
        RunOutcome::NoActiveWatchers
    );
    assert_eq!(st.inner.got, b"late");
    assert_eq!(st.calls, 1, "the embed callback ran {} times", st.calls);
}

/// `Embed::unembed` gives the loop back, working on its own: its watchers kept,
/// new ones served; the handle stale.
fn unembed_gives_the_loop_back(outer: &'static str, inner: &'static str) {
    let (mut lp, mut inside, mut peer) = outer_and_reader(outer, inner);
    let (b, mut peer_b) = pair();
    read_once(&mut inside, b);
    let e = Embed::new(&mut lp, inside, sweep).unwrap();
    peer.write_all(b"one").unwrap();
    let mut st = Outer::default();
    while st.inner.got.is_empty() {
        lp.run(RunMode::Once, &mut st).unwrap();
    }
    assert_eq!(st.inner.got, b"one");
    let mut inside = e.unembed(&mut lp).unwrap();
    assert!(matches!(
        e.inner(&lp),
        Err(Error::StaleHandle { kind: "embed" })
    ));
    assert!(matches!(e.unembed(&mut lp), Err(Error::StaleHandle { .. })));
    assert_eq!(lp.active_count(), 0);
    // On its own: the watcher left in it, and a timer started now.
    inside
        .timer(ms(5), Duration::ZERO, |lp, st, _| st.fired.push(lp.now()))
        .unwrap();
    peer_b.write_all(b"two").unwrap();
    let mut mine = Inner::default();
    assert_eq!(
        inside.run(RunMode::Default, &mut mine).unwrap(),
        RunOutcome::NoActiveWatchers
    );
    assert_eq!((mine.got.as_slice(), mine.fired.len()), (&b"two"[..], 1));
    // And it can be embedded again.
    let (c, mut peer_c) = pair();
    read_once(&mut inside, c);
    let e = Embed::new(&mut lp, inside, sweep_until_done).unwrap();
    peer_c.write_all(b"three").unwrap();
    let mut st = Outer::default();
    lp.run(RunMode::Default, &mut st).unwrap();
    assert_eq!(st.inner.got, b"three");
    assert!(e.inner(&lp).is_ok());
}

/// An async send from another thread to an inner async watcher wakes the
/// outer loop through the inner loop's fd (the outer's wait armed the
/// inner's wake-up: `next_timeout`), whenever the send comes.
fn async_send_wakes_the_outer(outer: &'static str, inner: &'static str) {
    let mut lp: Loop<Outer> = World::new(outer).new_loop();
    let mut inside = inner_loop::<Inner>(inner);
    let (_, sender) = Async::new(&mut inside, |lp, st, me| {
        st.got.push(b'!');
        lp.remove(me).unwrap();
    })
    .unwrap();
    let e = Embed::new(&mut lp, inside, sweep_until_done).unwrap();
    let thread = std::thread::spawn(move || sender.send().unwrap());
    let st = run_out(&mut lp);
    thread.join().unwrap();
    assert_eq!(st.inner.got, b"!");
    assert!(!lp.is_active(e).unwrap());
}

/// A panic in the embed callback propagates out of the outer's run, and
/// the inner loop is put back first: reachable, and served by the next
/// run. Inside the callback, the loop is the callback's: `Embed::inner_mut`
/// and `Embed::unembed` say so.
fn panic_keeps_the_inner_loop(outer: &'static str, inner: &'static str) {
    let (mut lp, inside, mut peer) = outer_and_reader(outer, inner);
    let e = Embed::new(&mut lp, inside, |lp, st, inner, me| {
        assert!(matches!(me.inner_mut(lp), Err(Error::EmbeddedRunning)));
        assert!(matches!(me.inner(lp), Err(Error::EmbeddedRunning)));
        assert!(matches!(me.unembed(lp), Err(Error::EmbeddedRunning)));
        st.calls += 1;
        if st.calls == 1 {
            panic!("first call");
        }
        inner.run(RunMode::NoWait, &mut st.inner).unwrap();
        if inner.active_count() == 0 {
            lp.stop(me).unwrap();
        }
    })
    .unwrap();
    peer.write_all(b"x").unwrap();
    let mut st = Outer::default();
    let caught = catch_unwind(AssertUnwindSafe(|| lp.run(RunMode::Default, &mut st)));
    assert_eq!(
        caught.unwrap_err().downcast_ref::<&str>(),
        Some(&"first call")
    );
    assert_eq!(e.inner(&lp).unwrap().active_count(), 1, "the loop is back");
    assert_eq!(
        lp.run(RunMode::Default, &mut st).unwrap(),
        RunOutcome::NoActiveWatchers
    );
    assert_eq!((st.calls, st.inner.got.as_slice()), (2, &b"x"[..]));
}

/// `remove` (here from the embed callback itself) drops the inner loop:
/// its cleanup watchers run, once the callback has returned.
fn remove_drops_the_inner_loop(outer: &'static str, inner: &'static str) {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;
    let mut lp: Loop<Outer> = World::new(outer).new_loop();
    let mut inside = inner_loop::<Inner>(inner);
    let cleaned = Arc::new(AtomicU32::new(0));
    let c = cleaned.clone();
    Cleanup::new(&mut inside, move |_| {
        c.fetch_add(1, Ordering::SeqCst);
    })
    .unwrap();
    Idle::new(&mut inside, |_, _, _| {}).unwrap(); // work at once: next_timeout is zero
    let seen = cleaned.clone();
    Embed::new(&mut lp, inside, move |lp, st, _, me| {
        st.calls += 1;
        lp.remove(me).unwrap();
        assert_eq!(seen.load(Ordering::SeqCst), 0, "not while it runs");
    })
    .unwrap();
    let st = run_out(&mut lp);
    assert_eq!((st.calls, cleaned.load(Ordering::SeqCst)), (1, 1));
}

/// The outer's `reinit_after_fork` (called here without a fork: it makes
/// new kernel objects all the same) re-creates the inner loop's too, and
/// the outer watches the inner's new fd.
fn reinit_reaches_the_inner_loop(outer: &'static str, inner: &'static str) {
    let (mut lp, inside, mut peer) = outer_and_reader(outer, inner);
    let e = Embed::new(&mut lp, inside, sweep_until_done).unwrap();
    let mut st = Outer::default();
    lp.run(RunMode::NoWait, &mut st).unwrap();
    lp.reinit_after_fork().unwrap();
    peer.write_all(b"after").unwrap();
    assert_eq!(
        lp.run(RunMode::Default, &mut st).unwrap(),
        RunOutcome::NoActiveWatchers
    );
    assert_eq!(st.inner.got, b"after");
    assert!(!lp.is_active(e).unwrap());
}

/// One test per scenario, each run on every pair ([`on_pairs`]).
macro_rules! on_every_pair {
    ($($test:ident: $what:literal => $scenario:ident;)*) => {$(
        #[test]
        fn $test() {
            on_pairs($what, $scenario);
        }
    )*};
}

on_every_pair! {
    io_reaches_the_inner_watcher_on_every_pair: "io" => io_reaches_the_inner_watcher;
    inner_timer_fires_on_time_on_every_pair: "timer" => inner_timer_fires_on_time;
    watcher_started_between_runs_is_seen_on_every_pair: "flush" => watcher_started_between_runs_is_seen;
    unembed_gives_the_loop_back_on_every_pair: "unembed" => unembed_gives_the_loop_back;
    async_send_wakes_the_outer_on_every_pair: "async" => async_send_wakes_the_outer;
    panic_in_the_callback_keeps_the_inner_loop_on_every_pair: "panic" => panic_keeps_the_inner_loop;
    remove_drops_the_inner_loop_on_every_pair: "remove" => remove_drops_the_inner_loop;
    reinit_after_fork_reaches_the_inner_loop_on_every_pair: "reinit" => reinit_reaches_the_inner_loop;
}

// ---------------------------------------------------------------------
// The refusals.

#[test]
fn loops_without_a_pollable_fd_are_refused() {
    watchdog("refusals", WATCHDOG, || {
        let mut inners: Vec<(&str, Loop<'static, ()>)> = vec![
            ("poll", World::new("poll").new_loop()),
            ("select", World::new("select").new_loop()),
            ("sim", Loop::with_backend(Sim::new().backend())),
        ];
        for (name, mut inner) in inners.drain(..) {
            match inner.pollable_fd() {
                Err(Error::NoPollableFd { backend, reason }) => {
                    assert_eq!(backend, name);
                    assert!(!reason.is_empty());
                }
                other => panic!("{name}: {other:?}"),
            }
            // `PollableLoop::new` says the same, and gives the loop back with
            // its watchers.
            let fired = std::rc::Rc::new(std::cell::Cell::new(false));
            let f = fired.clone();
            inner
                .timer(Duration::ZERO, Duration::ZERO, move |_, _, _| f.set(true))
                .unwrap();
            let refused = PollableLoop::new(inner).unwrap_err();
            let text = refused.to_string();
            assert!(
                matches!(refused.error(), Error::NoPollableFd { backend, .. } if *backend == name),
                "{text}"
            );
            assert!(
                text.contains(name) && text.contains("no pollable fd"),
                "{text}"
            );
            let mut inner = refused.into_loop();
            assert_eq!(inner.active_count(), 1);
            inner.run(RunMode::Default, &mut ()).unwrap();
            assert!(fired.get(), "{name}: the timer lost");
            for outer_name in outers() {
                let outer: Loop = World::new(outer_name).new_loop();
                let err = Embed::can_embed(&outer, &inner).unwrap_err();
                let text = err.to_string();
                match &err {
                    Error::CannotEmbed {
                        inner: i,
                        outer: o,
                        reason,
                    } => {
                        assert_eq!((*i, *o), (name, outer_name));
                        assert!(reason.contains("no pollable fd"), "{text}");
                    }
                    other => panic!("{name} in {outer_name}: {other:?}"),
                }
                assert!(text.contains(name) && text.contains(outer_name), "{text}");
            }
            // `embed` says the same, and leaves nothing behind.
            let mut outer: Loop = World::new("epoll").new_loop();
            let err = Embed::new(&mut outer, inner, |_, _, _, _| {}).unwrap_err();
            assert!(matches!(err, Error::CannotEmbed { .. }), "{err}");
            assert_eq!((outer.active_count(), outer.pending_count()), (0, 0));
        }
    });
}

#[test]
fn a_simulator_cannot_embed_an_os_loop() {
    watchdog("sim outer", WATCHDOG, || {
        for name in inners() {
            let inner = inner_loop::<()>(name);
            let mut sim: Loop = Loop::with_backend(Sim::new().backend());
            let err = Embed::new(&mut sim, inner, |_, _, _, _| {}).unwrap_err();
            assert!(
                matches!(err, Error::CannotEmbed { inner, outer: "sim", .. } if inner == name),
                "{err}"
            );
            assert!(err.to_string().contains("simulated"), "{err}");
            assert_eq!(sim.active_count(), 0);
        }
    });
}

/// A ring with deferred task work is never woken by its completions:
/// refused, saying so (a kernel before 6.1 makes rings without it).
#[cfg(all(feature = "io-uring", target_os = "linux"))]
#[test]
fn io_uring_with_deferred_task_work_has_no_pollable_fd() {
    let lp: Loop = World::new("io_uring").new_loop();
    let deferred = format!("{:?}", evloop::backends::io_uring::IoUring::new().unwrap())
        .contains("deferred_task_work: true");
    match lp.pollable_fd() {
        Ok(_) => assert!(!deferred),
        Err(err) => {
            assert!(deferred, "{err}");
            let text = err.to_string();
            assert!(
                text.contains("deferred task work") && text.contains("without_deferred_task_work"),
                "{text}"
            );
        }
    }
}

// ---------------------------------------------------------------------
// The pollable fd itself.

/// The pollable fd is readable exactly when an io watcher's fd is ready
/// (once flushed), not for a due timer (`next_timeout` says zero then),
/// and not once the loop has taken the event.
fn pollable_fd_readable_exactly_when_ready(name: &'static str) {
    let mut lp = PollableLoop::new(inner_loop::<Vec<u8>>(name)).unwrap();
    let fd = lp.as_raw_fd();
    assert_eq!(lp.pollable_fd().unwrap().as_raw_fd(), fd);
    assert_eq!(lp.next_timeout(), None, "nothing active");
    assert!(!lp.readable_now().unwrap());

    let (a, mut peer) = pair();
    let io = lp
        .io(a, Interest::READABLE, |_, got, ev| {
            let mut buf = [0; 64];
            let n = ev.source.read(&mut buf).unwrap();
            got.extend_from_slice(&buf[..n]);
        })
        .unwrap();
    peer.write_all(b"1").unwrap();
    // Not flushed: the backend does not know the fd yet.
    assert_eq!(lp.next_timeout(), Some(Duration::ZERO), "changes unflushed");
    assert!(
        !lp.readable_now().unwrap(),
        "{name}: readable before the flush"
    );
    lp.flush_changes().unwrap();
    assert_eq!(lp.next_timeout(), None);
    assert!(
        readable(fd, 5_000),
        "{name}: not readable with data waiting"
    );
    let mut got = Vec::new();
    lp.run(RunMode::NoWait, &mut got).unwrap();
    assert_eq!(got, b"1");
    lp.flush_changes().unwrap();
    assert_eq!(lp.next_timeout(), None);
    assert!(
        !lp.readable_now().unwrap(),
        "{name}: readable with the data taken"
    );

    // Data from another thread wakes a wait on the fd.
    let writer = std::thread::spawn(move || {
        peer.write_all(b"2").unwrap();
        peer
    });
    assert!(readable(fd, 5_000), "{name}: not woken by the write");
    let mut peer = writer.join().unwrap();
    lp.run(RunMode::NoWait, &mut got).unwrap();
    assert_eq!(got, b"12");

    // A due timer: the fd says nothing, next_timeout says zero.
    lp.stop(io).unwrap();
    lp.flush_changes().unwrap();
    let t = lp
        .timer(Duration::ZERO, Duration::ZERO, |_, got, _| got.push(b't'))
        .unwrap();
    peer.write_all(b"3").unwrap(); // on a stopped watcher's fd: unwatched
    assert_eq!(lp.next_timeout(), Some(Duration::ZERO), "a due timer");
    assert!(!lp.readable_now().unwrap(), "{name}: readable for a timer");
    lp.run(RunMode::NoWait, &mut got).unwrap();
    assert_eq!(got, b"12t");
    // A timer to come: its time left.
    t.set(&mut lp, ms(400), Duration::ZERO).unwrap();
    lp.start(t).unwrap();
    let left = lp.next_timeout().unwrap();
    assert!(left > Duration::ZERO && left <= ms(400), "{left:?}");
    // Pending callbacks: zero, and the fd says nothing of them.
    lp.feed_event(io, Ready::READABLE).unwrap();
    assert_eq!(lp.next_timeout(), Some(Duration::ZERO));
    assert!(!lp.readable_now().unwrap());
    // An idle watcher: zero.
    lp.clear_pending(io).unwrap();
    let idle = Idle::new(&mut lp, |_, _, _| {}).unwrap();
    assert_eq!(lp.next_timeout(), Some(Duration::ZERO));
    lp.remove(idle).unwrap();
    assert_eq!(lp.next_timeout().map(|d| d > Duration::ZERO), Some(true));
}

#[test]
fn pollable_fd_is_readable_exactly_when_an_inner_fd_is_ready() {
    for name in inners() {
        watchdog(&format!("pollable fd on {name}"), WATCHDOG, move || {
            pollable_fd_readable_exactly_when_ready(name)
        });
    }
}

/// Runs `lp` from a mio `Poll`: mio watches the loop's fd (`AsRawFd`),
/// waits at most `next_timeout`, and runs the loop without blocking when
/// woken. mio's registrations are edge-triggered: re-registering after
/// each run re-reads the readiness, so that what a run left (a level fd
/// still readable) wakes the next wait.
fn run_from_mio(
    mut lp: PollableLoop<'static, Driven>,
    st: &mut Driven,
) -> Result<(PollableLoop<'static, Driven>, u32), Box<dyn StdError>> {
    const LOOP: Token = Token(0);
    let mut poll = Poll::new()?;
    let fd = lp.as_raw_fd();
    let loop_fd = || SourceFd(&fd);
    poll.registry()
        .register(&mut loop_fd(), LOOP, mio::Interest::READABLE)?;
    let mut events = Events::with_capacity(64);
    let mut wakes = 0;
    while lp.active_count() > 0 {
        // The loop's changes to its backend (its fd readable for them),
        // then how long mio may wait (timers, pending callbacks).
        lp.flush_changes()?;
        let timeout = lp.next_timeout();
        match poll.poll(&mut events, timeout) {
            Ok(()) => {}
            // An io_uring ring without deferred task work ends the
            // thread's waits with EINTR as its polls complete.
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
        wakes += 1;
        // (Other sources' events would be handled here.)
        lp.run(RunMode::NoWait, st)?;
        poll.registry()
            .reregister(&mut loop_fd(), LOOP, mio::Interest::READABLE)?;
    }
    Ok((lp, wakes))
}

#[test]
fn a_loop_driven_from_mio() {
    for name in inners() {
        watchdog(&format!("mio drives {name}"), WATCHDOG, move || {
            driven_from(name, run_from_mio)
        });
    }
}

// ---------------------------------------------------------------------
// Chains: loops embedded in one another (issue 34, item 8).

/// What every loop of a chain keeps (one state, handed down the chain):
/// whether the innermost timer fired, and the errors the runs met.
#[derive(Default)]
struct Chain {
    fired: u32,
    errors: Vec<String>,
}

/// A chain's embed callback: one non-blocking run of the loop below; an
/// error it meets is recorded and the watcher stopped, as is a watcher
/// whose loop has nothing left (so that the chain unwinds to the top).
fn descend(
    lp: &mut Loop<Chain>,
    st: &mut Chain,
    inner: &mut Loop<'static, Chain>,
    me: Embed<Chain>,
) {
    if let Err(e) = inner.run(RunMode::NoWait, st) {
        st.errors.push(e.to_string());
        lp.stop(me).unwrap();
    } else if inner.active_count() == 0 {
        lp.stop(me).unwrap();
    }
}

/// Builds a chain of `depth` loops on `name` embedded in one another
/// below a top loop, the innermost with a 20 ms timer, bottom up; the
/// first `embed` refused ends it. Returns the top loop and the error.
fn chain(name: &'static str, depth: usize) -> (Loop<'static, Chain>, Option<Error>) {
    let mut lp = inner_loop::<Chain>(name);
    lp.timer(ms(20), Duration::ZERO, |_, st, _| st.fired += 1)
        .unwrap();
    for _ in 0..depth {
        let mut outer = inner_loop::<Chain>(name);
        if let Err(e) = Embed::new(&mut outer, lp, descend) {
            return (outer, Some(e));
        }
        lp = outer;
    }
    (lp, None)
}

/// Runs a chain's top loop until the chain unwinds (fired, or an error
/// stopped it), with an unreferenced 2 s timer that breaks a run that
/// would not end; returns the run's outcome and its iterations.
fn run_chain(top: &mut Loop<'static, Chain>, st: &mut Chain) -> (evloop::Result<RunOutcome>, u64) {
    let guard = top
        .timer(ms(2_000), Duration::ZERO, |lp, _, _| {
            lp.break_loop(evloop::Break::All)
        })
        .unwrap();
    top.set_ref(guard, false).unwrap();
    let before = top.iteration();
    let outcome = top.run(RunMode::Default, st);
    (outcome, top.iteration() - before)
}

/// The epoll chain the audit found spinning: with 4 loops embedded in
/// one another below the top one, the innermost timer fires through
/// all of them; with 5, the kernel refuses the fifth level (`ELOOP`), and
/// that `embed` says so: no chain that silently never fires, no spin.
#[cfg(target_os = "linux")]
#[test]
fn an_epoll_chain_too_deep_is_refused_at_embed() {
    watchdog("epoll chain", WATCHDOG, || {
        let (mut top, refused) = chain("epoll", 4);
        assert!(refused.is_none(), "{refused:?}");
        let mut st = Chain::default();
        let (outcome, iterations) = run_chain(&mut top, &mut st);
        assert_eq!(outcome.unwrap(), RunOutcome::NoActiveWatchers);
        assert_eq!((st.fired, st.errors.len()), (1, 0), "{:?}", st.errors);
        assert!(iterations < 10, "{iterations} iterations");

        let (mut top, refused) = chain("epoll", 5);
        let err = refused.expect("the fifth level is refused at embed");
        let text = err.to_string();
        assert!(
            matches!(
                err,
                Error::CannotEmbed {
                    inner: "epoll",
                    outer: "epoll",
                    ..
                }
            ),
            "{text}"
        );
        assert!(
            text.contains("ELOOP") && text.contains("nested too deep"),
            "{text}"
        );
        // What was built works: the top loop (the refused one) has nothing.
        assert_eq!(top.active_count(), 0);
        let mut st = Chain::default();
        assert_eq!(
            top.run(RunMode::Default, &mut st).unwrap(),
            RunOutcome::NoActiveWatchers
        );
    });
}

/// The same limit met in `run`: the deepest level's watcher is stopped
/// while the chain is built (its fd unregistered) and started again
/// inside it, so that the registration is made, and refused, by a flush
/// in the top loop's run. The level's run returns the error (its
/// callback above records it), its watcher is stopped, and the chain
/// unwinds in a few iterations.
#[cfg(target_os = "linux")]
#[test]
fn an_epoll_chain_too_deep_fails_in_run() {
    watchdog("epoll chain started late", WATCHDOG, || {
        let mut deepest = inner_loop::<Chain>("epoll");
        deepest
            .timer(ms(20), Duration::ZERO, |_, st, _| st.fired += 1)
            .unwrap();
        let mut lp = inner_loop::<Chain>("epoll");
        let last = Embed::new(&mut lp, deepest, descend).unwrap();
        lp.stop(last).unwrap();
        let mut path = Vec::new();
        for _ in 0..4 {
            let mut outer = inner_loop::<Chain>("epoll");
            path.push(Embed::new(&mut outer, lp, descend).unwrap());
            lp = outer;
        }
        let mut top = lp;
        let mut level = &mut top;
        for &e in path.iter().rev() {
            level = e.inner_mut(level).unwrap();
        }
        level.start(last).unwrap();

        let mut st = Chain::default();
        let (outcome, iterations) = run_chain(&mut top, &mut st);
        assert_eq!(outcome.unwrap(), RunOutcome::NoActiveWatchers);
        assert_eq!(st.fired, 0);
        assert_eq!(st.errors.len(), 1, "{:?}", st.errors);
        assert!(
            st.errors[0].contains("ELOOP") && st.errors[0].contains("nested too deep"),
            "{}",
            st.errors[0]
        );
        assert!(iterations < 10, "{iterations} iterations: it spun");
    });
}

/// Chains of 1 to 6 levels on each backend with a pollable fd: each
/// either fires its innermost timer or says why not (at `embed`, or from
/// a run: the emulated kqueue is two epoll levels per kqueue, and
/// reports a refused registration as an invalid fd), in a few
/// iterations. io_uring polls a ring's fd without nesting epoll
/// instances: any depth works.
#[test]
fn chains_fire_or_say_why_on_every_backend() {
    for name in inners() {
        watchdog(&format!("chains on {name}"), WATCHDOG, move || {
            for depth in 1..=6 {
                let (mut top, refused) = chain(name, depth);
                let mut st = Chain::default();
                let (outcome, iterations) = run_chain(&mut top, &mut st);
                // (The top loop's own watcher refused: its run says so.)
                match outcome {
                    Ok(outcome) => assert_eq!(outcome, RunOutcome::NoActiveWatchers),
                    Err(e) => st.errors.push(e.to_string()),
                }
                let what = format!("{name}, {depth} levels: {refused:?}, {:?}", st.errors);
                assert!(iterations < 10, "{what}: {iterations} iterations");
                let failed = refused.is_some() || !st.errors.is_empty();
                assert_ne!(st.fired == 1, failed, "{what}");
                let expect_fired = match name {
                    "epoll" => depth <= 4,
                    "io_uring" => true,
                    _ => st.fired == 1, // (however deep the emulation allows)
                };
                assert_eq!(st.fired == 1, expect_fired, "{what}");
                for text in refused.iter().map(|e| e.to_string()).chain(st.errors) {
                    assert!(text.contains("cannot be embedded"), "{name}: {text}");
                }
            }
        });
    }
}

// ---------------------------------------------------------------------
// Another loop put in place of the embedded one (issue 34, item 9).

/// What the replacement scenarios' outer loops keep.
#[derive(Default)]
struct Swap {
    inner: Inner,
    calls: u32,
    /// The loop to put in place of the embedded one at the first call.
    replacement: Option<Loop<'static, Inner>>,
    /// The replaced loop's fd number, and the readable file the test put
    /// at it once it was closed (with its peer): not the embedded loop.
    old_fd: RawFd,
    reused: Option<(std::os::fd::OwnedFd, UnixStream, UnixStream)>,
}

/// Closes the replaced loop and puts a readable socket at its number:
/// `F_DUPFD` gives the lowest free number from it (that number, unless
/// another test's thread took it meanwhile: never someone else's fd).
fn reuse_number(old: Loop<'static, Inner>, st: &mut Swap) {
    st.old_fd = old.pollable_fd().unwrap().as_raw_fd();
    drop(old);
    let (x, mut y) = UnixStream::pair().unwrap();
    y.write_all(b"not the loop").unwrap();
    // SAFETY: F_DUPFD on an open fd returns a new fd that nothing else
    // owns; OwnedFd takes it (or fails the test on -1).
    let n = unsafe { libc::fcntl(x.as_raw_fd(), libc::F_DUPFD_CLOEXEC, st.old_fd) };
    assert!(n >= 0, "F_DUPFD: {}", std::io::Error::last_os_error());
    let reused = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(n) };
    st.reused = Some((reused, x, y));
}

/// The embed callback puts another loop in place of the embedded one
/// (`mem::replace` on its `&mut Loop`) and the old one is dropped; a
/// readable socket then takes the old fd number. The outer follows the
/// new loop: its io watcher is served (the peer writes later, from the
/// outer's timer), and the readable socket at the old number does not
/// run the callback (on poll and select, which watch numbers, it would
/// run it at every iteration; epoll would wait on the old loop's closed
/// registration forever).
fn replaced_in_the_callback(outer: &'static str, inner: &'static str) {
    let mut lp: Loop<Swap> = World::new(outer).new_loop();
    let mut first = inner_loop::<Inner>(inner);
    first
        .timer(Duration::ZERO, Duration::ZERO, |_, _, _| {})
        .unwrap(); // the first call, at once
    let (a, mut peer) = pair();
    let mut second = inner_loop::<Inner>(inner);
    read_once(&mut second, a);
    let e = Embed::new(&mut lp, first, |lp, st, inner, me| {
        st.calls += 1;
        inner.run(RunMode::NoWait, &mut st.inner).unwrap();
        if let Some(next) = st.replacement.take() {
            reuse_number(std::mem::replace(inner, next), st);
        }
        if inner.active_count() == 0 {
            lp.stop(me).unwrap();
        }
    })
    .unwrap();
    lp.timer(ms(20), Duration::ZERO, move |_, _, _| {
        peer.write_all(b"ping").unwrap();
    })
    .unwrap();
    let mut st = Swap {
        replacement: Some(second),
        ..Swap::default()
    };
    assert_eq!(
        lp.run(RunMode::Default, &mut st).unwrap(),
        RunOutcome::NoActiveWatchers
    );
    assert_eq!(st.inner.got, b"ping");
    assert!(st.calls < 10, "the embed callback ran {} times", st.calls);
    let (reused, _, _) = st.reused.as_ref().unwrap();
    if reused.as_raw_fd() != st.old_fd {
        eprintln!("{inner} in {outer}: fd {} was taken meanwhile", st.old_fd);
    }
    // The loop held is the new one.
    assert_eq!(e.inner(&lp).unwrap().active_count(), 0);
}

/// A loop put in place that this loop cannot watch (no pollable fd): the
/// watcher is stopped and the outer's run says why; the loop is there to
/// take back. Between runs, through `Embed::inner_mut`, the same: found
/// before the outer polls.
fn replaced_by_a_loop_that_cannot_be_embedded(outer: &'static str, inner: &'static str) {
    let mut lp: Loop<Swap> = World::new(outer).new_loop();
    let mut first = inner_loop::<Inner>(inner);
    first
        .timer(Duration::ZERO, Duration::ZERO, |_, _, _| {})
        .unwrap();
    let e = Embed::new(&mut lp, first, |_, st, inner, _| {
        st.calls += 1;
        if let Some(next) = st.replacement.take() {
            drop(std::mem::replace(inner, next));
        }
    })
    .unwrap();
    let mut st = Swap {
        replacement: Some(World::new("poll").new_loop()),
        ..Swap::default()
    };
    let err = lp.run(RunMode::Default, &mut st).unwrap_err();
    assert!(
        matches!(err, Error::CannotEmbed { inner: "poll", .. }),
        "{err}"
    );
    assert!(err.to_string().contains("no pollable fd"), "{err}");
    assert_eq!(st.calls, 1);
    assert!(!lp.is_active(e).unwrap());
    // Started again, it says the same; with a loop that can be watched
    // put in place, it works.
    assert!(matches!(lp.start(e), Err(Error::CannotEmbed { .. })));
    *e.inner_mut(&mut lp).unwrap() = inner_loop::<Inner>(inner);
    lp.start(e).unwrap();
    assert!(lp.is_active(e).unwrap());
    // Replaced between runs while active: refused before the poll.
    *e.inner_mut(&mut lp).unwrap() = World::new("select").new_loop();
    let err = lp.run(RunMode::Default, &mut st).unwrap_err();
    assert!(
        matches!(
            err,
            Error::CannotEmbed {
                inner: "select",
                ..
            }
        ),
        "{err}"
    );
    assert!(!lp.is_active(e).unwrap());
    assert_eq!(st.calls, 1, "the callback ran for a loop it cannot watch");
    assert_eq!(e.unembed(&mut lp).unwrap().backend_name(), "select");
}

on_every_pair! {
    replaced_in_the_callback_is_followed_on_every_pair: "replaced" => replaced_in_the_callback;
    replaced_by_an_unembeddable_loop_on_every_pair: "replaced, refused" => replaced_by_a_loop_that_cannot_be_embedded;
}

/// The inner loop's pollable fd changes under the outer: an epoll
/// backend rebuilds its instance when a removal misses its registration
/// (an fd of its replaced behind its back, as in
/// `tests/epoll_closed_behind_back.rs`), and the rebuilt instance has
/// another number. The outer follows it: the inner io after the rebuild
/// is served (before, the outer watched the closed number: epoll waited
/// forever, poll and select met a closed fd).
#[cfg(target_os = "linux")]
fn follows_a_rebuilt_inner_instance(outer: &'static str) {
    let mut inside = inner_loop::<Inner>("epoll");
    let (x, _x_peer) = pair();
    let n = x.as_raw_fd();
    let w = inside.io(x, Interest::READABLE, |_, _, _| {}).unwrap();
    inside.flush_changes().unwrap();
    let null = std::fs::File::open("/dev/null").unwrap();
    // SAFETY: `n` is the socket the watcher owns, open until the watcher
    // goes; dup2 puts /dev/null's file at that number (the socket's file
    // closes, its registration with it), which the watcher's drop then
    // closes once: no fd is used after its close.
    assert_eq!(unsafe { libc::dup2(null.as_raw_fd(), n) }, n);
    inside.remove(w).unwrap(); // its DEL misses: a rebuild at the next poll
    let before = inside.pollable_fd().unwrap().as_raw_fd();

    let (a, mut peer) = pair();
    inside
        .io(a, Interest::READABLE, |lp, st, ev| {
            let mut buf = [0; 64];
            let n = ev.source.read(&mut buf).unwrap();
            st.got.extend_from_slice(&buf[..n]);
            if st.got.len() == 6 {
                lp.remove(ev.watcher).unwrap();
            }
        })
        .unwrap();
    let mut lp: Loop<Outer> = World::new(outer).new_loop();
    let e = Embed::new(&mut lp, inside, sweep_until_done).unwrap();
    let mut writes = vec![&b"one"[..], b"two"].into_iter();
    lp.timer(ms(10), ms(20), move |lp, _, me| match writes.next() {
        Some(bytes) => peer.write_all(bytes).unwrap(),
        None => lp.remove(me).unwrap(),
    })
    .unwrap();
    let st = run_out(&mut lp);
    assert_eq!(st.inner.got, b"onetwo");
    let after = e.inner(&lp).unwrap().pollable_fd().unwrap().as_raw_fd();
    assert_ne!(before, after, "no rebuild: the scenario tests nothing");
    assert!(st.calls < 10, "the embed callback ran {} times", st.calls);
}

#[cfg(target_os = "linux")]
#[test]
fn an_inner_loop_whose_fd_changes_is_followed() {
    common::on_backends("rebuilt inner", &outers(), follows_a_rebuilt_inner_instance);
}
