//! The executor (`evloop::exec`): tasks, wakers, join handles, and the
//! futures for the watchers, on the simulator (exact times and traces)
//! and on every kernel backend with real socket pairs, timers, signals
//! and processes, each under the watchdog.

mod common;

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use common::{in_worlds, on_backends, World};
use evloop::exec::{
    block_on, child_exit, signals, sleep, spawn_local, spawn_on, timeout, yield_now, AsyncFd,
    Elapsed, Executor, JoinError,
};
use evloop::{Error, Interest, Loop, RunMode, RunOutcome, Sim};

fn every_backend() -> Vec<&'static str> {
    common::backends()
}

fn kernels() -> Vec<&'static str> {
    evloop::backends::AVAILABLE.to_vec()
}

// ---------------------------------------------------------------------
// An async echo server, exactly, on the simulator.

/// Echoes each connection in a task of its own, logging what it read and
/// when, until the peer closes.
async fn echo(conn: evloop::SimSocket, log: Rc<RefCell<Vec<String>>>, started: Duration) {
    let fd = conn.fd();
    let conn = AsyncFd::new(conn).unwrap();
    let mut buf = [0u8; 8];
    loop {
        let n = conn.read(&mut buf).await.unwrap();
        let now = sleep(Duration::ZERO).deadline().unwrap() - started;
        log.borrow_mut().push(format!(
            "{}ms fd{fd} {:?}",
            now.as_millis(),
            String::from_utf8_lossy(&buf[..n])
        ));
        if n == 0 {
            return;
        }
        conn.write_all(&buf[..n]).await.unwrap();
    }
}

#[test]
fn an_async_echo_server_runs_exactly_on_the_simulator() {
    let sim = Sim::new();
    let a = sim.socket("a", 1024);
    let b = sim.socket("b", 4);
    let (fa, fb) = (a.fd(), b.fd());
    sim.deliver(Duration::from_millis(10), &a, b"hello");
    sim.deliver(Duration::from_millis(15), &b, b"0123456789"); // more than its buffer
    sim.deliver(Duration::from_millis(20), &a, b" world");
    sim.close_peer(Duration::from_millis(30), &a);
    sim.free_send(Duration::from_millis(40), &b, 4);
    sim.free_send(Duration::from_millis(50), &b, 16);
    sim.close_peer(Duration::from_millis(60), &b);

    let mut lp: Loop = Loop::with_backend(sim.backend());
    let log = Rc::new(RefCell::new(vec![]));
    let started = lp.now();
    let (la, lb) = (log.clone(), log.clone());
    spawn_on(&mut lp, echo(a, la, started)).unwrap();
    spawn_on(&mut lp, echo(b, lb, started)).unwrap();
    assert_eq!(
        lp.run(RunMode::Default, &mut ()).unwrap(),
        RunOutcome::NoActiveWatchers
    );
    assert_eq!(
        *log.borrow(),
        [
            "10ms fd3 \"hello\"",
            "15ms fd4 \"01234567\"",
            "20ms fd3 \" world\"",
            "30ms fd3 \"\"",
            "40ms fd4 \"89\"",
            "60ms fd4 \"\"",
        ]
    );
    assert_eq!(sim.sent(fa), b"hello world");
    assert_eq!(sim.sent(fb), b"0123456789");
    assert_eq!(lp.now(), Duration::from_millis(60));
    // Every watcher the futures made is gone, and the kernel side too.
    assert_eq!(lp.active_count(), 0);
    assert_eq!(sim.registered(fa), Interest::NONE);
    assert_eq!(sim.registered(fb), Interest::NONE);
    insta_like(&sim.trace_lines(), TRACE);
}

/// The simulator's trace of that run, literally. The simulator has no
/// edge triggering, so each socket's watcher is level-triggered and
/// watches what a task waits for: a read's interest stays while the task
/// reads on (a wait that follows a report in the same iteration costs no
/// backend call), and changes only when the task waits to write (fd4 at
/// 15ms, back at 50ms) or ends.
const TRACE: &str = "
t=0ns modify fd3 - => r
t=0ns modify fd4 - => r
t=0ns idle until t=10ms
t=10ms poll {fd3:r}
t=10ms dispatch fd3 r
t=10ms idle until t=15ms
t=15ms poll {fd4:r}
t=15ms dispatch fd4 r
t=15ms modify fd4 r => w
t=15ms idle until t=20ms
t=20ms poll {fd3:r}
t=20ms dispatch fd3 r
t=20ms idle until t=30ms
t=30ms poll {fd3:r|hup}
t=30ms dispatch fd3 r|hup
t=30ms modify fd3 r => -
t=30ms idle until t=40ms
t=40ms poll {fd4:w}
t=40ms dispatch fd4 w
t=40ms idle until t=50ms
t=50ms poll {fd4:w}
t=50ms dispatch fd4 w
t=50ms modify fd4 w => r
t=50ms idle until t=60ms
t=60ms poll {fd4:r|hup}
t=60ms dispatch fd4 r|hup
t=60ms modify fd4 r => -
";

