//! Watcher kinds written outside the crate, with its public API only
//! (this file is its own crate): a byte counter that has the loop watch
//! an fd it owns, and a channel that other threads send to, woken through
//! the backend's waker. Both run on every backend (the simulator, epoll,
//! poll, select; kqueue over the emulation and io_uring with their
//! features), under the watchdog; the simulator also gives their exact
//! trace.

mod common;

use std::collections::{HashMap, VecDeque};
use std::io::{self, Read};
use std::sync::atomic::{fence, AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use common::{on_every_backend, World};
use evloop::backend::Wake;
use evloop::{
    Async, Check, Context, Error, Interest, Kind, Loop, Phase, Phases, Ready, RunMode, RunOutcome,
    Sim, Source, Watcher,
};

// ---------------------------------------------------------------------
// A byte counter: one watcher per source it owns; the loop watches the
// source's fd for it (Context::watch_fd), the callback gets the bytes
// read so far, and `None` at the end of the stream.

#[derive(Default)]
struct Counters {
    sources: HashMap<Watcher<Counters>, (Box<dyn ReadSource>, usize)>,
}

trait ReadSource: Read + Source {}
impl<T: Read + Source> ReadSource for T {}

impl Kind for Counters {
    const NAME: &'static str = "counter";

    fn start(&mut self, cx: &mut Context<'_>, w: Watcher<Self>) -> evloop::Result<bool> {
        let (source, _) = &self.sources[&w];
        cx.watch_fd(w, source.source_fd(), Interest::READABLE)?;
        Ok(true)
    }

    fn remove(&mut self, _: &mut Context<'_>, w: Watcher<Self>) {
        // Unwatched already (it stopped first): the source can close.
        self.sources.remove(&w);
    }
}

impl Counters {
    /// Reads what is there: the new total, or `None` at the end.
    fn read(&mut self, w: Watcher<Counters>) -> Option<usize> {
        let (source, total) = self.sources.get_mut(&w)?;
        let mut buf = [0u8; 256];
        loop {
            match source.read(&mut buf) {
                Ok(0) => return None,
                Ok(n) => *total += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Some(*total),
                Err(e) => panic!("read: {e}"),
            }
        }
    }
}

/// The kind's API, as its author would publish it: a watcher that counts
/// what `source` delivers.
fn count<'s, S, F>(
    lp: &mut Loop<'s, S>,
    source: impl ReadSource + 'static,
    mut f: F,
) -> evloop::Result<Watcher<Counters>>
where
    F: FnMut(&mut Loop<'s, S>, &mut S, Option<usize>) + 's,
{
    if lp.kind::<Counters>().is_none() {
        lp.install(Counters::default())?;
    }
    let w = lp.watcher::<Counters, _>(move |lp, state, me, ready| {
        assert!(ready.is_readable() || ready.is_hup(), "{ready}");
        let total = lp.kind_mut::<Counters>().unwrap().read(me);
        if total.is_none() {
            lp.remove(me).unwrap();
        }
        f(lp, state, total);
    })?;
    lp.kind_mut::<Counters>()
        .unwrap()
        .sources
        .insert(w, (Box::new(source), 0));
    if let Err(e) = lp.start(w) {
        lp.remove(w).unwrap();
        return Err(e);
    }
    Ok(w)
}

#[test]
fn a_counter_on_every_backend_sees_every_byte_and_the_end() {
    on_every_backend("counter", |backend| {
        let world = World::new(backend);
        let (conn, mut peer) = world.pair();
        let mut lp: Loop<Vec<Option<usize>>> = world.new_loop();
        count(&mut lp, conn, |_, log, total| log.push(total)).unwrap();
        peer.send(b"hello");
        let mut log = vec![];
        // Until the five bytes are in (a kernel may split them).
        while log.last() != Some(&Some(5)) {
            lp.run(RunMode::Once, &mut log).unwrap();
        }
        drop(peer);
        let outcome = lp.run(RunMode::Default, &mut log).unwrap();
        assert_eq!(outcome, RunOutcome::NoActiveWatchers, "{backend}");
        assert_eq!(log.last(), Some(&None), "{backend}: {log:?}");
        assert_eq!(lp.active_count(), 0);
    });
}

#[test]
fn a_counter_on_the_simulator_runs_at_the_exact_times() {
    let sim = Sim::new();
    let sock = sim.socket("counted", 64);
    sim.deliver(Duration::from_millis(10), &sock, b"abc");
    sim.deliver(Duration::from_millis(20), &sock, b"de");
    sim.close_peer(Duration::from_millis(30), &sock);
    let mut lp: Loop<Vec<(u64, Option<usize>)>> = Loop::with_backend(sim.backend());
    count(&mut lp, sock, |lp, log, total| {
        log.push((lp.now().as_millis() as u64, total))
    })
    .unwrap();
    let mut log = vec![];
    assert_eq!(
        lp.run(RunMode::Default, &mut log).unwrap(),
        RunOutcome::NoActiveWatchers
    );
    assert_eq!(log, [(10, Some(3)), (20, Some(5)), (30, None)]);
}

#[test]
#[cfg_attr(
    target_os = "wasi",
    ignore = "a WASI guest has no filesystem without a preopened directory"
)]
fn a_counter_refuses_a_source_the_backend_cannot_watch_and_leaves_nothing() {
    // A regular file is never pollable: the error comes from `start`, as
    // `Loop::io`'s does, and the watcher is gone.
    let dir = std::env::temp_dir().join(format!("evloop-outside-kind-{}", std::process::id()));
    std::fs::write(&dir, b"data").unwrap();
    let file = std::fs::File::open(&dir).unwrap();
    let mut lp: Loop = Loop::builder().backend("epoll").build().unwrap();
    let err = count(&mut lp, file, |_, _, _| {}).unwrap_err();
    assert!(matches!(err, Error::InvalidFd { .. }), "{err}");
    assert_eq!(lp.active_count(), 0);
    std::fs::remove_file(&dir).unwrap();
    // A simulated socket on a kernel backend: the wrong kind of source.
    let sim = Sim::new();
    let err = count(&mut lp, sim.socket("virtual", 0), |_, _, _| {}).unwrap_err();
    assert!(matches!(err, Error::WrongSourceKind { .. }), "{err}");
}

