//! hyper 1.x's own http1 server and client (and http2, through
//! `HyperExecutor`) on evloop's executor, over loopback, on every OS
//! backend of the build (epoll, poll, select; io_uring with `--features
//! io-uring`, kqueue over the emulation with `--features
//! emulated-kqueue`): many requests, sequential on one kept-alive
//! connection and concurrent on many, bodies of a few MB each way, a
//! server-side timeout through `HyperTimer`, a panicking handler; every
//! status and body checked. Then the simulator: hyper's server on a
//! `SimSocket`, scripted requests, the exact bytes answered and the
//! exact virtual times.
// What evloop's own integration tests share (tests/common/).
#[path = "../../common/mod.rs"]
mod common;

use std::cell::{Cell, RefCell};
use std::convert::Infallible;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{kernel_loop, on_backends, serve_one};
use evloop::exec::hyper::{HyperExecutor, HyperIo, HyperTimer};
use evloop::exec::{block_on, sleep, spawn_local, timeout, AsyncFd, JoinHandle};
use evloop::{Loop, Sim};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};

type Body = Full<Bytes>;

/// The backends of this build (kernel ones: loopback TCP).
fn kernels() -> &'static [&'static str] {
    evloop::backends::AVAILABLE
}

/// `n` bytes of a pattern that a shifted or truncated copy does not
/// match.
fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| {
            (i as u32)
                .wrapping_mul(2_654_435_761)
                .rotate_left(seed as u32 % 32) as u8
        })
        .collect()
}

fn query(req: &Request<Incoming>, key: &str) -> Option<usize> {
    req.uri().query()?.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        (k == key).then(|| v.parse().ok())?
    })
}

/// The test server's routes.
async fn handle(req: Request<Incoming>) -> Result<Response<Body>, Infallible> {
    let path = req.uri().path().to_string();
    let res = match path.as_str() {
        "/hello" => Response::new(Full::new(Bytes::from_static(b"hello"))),
        // The request's number back (a client checks it got its own).
        "/n" => Response::new(Full::new(Bytes::from(
            query(&req, "n").unwrap().to_string(),
        ))),
        // Answers after a sleep on the loop's timers (requests overlap).
        "/sleep" => {
            let ms = query(&req, "ms").unwrap() as u64;
            sleep(Duration::from_millis(ms)).await;
            Response::new(Full::new(Bytes::from(format!("slept {ms}"))))
        }
        "/echo" => {
            let body = req.into_body().collect().await.unwrap().to_bytes();
            Response::new(Full::new(body))
        }
        "/big" => {
            let n = query(&req, "n").unwrap();
            Response::new(Full::new(Bytes::from(pattern(n, 7))))
        }
        "/panic" => panic!("the handler panics"),
        _ => {
            let mut res = Response::new(Full::new(Bytes::from_static(b"no such page")));
            *res.status_mut() = StatusCode::NOT_FOUND;
            res
        }
    };
    Ok(res)
}

/// What the server task shares with the test.
#[derive(Default)]
struct Served {
    accepted: Cell<usize>,
    connections: RefCell<Vec<JoinHandle<Result<(), hyper::Error>>>>,
}

/// Starts hyper's http1 server on loopback in a task of the current
/// executor: one task per connection, configured by `config`.
fn start_server(config: fn(&mut hyper::server::conn::http1::Builder)) -> (SocketAddr, Rc<Served>) {
    let listener = AsyncFd::<TcpListener>::bind("127.0.0.1:0").unwrap();
    let addr = listener.get_ref().local_addr().unwrap();
    let served = Rc::new(Served::default());
    let s = served.clone();
    spawn_local(async move {
        let mut builder = hyper::server::conn::http1::Builder::new();
        builder.timer(HyperTimer::new());
        config(&mut builder);
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            s.accepted.set(s.accepted.get() + 1);
            let conn = builder.serve_connection(HyperIo::new(stream), service_fn(handle));
            s.connections.borrow_mut().push(spawn_local(conn).unwrap());
        }
    })
    .unwrap();
    (addr, served)
}

type Sender = hyper::client::conn::http1::SendRequest<Body>;