/// Compares a trace with its expected text (printing it, to update the
/// constant, when they differ).
fn insta_like(lines: &[String], expected: &str) {
    let got = lines.join("\n");
    assert_eq!(got, expected.trim(), "the trace changed; it is:\n{got}");
}

// ---------------------------------------------------------------------
// The same things on every backend, real sockets on the kernels.

#[test]
fn a_task_reads_and_writes_a_connection_on_every_backend() {
    in_worlds("async echo", &every_backend(), |world: &World| {
        let (conn, mut peer) = world.pair();
        let mut lp: Loop = world.new_loop();
        peer.send(b"ping");
        let conn = block_on(&mut lp, &mut (), async move {
            let conn = AsyncFd::new(conn).unwrap();
            let mut buf = [0u8; 16];
            let n = conn.read(&mut buf).await.unwrap();
            assert_eq!(&buf[..n], b"ping");
            conn.write_all(b"pong").await.unwrap();
            conn
        })
        .unwrap();
        // The peer's end, without blocking the loop's thread.
        let mut got = vec![];
        while got.len() < 4 {
            got.extend(peer.receive());
        }
        assert_eq!(got, b"pong");
        // The end of the stream.
        drop(peer);
        let n = block_on(
            &mut lp,
            &mut (),
            async move { conn.read(&mut [0u8; 4]).await },
        )
        .unwrap()
        .unwrap();
        assert_eq!(n, 0);
        assert_eq!(lp.active_count(), 0, "{}", world.backend);
    });
}

#[test]
fn sleeps_and_timeouts_keep_the_loops_time_on_every_backend() {
    on_backends("sleep", &every_backend(), |backend| {
        let world = World::new(backend);
        let mut lp: Loop = world.new_loop();
        let start = lp.now();
        block_on(&mut lp, &mut (), sleep(Duration::from_millis(20))).unwrap();
        assert!(lp.now() - start >= Duration::from_millis(20), "{backend}");
        let start = lp.now();
        let r = block_on(
            &mut lp,
            &mut (),
            timeout(Duration::from_millis(10), sleep(Duration::from_secs(30))),
        )
        .unwrap();
        assert_eq!(r, Err(Elapsed(())));
        let took = lp.now() - start;
        assert!(took >= Duration::from_millis(10), "{backend}: {took:?}");
        assert!(took < Duration::from_secs(30), "{backend}: {took:?}");
        // The long sleep was dropped with its timer.
        assert_eq!(lp.active_count(), 0, "{backend}");
        let r = block_on(
            &mut lp,
            &mut (),
            timeout(Duration::from_secs(30), async { 7 }),
        )
        .unwrap();
        assert_eq!(r, Ok(7));
        assert_eq!(lp.active_count(), 0, "{backend}");
    });
}

