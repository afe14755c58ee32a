//! A hello-world HTTP server made with hyper 1.x's own http1 server, on
//! evloop's executor (`evloop::exec::hyper`): one task per connection,
//! hyper's `header_read_timeout` (30 s) on the loop's timers, keep-alive.
//! Every request gets `200 OK` and `Hello, world!`.
//!
//! Run with: `cargo run --release --manifest-path
//! tests/hyper_suite/Cargo.toml --example hyper_server [PORT] [BACKEND]`
//! (PORT defaults to 8080, 0 takes a free one; BACKEND is one of
//! `evloop::backends::AVAILABLE`, by default `EVLOOP_BACKEND` or the
//! platform's), then `wrk -t2 -c64 -d10s http://127.0.0.1:PORT/`. It
//! prints `http on ADDR (backend NAME)` once it listens, and serves until
//! killed. `hyper_tokio.rs`, beside it, is the same server on tokio
//! (benches/hyper_wrk.sh measures both).

use std::convert::Infallible;
use std::io::Write;
use std::net::TcpListener;
use std::process::ExitCode;
use std::time::Duration;

use bytes::Bytes;
use evloop::exec::hyper::{HyperIo, HyperTimer};
use evloop::exec::{block_on, sleep, spawn_local, AsyncFd, Executor};
use evloop::Loop;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response};

async fn hello(_: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let mut res = Response::new(Full::new(Bytes::from_static(b"Hello, world!\n")));
    res.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/plain"),
    );
    Ok(res)
}

/// Accepts connections on `listener` for ever, each served by hyper in a
/// task of its own.
async fn serve(listener: AsyncFd<TcpListener>) {
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(HyperTimer::new());
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                let _ = stream.get_ref().set_nodelay(true);
                let conn = http.serve_connection(HyperIo::new(stream), service_fn(hello));
                let spawned = spawn_local(async move {
                    if let Err(e) = conn.await {
                        if !e.is_incomplete_message() {
                            eprintln!("connection: {e}");
                        }
                    }
                });
                if let Err(e) = spawned {
                    eprintln!("spawn: {e}");
                }
            }
            Err(e) => {
                // Out of fds, say: back off instead of spinning.
                eprintln!("accept: {e} (backing off)");
                sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let port: u16 = match args.next().as_deref().map(str::parse).unwrap_or(Ok(8080)) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("usage: hyper_server [PORT] [BACKEND]: bad port: {e}");
            return ExitCode::from(2);
        }
    };
    let mut builder = Loop::builder();
    if let Some(name) = args.next() {
        builder = builder.backend(&name);
    }
    let mut lp: Loop = match builder.build() {
        Ok(lp) => lp,
        Err(e) => {
            eprintln!("hyper_server: no loop: {e}");
            return ExitCode::FAILURE;
        }
    };
    let listener = match TcpListener::bind(("127.0.0.1", port)) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("hyper_server: cannot listen on port {port}: {e}");
            return ExitCode::FAILURE;
        }
    };
    let addr = listener
        .local_addr()
        .expect("a bound listener has an address");
    let listener = match Executor::of(&mut lp)
        .map_err(std::io::Error::other)
        .and_then(|ex| AsyncFd::with_executor(&ex, listener))
    {
        Ok(l) => l,
        Err(e) => {
            eprintln!("hyper_server: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("http on {addr} (backend {})", lp.backend_name());
    let _ = std::io::stdout().flush();
    match block_on(&mut lp, &mut (), serve(listener)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hyper_server: the loop failed: {e}");
            ExitCode::FAILURE
        }
    }
}
