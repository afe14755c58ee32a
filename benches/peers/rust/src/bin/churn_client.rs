//! The load client of the connection-churn benchmark (`../../churn.sh`):
//! `TOTAL` connections to 127.0.0.1:`PORT`, `CONC` in flight (one blocking
//! thread each); each connects, sends the request, reads the reply until
//! end of file, checks it and closes. Prints the wall time and the rate;
//! exits non-zero if any reply was wrong or a connection failed.
//!
//!     churn_client PORT TOTAL CONC

#[path = "../churn.rs"]
mod churn;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

static NEXT: AtomicU64 = AtomicU64::new(0);
static FAILED: AtomicU64 = AtomicU64::new(0);

/// Connects, retrying for 10 s while the server is not listening yet.
fn connect(addr: std::net::SocketAddr) -> std::io::Result<TcpStream> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match TcpStream::connect(addr) {
            Err(e)
                if e.kind() == std::io::ErrorKind::ConnectionRefused
                    && Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(5))
            }
            r => return r,
        }
    }
}

fn one(addr: std::net::SocketAddr, reply: &mut Vec<u8>) -> std::io::Result<()> {
    let mut s = connect(addr)?;
    s.write_all(churn::REQUEST)?;
    reply.clear();
    s.read_to_end(reply)?;
    if reply.as_slice() != churn::REPLY {
        return Err(std::io::Error::other(format!(
            "bad reply {:?}",
            String::from_utf8_lossy(reply)
        )));
    }
    Ok(())
}

fn main() {
    let a: Vec<u64> = std::env::args()
        .skip(1)
        .filter_map(|s| s.parse().ok())
        .collect();
    let [port, total, conc] = a[..] else {
        eprintln!("usage: churn_client PORT TOTAL CONC");
        std::process::exit(2)
    };
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port as u16));
    // The first connection alone: it waits for the server to listen.
    let mut reply = Vec::with_capacity(64);
    if total > 0 {
        NEXT.store(1, Ordering::Relaxed);
        if let Err(e) = one(addr, &mut reply) {
            eprintln!("churn_client: {e}");
            std::process::exit(1)
        }
    }
    let t0 = Instant::now();
    let threads: Vec<_> = (0..conc.max(1))
        .map(|_| {
            std::thread::spawn(move || {
                let mut reply = Vec::with_capacity(64);
                while NEXT.fetch_add(1, Ordering::Relaxed) < total {
                    if let Err(e) = one(addr, &mut reply) {
                        if FAILED.fetch_add(1, Ordering::Relaxed) < 5 {
                            eprintln!("churn_client: {e}");
                        }
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("client thread");
    }
    let secs = t0.elapsed().as_secs_f64();
    let failed = FAILED.load(Ordering::Relaxed);
    println!(
        "client: {total} connections, {conc} in flight, {secs:.3} s, {:.0} conn/s, {failed} failed",
        total as f64 / secs
    );
    if failed > 0 {
        std::process::exit(1)
    }
}