#[test]
fn an_aborted_task_leaves_no_watcher_behind_on_every_backend() {
    in_worlds("abort", &every_backend(), |world: &World| {
        let (conn, _peer) = world.pair();
        let sim_fd = match &conn {
            common::Conn::Sim(s) => Some(s.fd()),
            common::Conn::Os(_) => None,
        };
        let mut lp: Loop = world.new_loop();
        let reader = spawn_on(&mut lp, async move {
            let conn = AsyncFd::new(conn).unwrap();
            let _ = conn.read(&mut [0u8; 4]).await;
            unreachable!("nothing is sent");
        })
        .unwrap();
        let sleeper = spawn_on(&mut lp, async { sleep(Duration::from_secs(3600)).await }).unwrap();
        // Both wait: a socket's watcher and a timer.
        lp.run(RunMode::NoWait, &mut ()).unwrap();
        lp.run(RunMode::NoWait, &mut ()).unwrap();
        assert_eq!(lp.active_count(), 2, "{}", world.backend);
        if let (Some(sim), Some(fd)) = (world.sim(), sim_fd) {
            assert_ne!(sim.registered(fd), Interest::NONE);
        }
        reader.abort();
        sleeper.abort();
        let (r, s) = block_on(&mut lp, &mut (), async { (reader.await, sleeper.await) }).unwrap();
        assert!(r.unwrap_err().is_aborted());
        assert!(s.unwrap_err().is_aborted());
        assert_eq!(lp.active_count(), 0, "{}", world.backend);
        if let (Some(sim), Some(fd)) = (world.sim(), sim_fd) {
            assert_eq!(sim.registered(fd), Interest::NONE);
        }
        assert_eq!(
            lp.run(RunMode::Default, &mut ()).unwrap(),
            RunOutcome::NoActiveWatchers
        );
    });
}

#[test]
fn a_panicking_task_is_reported_and_the_loop_goes_on_on_every_backend() {
    on_backends("panic", &every_backend(), |backend| {
        let world = World::new(backend);
        let mut lp: Loop<Vec<&str>> = world.new_loop();
        let bad = spawn_on(&mut lp, async {
            sleep(Duration::from_millis(1)).await;
            panic!("a task's bug")
        })
        .unwrap();
        let good = spawn_on(&mut lp, async {
            sleep(Duration::from_millis(5)).await;
            "fine"
        })
        .unwrap();
        lp.timer(Duration::from_millis(2), Duration::ZERO, |_, log, _| {
            log.push("timer")
        })
        .unwrap();
        let mut log = vec![];
        let (bad, good) = block_on(&mut lp, &mut log, async { (bad.await, good.await) }).unwrap();
        let err = bad.unwrap_err();
        assert!(err.is_panic(), "{backend}");
        assert_eq!(err.to_string(), "the task panicked: a task's bug");
        assert_eq!(good.unwrap(), "fine");
        assert_eq!(log, ["timer"]);
        // Still usable: spawn and finish another.
        let again = spawn_on(&mut lp, async { 1 }).unwrap();
        assert_eq!(block_on(&mut lp, &mut log, again).unwrap().unwrap(), 1);
    });
}

/// A one-value channel whose sender lives on another thread.
struct Slot<T> {
    value: Option<T>,
    waker: Option<Waker>,
}

struct Recv<T>(Arc<Mutex<Slot<T>>>);

