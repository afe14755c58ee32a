//! fd_reify: io watcher changes are batched into at most one backend call
//! per fd per iteration, and none when they cancel out. Counted on the
//! simulated backend. (What runs on every backend too, several watchers
//! on one fd, one-shot, fed events and `into_source` from a callback, is in
//! tests/scenarios/io_and_models.rs.)

mod common;

use common::sim_socket;
use evloop::{Error, Interest, Io, Loop, Prepare, RunMode, Sim, SimSocket, Trigger};

#[test]
fn many_changes_on_one_fd_make_one_backend_call() {
    let (sim, sock) = sim_socket("s", 0);
    let mut lp: Loop = Loop::with_backend(sim.backend());
    let r = Io::borrowed(&mut lp, &sock, Interest::READABLE, |_, _, _| {}).unwrap();
    lp.stop(r).unwrap();
    lp.start(r).unwrap();
    r.set_interest(&mut lp, Interest::BOTH).unwrap();
    r.set_interest(&mut lp, Interest::READABLE).unwrap();
    let w = Io::borrowed(&mut lp, &sock, Interest::WRITABLE, |_, _, _| {}).unwrap();
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
    let (sim, sock) = sim_socket("s", 0);
    let mut lp: Loop = Loop::with_backend(sim.backend());
    let r = Io::borrowed(&mut lp, &sock, Interest::READABLE, |_, _, _| {}).unwrap();
    lp.run(RunMode::NoWait, &mut ()).unwrap();
    assert_eq!(sim.modify_count(), 1);

    // A prepare watcher churns the fd's watchers every iteration.
    let mut extra = None;
    let sock = &sock;
    Prepare::new(&mut lp, move |lp, _, _| {
        lp.stop(r).unwrap();
        lp.start(r).unwrap();
        r.set_interest(lp, Interest::WRITABLE).unwrap();
        r.set_interest(lp, Interest::READABLE).unwrap();
        if let Some(w) = extra.take() {
            lp.remove(w).unwrap();
        }
        let w = Io::borrowed(lp, sock, Interest::READABLE, |_, _, _| {}).unwrap();
        extra = Some(w);
    })
    .unwrap();
    for _ in 0..10 {
        lp.run(RunMode::NoWait, &mut ()).unwrap();
    }
    assert_eq!(sim.modify_count(), 1, "the union never changed");
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
        io.into_source::<String, _>(&mut lp),
        Err(Error::SourceType)
    ));
    assert!(
        lp.is_active(io).unwrap(),
        "a wrong type leaves the watcher alone"
    );
    let sock: SimSocket = io.into_source(&mut lp).unwrap();
    assert_eq!(sock.name(), "mine");
    assert!(matches!(
        lp.is_active(io),
        Err(Error::StaleHandle { kind: "io" })
    ));
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
    let (sim, sock) = sim_socket("s", 0);
    let mut lp: Loop = Loop::with_backend(sim.backend());
    let err = Io::borrowed(
        &mut lp,
        &sock,
        Interest::READABLE.with_trigger(Trigger::Edge),
        |_, _, _| {},
    )
    .unwrap_err();
    assert!(
        err.to_string().contains("not supported by the sim backend"),
        "{err}"
    );
    Io::borrowed(
        &mut lp,
        &sock,
        Interest::READABLE.with_trigger(Trigger::Oneshot),
        |_, _, _| {},
    )
    .unwrap();
    let err = Io::borrowed(&mut lp, &sock, Interest::WRITABLE, |_, _, _| {}).unwrap_err();
    assert!(matches!(err, Error::TriggerConflict { fd: 3, .. }), "{err}");
}
