//! An async server's graceful shutdown (docs/async.md, "Graceful
//! shutdown"), from `exec`'s parts: a `JoinSet` of connection tasks, a
//! `Shutdown` signal, `race`. With live connections, SIGTERM arrives
//! (a signal stream triggers the `Shutdown`): the server stops accepting,
//! each connection task says goodbye and ends, and the set drains. On the
//! simulator (a simulated signal, scripted connections, exact times) and
//! on every kernel backend (TCP on loopback, a real SIGTERM), under the
//! watchdog. Then the parts alone: a `JoinSet`'s order, aborts and drop,
//! a `Shutdown` triggered from another thread, `race`.

mod common;

use std::cell::RefCell;
use std::collections::VecDeque;
use std::future::Future;
use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::rc::Rc;
use std::time::Duration;

use common::{on_backends, World};
use evloop::exec::{
    block_on, race, signals, sleep, spawn_local, spawn_on, timeout, AsyncFd, Either, Executor,
    JoinSet, Shutdown,
};
use evloop::{Loop, RunMode, RunOutcome, Sim, SimSocket};

// ---------------------------------------------------------------------
// The server, as docs/async.md writes it, over any stream.

/// Echoes until the peer ends, or the shutdown comes: then says "bye".
async fn serve<C>(conn: AsyncFd<C>, shutdown: Shutdown) -> io::Result<()>
where
    for<'a> &'a C: Read + Write,
{
    let mut buf = [0u8; 1024];
    loop {
        let n = match race(shutdown.triggered(), conn.read(&mut buf)).await {
            Either::Left(()) => return conn.write_all(b"bye\n").await,
            Either::Right(read) => read?,
        };
        if n == 0 {
            return Ok(());
        }
        conn.write_all(&buf[..n]).await?;
    }
}

/// Accepts until the shutdown, then waits (at most 5 s) for the
/// connection tasks; gives how many ended well.
async fn server<C, A, F>(mut accept: A, shutdown: Shutdown) -> usize
where
    C: 'static,
    for<'a> &'a C: Read + Write,
    A: FnMut() -> F,
    F: Future<Output = io::Result<AsyncFd<C>>>,
{
    let mut conns = JoinSet::new();
    let mut served = 0;
    loop {
        match race(shutdown.triggered(), accept()).await {
            Either::Left(()) => break,
            Either::Right(Ok(conn)) => conns.spawn_local(serve(conn, shutdown.clone())).unwrap(),
            Either::Right(Err(e)) => panic!("accept: {e}"),
        }
        while let Some(done) = conns.try_join_next() {
            served += done.unwrap().is_ok() as usize;
        }
    }
    drop(accept); // the listener: no more connections
    let drain = async {
        while let Some(done) = conns.join_next().await {
            served += done.unwrap().is_ok() as usize;
        }
    };
    timeout(Duration::from_secs(5), drain)
        .await
        .expect("the connections end once told");
    assert!(conns.is_empty());
    served
}

/// The SIGTERM watcher: triggers the shutdown at the first delivery.
fn on_sigterm(shutdown: &Shutdown) {
    let shutdown = shutdown.clone();
    let mut term = signals(libc::SIGTERM);
    spawn_local(async move {
        if let Some(Ok(_)) = term.recv().await {
            shutdown.trigger();
        }
    })
    .unwrap();
}

/// Sends `hi` and reads it back.
async fn echo_once<C>(conn: &AsyncFd<C>)
where
    for<'a> &'a C: Read + Write,
{
    conn.write_all(b"hi").await.unwrap();
    let mut got = [0u8; 2];
    let mut n = 0;
    while n < 2 {
        n += conn.read(&mut got[n..]).await.unwrap();
    }
    assert_eq!(&got, b"hi");
}

/// Reads to the end.
async fn rest<C>(conn: &AsyncFd<C>) -> Vec<u8>
where
    for<'a> &'a C: Read + Write,
{
    let mut all = vec![];
    let mut buf = [0u8; 64];
    loop {
        match conn.read(&mut buf).await.unwrap() {
            0 => return all,
            n => all.extend_from_slice(&buf[..n]),
        }
    }
}

const CLIENTS: usize = 3;

// ---------------------------------------------------------------------
// On the simulator: a connection is a socket pair, "accepted" when a
// byte on the listener's socket says one is waiting.