#[test]
fn a_kinds_handles_are_checked_like_every_handle() {
    let sim = Sim::new();
    let mut lp: Loop = Loop::with_backend(sim.backend());
    let w = count(&mut lp, sim.socket("a", 0), |_, _, _| {}).unwrap();
    assert!(lp.is_active(w).unwrap());
    lp.stop(w).unwrap();
    assert!(!lp.is_active(w).unwrap());
    lp.start(w).unwrap();
    lp.remove(w).unwrap();
    assert!(matches!(
        lp.remove(w),
        Err(Error::StaleHandle { kind: "counter" })
    ));
    let mut other: Loop = Loop::with_backend(Sim::new().backend());
    other.install(Counters::default()).unwrap();
    assert!(matches!(
        other.start(w),
        Err(Error::ForeignHandle { kind: "counter" })
    ));
    assert!(matches!(
        other.install(Counters::default()),
        Err(Error::KindInstalled { kind: "counter" })
    ));
}

// ---------------------------------------------------------------------
// A channel: senders on other threads push messages and wake the loop
// (the backend's waker); the kind queues its watcher after the poll, and
// the callback gets each message in order.

struct Shared<T> {
    queue: Mutex<VecDeque<T>>,
    /// The loop is about to block, or blocks: a send must wake it.
    sleeping: AtomicBool,
    /// The backend's, given when the watcher starts.
    waker: OnceLock<Arc<dyn Wake>>,
}

struct Channels<T: Send + 'static> {
    watchers: HashMap<Watcher<Channels<T>>, Arc<Shared<T>>>,
}

impl<T: Send + 'static> Kind for Channels<T> {
    const NAME: &'static str = "channel";
    const PHASES: Phases = Phases::POLLED;

    /// The OS services wake the loop for it (NoticeService::waker: one
    /// per loop, shared with the crate's async watchers).
    fn start(&mut self, cx: &mut Context<'_>, w: Watcher<Self>) -> evloop::Result<bool> {
        let backend = cx.backend().name();
        let waker = cx
            .services(|s, fds| s.waker(fds))
            .map_err(|source| Error::Backend {
                backend,
                op: "give a waker",
                source,
            })?;
        let _ = self.watchers[&w].waker.set(waker);
        Ok(true)
    }

    fn phase(&mut self, cx: &mut Context<'_>, _: Phase) {
        for (&w, shared) in &self.watchers {
            if cx.is_active(w) && !shared.queue.lock().unwrap().is_empty() {
                cx.queue(w, Ready::EMPTY);
            }
        }
    }

    /// Dekker's pattern with the sender: store, fence, load here; push,
    /// fence, load there. Either the loop sees the message or the sender
    /// sees the loop asleep and wakes it.
    fn sleep(&mut self, _: &mut Context<'_>) -> bool {
        let mut ready = false;
        for shared in self.watchers.values() {
            shared.sleeping.store(true, Ordering::SeqCst);
            fence(Ordering::SeqCst);
            ready |= !shared.queue.lock().unwrap().is_empty();
        }
        ready
    }

    fn wake(&mut self) {
        for shared in self.watchers.values() {
            shared.sleeping.store(false, Ordering::SeqCst);
        }
    }

    fn wants_notices(&self) -> bool {
        // The backend's wake-up is a notice: taking them keeps it drained.
        !self.watchers.is_empty()
    }

    fn remove(&mut self, _: &mut Context<'_>, w: Watcher<Self>) {
        self.watchers.remove(&w);
    }
}

