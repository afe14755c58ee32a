//! The watchers beyond io, on every OS backend of the host, with loopback
//! TCP and temporary files only, so that the same file runs on Windows
//! (iocp and select, under Wine in CI) and on Unix (epoll, poll, select):
//! timers (repeat, never early), periodic, prepare / check / idle, once
//! (ready or timed out), stat (polling), cleanup, async senders from
//! another thread, and tasks (`evloop::exec`: loopback TCP, a sleep, a
//! wake from another thread). Signals (console events on Windows) and children have
//! their own tests per backend (`tests/windows_iocp.rs`,
//! `tests/windows_select.rs`; `tests/process_watchers.rs` on Unix).
//!
//! ```sh
//! cargo test --test portable_watchers                                 # Unix
//! cargo test --target x86_64-pc-windows-gnu --test portable_watchers  # Wine
//! ```

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime};

use evloop::exec::block_on;
use evloop::{
    Async, Check, Cleanup, Idle, Interest, Loop, Once, OnceEvent, Periodic, Prepare, Ready,
    RunMode, Schedule, Stat,
};

/// Runs `f` on its own thread; fails if it has not finished in time.
fn watchdog(what: &str, f: impl FnOnce() + Send + 'static) {
    // A WASI guest has one thread: tests/wasi/run.sh bounds its run.
    if cfg!(target_os = "wasi") {
        return f();
    }
    let (done, finished) = mpsc::channel();
    let t = std::thread::spawn(move || {
        f();
        let _ = done.send(());
    });
    match finished.recv_timeout(Duration::from_secs(60)) {
        Ok(()) | Err(mpsc::RecvTimeoutError::Disconnected) => {
            if let Err(p) = t.join() {
                std::panic::resume_unwind(p);
            }
        }
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("{what}: hangs or spins"),
    }
}

