//! `net` and `exec` on WASI, built for `wasm32-wasip1` and run under
//! wasmtime (`tests/wasi/run.sh`): what a guest cannot do with sockets is
//! an `Err` of kind `Unsupported` that names WASI and says why (one test
//! per call; the signal and child streams' first items name WASI too),
//! and the executor runs single-threaded: tasks, sleeps, and
//! wakes from the loop's own thread, with no backend waker.
//!
//! The ignored test, an async echo server on the preopened listener, is
//! run by tests/wasi_echo.rs, which starts this guest with a
//! listener and serves it from Linux: `wasi_net_guest.wasm --ignored
//! --exact exec_echo_on_the_preopened_listener`.
#![cfg(target_os = "wasi")]

mod common;

use std::cell::{Cell, RefCell};
use std::future::poll_fn;
use std::io;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::rc::Rc;
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};

use evloop::exec::{
    block_on, child_exit, child_exits, signals, sleep, spawn_local, yield_now, AsyncFd, JoinSet,
};
use evloop::net::ListenOptions;
use evloop::{Loop, RunMode, RunOutcome};

use common::names_wasi;

/// Connections the echo test serves before it returns; tests/wasi_echo.rs
/// connects as many.
const EXEC_ECHO_CONNECTIONS: usize = 30;

/// Asserts that `err` is `Unsupported` and names WASI.
#[track_caller]
fn refused(err: io::Error) {
    assert_eq!(err.kind(), io::ErrorKind::Unsupported, "{err}");
    names_wasi(err);
}

#[test]
fn listen_options_bind_is_refused() {
    let addr: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let err = ListenOptions::new().bind(addr).unwrap_err();
    assert!(err.to_string().contains("preopened"), "{err}");
    refused(err);
}

#[test]
fn fd_limits_is_refused() {
    refused(evloop::net::fd_limits().unwrap_err());
}

#[test]
fn raise_fd_limit_is_refused() {
    refused(evloop::net::raise_fd_limit().unwrap_err());
}

#[test]
fn async_bind_is_refused() {
    let mut lp: Loop = Loop::new().unwrap();
    let err = block_on(&mut lp, &mut (), async {
        AsyncFd::<TcpListener>::bind("127.0.0.1:0").unwrap_err()
    })
    .unwrap();
    refused(err);
}

#[test]
fn async_connect_is_refused() {
    let mut lp: Loop = Loop::new().unwrap();
    let addr: SocketAddr = "127.0.0.1:9".parse().unwrap();
    let err = block_on(&mut lp, &mut (), AsyncFd::<TcpStream>::connect(addr))
        .unwrap()
        .unwrap_err();
    refused(err);
}

/// The signal stream's first item is an error naming WASI (which has no
/// signals), and then it ends.
#[test]
fn the_signal_stream_is_refused() {
    let mut lp: Loop = Loop::new().unwrap();
    let (first, then) = block_on(&mut lp, &mut (), async {
        let mut term = signals(evloop::Signal::TERM);
        (term.recv().await, term.recv().await)
    })
    .unwrap();
    names_wasi(first.expect("a first item").unwrap_err());
    assert!(then.is_none());
}

/// The child streams' first item is an error naming WASI (which has no
/// processes to wait for).
#[test]
fn the_child_streams_are_refused() {
    let mut lp: Loop = Loop::new().unwrap();
    let (one, any) = block_on(&mut lp, &mut (), async {
        (child_exit(1).await, child_exits().recv().await)
    })
    .unwrap();
    names_wasi(one.unwrap_err());
    names_wasi(any.expect("a first item").unwrap_err());
}

