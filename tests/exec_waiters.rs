//! Several tasks waiting on one `AsyncFd` source in the same direction:
//! every one is woken by its readiness (async-io keeps every waiter; a
//! listener shared by acceptor tasks is a common pattern). On the
//! simulator and every kernel backend: epoll registers the source
//! edge-triggered, poll and select (and the simulator) level-triggered,
//! and the two paths differ (reactor.rs), so both are covered.

mod common;

use std::cell::Cell;
use std::net::{TcpListener, TcpStream};
use std::rc::Rc;
use std::time::Duration;

use common::{in_worlds, on_backends, World};
use evloop::exec::{block_on, spawn_on, timeout, AsyncFd, Executor, JoinHandle};
use evloop::{Loop, RunMode};

fn every_backend() -> Vec<&'static str> {
    common::backends()
}

/// How many tasks wait at once.
const WAITERS: [usize; 3] = [1, 2, 5];

/// Runs the loop until every task has made its first wait.
fn settle<S: Default>(lp: &mut Loop<'_, S>) {
    let mut st = S::default();
    for _ in 0..3 {
        lp.run(RunMode::NoWait, &mut st).unwrap();
    }
}

/// Awaits every task, failing (instead of hanging) if one is not done
/// within 5 s of loop time.
fn join_all(lp: &mut Loop<'_, ()>, tasks: Vec<JoinHandle<()>>) {
    let backend = lp.backend_name();
    let n = tasks.len();
    let r = block_on(
        lp,
        &mut (),
        timeout(Duration::from_secs(5), async move {
            for t in tasks {
                t.await.unwrap();
            }
        }),
    )
    .unwrap();
    assert!(r.is_ok(), "{backend}: not every one of {n} waiters woke");
}

#[test]
fn every_task_awaiting_readable_on_one_socket_is_woken_on_every_backend() {
    in_worlds("shared readable", &every_backend(), |world: &World| {
        for n in WAITERS {
            let (conn, mut peer) = world.pair();
            let mut lp: Loop = world.new_loop();
            let ex = Executor::of(&mut lp).unwrap();
            let conn = Rc::new(AsyncFd::with_executor(&ex, conn).unwrap());
            let woken = Rc::new(Cell::new(0));
            let tasks: Vec<_> = (0..n)
                .map(|_| {
                    let (conn, woken) = (conn.clone(), woken.clone());
                    spawn_on(&mut lp, async move {
                        conn.readable().await.unwrap();
                        woken.set(woken.get() + 1);
                    })
                    .unwrap()
                })
                .collect();
            settle(&mut lp);
            assert_eq!(woken.get(), 0, "{}: nothing was sent", world.backend);
            peer.send(b"x");
            join_all(&mut lp, tasks);
            assert_eq!(woken.get(), n, "{}", world.backend);
            drop(conn);
            lp.run(RunMode::NoWait, &mut ()).unwrap();
            assert_eq!(lp.active_count(), 0, "{}", world.backend);
        }
    });
}

#[test]
fn every_task_reading_one_socket_gets_its_byte_on_every_backend() {
    in_worlds("shared read", &every_backend(), |world: &World| {
        for n in WAITERS {
            let (conn, mut peer) = world.pair();
            let mut lp: Loop = world.new_loop();
            let ex = Executor::of(&mut lp).unwrap();
            let conn = Rc::new(AsyncFd::with_executor(&ex, conn).unwrap());
            let got = Rc::new(Cell::new(0));
            let tasks: Vec<_> = (0..n)
                .map(|_| {
                    let (conn, got) = (conn.clone(), got.clone());
                    spawn_on(&mut lp, async move {
                        // One byte each: no read is short, so each task
                        // takes one byte and leaves the rest.
                        let mut byte = [0u8; 1];
                        assert_eq!(conn.read(&mut byte).await.unwrap(), 1);
                        got.set(got.get() + 1);
                    })
                    .unwrap()
                })
                .collect();
            settle(&mut lp);
            peer.send(&vec![b'x'; n]);
            join_all(&mut lp, tasks);
            assert_eq!(got.get(), n, "{}", world.backend);
        }
    });
}

#[test]
#[cfg_attr(
    target_os = "wasi",
    ignore = "a WASI guest cannot bind or connect a socket"
)]
fn every_task_accepting_on_one_listener_gets_a_connection_on_every_kernel() {
    on_backends("shared accept", evloop::backends::AVAILABLE, |backend| {
        for n in WAITERS {
            let world = World::new(backend);
            let mut lp: Loop = world.new_loop();
            let ex = Executor::of(&mut lp).unwrap();
            let listener = evloop::net::ListenOptions::new()
                .bind("127.0.0.1:0".parse().unwrap())
                .unwrap();
            let addr = listener.local_addr().unwrap();
            let listener: Rc<AsyncFd<TcpListener>> =
                Rc::new(AsyncFd::with_executor(&ex, listener).unwrap());
            let tasks: Vec<_> = (0..n)
                .map(|_| {
                    let listener = listener.clone();
                    spawn_on(&mut lp, async move {
                        let (conn, _) = listener.accept().await.unwrap();
                        // Each accepted once; the peer's byte tells them apart.
                        let mut byte = [0u8; 1];
                        assert_eq!(conn.read(&mut byte).await.unwrap(), 1);
                    })
                    .unwrap()
                })
                .collect();
            settle(&mut lp);
            // Connected through the backlog, before anyone accepts.
            let clients: Vec<TcpStream> = (0..n)
                .map(|i| {
                    use std::io::Write;
                    let mut c = TcpStream::connect(addr).unwrap();
                    c.write_all(&[i as u8]).unwrap();
                    c
                })
                .collect();
            join_all(&mut lp, tasks);
            drop(clients);
        }
    });
}