/// Each scenario on every OS backend of the host.
fn on_every_backend(what: &str, scenario: fn(&'static str)) {
    for name in evloop::backends::AVAILABLE {
        eprintln!("{what} on {name}");
        watchdog(&format!("{what} on {name}"), move || scenario(name));
    }
}

fn new_loop<'s, S>(backend: &str) -> Loop<'s, S> {
    Loop::builder().backend(backend).build().unwrap()
}

/// A connected loopback pair, non-blocking.
fn tcp_pair() -> (TcpStream, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (b, _) = l.accept().unwrap();
    a.set_nonblocking(true).unwrap();
    b.set_nonblocking(true).unwrap();
    (a, b)
}

#[test]
fn a_repeating_timer_fires_on_time_never_early() {
    on_every_backend("repeat timer", |backend| {
        // Before the loop: its timers count from its cached time, read
        // when it was made, so a real clock started after that (a thread
        // preempted in between) could see them fire "early".
        let start = Instant::now();
        let mut lp: Loop<Vec<Duration>> = new_loop(backend);
        let t0 = lp.now();
        lp.timer(
            Duration::from_millis(5),
            Duration::from_millis(5),
            |lp, at, me| {
                at.push(lp.now());
                if at.len() == 3 {
                    lp.remove(me).unwrap();
                }
            },
        )
        .unwrap();
        let mut at = Vec::new();
        lp.run(RunMode::Default, &mut at).unwrap();
        assert_eq!(at.len(), 3);
        for (i, t) in at.iter().enumerate() {
            assert!(
                *t - t0 >= Duration::from_millis(5 * (i as u64 + 1)),
                "{at:?}"
            );
        }
        assert!(start.elapsed() >= Duration::from_millis(15));
    });
}

#[test]
fn a_periodic_watcher_fires_on_its_wall_clock_schedule() {
    on_every_backend("periodic", |backend| {
        let mut lp: Loop<Vec<SystemTime>> = new_loop(backend);
        Periodic::new(
            &mut lp,
            Schedule::every(Duration::from_millis(10)),
            |lp, at, me| {
                at.push(lp.read_wall_clock());
                if at.len() == 2 {
                    lp.remove(me).unwrap();
                }
            },
        )
        .unwrap();
        let mut at = Vec::new();
        lp.run(RunMode::Default, &mut at).unwrap();
        assert_eq!(at.len(), 2);
        // Aligned to multiples of the interval: the second firing is in a
        // later interval than the first (however late either ran).
        let slot = |t: SystemTime| {
            t.duration_since(SystemTime::UNIX_EPOCH)
                .unwrap()
                .as_millis()
                / 10
        };
        assert!(slot(at[1]) > slot(at[0]), "{at:?}");
    });
}

#[test]
fn prepare_check_and_idle_run_in_their_phases() {
    on_every_backend("phases", |backend| {
        let mut lp: Loop<Vec<&'static str>> = new_loop(backend);
        Prepare::new(&mut lp, |lp, log, me| {
            log.push("prepare");
            lp.remove(me).unwrap();
        })
        .unwrap();
        Check::new(&mut lp, |lp, log, me| {
            log.push("check");
            lp.remove(me).unwrap();
        })
        .unwrap();
        Idle::new(&mut lp, |lp, log, me| {
            log.push("idle");
            lp.remove(me).unwrap();
        })
        .unwrap();
        let mut log = Vec::new();
        lp.run(RunMode::Default, &mut log).unwrap();
        // libev's order: prepare before the wait, check after it, idle
        // when nothing else is pending (the wait does not block with an
        // idle watcher active).
        assert_eq!(log, ["prepare", "check", "idle"]);
    });
}

#[test]
#[cfg_attr(
    target_os = "wasi",
    ignore = "a WASI guest cannot bind or connect a socket"
)]
fn once_is_ready_or_times_out() {
    on_every_backend("once", |backend| {
        let mut lp: Loop<Vec<String>> = new_loop(backend);
        let (a, mut b) = tcp_pair();
        Once::new(
            &mut lp,
            Some((a, Interest::READABLE)),
            Some(Duration::from_secs(30)),
            |_, log, ev| match ev {
                OnceEvent::Ready { ready, mut source } => {
                    assert!(ready.contains(Ready::READABLE));
                    let mut buf = [0u8; 8];
                    let n = source.read(&mut buf).unwrap();
                    log.push(format!("ready {}", String::from_utf8_lossy(&buf[..n])));
                }
                OnceEvent::TimedOut { .. } => log.push("timed out".into()),
            },
        )
        .unwrap();
        b.write_all(b"ping").unwrap();
        let (quiet, _peer) = tcp_pair();
        let t0 = lp.now();
        Once::new(
            &mut lp,
            Some((quiet, Interest::READABLE)),
            Some(Duration::from_millis(20)),
            move |lp, log, ev| {
                assert!(matches!(ev, OnceEvent::TimedOut { source: Some(_) }));
                assert!(lp.now() - t0 >= Duration::from_millis(20), "early");
                log.push("quiet timed out".into());
            },
        )
        .unwrap();
        let mut log = Vec::new();
        lp.run(RunMode::Default, &mut log).unwrap();
        assert_eq!(log, ["ready ping", "quiet timed out"]);
    });
}

