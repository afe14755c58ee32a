//! The process-wide registry of backends (`evloop::backends::register`): a
//! backend registered once is seen by `Loop::new()` through
//! `EVLOOP_BACKEND`, by every `Builder`, by `backends::open`, and listed
//! in every unknown-backend error; names of the crate's own backends, an
//! empty name and a second registration are refused. One test, in a
//! binary of its own: the registry and the environment are the process's.

use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

use evloop::backend::{Backend, Capabilities, NoticeService, PollEvent, PollStatus};
use evloop::{backends, Builder, Error, Interest, Loop, RawFd, RunMode};

/// "Another crate's" backend: the platform's default, under its own name.
struct Relabelled(Box<dyn Backend>);

impl Backend for Relabelled {
    fn name(&self) -> &'static str {
        "relabelled"
    }
    fn capabilities(&self) -> Capabilities {
        self.0.capabilities()
    }
    fn notices(&mut self) -> Option<&mut dyn NoticeService> {
        self.0.notices()
    }
    fn modify(&mut self, fd: RawFd, old: Interest, new: Interest) -> io::Result<()> {
        self.0.modify(fd, old, new)
    }
    fn poll(&mut self, t: Option<Duration>, ev: &mut Vec<PollEvent>) -> io::Result<PollStatus> {
        self.0.poll(t, ev)
    }
    fn now(&mut self) -> Duration {
        self.0.now()
    }
}

fn open_relabelled() -> io::Result<Box<dyn Backend>> {
    let inner = backends::open(backends::default_name()).map_err(io::Error::other)?;
    Ok(Box::new(Relabelled(inner)))
}

fn refused() -> io::Result<Box<dyn Backend>> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "not on this machine",
    ))
}

#[test]
fn a_backend_registered_once_is_seen_by_every_loop_of_the_process() {
    // Before: unknown everywhere, and the error lists what exists.
    let Err(err) = Loop::<()>::builder().backend("relabelled").build::<()>() else {
        panic!("known before it was registered")
    };
    assert!(matches!(err, Error::UnknownBackend { .. }), "{err}");

    backends::register("relabelled", open_relabelled).unwrap();
    backends::register("refused", refused).unwrap();
    assert_eq!(backends::names().len(), backends::AVAILABLE.len() + 2);
    assert!(backends::names().ends_with(&["relabelled", "refused"]));
    assert_eq!(Builder::new().available(), backends::names());

    // backends::open and factory.
    assert_eq!(backends::open("relabelled").unwrap().name(), "relabelled");
    assert!(backends::factory("relabelled").is_some());
    let Err(err) = backends::open("refused") else {
        panic!()
    };
    assert!(
        matches!(
            err,
            Error::Backend {
                backend: "refused",
                op: "create",
                ..
            }
        ),
        "{err}"
    );

    // Loop::new() through the environment (the test is alone in its
    // binary: nothing else reads the variable meanwhile).
    // SAFETY: no other thread of this test binary reads or writes the environment.
    unsafe { std::env::set_var("EVLOOP_BACKEND", "relabelled") };
    let mut lp: Loop<Vec<u8>> = Loop::new().unwrap();
    // SAFETY: no other thread of this test binary reads or writes the environment.
    unsafe { std::env::remove_var("EVLOOP_BACKEND") };
    assert_eq!(lp.backend_name(), "relabelled");
    // ... and it serves: a byte over loopback TCP.
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let mut peer = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (mine, _) = l.accept().unwrap();
    mine.set_nonblocking(true).unwrap();
    lp.io(mine, Interest::READABLE, |lp, got, ev| {
        let mut buf = [0u8; 8];
        let n = ev.source.read(&mut buf).unwrap();
        got.extend_from_slice(&buf[..n]);
        lp.remove(ev.watcher).unwrap();
    })
    .unwrap();
    peer.write_all(b"x").unwrap();
    // The watchdog: a backend that never reports the byte fails the test
    // instead of hanging it.
    let dog = lp
        .timer(Duration::from_secs(30), Duration::ZERO, |_, _, _| {
            panic!("the registered backend never reported the byte")
        })
        .unwrap();
    lp.set_ref(dog, false).unwrap();
    let mut got = Vec::new();
    lp.run(RunMode::Default, &mut got).unwrap();
    assert_eq!(got, b"x");

    // An unknown name's error lists the registered ones too.
    // SAFETY: no other thread of this test binary reads or writes the environment.
    unsafe { std::env::set_var("EVLOOP_BACKEND", "relabeled") };
    let Err(err) = Loop::<()>::new() else {
        panic!("a typo accepted")
    };
    // SAFETY: no other thread of this test binary reads or writes the environment.
    unsafe { std::env::remove_var("EVLOOP_BACKEND") };
    let text = err.to_string();
    assert!(
        text.contains("relabelled") && text.contains("EVLOOP_BACKEND"),
        "{text}"
    );

    // Refused: the crate's names (on any platform), empty, registered twice.
    for name in backends::RESERVED.iter().copied().chain(["", "relabelled"]) {
        let Err(err) = backends::register(name, open_relabelled) else {
            panic!("{name:?} registered")
        };
        assert!(
            matches!(err, Error::BackendNameTaken { .. }),
            "{name:?}: {err}"
        );
        assert!(err.to_string().contains(&format!("{name:?}")), "{err}");
    }
    assert_eq!(
        backends::names().len(),
        backends::AVAILABLE.len() + 2,
        "nothing added"
    );
    assert_eq!(
        backends::open("relabelled").unwrap().name(),
        "relabelled",
        "not replaced"
    );
}