#[test]
fn a_server_shuts_down_gracefully_on_sigterm_exactly_on_the_simulator() {
    common::watchdog("sim shutdown", common::WATCHDOG, || {
        let sim = Sim::new();
        let (listen, knock) = sim.pair("listener", 64);
        let mut lp: Loop = Loop::with_backend(sim.backend());
        let ex = Executor::of(&mut lp).unwrap();
        let backlog: Rc<RefCell<VecDeque<SimSocket>>> = Rc::default();
        let listen = Rc::new(AsyncFd::with_executor(&ex, listen).unwrap());
        let queued = backlog.clone();
        let accept = move || {
            let (listen, queued) = (listen.clone(), queued.clone());
            async move {
                listen.read(&mut [0u8; 1]).await?;
                let conn = queued.borrow_mut().pop_front().unwrap();
                AsyncFd::new(conn)
            }
        };
        let connect = |sim: &Sim, knock: &mut SimSocket| {
            let (ours, theirs) = sim.pair("conn", 1024);
            backlog.borrow_mut().push_back(theirs);
            knock.write_all(b"c").unwrap();
            AsyncFd::with_executor(&ex, ours).unwrap()
        };
        let mut knock = knock;
        // SIGTERM at 100 ms, with three connections open.
        sim.raise(Duration::from_millis(100), libc::SIGTERM);
        let served = block_on(&mut lp, &mut (), async {
            let shutdown = Shutdown::new();
            on_sigterm(&shutdown);
            let server = spawn_local(server(accept, shutdown)).unwrap();
            let clients: Vec<_> = (0..CLIENTS).map(|_| connect(&sim, &mut knock)).collect();
            for c in &clients {
                echo_once(c).await;
            }
            for c in &clients {
                assert_eq!(rest(c).await, b"bye\n");
            }
            let served = server.await.unwrap();
            // The listener is closed: a knock now is refused.
            let late = knock.write_all(b"c").unwrap_err();
            assert_eq!(late.kind(), io::ErrorKind::BrokenPipe);
            served
        })
        .unwrap();
        assert_eq!(served, CLIENTS);
        // Everything happened at the signal's time.
        assert_eq!(lp.now(), Duration::from_millis(100));
        // Nothing left: no task (the signal's ended after its delivery),
        // no watcher.
        assert_eq!(Executor::of(&mut lp).unwrap().task_count(), 0);
        assert_eq!(
            lp.run(RunMode::Default, &mut ()).unwrap(),
            RunOutcome::NoActiveWatchers
        );
    });
}

// ---------------------------------------------------------------------
// On the kernels: TCP on loopback, a real SIGTERM.

#[test]
fn a_server_shuts_down_gracefully_on_sigterm_on_every_kernel() {
    let _alone = common::alone();
    on_backends("tcp shutdown", evloop::backends::AVAILABLE, |backend| {
        let world = World::new(backend);
        let mut lp: Loop = world.new_loop();
        let listener = evloop::net::ListenOptions::new()
            .bind("127.0.0.1:0".parse().unwrap())
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let served = block_on(&mut lp, &mut (), async move {
            let shutdown = Shutdown::new();
            on_sigterm(&shutdown);
            let listener: Rc<AsyncFd<TcpListener>> = Rc::new(AsyncFd::new(listener).unwrap());
            let accept = move || {
                let l = listener.clone();
                async move { l.accept().await.map(|(conn, _)| conn) }
            };
            let server = spawn_local(server(accept, shutdown)).unwrap();
            let mut clients = vec![];
            for _ in 0..CLIENTS {
                let c = AsyncFd::<TcpStream>::connect(addr).await.unwrap();
                echo_once(&c).await;
                clients.push(c);
            }
            // Three live connections; the signal stream watches.
            let status = std::process::Command::new("kill")
                .args(["-TERM", &std::process::id().to_string()])
                .status()
                .unwrap();
            assert!(status.success());
            for c in &clients {
                assert_eq!(rest(c).await, b"bye\n");
            }
            let served = server.await.unwrap();
            // The listener is closed: a new connection is refused.
            assert!(AsyncFd::<TcpStream>::connect(addr).await.is_err());
            served
        })
        .unwrap();
        assert_eq!(served, CLIENTS, "{backend}");
        assert_eq!(Executor::of(&mut lp).unwrap().task_count(), 0, "{backend}");
        assert_eq!(lp.active_count(), 0, "{backend}");
    });
}

// ---------------------------------------------------------------------
// The parts.