/// hyper's http1 client on a new connection; its connection future runs
/// in a task of its own.
async fn connect(addr: SocketAddr) -> Sender {
    let stream = AsyncFd::<TcpStream>::connect(addr).await.unwrap();
    let (sender, conn) = hyper::client::conn::http1::handshake(HyperIo::new(stream))
        .await
        .unwrap();
    spawn_local(async move {
        let _ = conn.await;
    })
    .unwrap();
    sender
}

fn get(path: &str) -> Request<Body> {
    Request::get(path)
        .header("host", "evloop.test")
        .body(Full::new(Bytes::new()))
        .unwrap()
}

/// Sends `req`, checks the status, gives the body.
async fn fetch(sender: &mut Sender, req: Request<Body>, status: StatusCode) -> Bytes {
    sender.ready().await.unwrap();
    let res = sender.send_request(req).await.unwrap();
    assert_eq!(res.status(), status);
    res.into_body().collect().await.unwrap().to_bytes()
}

#[test]
fn sequential_requests_on_one_kept_alive_connection() {
    on_backends("hyper sequential", kernels(), |backend| {
        let mut lp = kernel_loop(backend);
        let served = block_on(&mut lp, &mut (), async {
            let (addr, served) = start_server(|_| {});
            let mut sender = connect(addr).await;
            for n in 0..300 {
                let body = fetch(&mut sender, get(&format!("/n?n={n}")), StatusCode::OK).await;
                assert_eq!(body, n.to_string());
            }
            let body = fetch(&mut sender, get("/missing"), StatusCode::NOT_FOUND).await;
            assert_eq!(&body[..], b"no such page");
            served
        })
        .unwrap();
        assert_eq!(served.accepted.get(), 1, "{backend}: keep-alive");
    });
}

#[test]
fn concurrent_connections_and_overlapping_requests() {
    on_backends("hyper concurrent", kernels(), |backend| {
        let mut lp = kernel_loop(backend);
        let served = block_on(&mut lp, &mut (), async {
            let (addr, served) = start_server(|_| {});
            let clients: Vec<_> = (0..24)
                .map(|c| {
                    spawn_local(async move {
                        let mut sender = connect(addr).await;
                        for i in 0..20 {
                            let n = c * 1000 + i;
                            let body =
                                fetch(&mut sender, get(&format!("/n?n={n}")), StatusCode::OK).await;
                            assert_eq!(body, n.to_string());
                        }
                        // Requests that wait on the server's timers,
                        // overlapping across the connections.
                        let ms = 5 + c % 7;
                        let body =
                            fetch(&mut sender, get(&format!("/sleep?ms={ms}")), StatusCode::OK)
                                .await;
                        assert_eq!(body, format!("slept {ms}"));
                        20
                    })
                    .unwrap()
                })
                .collect();
            let mut done = 0;
            for c in clients {
                done += c.await.unwrap();
            }
            assert_eq!(done, 24 * 20);
            served
        })
        .unwrap();
        assert_eq!(served.accepted.get(), 24);
    });
}

#[test]
fn bodies_of_megabytes_both_ways() {
    on_backends("hyper large bodies", kernels(), |backend| {
        let mut lp = kernel_loop(backend);
        block_on(&mut lp, &mut (), async {
            let (addr, _) = start_server(|_| {});
            let mut sender = connect(addr).await;
            for (i, size) in [3 << 20, 5 << 20].into_iter().enumerate() {
                let up = pattern(size, i as u8);
                let req = Request::post("/echo")
                    .header("host", "evloop.test")
                    .body(Full::new(Bytes::from(up.clone())))
                    .unwrap();
                let back = fetch(&mut sender, req, StatusCode::OK).await;
                assert_eq!(back.len(), size);
                assert!(back == up, "{backend}: the echoed body differs");
                let down = fetch(&mut sender, get(&format!("/big?n={size}")), StatusCode::OK).await;
                assert!(
                    down == pattern(size, 7),
                    "{backend}: the downloaded body differs"
                );
            }
        })
        .unwrap();
    });
}