#[derive(Clone)]
struct Sender<T>(Arc<Shared<T>>);

impl<T> Sender<T> {
    fn send(&self, value: T) {
        self.0.queue.lock().unwrap().push_back(value);
        fence(Ordering::SeqCst);
        if self.0.sleeping.load(Ordering::SeqCst) {
            if let Some(waker) = self.0.waker.get() {
                waker.wake();
            }
        }
    }
}

/// The channel kind's API: a watcher whose callback gets every message
/// sent to the returned sender.
fn channel<'s, S, T, F>(lp: &mut Loop<'s, S>, mut f: F) -> evloop::Result<Sender<T>>
where
    T: Send + 'static,
    F: FnMut(&mut Loop<'s, S>, &mut S, Watcher<Channels<T>>, T) + 's,
{
    if lp.kind::<Channels<T>>().is_none() {
        lp.install(Channels::<T> {
            watchers: HashMap::new(),
        })?;
    }
    let shared = Arc::new(Shared {
        queue: Mutex::new(VecDeque::new()),
        sleeping: AtomicBool::new(false),
        waker: OnceLock::new(),
    });
    let w = lp.watcher::<Channels<T>, _>(move |lp, state, me, _| loop {
        let Some(shared) = lp.kind::<Channels<T>>().and_then(|k| k.watchers.get(&me)) else {
            return;
        };
        let Some(value) = shared.queue.lock().unwrap().pop_front() else {
            return;
        };
        f(lp, state, me, value);
    })?;
    lp.kind_mut::<Channels<T>>()
        .unwrap()
        .watchers
        .insert(w, shared.clone());
    lp.start(w)?;
    Ok(Sender(shared))
}

#[test]
#[cfg_attr(target_os = "wasi", ignore = "a WASI guest has one thread")]
fn a_channel_on_every_backend_gets_every_message_from_other_threads_in_order() {
    on_every_backend("channel", |backend| {
        let world = World::new(backend);
        let mut lp: Loop<Vec<u32>> = world.new_loop();
        let tx = channel(&mut lp, |lp, got: &mut Vec<u32>, me, n| {
            got.push(n);
            if got.len() == 400 {
                lp.remove(me).unwrap();
            }
        })
        .unwrap();
        let senders: Vec<_> = (0..4)
            .map(|t| {
                let tx = tx.clone();
                std::thread::spawn(move || {
                    for i in 0..100 {
                        tx.send(t * 1000 + i);
                    }
                })
            })
            .collect();
        let mut got = vec![];
        if backend == "sim" {
            // Virtual time: the simulator's poll does not wait for threads;
            // join them first, so that the messages are there.
            for s in senders {
                s.join().unwrap();
            }
            assert_eq!(
                lp.run(RunMode::Default, &mut got).unwrap(),
                RunOutcome::NoActiveWatchers
            );
        } else {
            // A kernel poll blocks until a sender wakes it.
            assert_eq!(
                lp.run(RunMode::Default, &mut got).unwrap(),
                RunOutcome::NoActiveWatchers,
                "{backend}"
            );
            for s in senders {
                s.join().unwrap();
            }
        }
        assert_eq!(got.len(), 400, "{backend}");
        for t in 0..4 {
            let mine: Vec<u32> = got.iter().copied().filter(|n| n / 1000 == t).collect();
            assert_eq!(mine, (0..100).map(|i| t * 1000 + i).collect::<Vec<_>>());
        }
    });
}

#[test]
fn an_outside_kind_runs_after_the_crates_own_in_its_phase() {
    // Within one priority, a user kind queued after the poll runs after
    // the crate's async watchers (and before check watchers).
    let sim = Sim::new();
    let mut lp: Loop<Vec<&str>> = Loop::with_backend(sim.backend());
    let tx = channel(&mut lp, |lp, log: &mut Vec<&str>, me, _: ()| {
        log.push("channel");
        lp.remove(me).unwrap();
    })
    .unwrap();
    let (a, sender) = Async::new(&mut lp, |lp, log, me| {
        log.push("async");
        lp.remove(me).unwrap();
    })
    .unwrap();
    let _ = a;
    Check::new(&mut lp, |lp, log, me| {
        log.push("check");
        lp.remove(me).unwrap();
    })
    .unwrap();
    tx.send(());
    sender.send().unwrap();
    let mut log = vec![];
    lp.run(RunMode::Once, &mut log).unwrap();
    assert_eq!(log, ["async", "channel", "check"]);
}

#[test]
fn watcher_needs_its_kind_installed() {
    let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    assert!(matches!(
        lp.watcher::<Counters, _>(|_, _, _, _| {}),
        Err(Error::KindNotInstalled { kind: "counter" })
    ));
}
