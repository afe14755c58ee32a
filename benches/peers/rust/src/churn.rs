//! Connection churn: what every churn server and the load client share
//! (the Rust twin of `../c/churn_common.c`; `../churn.sh` runs them).
//!
//! Per connection the server accepts (until `WouldBlock`), registers the
//! socket for reading, reads the request with one read when it is
//! readable, writes the reply with one write and closes. The client
//! connects, sends the request, reads the reply until end of file and
//! closes, `CONC` connections in flight. Each server measures its own CPU
//! time (`getrusage`, user + system) and wall time from the close of the
//! `WARMUP`-th connection to that of the `WARMUP + COUNT`-th, prints one
//! CSV line and exits; so the loop's setup and the first connections (page
//! faults, allocator growth) are left out.

// Each binary includes this file (`#[path]`) and uses part of it.
#![allow(dead_code)]

use std::time::Instant;

/// The request: read whole with one read.
pub const REQUEST: &[u8; 32] = b"GET /churn HTTP/1.0 ...........\n";
/// The reply: written whole with one write.
pub const REPLY: &[u8; 32] = b"HTTP/1.0 200 OK churn .........\n";
/// The server's read buffer (on its stack, or evloop::net's per
/// connection).
pub const READ_BUF: usize = 512;
/// The listen backlog of every server.
pub const BACKLOG: i32 = 1024;

/// The CSV header of the servers' line.
pub const HEADER: &str = "impl,conns,cpu_us,user_us,sys_us,wall_us";

/// `churn_<impl> PORT WARMUP COUNT`.
pub struct ServerArgs {
    pub port: u16,
    pub warmup: u64,
    pub count: u64,
}

impl ServerArgs {
    pub fn parse(name: &str) -> ServerArgs {
        let a: Vec<String> = std::env::args().skip(1).collect();
        let num = |i: usize| a.get(i).and_then(|s| s.parse::<u64>().ok());
        match (num(0), num(1), num(2)) {
            (Some(port), Some(warmup), Some(count)) if port < 65536 && count > 0 => ServerArgs {
                port: port as u16,
                warmup,
                count,
            },
            _ => {
                eprintln!("usage: churn_{name} PORT WARMUP COUNT");
                std::process::exit(2)
            }
        }
    }

    pub fn addr(&self) -> std::net::SocketAddr {
        std::net::SocketAddr::from(([127, 0, 0, 1], self.port))
    }
}

/// CPU time of the process so far, user and system, in µs.
fn cpu_us() -> (u64, u64) {
    // SAFETY: getrusage writes the struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let us = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    (us(ru.ru_utime), us(ru.ru_stime))
}

/// Counts the closed connections; snapshots the CPU and the wall clock at
/// the warm-up's end, and at the last one prints the line and exits.
pub struct Meter {
    name: &'static str,
    closed: u64,
    warmup: u64,
    end: u64,
    start: Option<((u64, u64), Instant)>,
}

impl Meter {
    pub fn new(name: &'static str, args: &ServerArgs) -> Meter {
        let mut m = Meter {
            name,
            closed: 0,
            warmup: args.warmup,
            end: args.warmup + args.count,
            start: None,
        };
        if m.warmup == 0 {
            m.start = Some((cpu_us(), Instant::now()));
        }
        m
    }

    /// One connection closed (call after its `close`).
    #[inline]
    pub fn closed(&mut self) {
        self.closed += 1;
        if self.closed == self.warmup {
            self.start = Some((cpu_us(), Instant::now()));
        } else if self.closed == self.end {
            self.report();
        }
    }

    #[cold]
    fn report(&self) -> ! {
        let ((u0, s0), t0) = self.start.expect("started");
        let wall = t0.elapsed().as_micros();
        let (u1, s1) = cpu_us();
        let (u, s) = (u1 - u0, s1 - s0);
        println!(
            "{},{},{},{},{},{}",
            self.name,
            self.end - self.warmup,
            u + s,
            u,
            s,
            wall
        );
        std::process::exit(0)
    }
}
