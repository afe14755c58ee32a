//! `examples/http_server.rs` on tokio's `current_thread` runtime: the same
//! HTTP/1.1 keep-alive server, answering `GET /` with the same bytes, its
//! request heads parsed by the example's own `answer` (the example is
//! included by path), an 8 KiB head buffer and a 30 s idle timeout as the
//! example's `ConnOptions` have, a task per connection on a `LocalSet`.
//! `benches/completion.sh` measures it against the example on evloop's
//! backends.
//!
//! `http_tokio [ADDR]` (default 127.0.0.1:8080; port 0 takes a free one).
//! Prints `http on ADDR (tokio current_thread)` once it listens, and
//! serves until killed.

use std::io;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

// The example, for its request parsing and answers; its own `main` and
// evloop server are not used here.
#[allow(dead_code)]
#[path = "../../../../../examples/http_server.rs"]
mod http_server;

/// The largest request head taken (the example's `max_read_buffer`).
const HEAD_MAX: usize = 8192;
/// The example's `idle_timeout`.
const IDLE: Duration = Duration::from_secs(30);

async fn serve_conn(mut stream: TcpStream) -> io::Result<()> {
    let mut input = [0u8; HEAD_MAX];
    let mut len = 0;
    let mut out = Vec::new();
    loop {
        let n = match tokio::time::timeout(IDLE, stream.read(&mut input[len..])).await {
            Ok(read) => read?,
            Err(_) => return Ok(()), // idle
        };
        if n == 0 {
            return Ok(()); // answers already sent
        }
        len += n;
        // Every complete head in order, as the example's `on_event`.
        let mut used = 0;
        let mut close = false;
        while let Some(end) = http_server::find(&input[used..len], b"\r\n\r\n") {
            let (reply, last) = http_server::answer(&input[used..used + end]);
            used += end + 4;
            out.extend_from_slice(reply);
            if last {
                close = true;
                break;
            }
        }
        input.copy_within(used..len, 0);
        len -= used;
        if !close && len == HEAD_MAX {
            out.extend_from_slice(http_server::BAD); // a head larger than the buffer
            close = true;
        }
        if !out.is_empty() {
            stream.write_all(&out).await?;
            out.clear();
        }
        if close {
            return stream.shutdown().await;
        }
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    peers_bench::serve_local(
        "127.0.0.1:8080",
        |addr| format!("http on {addr} (tokio current_thread)"),
        serve_conn,
    )
}
