//! The hello-world server of `hyper_server.rs` (beside it) on tokio's
//! `current_thread` runtime instead of evloop (hyper-util's `TokioIo` and
//! `TokioTimer`, `tokio::spawn` per connection): the same hyper, the same
//! answer, one thread. `benches/hyper_wrk.sh` runs both under wrk to
//! compare requests/s and CPU per request.
//!
//! Run with: `cargo run --release --manifest-path
//! tests/hyper_suite/Cargo.toml --example hyper_tokio [PORT]` (PORT
//! defaults to 8080, 0 takes a free one). It prints `http on ADDR
//! (tokio current_thread)` once it listens, and serves until killed.

use std::convert::Infallible;
use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::{TokioIo, TokioTimer};

async fn hello(_: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let mut res = Response::new(Full::new(Bytes::from_static(b"Hello, world!\n")));
    res.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/plain"),
    );
    Ok(res)
}

async fn serve(listener: tokio::net::TcpListener) {
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new());
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                let _ = stream.set_nodelay(true);
                let conn = http.serve_connection(TokioIo::new(stream), service_fn(hello));
                tokio::spawn(async move {
                    if let Err(e) = conn.await {
                        if !e.is_incomplete_message() {
                            eprintln!("connection: {e}");
                        }
                    }
                });
            }
            Err(e) => {
                eprintln!("accept: {e} (backing off)");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

fn main() -> ExitCode {
    let port: u16 = match std::env::args()
        .nth(1)
        .as_deref()
        .map(str::parse)
        .unwrap_or(Ok(8080))
    {
        Ok(p) => p,
        Err(e) => {
            eprintln!("usage: hyper_tokio [PORT]: bad port: {e}");
            return ExitCode::from(2);
        }
    };
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("hyper_tokio: no runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    rt.block_on(async {
        let listener = match tokio::net::TcpListener::bind(("127.0.0.1", port)).await {
            Ok(l) => l,
            Err(e) => {
                eprintln!("hyper_tokio: cannot listen on port {port}: {e}");
                return ExitCode::FAILURE;
            }
        };
        let addr = listener
            .local_addr()
            .expect("a bound listener has an address");
        println!("http on {addr} (tokio current_thread)");
        let _ = std::io::stdout().flush();
        serve(listener).await;
        ExitCode::SUCCESS
    })
}
