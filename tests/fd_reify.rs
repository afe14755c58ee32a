//! fd_reify: io watcher changes are batched into at most one backend call
//! per fd per iteration, and none when they cancel out. Counted on the
//! simulated backend.

use std::time::Duration;

use evloop::{Error, Interest, Loop, Ready, RunMode, RunOutcome, Sim, SimSocket, Trigger};

#[test]
fn many_changes_on_one_fd_make_one_backend_call() {
    let sim = Sim::new();
    let sock = sim.socket("s", 0);
    let mut lp: Loop = Loop::with_backend(sim.backend());
    let r = lp
        .io_borrowed(&sock, Interest::READABLE, |_, _, _| {})
        .unwrap();
    lp.stop(r).unwrap();
    lp.start(r).unwrap();
    lp.set_interest(r, Interest::BOTH).unwrap();
    lp.set_interest(r, Interest::READABLE).unwrap();
    let w = lp
        .io_borrowed(&sock, Interest::WRITABLE, |_, _, _| {})
        .unwrap();
    lp.stop(w).unwrap();
    assert_eq!(
        sim.modify_count(),
        0,
        "starting and stopping only marks the fd"
    );

    lp.run(RunMode::NoWait, &mut ()).unwrap();
    assert_eq!(sim.modify_count(), 1);
    assert_eq!(sim.trace_lines()[0], "t=0ns modify fd3 - => r");
    assert_eq!(sim.registered(&sock), Interest::READABLE);
}

#[test]
fn changes_that_cancel_out_make_no_backend_call() {
    let sim = Sim::new();
    let sock = sim.socket("s", 0);
    let mut lp: Loop = Loop::with_backend(sim.backend());
    let r = lp
        .io_borrowed(&sock, Interest::READABLE, |_, _, _| {})
        .unwrap();
    lp.run(RunMode::NoWait, &mut ()).unwrap();
    assert_eq!(sim.modify_count(), 1);

    // A prepare watcher churns the fd's watchers every iteration.
    let mut extra = None;
    let sock = &sock;
    lp.prepare(move |lp, _, _| {
        lp.stop(r).unwrap();
        lp.start(r).unwrap();
        lp.set_interest(r, Interest::WRITABLE).unwrap();
        lp.set_interest(r, Interest::READABLE).unwrap();
        if let Some(w) = extra.take() {
            lp.remove(w).unwrap();
        }
        let w = lp
            .io_borrowed(sock, Interest::READABLE, |_, _, _| {})
            .unwrap();
        extra = Some(w);
    })
    .unwrap();
    for _ in 0..10 {
        lp.run(RunMode::NoWait, &mut ()).unwrap();
    }
    assert_eq!(sim.modify_count(), 1, "the union never changed");
}

#[test]
fn several_watchers_on_one_fd_share_one_registration() {
    let sim = Sim::new();
    let sock = sim.socket("s", 8);
    sim.deliver(Duration::from_millis(1), &sock, b"x");
    let mut lp: Loop<Vec<String>> = Loop::with_backend(sim.backend());
    let log_as = |name: &'static str| {
        move |lp: &mut Loop<'_, Vec<String>>,
              log: &mut Vec<String>,
              ev: evloop::IoEvent<'_, &SimSocket>| {
            log.push(format!("{name} {}", ev.ready));
            lp.stop(ev.watcher).unwrap();
        }
    };
    lp.io_borrowed(&sock, Interest::READABLE, log_as("reader"))
        .unwrap();
    lp.io_borrowed(&sock, Interest::WRITABLE, log_as("writer"))
        .unwrap();
    lp.io_borrowed(&sock, Interest::BOTH, log_as("both"))
        .unwrap();
    let mut log = vec![];
    assert_eq!(
        lp.run(RunMode::Default, &mut log).unwrap(),
        RunOutcome::NoActiveWatchers
    );
    // Iteration 1 (t=0): writable only. Iteration 2 (t=1ms): the reader.
    assert_eq!(log, ["writer w", "both w", "reader r"]);
    assert_eq!(
        sim.trace_lines(),
        [
            "t=0ns modify fd3 - => rw",
            "t=0ns poll {fd3:w}",
            "t=0ns dispatch fd3 w",
            "t=0ns dispatch fd3 w",
            "t=0ns modify fd3 rw => r",
            "t=0ns idle until t=1ms",
            "t=1ms poll {fd3:r}",
            "t=1ms dispatch fd3 r",
            // The last stop is sent at the next reify, if the loop runs again.
        ]
    );
}

