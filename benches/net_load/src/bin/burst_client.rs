//! A burst of clients connecting at once: `burst_client ADDR N [LIMIT_S]`.
//! N threads wait at a barrier, then each connects, sends `PING` and
//! reads `+PONG`, and notes how long the connect and the first reply
//! took. Prints the distribution, and every connection slower than 1 s;
//! a client not done after LIMIT_S seconds (default 120) counts as
//! stalled (the program ends anyway: each socket has that timeout).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let addr = args
        .get(1)
        .cloned()
        .unwrap_or_else(|| "127.0.0.1:6390".into());
    let n: usize = args.get(2).map_or(1000, |a| a.parse().unwrap());
    let limit = Duration::from_secs(args.get(3).map_or(120, |a| a.parse().unwrap()));
    let barrier = Arc::new(Barrier::new(n));
    let threads: Vec<_> = (0..n)
        .map(|_| {
            let (addr, barrier) = (addr.clone(), barrier.clone());
            std::thread::Builder::new()
                .stack_size(64 * 1024)
                .spawn(move || {
                    let sock = addr.parse().unwrap();
                    barrier.wait();
                    let began = Instant::now();
                    let mut s =
                        TcpStream::connect_timeout(&sock, limit).map_err(|e| e.to_string())?;
                    let connected = began.elapsed();
                    s.set_read_timeout(Some(limit)).unwrap();
                    s.write_all(b"*1\r\n$4\r\nPING\r\n")
                        .map_err(|e| e.to_string())?;
                    let mut reply = [0u8; 7];
                    s.read_exact(&mut reply).map_err(|e| e.to_string())?;
                    let replied = began.elapsed();
                    // Kept open until every client is done, as
                    // redis-benchmark's clients are.
                    Ok::<_, String>((connected, replied, s))
                })
                .unwrap()
        })
        .collect();
    let mut connects = Vec::new();
    let mut replies = Vec::new();
    let mut failed = Vec::new();
    let mut open = Vec::new();
    for t in threads {
        match t.join().unwrap() {
            Ok((c, r, s)) => {
                connects.push(c);
                replies.push(r);
                open.push(s);
            }
            Err(e) => failed.push(e),
        }
    }
    connects.sort();
    replies.sort();
    let pct = |v: &[Duration], p: usize| {
        v.get((v.len() * p / 100).min(v.len().saturating_sub(1)))
            .copied()
            .unwrap_or_default()
    };
    let slow = replies
        .iter()
        .filter(|d| **d > Duration::from_secs(1))
        .count();
    println!(
        "clients {n} ok {} failed {} | connect ms p50 {:.1} p99 {:.1} max {:.1} | first reply ms p50 {:.1} p99 {:.1} max {:.1} | over 1 s: {slow}",
        replies.len(),
        failed.len(),
        pct(&connects, 50).as_secs_f64() * 1e3,
        pct(&connects, 99).as_secs_f64() * 1e3,
        connects.last().copied().unwrap_or_default().as_secs_f64() * 1e3,
        pct(&replies, 50).as_secs_f64() * 1e3,
        pct(&replies, 99).as_secs_f64() * 1e3,
        replies.last().copied().unwrap_or_default().as_secs_f64() * 1e3,
    );
    for e in failed.iter().take(5) {
        println!("  failed: {e}");
    }
}