#[test]
fn header_read_timeout_through_the_timer() {
    on_backends("hyper header_read_timeout", kernels(), |backend| {
        let mut lp = kernel_loop(backend);
        let (closed_after, served) = block_on(&mut lp, &mut (), async {
            let (addr, served) = start_server(|b| {
                b.header_read_timeout(Duration::from_millis(150));
            });
            // A raw client that sends half a request head and waits.
            let raw = AsyncFd::<TcpStream>::connect(addr).await.unwrap();
            let start = Instant::now();
            raw.write_all(b"GET /hello HTTP/1.1\r\nhost: evloop.test\r\n")
                .await
                .unwrap();
            let mut buf = [0u8; 256];
            let n = timeout(Duration::from_secs(10), raw.read(&mut buf))
                .await
                .expect("the server closes the connection")
                .unwrap_or(0);
            // hyper closes without an answer (nothing, or a 408).
            let head = String::from_utf8_lossy(&buf[..n]).to_string();
            assert!(n == 0 || head.starts_with("HTTP/1.1 408"), "{head}");
            // Meanwhile a well-behaved client is served.
            let mut sender = connect(addr).await;
            assert_eq!(
                &fetch(&mut sender, get("/hello"), StatusCode::OK).await[..],
                b"hello"
            );
            (start.elapsed(), served)
        })
        .unwrap();
        assert!(
            // Not at once, and not never: the timer starts when the
            // server first polls the connection, a little before `start`.
            closed_after >= Duration::from_millis(100) && closed_after < Duration::from_secs(5),
            "{backend}: closed after {closed_after:?}"
        );
        let first = served.connections.borrow_mut().remove(0);
        let err = block_on(&mut lp, &mut (), first)
            .unwrap()
            .unwrap()
            .unwrap_err();
        assert!(err.is_timeout(), "{backend}: {err}");
    });
}

#[test]
fn a_panicking_handler_leaves_the_server_serving() {
    on_backends("hyper panicking handler", kernels(), |backend| {
        let mut lp = kernel_loop(backend);
        let served = block_on(&mut lp, &mut (), async {
            let (addr, served) = start_server(|_| {});
            // A connection made before the panic, used after it.
            let mut before = connect(addr).await;
            assert_eq!(
                &fetch(&mut before, get("/hello"), StatusCode::OK).await[..],
                b"hello"
            );
            for _ in 0..3 {
                let mut doomed = connect(addr).await;
                doomed.ready().await.unwrap();
                // The connection's task panics: the client sees its
                // connection closed, with no answer.
                let err = doomed.send_request(get("/panic")).await.unwrap_err();
                assert!(err.is_incomplete_message() || err.is_canceled(), "{err}");
            }
            assert_eq!(
                &fetch(&mut before, get("/hello"), StatusCode::OK).await[..],
                b"hello"
            );
            let mut after = connect(addr).await;
            for n in 0..10 {
                let body = fetch(&mut after, get(&format!("/n?n={n}")), StatusCode::OK).await;
                assert_eq!(body, n.to_string());
            }
            served
        })
        .unwrap();
        assert_eq!(served.accepted.get(), 5);
        let conns: Vec<_> = served.connections.borrow_mut().drain(..).collect();
        let mut panics = 0;
        for (i, c) in conns.into_iter().enumerate() {
            if (1..=3).contains(&i) {
                let err = block_on(&mut lp, &mut (), c).unwrap().unwrap_err();
                assert_eq!(err.to_string(), "the task panicked: the handler panics");
                panics += 1;
            } else {
                assert!(!c.is_finished(), "{backend}: connection {i} still open");
            }
        }
        assert_eq!(panics, 3);
    });
}