#[test]
fn a_join_set_gives_outcomes_as_tasks_finish_and_aborts_on_every_backend() {
    on_backends("join set", &common::backends(), |backend| {
        let world = World::new(backend);
        let mut lp: Loop = world.new_loop();
        let (order, aborted) = block_on(&mut lp, &mut (), async {
            let mut set = JoinSet::new();
            for ms in [30u64, 10, 20] {
                set.spawn_local(async move {
                    sleep(Duration::from_millis(ms)).await;
                    ms
                })
                .unwrap();
            }
            set.spawn_local(async { panic!("one task's bug") }).unwrap();
            assert_eq!(set.len(), 4);
            let mut order = vec![];
            let mut panics = 0;
            while let Some(done) = set.join_next().await {
                match done {
                    Ok(ms) => order.push(ms),
                    Err(e) => panics += e.is_panic() as usize,
                }
            }
            assert_eq!(panics, 1);
            assert!(set.is_empty());
            assert!(set.join_next().await.is_none());
            // Finished before anyone asked: still in finishing order.
            for ms in [30u64, 10] {
                set.spawn_local(async move {
                    sleep(Duration::from_millis(ms)).await;
                    ms
                })
                .unwrap();
            }
            sleep(Duration::from_millis(50)).await;
            assert_eq!(set.try_join_next().unwrap().unwrap(), 10);
            assert_eq!(set.join_next().await.unwrap().unwrap(), 30);
            // abort_all: each gives Aborted, and its timer goes.
            for _ in 0..5 {
                set.spawn_local(async {
                    sleep(Duration::from_secs(3600)).await;
                    0
                })
                .unwrap();
            }
            set.abort_all();
            let mut aborted = 0;
            while let Some(done) = set.join_next().await {
                aborted += done.unwrap_err().is_aborted() as usize;
            }
            (order, aborted)
        })
        .unwrap();
        assert_eq!(order, [10, 20, 30], "{backend}");
        assert_eq!(aborted, 5);
        assert_eq!(lp.active_count(), 0, "{backend}");
        // Dropping a set aborts its tasks: run ends at once.
        let ex = Executor::of(&mut lp).unwrap();
        let mut set = JoinSet::new();
        for _ in 0..3 {
            set.spawn_local_on(sleep(Duration::from_secs(3600)), &ex)
                .unwrap();
        }
        drop(set);
        let start = lp.now();
        assert_eq!(
            lp.run(RunMode::Default, &mut ()).unwrap(),
            RunOutcome::NoActiveWatchers
        );
        assert!(lp.now() - start < Duration::from_secs(60), "{backend}");
        assert_eq!(ex.task_count(), 0);
    });
}

#[test]
fn a_shutdown_triggered_from_another_thread_wakes_every_waiter_on_every_kernel() {
    on_backends(
        "shutdown from a thread",
        evloop::backends::AVAILABLE,
        |backend| {
            let world = World::new(backend);
            let mut lp: Loop = world.new_loop();
            let shutdown = Shutdown::new();
            let waiters: Vec<_> = (0..5)
                .map(|_| {
                    let s = shutdown.clone();
                    spawn_on(&mut lp, async move { s.triggered().await }).unwrap()
                })
                .collect();
            // Every waiter waits; the loop then blocks until the trigger.
            lp.run(RunMode::NoWait, &mut ()).unwrap();
            let from_thread = shutdown.clone();
            let thread = std::thread::spawn(move || from_thread.trigger());
            let r = block_on(
                &mut lp,
                &mut (),
                timeout(Duration::from_secs(10), async move {
                    for w in waiters {
                        w.await.unwrap();
                    }
                }),
            )
            .unwrap();
            assert!(r.is_ok(), "{backend}: a waiter was not woken");
            thread.join().unwrap();
            // Triggered stays: a later wait is over at once.
            block_on(&mut lp, &mut (), shutdown.triggered()).unwrap();
        },
    );
}

#[test]
fn race_gives_the_first_and_drops_the_other_on_the_simulator() {
    let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    let r = block_on(&mut lp, &mut (), async {
        race(sleep(Duration::from_secs(2)), async {
            sleep(Duration::from_secs(1)).await;
            "one"
        })
        .await
    })
    .unwrap();
    assert_eq!(r, Either::Right("one"));
    assert_eq!(lp.now(), Duration::from_secs(1));
    assert_eq!(lp.active_count(), 0);
    // Both ready: the left one wins.
    let r = block_on(&mut lp, &mut (), race(async { 1 }, async { 2 })).unwrap();
    assert_eq!(r, Either::Left(1));
}
