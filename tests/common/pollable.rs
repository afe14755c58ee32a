//! A loop driven from a foreign loop through its pollable fd ("Nesting
//! loops" in docs/recipes.md): the backends whose loops have one, such a
//! loop, and the scenario that a driver (mio in tests/embed.rs, tokio's
//! `AsyncFd` in tests/hyper_suite/tests/embed_tokio.rs) runs it through.

use std::error::Error as StdError;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;

use evloop::{Interest, Loop, PollableLoop};

/// The OS backends of this host that have a pollable fd: each can be the
/// inner loop.
pub fn inners() -> Vec<&'static str> {
    evloop::backends::AVAILABLE
        .iter()
        .copied()
        .filter(|name| matches!(*name, "epoll" | "io_uring" | "kqueue"))
        .collect()
}

/// A loop on `name` that can be embedded: io_uring's on a ring without
/// deferred task work (the one whose fd is woken by its completions).
pub fn inner_loop<T>(name: &'static str) -> Loop<'static, T> {
    #[cfg(all(feature = "io-uring", target_os = "linux"))]
    if name == "io_uring" {
        let ring = evloop::backends::io_uring::IoUring::without_deferred_task_work()
            .unwrap_or_else(|e| panic!("io_uring: {e}"));
        return Loop::with_backend(ring);
    }
    super::World::new(name).new_loop()
}

/// What the driven scenarios' loops keep.
#[derive(Default)]
pub struct Driven {
    pub got: Vec<u8>,
    pub ticks: u32,
}

/// How a foreign loop runs a pollable loop until no watcher of it is
/// active, through the loop's fd; returns the loop, and how many times
/// the foreign loop woke.
pub type Driver = fn(
    PollableLoop<'static, Driven>,
    &mut Driven,
) -> Result<(PollableLoop<'static, Driven>, u32), Box<dyn StdError>>;

/// Driven from a foreign loop ("nested in a foreign loop"): a level
/// watcher that reads one byte per call (so readiness is left over after
/// a run), bytes written from another thread, and a timer.
pub fn driven_from(name: &'static str, driver: Driver) {
    let mut lp = PollableLoop::new(inner_loop::<Driven>(name)).unwrap();
    assert_eq!(lp.as_raw_fd(), lp.pollable_fd().unwrap().as_raw_fd());
    lp.update_now();
    let start = lp.now();
    let (a, mut peer) = UnixStream::pair().unwrap();
    a.set_nonblocking(true).unwrap();
    lp.io(a, Interest::READABLE, |lp, st, ev| {
        let mut one = [0; 1];
        match ev.source.read(&mut one) {
            Ok(0) => lp.remove(ev.watcher).unwrap(),
            Ok(_) => st.got.push(one[0]),
            Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock),
        }
    })
    .unwrap();
    lp.timer(super::ms(20), super::ms(20), |lp, st, me| {
        st.ticks += 1;
        if st.ticks == 3 {
            lp.remove(me).unwrap();
        }
    })
    .unwrap();
    // The end of file comes with the peer's drop.
    let writer = std::thread::spawn(move || peer.write_all(b"abcdef").unwrap());
    let mut st = Driven::default();
    let (lp, wakes) = driver(lp, &mut st).unwrap_or_else(|e| panic!("{name}: {e}"));
    writer.join().unwrap();
    assert_eq!((st.got.as_slice(), st.ticks), (&b"abcdef"[..], 3));
    assert!(lp.now() - start >= super::ms(60), "{:?}", lp.now() - start);
    // A wake per byte, the end of file and the timers, give or take: no
    // spin.
    assert!(wakes < 100, "{wakes} wakes");
}