#[test]
fn http2_streams_through_the_executor() {
    on_backends("hyper http2", kernels(), |backend| {
        let mut lp = kernel_loop(backend);
        block_on(&mut lp, &mut (), async {
            let (addr, _) = serve_one(|stream| async move {
                // Each stream is a task of the loop's executor (!Send:
                // the handler holds an Rc).
                let calls = Rc::new(Cell::new(0));
                let service = service_fn(move |req| {
                    let calls = calls.clone();
                    async move {
                        calls.set(calls.get() + 1);
                        handle(req).await
                    }
                });
                hyper::server::conn::http2::Builder::new(HyperExecutor::new())
                    .timer(HyperTimer::new())
                    .serve_connection(HyperIo::new(stream), service)
                    .await
                    .unwrap();
            });
            let stream = AsyncFd::<TcpStream>::connect(addr).await.unwrap();
            let (sender, conn) = hyper::client::conn::http2::Builder::new(HyperExecutor::new())
                .timer(HyperTimer::new())
                .handshake::<_, Body>(HyperIo::new(stream))
                .await
                .unwrap();
            spawn_local(async move {
                let _ = conn.await;
            })
            .unwrap();
            // Many streams at once on one connection.
            let requests: Vec<_> = (0..50)
                .map(|n| {
                    let mut sender = sender.clone();
                    spawn_local(async move {
                        let path = if n % 5 == 0 {
                            format!("http://evloop.test/sleep?ms={}", n % 3 + 1)
                        } else {
                            format!("http://evloop.test/n?n={n}")
                        };
                        sender.ready().await.unwrap();
                        let res = sender
                            .send_request(Request::get(path).body(Full::new(Bytes::new())).unwrap())
                            .await
                            .unwrap();
                        assert_eq!(res.status(), StatusCode::OK);
                        let body = res.into_body().collect().await.unwrap().to_bytes();
                        let want = if n % 5 == 0 {
                            format!("slept {}", n % 3 + 1)
                        } else {
                            n.to_string()
                        };
                        assert_eq!(body, want);
                    })
                    .unwrap()
                })
                .collect();
            for r in requests {
                r.await.unwrap();
            }
        })
        .unwrap();
    });
}

// ----- the simulator: exact bytes, exact virtual times ------------------

const HELLO: &[u8] = b"GET /hello HTTP/1.1\r\nhost: sim\r\n\r\n";

/// hyper's server on a simulated socket: scripted requests, the answer's
/// exact bytes, and when each answer was made in virtual time.
#[test]
fn simulated_server_answers_exact_bytes_at_exact_times() {
    common::watchdog("hyper on the simulator", common::WATCHDOG, || {
        let sim = Sim::new();
        let sock = sim.socket("client", 1 << 16);
        let fd = sock.fd();
        // Two requests, the second with a body, then the client hangs up.
        sim.deliver(Duration::from_millis(10), &sock, HELLO);
        sim.deliver(
            Duration::from_millis(30),
            &sock,
            b"POST /echo HTTP/1.1\r\nhost: sim\r\ncontent-length: 3\r\n\r\nabc",
        );
        sim.close_peer(Duration::from_millis(50), &sock);
        let answered = Rc::new(RefCell::new(Vec::new()));
        let log = answered.clone();
        let clock = sim.clone();
        let mut lp: Loop = Loop::with_backend(sim.backend());
        let served = block_on(&mut lp, &mut (), async move {
            let service = service_fn(move |req: Request<Incoming>| {
                let log = log.clone();
                let clock = clock.clone();
                async move {
                    // Each answer takes 5 ms of the loop's timers.
                    sleep(Duration::from_millis(5)).await;
                    log.borrow_mut().push(clock.now());
                    handle(req).await
                }
            });
            hyper::server::conn::http1::Builder::new()
                .timer(HyperTimer::new())
                .auto_date_header(false)
                .serve_connection(HyperIo::new(AsyncFd::new(sock).unwrap()), service)
                .await
        })
        .unwrap();
        served.unwrap();
        assert_eq!(
            String::from_utf8(sim.sent(fd)).unwrap(),
            "HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello\
             HTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\nabc"
        );
        assert_eq!(
            *answered.borrow(),
            [Duration::from_millis(15), Duration::from_millis(35)]
        );
        // The server saw the hang-up when it came, and ended then.
        assert_eq!(lp.now(), Duration::from_millis(50));
        assert_eq!(lp.active_count(), 0);
    });
}