#[test]
fn removing_an_owned_source_deregisters_before_it_is_closed() {
    let sim = Sim::new();
    let mut lp: Loop = Loop::with_backend(sim.backend());
    let io = lp
        .io(sim.socket("s", 0), Interest::READABLE, |_, _, _| {})
        .unwrap();
    lp.run(RunMode::NoWait, &mut ()).unwrap();
    assert_eq!(sim.registered(3), Interest::READABLE);
    lp.remove(io).unwrap();
    // Not deferred to the next reify: the fd number may be reused at once.
    assert_eq!(sim.registered(3), Interest::NONE);
    assert_eq!(sim.trace_lines().last().unwrap(), "t=0ns modify fd3 r => -");
}

#[test]
fn into_source_hands_the_socket_back() {
    let sim = Sim::new();
    let mut lp: Loop = Loop::with_backend(sim.backend());
    let io = lp
        .io(sim.socket("mine", 0), Interest::READABLE, |_, _, _| {})
        .unwrap();
    assert!(matches!(
        lp.into_source::<String>(io),
        Err(Error::SourceType)
    ));
    assert!(
        lp.is_active(io).unwrap(),
        "a wrong type leaves the watcher alone"
    );
    let sock: SimSocket = lp.into_source(io).unwrap();
    assert_eq!(sock.name(), "mine");
    assert!(matches!(
        lp.is_active(io),
        Err(Error::StaleHandle { kind: "io" })
    ));
}

#[test]
fn into_source_from_its_own_callback_is_busy() {
    let sim = Sim::new();
    let sock = sim.socket("s", 1);
    let mut lp: Loop<Option<String>> = Loop::with_backend(sim.backend());
    lp.io(sock, Interest::WRITABLE, |lp, seen, ev| {
        *seen = Some(
            lp.into_source::<SimSocket>(ev.watcher)
                .unwrap_err()
                .to_string(),
        );
        lp.remove(ev.watcher).unwrap();
    })
    .unwrap();
    let mut seen = None;
    lp.run(RunMode::Default, &mut seen).unwrap();
    assert!(seen.unwrap().contains("callback is running"));
}

#[test]
fn os_descriptor_on_the_simulator_is_refused() {
    let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
    let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    let err = lp.io(a, Interest::READABLE, |_, _, _| {}).unwrap_err();
    assert!(matches!(
        err,
        Error::WrongSourceKind {
            backend: "sim",
            virtual_source: false
        }
    ));
    assert!(err.to_string().contains("only simulated fds"), "{err}");
}

#[test]
fn edge_trigger_is_refused_where_unsupported_and_modes_cannot_mix() {
    let sim = Sim::new();
    let sock = sim.socket("s", 0);
    let mut lp: Loop = Loop::with_backend(sim.backend());
    let err = lp
        .io_borrowed(
            &sock,
            Interest::READABLE.with_trigger(Trigger::Edge),
            |_, _, _| {},
        )
        .unwrap_err();
    assert!(
        err.to_string().contains("not supported by the sim backend"),
        "{err}"
    );
    lp.io_borrowed(
        &sock,
        Interest::READABLE.with_trigger(Trigger::Oneshot),
        |_, _, _| {},
    )
    .unwrap();
    let err = lp
        .io_borrowed(&sock, Interest::WRITABLE, |_, _, _| {})
        .unwrap_err();
    assert!(matches!(err, Error::TriggerConflict { fd: 3, .. }), "{err}");
}

#[test]
fn oneshot_fires_once_until_rearmed() {
    let sim = Sim::new();
    let sock = sim.socket("s", 0);
    sim.deliver(Duration::from_millis(1), &sock, b"abc");
    let mut lp: Loop<u32> = Loop::with_backend(sim.backend());
    let io = lp
        .io_borrowed(
            &sock,
            Interest::READABLE.with_trigger(Trigger::Oneshot),
            |_, n, _| *n += 1,
        )
        .unwrap();
    let mut n = 0;
    // Data stays unread, yet the watcher is disarmed after one report.
    assert_eq!(
        lp.run(RunMode::Default, &mut n).unwrap(),
        RunOutcome::NoActiveWatchers
    );
    assert_eq!(n, 1);
    assert!(!lp.is_active(io).unwrap());
    lp.start(io).unwrap(); // re-arm
    lp.run(RunMode::Default, &mut n).unwrap();
    assert_eq!(n, 2);
}

#[test]
fn feed_event_merges_with_a_queued_event() {
    let sim = Sim::new();
    let sock = sim.socket("s", 0);
    let mut lp: Loop<Vec<Ready>> = Loop::with_backend(sim.backend());
    let io = lp
        .io(sock, Interest::BOTH, |lp, log, ev| {
            log.push(ev.ready);
            lp.remove(ev.watcher).unwrap();
        })
        .unwrap();
    lp.feed_event(io, Ready::READABLE).unwrap();
    lp.feed_event(io, Ready::WRITABLE).unwrap();
    assert_eq!(lp.pending_count(), 1);
    let mut log = vec![];
    lp.run(RunMode::Default, &mut log).unwrap();
    assert_eq!(log, [Ready::READABLE | Ready::WRITABLE]);
}