/// Tasks, sleeps (never early), yields and a join set on the one thread:
/// the executor needs no backend waker for them.
#[test]
fn the_executor_runs_tasks_and_sleeps_single_threaded() {
    let t0 = Instant::now();
    let mut lp: Loop = Loop::new().unwrap();
    let order = Rc::new(RefCell::new(Vec::new()));
    let o = order.clone();
    let total = block_on(&mut lp, &mut (), async move {
        let mut set = JoinSet::new();
        for i in [3u64, 1, 2] {
            let o = o.clone();
            set.spawn_local(async move {
                sleep(Duration::from_millis(5 * i)).await;
                assert!(t0.elapsed() >= Duration::from_millis(5 * i));
                yield_now().await;
                o.borrow_mut().push(i);
                i
            })
            .unwrap();
        }
        let mut total = 0;
        while let Some(done) = set.join_next().await {
            total += done.unwrap();
        }
        total
    })
    .unwrap();
    assert_eq!(total, 6);
    assert_eq!(*order.borrow(), [1, 2, 3]);
}

/// A waker woken from a watcher's callback (the loop's thread, outside
/// any task) while the task waits: the loop runs the task next instead of
/// blocking, although WASI gives the executor no backend waker.
#[test]
fn a_wake_from_a_callback_runs_the_task() {
    let mut lp: Loop<Rc<RefCell<Option<Waker>>>> = Loop::new().unwrap();
    let slot: Rc<RefCell<Option<Waker>>> = Rc::default();
    let fired = Rc::new(Cell::new(false));
    let (s, f) = (slot.clone(), fired.clone());
    let task = evloop::exec::spawn_on(&mut lp, async move {
        poll_fn(|cx| {
            if f.get() {
                Poll::Ready(())
            } else {
                *s.borrow_mut() = Some(cx.waker().clone());
                Poll::Pending
            }
        })
        .await;
        "woken"
    })
    .unwrap();
    let f = fired.clone();
    lp.timer(
        Duration::from_millis(5),
        Duration::ZERO,
        move |_, slot, _| {
            f.set(true);
            slot.borrow_mut().take().expect("the task waits").wake();
        },
    )
    .unwrap();
    let mut state = slot;
    let started = Instant::now();
    assert_eq!(
        lp.run(RunMode::Default, &mut state).unwrap(),
        RunOutcome::NoActiveWatchers
    );
    assert!(task.is_finished());
    assert!(started.elapsed() < Duration::from_secs(5));
}

/// Echoes one connection: reads to its end, writes each read back, then
/// half-closes.
async fn echo(conn: AsyncFd<TcpStream>) -> io::Result<usize> {
    let mut buf = vec![0u8; 16 * 1024];
    let mut total = 0;
    loop {
        match conn.read(&mut buf).await? {
            0 => break,
            n => {
                conn.write_all(&buf[..n]).await?;
                total += n;
            }
        }
    }
    conn.get_ref().shutdown(Shutdown::Write)?;
    Ok(total)
}

/// An async echo server on the listener the runtime preopened
/// (`wasmtime run -S tcplisten=ADDR`): `AsyncFd` over the listener and
/// the sockets accepted from it, one task each; it returns after
/// [`EXEC_ECHO_CONNECTIONS`] connections. Run by tests/wasi_echo.rs.
#[test]
#[ignore = "needs a preopened listener: tests/wasi_echo.rs runs it"]
fn exec_echo_on_the_preopened_listener() {
    let listener = evloop::backends::wasi::preopened_listeners()
        .unwrap()
        .into_iter()
        .next()
        .expect("a preopened listener (tests/wasi_echo.rs gives one)");
    let mut lp: Loop = Loop::new().unwrap();
    let echoed = block_on(&mut lp, &mut (), async move {
        let listener = AsyncFd::new(listener)?;
        let mut tasks = Vec::new();
        for _ in 0..EXEC_ECHO_CONNECTIONS {
            let (conn, _) = listener.accept().await?;
            tasks.push(spawn_local(echo(conn)).unwrap());
        }
        drop(listener);
        let mut echoed = 0;
        for t in tasks {
            echoed += t.await.unwrap()?;
        }
        Ok::<_, io::Error>(echoed)
    })
    .unwrap()
    .unwrap();
    println!("exec echo: {EXEC_ECHO_CONNECTIONS} connections, {echoed} bytes");
}