impl<T> Future for Recv<T> {
    type Output = T;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        let mut s = self.0.lock().unwrap();
        match s.value.take() {
            Some(v) => Poll::Ready(v),
            None => {
                s.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

fn send<T>(slot: &Arc<Mutex<Slot<T>>>, v: T) {
    let waker = {
        let mut s = slot.lock().unwrap();
        s.value = Some(v);
        s.waker.take()
    };
    if let Some(w) = waker {
        w.wake();
    }
}

#[test]
fn wakes_from_other_threads_wake_the_blocked_loop_on_every_kernel() {
    on_backends("cross-thread wakes", &kernels(), |backend| {
        let mut lp: Loop = World::new(backend).new_loop();
        // Four threads, 50 values each, each value awaited by its own
        // task; a lost wake-up hangs the loop (the watchdog fails it).
        let mut slots = vec![];
        let mut tasks = vec![];
        for _ in 0..200 {
            let slot = Arc::new(Mutex::new(Slot {
                value: None,
                waker: None,
            }));
            slots.push(slot.clone());
            tasks.push(spawn_on(&mut lp, Recv(slot)).unwrap());
        }
        // Every task has polled once and waits.
        lp.run(RunMode::NoWait, &mut ()).unwrap();
        let senders: Vec<_> = slots
            .chunks(50)
            .enumerate()
            .map(|(t, chunk)| {
                let chunk = chunk.to_vec();
                std::thread::spawn(move || {
                    for (i, slot) in chunk.iter().enumerate() {
                        send(slot, t * 50 + i);
                    }
                })
            })
            .collect();
        let got = block_on(&mut lp, &mut (), async move {
            let mut got = vec![];
            for t in tasks {
                got.push(t.await.unwrap());
            }
            got
        })
        .unwrap();
        assert_eq!(got, (0..200).collect::<Vec<_>>());
        for s in senders {
            s.join().unwrap();
        }
    });
}

/// Never finishes: wakes itself at every poll, counting them.
struct Busy(Rc<RefCell<u64>>);

impl Future for Busy {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        *self.0.borrow_mut() += 1;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

#[test]
fn a_task_that_never_waits_does_not_starve_io_on_every_backend() {
    in_worlds("busy task", &every_backend(), |world: &World| {
        let (conn, mut peer) = world.pair();
        let mut lp: Loop<Option<evloop::exec::JoinHandle<()>>> = world.new_loop();
        let polls = Rc::new(RefCell::new(0));
        let busy = spawn_on(&mut lp, Busy(polls.clone())).unwrap();
        // A callback watcher: the io it waits for must come through.
        lp.io(conn, Interest::READABLE, |lp, busy, ev| {
            busy.take().unwrap().abort();
            lp.remove(ev.watcher).unwrap();
        })
        .unwrap();
        let mut state = Some(busy);
        // Polled once per pass (the budget ends it: the task's own wake
        // waits for the next), a pass per iteration (the spawn fed one
        // before the first), and the polls do not block meanwhile.
        for i in 1..=3 {
            let before = *polls.borrow();
            lp.run(RunMode::Once, &mut state).unwrap();
            let after = *polls.borrow();
            assert!(
                after - before == 1 || (i == 1 && after == 2),
                "{i}: {after}"
            );
        }
        // The io comes through while the task keeps the loop busy.
        peer.send(b"x");
        assert_eq!(
            lp.run(RunMode::Default, &mut state).unwrap(),
            RunOutcome::NoActiveWatchers
        );
        assert!(state.is_none());
        let polls = *polls.borrow();
        assert!(polls >= 3, "{polls}");
    });
}

#[test]
fn callbacks_and_tasks_mix_in_one_loop_exactly_on_the_simulator() {
    let sim = Sim::new();
    let mut lp: Loop<Vec<String>> = Loop::with_backend(sim.backend());
    let ex = Executor::of(&mut lp).unwrap();
    let log = Rc::new(RefCell::new(Vec::<String>::new()));
    // A repeating timer callback spawns a task at each firing; each task
    // sleeps 5ms and logs, through the shared log.
    let l2 = log.clone();
    lp.timer(
        Duration::from_millis(10),
        Duration::from_millis(10),
        move |lp, _, t| {
            let n = lp.iteration();
            let now = lp.now().as_millis();
            l2.borrow_mut().push(format!("{now}ms timer"));
            let l3 = l2.clone();
            ex.spawn(async move {
                sleep(Duration::from_millis(5)).await;
                l3.borrow_mut().push(format!("{}ms task", now + 5));
            })
            .unwrap();
            if n > 5 || now >= 30 {
                lp.remove(t).unwrap();
            }
        },
    )
    .unwrap();
    let mut st = vec![];
    assert_eq!(
        lp.run(RunMode::Default, &mut st).unwrap(),
        RunOutcome::NoActiveWatchers
    );
    assert_eq!(
        *log.borrow(),
        [
            "10ms timer",
            "15ms task",
            "20ms timer",
            "25ms task",
            "30ms timer",
            "35ms task"
        ]
    );
    assert_eq!(lp.now(), Duration::from_millis(35));
}

#[test]
fn a_dropped_read_future_and_its_source_leave_nothing_on_the_simulator() {
    let sim = Sim::new();
    let sock = sim.socket("s", 64);
    let fd = sock.fd();
    let mut lp: Loop = Loop::with_backend(sim.backend());
    let sock = block_on(&mut lp, &mut (), async move {
        let sock = AsyncFd::new(sock).unwrap();
        let r = timeout(Duration::from_millis(10), sock.read(&mut [0u8; 4])).await;
        assert_eq!(r.unwrap_err(), Elapsed(()));
        sock
    })
    .unwrap();
    // The source is still watched (its AsyncFd lives) ...
    assert_ne!(sim.registered(fd), Interest::NONE);
    drop(sock);
    // ... until it is dropped: removed at the executor's next pass.
    lp.run(RunMode::NoWait, &mut ()).unwrap();
    assert_eq!(sim.registered(fd), Interest::NONE);
    assert_eq!(lp.active_count(), 0);
}

#[test]
fn errors_are_clear_and_nothing_panics() {
    // Outside any task.
    assert!(matches!(spawn_local(async {}), Err(Error::NoExecutor)));
    assert!(AsyncFd::new(Sim::new().socket("s", 0)).is_err());
    assert!(Executor::current().is_none());
    // A future that can never be woken, on the simulator: Stalled.
    let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    let never = std::future::pending::<()>();
    assert!(matches!(
        block_on(&mut lp, &mut (), never),
        Err(Error::Stalled)
    ));
    // A source the backend refuses (an OS fd on the simulator): the
    // error comes from the first wait.
    let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
    let r = block_on(&mut lp, &mut (), async move {
        AsyncFd::new(a).unwrap().readable().await
    })
    .unwrap();
    let e = r.unwrap_err();
    assert!(
        e.to_string().contains("simulat") || e.to_string().contains("virtual"),
        "{e}"
    );
    // A regular file on epoll: refused the same way.
    let dir = std::env::temp_dir().join(format!("evloop-exec-{}", std::process::id()));
    std::fs::write(&dir, b"x").unwrap();
    let file = std::fs::File::open(&dir).unwrap();
    let mut lp: Loop = Loop::builder().backend("poll").build().unwrap();
    let r = block_on(&mut lp, &mut (), async move {
        AsyncFd::new(file).unwrap().readable().await
    })
    .unwrap();
    assert!(r.is_err());
    std::fs::remove_file(&dir).unwrap();
    // A spawn on the executor of a dropped loop.
    let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    let ex = Executor::of(&mut lp).unwrap();
    drop(lp);
    assert!(matches!(ex.spawn(async {}), Err(Error::ExecutorGone)));
}

#[test]
fn dropping_the_loop_drops_its_tasks_and_what_they_hold() {
    let held = Rc::new(());
    let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    let h2 = held.clone();
    let task = spawn_on(&mut lp, async move {
        let _h = h2;
        sleep(Duration::from_secs(60)).await;
    })
    .unwrap();
    lp.run(RunMode::NoWait, &mut ()).unwrap();
    assert_eq!(Rc::strong_count(&held), 2);
    drop(lp);
    assert_eq!(
        Rc::strong_count(&held),
        1,
        "the task was dropped with the loop"
    );
    // Its handle says so (it never finished).
    let mut other: Loop = Loop::with_backend(Sim::new().backend());
    let r = block_on(&mut other, &mut (), task).unwrap();
    assert!(matches!(r, Err(JoinError::Aborted)));
}

#[test]
fn block_on_in_a_callback_runs_the_loop_nested() {
    let sim = Sim::new();
    let mut lp: Loop<Vec<u64>> = Loop::with_backend(sim.backend());
    lp.timer(Duration::from_millis(10), Duration::ZERO, |lp, log, _| {
        let v = block_on(lp, log, async {
            sleep(Duration::from_millis(5)).await;
            42
        })
        .unwrap();
        log.push(v);
        log.push(lp.now().as_millis() as u64);
    })
    .unwrap();
    let mut log = vec![];
    lp.run(RunMode::Default, &mut log).unwrap();
    assert_eq!(log, [42, 15]);
}

#[test]
fn a_budget_bounds_a_pass_and_tasks_run_in_wake_order() {
    let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    let ex = Executor::of(&mut lp).unwrap();
    ex.set_budget(2);
    let log = Rc::new(RefCell::new(VecDeque::new()));
    for i in 0..5 {
        let l = log.clone();
        ex.spawn(async move { l.borrow_mut().push_back(i) })
            .unwrap();
    }
    let mut passes = vec![];
    while ex.task_count() > 0 {
        lp.run(RunMode::NoWait, &mut ()).unwrap();
        passes.push(log.borrow_mut().drain(..).collect::<Vec<_>>());
    }
    assert_eq!(passes, [vec![0, 1], vec![2, 3], vec![4]]);
}

// ---------------------------------------------------------------------
// Signals and children, on the kernels.

#[test]
fn a_signal_stream_sees_each_delivery_on_every_kernel() {
    let _alone = common::alone();
    on_backends("signal stream", &common::child_kernels(), |backend| {
        let mut lp: Loop = common::kernel_loop(backend);
        let pid = std::process::id();
        let got = block_on(&mut lp, &mut (), async move {
            let mut usr2 = signals(libc::SIGUSR2);
            let mut got = vec![];
            for _ in 0..2 {
                // The stream watches from its first poll: send after it.
                let kill = spawn_local(async move {
                    yield_now().await;
                    let status = std::process::Command::new("kill")
                        .args(["-USR2", &pid.to_string()])
                        .status()
                        .unwrap();
                    assert!(status.success());
                })
                .unwrap();
                got.push(usr2.recv().await.unwrap().unwrap());
                kill.await.unwrap();
            }
            got
        })
        .unwrap();
        assert_eq!(got, [libc::SIGUSR2, libc::SIGUSR2]);
        assert_eq!(
            lp.active_count(),
            0,
            "{backend}: the stream's watcher is gone"
        );
    });
}

#[test]
fn a_child_exit_is_awaited_on_every_kernel() {
    let _alone = common::alone();
    on_backends("child exit", &common::child_kernels(), |backend| {
        let mut lp: Loop = common::kernel_loop(backend);
        let (pid, status) = block_on(&mut lp, &mut (), async {
            // Reaped by the loop's child watcher, not by `wait`.
            #[allow(clippy::zombie_processes)]
            let child = std::process::Command::new("sh")
                .args(["-c", "exit 5"])
                .spawn()
                .unwrap();
            child_exit(child.id()).await.unwrap()
        })
        .unwrap();
        assert!(pid > 0);
        assert_eq!(status, Some(evloop::ExitStatus::Exited(5)), "{backend}");
        // Not a child of ours: a clear error.
        let r = block_on(&mut lp, &mut (), child_exit(1)).unwrap();
        assert!(matches!(r, Err(Error::Child { pid: 1, .. })), "{r:?}");
    });
}

struct PanicsOnDrop;

impl Drop for PanicsOnDrop {
    fn drop(&mut self) {
        panic!("a drop's bug");
    }
}

/// A task that holds a `PanicsOnDrop` and sleeps for a minute.
async fn bomb() {
    let _bomb = PanicsOnDrop;
    sleep(Duration::from_secs(60)).await;
}

#[test]
fn a_panic_while_an_aborted_task_is_dropped_is_its_outcome_on_every_backend() {
    in_worlds("aborted task's drop panics", &every_backend(), |world| {
        let mut lp: Loop = world.new_loop();
        let waited = spawn_on(&mut lp, bomb()).unwrap();
        let detached = spawn_on(&mut lp, bomb()).unwrap();
        lp.run(RunMode::NoWait, &mut ()).unwrap();
        waited.abort();
        detached.abort();
        drop(detached);
        // Neither drop's panic comes out of `run` or `block_on`: the
        // waited task's handle gives it, the detached one's is dropped.
        let r = block_on(&mut lp, &mut (), waited).unwrap();
        let err = r.unwrap_err();
        assert!(err.is_panic(), "{}: {err:?}", world.backend);
        assert_eq!(err.to_string(), "the task panicked: a drop's bug");
        // Both tasks are gone with their timers; the loop goes on.
        assert_eq!(Executor::of(&mut lp).unwrap().task_count(), 0);
        assert_eq!(lp.active_count(), 0);
        assert_eq!(block_on(&mut lp, &mut (), async { 5 }).unwrap(), 5);
        assert_eq!(
            lp.run(RunMode::Default, &mut ()).unwrap(),
            RunOutcome::NoActiveWatchers
        );
    });
}

/// Ready at its first poll, with a field whose drop panics.
struct ReadyThenPanicsOnDrop(#[allow(dead_code)] PanicsOnDrop);

impl Future for ReadyThenPanicsOnDrop {
    type Output = u8;
    fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<u8> {
        Poll::Ready(7)
    }
}

/// A value whose drop panics, as a task's output.
struct PanicsOnDropOutput;

impl Drop for PanicsOnDropOutput {
    fn drop(&mut self) {
        panic!("an output's bug");
    }
}

#[test]
fn a_panic_while_a_finished_task_is_dropped_is_contained_on_every_backend() {
    in_worlds("finished task's drop panics", &every_backend(), |world| {
        let mut lp: Loop = world.new_loop();
        // A future dropped once ready: its drop's panic is the outcome.
        let waited = spawn_on(&mut lp, ReadyThenPanicsOnDrop(PanicsOnDrop)).unwrap();
        // An output nobody waits for, dropped with the task: contained.
        drop(spawn_on(&mut lp, async { PanicsOnDropOutput }).unwrap());
        let err = block_on(&mut lp, &mut (), waited).unwrap().unwrap_err();
        assert_eq!(err.to_string(), "the task panicked: a drop's bug");
        assert_eq!(Executor::of(&mut lp).unwrap().task_count(), 0);
        assert_eq!(
            lp.run(RunMode::Default, &mut ()).unwrap(),
            RunOutcome::NoActiveWatchers
        );
    });
}

#[test]
fn a_loop_dropped_with_tasks_whose_drops_panic_resumes_one_panic_on_every_backend() {
    in_worlds("pending tasks' drops panic", &every_backend(), |world| {
        let held = Rc::new(());
        let mut lp: Loop = world.new_loop();
        let mut handles = vec![];
        for _ in 0..3 {
            let h = held.clone();
            handles.push(
                spawn_on(&mut lp, async move {
                    let _h = h;
                    bomb().await
                })
                .unwrap(),
            );
        }
        lp.run(RunMode::NoWait, &mut ()).unwrap();
        // Three drops panic: each is caught (a second unwinding panic
        // would abort the process), every task is dropped, and the first
        // panic comes out of the loop's drop.
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(lp)));
        let payload = r.unwrap_err();
        assert_eq!(payload.downcast_ref::<&str>(), Some(&"a drop's bug"));
        assert_eq!(Rc::strong_count(&held), 1, "every task was dropped");
        // Their handles say they never finished.
        let mut other: Loop = world.new_loop();
        for h in handles {
            assert!(block_on(&mut other, &mut (), h)
                .unwrap()
                .unwrap_err()
                .is_aborted());
        }
    });
}

/// Yields until `done`: by `yield_now`, or (`by_poll_fn`) by a
/// `poll_fn` that wakes itself and returns `Pending`. How many times.
async fn yield_until(by_poll_fn: bool, mut done: impl FnMut() -> bool) -> u64 {
    let mut yields = 0;
    while !done() {
        if by_poll_fn {
            let mut woke = false;
            std::future::poll_fn(|cx| {
                if std::mem::replace(&mut woke, true) {
                    return Poll::Ready(());
                }
                cx.waker().wake_by_ref();
                Poll::Pending
            })
            .await;
        } else {
            yield_now().await;
        }
        yields += 1;
    }
    yields
}

#[test]
fn a_block_on_future_that_wakes_itself_lets_tasks_timers_and_io_run_on_every_backend() {
    in_worlds("self-woken block_on", &every_backend(), |world| {
        for by_poll_fn in [false, true] {
            let (conn, mut peer) = world.pair();
            let mut lp: Loop = world.new_loop();
            // The simulator's time moves only while the loop blocks,
            // which a woken `block_on` must not: there, all is due now.
            let after = if world.sim().is_some() {
                Duration::ZERO
            } else {
                Duration::from_millis(1)
            };
            let (slept, fired, read) = (
                Rc::new(Cell::new(false)),
                Rc::new(Cell::new(false)),
                Rc::new(Cell::new(false)),
            );
            let s = slept.clone();
            spawn_on(&mut lp, async move {
                sleep(after).await;
                s.set(true);
            })
            .unwrap();
            let f = fired.clone();
            lp.timer(after, Duration::ZERO, move |_, _, _| f.set(true))
                .unwrap();
            let r = read.clone();
            lp.io(conn, Interest::READABLE, move |lp, _, ev| {
                r.set(true);
                lp.remove(ev.watcher).unwrap();
            })
            .unwrap();
            peer.send(b"x");
            let yields = block_on(
                &mut lp,
                &mut (),
                yield_until(by_poll_fn, || slept.get() && fired.get() && read.get()),
            )
            .unwrap();
            if world.sim().is_some() {
                // One iteration per yield: everything ran in the first.
                assert_eq!(yields, 1, "by_poll_fn {by_poll_fn}");
            }
            // A minute's timer: an iteration that blocked for it would
            // show on the simulator's clock (and the watchdog's, here).
            lp.timer(Duration::from_secs(60), Duration::ZERO, |_, _, _| {})
                .unwrap();
            let start = lp.now();
            let yields = block_on(&mut lp, &mut (), {
                let mut n = 0;
                yield_until(by_poll_fn, move || {
                    n += 1;
                    n > 1000
                })
            })
            .unwrap();
            assert_eq!(yields, 1000);
            if world.sim().is_some() {
                assert_eq!(lp.now(), start, "a yield blocked");
            }
        }
    });
}