#[test]
#[cfg_attr(
    target_os = "wasi",
    ignore = "a WASI guest has no filesystem without a preopened directory"
)]
fn a_stat_watcher_sees_a_file_change() {
    on_every_backend("stat", |backend| {
        let dir = std::env::temp_dir().join(format!(
            "evloop-windows-watchers-{}-{backend}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("watched");
        std::fs::write(&path, b"one").unwrap();
        let mut lp: Loop<Vec<u64>> = new_loop(backend);
        Stat::new(
            &mut lp,
            &path,
            Duration::from_millis(10),
            |lp, sizes, ev| {
                sizes.push(ev.current.size);
                lp.remove(ev.watcher).unwrap();
            },
        )
        .unwrap();
        let p = path.clone();
        lp.timer(Duration::from_millis(1), Duration::ZERO, move |_, _, _| {
            std::fs::write(&p, b"three").unwrap();
        })
        .unwrap();
        let mut sizes = Vec::new();
        lp.run(RunMode::Default, &mut sizes).unwrap();
        assert_eq!(sizes, [5]);
        let _ = std::fs::remove_dir_all(&dir);
    });
}

#[test]
fn cleanup_runs_when_the_loop_is_dropped() {
    on_every_backend("cleanup", |backend| {
        let (tx, rx) = mpsc::channel();
        let mut lp: Loop<()> = new_loop(backend);
        Cleanup::new(&mut lp, move |_| tx.send("cleaned").unwrap()).unwrap();
        lp.run(RunMode::NoWait, &mut ()).unwrap();
        assert!(rx.try_recv().is_err());
        drop(lp);
        assert_eq!(rx.try_recv(), Ok("cleaned"));
    });
}

#[test]
#[cfg_attr(target_os = "wasi", ignore = "a WASI guest has one thread")]
fn async_senders_wake_the_loop_from_other_threads() {
    on_every_backend("async", |backend| {
        let mut lp: Loop<u32> = new_loop(backend);
        let (_, sender) = Async::new(&mut lp, |lp, n, me| {
            *n += 1;
            lp.remove(me).unwrap();
        })
        .unwrap();
        let t = std::thread::spawn(move || sender.send().unwrap());
        let mut n = 0;
        lp.run(RunMode::Default, &mut n).unwrap();
        t.join().unwrap();
        assert_eq!(n, 1);
    });
}

/// A thread's value for a task: the waker crosses threads.
struct FromThread(std::sync::Arc<std::sync::Mutex<(Option<u32>, Option<std::task::Waker>)>>);

impl std::future::Future for FromThread {
    type Output = u32;
    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<u32> {
        let mut s = self.0.lock().unwrap();
        match s.0.take() {
            Some(v) => std::task::Poll::Ready(v),
            None => {
                s.1 = Some(cx.waker().clone());
                std::task::Poll::Pending
            }
        }
    }
}

#[test]
#[cfg_attr(
    target_os = "wasi",
    ignore = "a WASI guest cannot bind or connect a socket, and has one thread"
)]
fn tasks_serve_loopback_tcp_sleep_and_are_woken_from_other_threads() {
    use evloop::exec::{sleep, spawn_local, AsyncFd};
    on_every_backend("tasks", |backend| {
        let mut lp: Loop = new_loop(backend);
        let start = lp.now();
        let echoed = block_on(&mut lp, &mut (), async {
            let listener = AsyncFd::<TcpListener>::bind("127.0.0.1:0")?;
            let addr = listener.get_ref().local_addr()?;
            // The server: one connection, echoed until its end.
            let server = spawn_local(async move {
                let (conn, _) = listener.accept().await?;
                let mut buf = [0u8; 256];
                loop {
                    match conn.read(&mut buf).await? {
                        0 => return Ok::<_, std::io::Error>(()),
                        n => conn.write_all(&buf[..n]).await?,
                    }
                }
            })
            .unwrap();
            let client = AsyncFd::<TcpStream>::connect(addr).await?;
            client.write_all(b"over loopback").await?;
            let mut got = vec![];
            let mut buf = [0u8; 64];
            while got.len() < 13 {
                let n = client.read(&mut buf).await?;
                got.extend_from_slice(&buf[..n]);
            }
            client.get_ref().shutdown(std::net::Shutdown::Write)?;
            server.await.unwrap()?;
            sleep(Duration::from_millis(20)).await;
            Ok::<_, std::io::Error>(got)
        })
        .unwrap()
        .unwrap();
        assert_eq!(echoed, b"over loopback");
        assert!(lp.now() - start >= Duration::from_millis(20));
        // A value from another thread wakes the blocked loop.
        let shared = std::sync::Arc::new(std::sync::Mutex::new((None, None::<std::task::Waker>)));
        let theirs = shared.clone();
        let t = std::thread::spawn(move || {
            let waker = {
                let mut s = theirs.lock().unwrap();
                s.0 = Some(7);
                s.1.take()
            };
            if let Some(w) = waker {
                w.wake();
            }
        });
        let v = block_on(&mut lp, &mut (), FromThread(shared)).unwrap();
        t.join().unwrap();
        assert_eq!(v, 7);
        assert_eq!(lp.active_count(), 0, "{backend}");
    });
}
