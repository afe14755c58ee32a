//! benches/net_load's `resp_server` on tokio's `current_thread` runtime:
//! the same RESP server (PING, SET, GET; anything else `+OK`; pipelined
//! commands answered in one write), its protocol side the very same file
//! (`benches/resp/resp.rs`, included by path), a 16 KiB read
//! buffer to start with as `ConnOptions`'s default, a task per connection
//! on a `LocalSet` sharing the keys through an `Rc<RefCell<..>>`.
//! `benches/completion.sh` measures it against `resp_server` on evloop's
//! backends.
//!
//! `resp_tokio [ADDR]` (default 127.0.0.1:6390; port 0 takes a free one).
//! Prints `resp_server on ADDR (tokio current_thread) pid PID` once it
//! listens, and serves until killed.

use std::cell::RefCell;
use std::io;
use std::rc::Rc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[path = "../../../../resp/resp.rs"]
mod resp;

/// The read buffer's first size (`ConnOptions`'s default); it grows when
/// a command does not fit.
const READ_BUFFER: usize = 16 * 1024;

async fn serve_conn(mut stream: TcpStream, db: Rc<RefCell<resp::Db>>) -> io::Result<()> {
    let mut input = Vec::with_capacity(READ_BUFFER);
    let mut out = Vec::new();
    loop {
        if input.len() == input.capacity() {
            input.reserve(input.capacity());
        }
        if stream.read_buf(&mut input).await? == 0 {
            return Ok(());
        }
        out.clear();
        let answered = resp::answer(&mut db.borrow_mut(), &input, &mut out);
        if !out.is_empty() {
            stream.write_all(&out).await?;
        }
        match answered {
            Ok(used) => drop(input.drain(..used)),
            Err(()) => return stream.shutdown().await, // a protocol error
        }
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let db = Rc::new(RefCell::new(resp::Db::new()));
    peers_bench::serve_local(
        "127.0.0.1:6390",
        |addr| {
            format!(
                "resp_server on {addr} (tokio current_thread) pid {}",
                std::process::id()
            )
        },
        move |stream| serve_conn(stream, db.clone()),
    )
}