/// hyper's `header_read_timeout` through `HyperTimer` on virtual time:
/// the deadline hyper computes from the timer's `now` lands exactly.
#[test]
fn simulated_header_read_timeout_fires_at_its_exact_virtual_time() {
    common::watchdog("hyper timeout on the simulator", common::WATCHDOG, || {
        let sim = Sim::new();
        let sock = sim.socket("slow client", 1 << 16);
        let fd = sock.fd();
        // The first request whole; the second's head never ends.
        sim.deliver(Duration::from_millis(10), &sock, HELLO);
        sim.deliver(
            Duration::from_millis(400),
            &sock,
            b"GET /hello HTTP/1.1\r\n",
        );
        let mut lp: Loop = Loop::with_backend(sim.backend());
        let served = block_on(&mut lp, &mut (), async move {
            hyper::server::conn::http1::Builder::new()
                .timer(HyperTimer::new())
                .auto_date_header(false)
                .header_read_timeout(Duration::from_secs(2))
                .serve_connection(
                    HyperIo::new(AsyncFd::new(sock).unwrap()),
                    service_fn(handle),
                )
                .await
        })
        .unwrap();
        assert!(served.unwrap_err().is_timeout());
        assert_eq!(
            sim.sent(fd),
            b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello"
        );
        // The timer for the second head started when the first answer was
        // written (10 ms): it fires 2 s later, to the nanosecond.
        assert_eq!(lp.now(), Duration::from_millis(2010));
        assert_eq!(lp.active_count(), 0);
    });
}

/// A raw HTTP/1.0 exchange (no hyper client): the server's answer and
/// its closing of the connection, read with std's blocking socket from
/// another thread.
#[test]
fn a_plain_client_thread_is_answered_and_closed() {
    on_backends("hyper and a blocking client", kernels(), |backend| {
        let mut lp = kernel_loop(backend);
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let client = std::thread::spawn(move || {
            let mut s = TcpStream::connect(addr).unwrap();
            s.write_all(b"GET /hello HTTP/1.0\r\n\r\n").unwrap();
            let mut all = Vec::new();
            s.read_to_end(&mut all).unwrap();
            String::from_utf8(all).unwrap()
        });
        block_on(&mut lp, &mut (), async move {
            let listener = AsyncFd::new(listener).unwrap();
            let (stream, _) = listener.accept().await.unwrap();
            hyper::server::conn::http1::Builder::new()
                .auto_date_header(false)
                .serve_connection(HyperIo::new(stream), service_fn(handle))
                .await
                .unwrap();
        })
        .unwrap();
        let answer = client.join().unwrap();
        assert_eq!(answer, "HTTP/1.0 200 OK\r\ncontent-length: 5\r\n\r\nhello");
    });
}

/// `evloop::exec::hyper`'s module example, verbatim (its doc block is
/// `ignore`: evloop's own tests have no hyper server or client).
#[test]
fn the_module_example_serves_hello() {
    use evloop::exec::hyper::{HyperIo, HyperTimer};
    use evloop::exec::{spawn_local, AsyncFd};
    use evloop::Loop;
    use http_body_util::{BodyExt, Full};
    use hyper::body::{Bytes, Incoming};
    use hyper::{service::service_fn, Request, Response};
    use std::convert::Infallible;
    use std::net::{TcpListener, TcpStream};

    async fn hello(_: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
        Ok(Response::new(Full::new(Bytes::from("hello"))))
    }

    let mut lp: Loop = Loop::new().unwrap();
    let body = block_on(&mut lp, &mut (), async {
        // The server: one task per connection.
        let listener = AsyncFd::<TcpListener>::bind("127.0.0.1:0")?;
        let addr = listener.get_ref().local_addr()?;
        spawn_local(async move {
            let (stream, _) = listener.accept().await.unwrap();
            hyper::server::conn::http1::Builder::new()
                .timer(HyperTimer::new())
                .serve_connection(HyperIo::new(stream), service_fn(hello))
                .await
                .unwrap();
        })
        .unwrap();
        // The client: its connection in a task of its own.
        let stream = AsyncFd::<TcpStream>::connect(addr).await?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(HyperIo::new(stream))
            .await
            .unwrap();
        spawn_local(conn).unwrap();
        let req = Request::get("/")
            .body(http_body_util::Empty::<Bytes>::new())
            .unwrap();
        let res = sender.send_request(req).await.unwrap();
        assert_eq!(res.status(), 200);
        Ok::<_, std::io::Error>(res.into_body().collect().await.unwrap().to_bytes())
    })
    .unwrap()
    .unwrap();
    assert_eq!(&body[..], b"hello");
}
