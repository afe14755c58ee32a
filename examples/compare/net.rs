//! `churn` and `http`: examples/http_server.rs's server (evloop::net: the
//! acceptor, buffered connections) on one backend on a thread of its own,
//! and clients on others. `churn`: a connection per request (accept,
//! register, read the request, reply, close), CPU per connection;
//! `http`: keep-alive connections under a load generator (wrk if on the
//! PATH, else client threads of this program), requests per second and
//! latency.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use evloop::net::{Conns, ListenOptions};
use evloop::{Async, AsyncSender, Break, Builder, Loop, RunMode};

use crate::harness::{Metric, Workload};
use crate::http_server::serve;

/// The CPU time of the calling thread (user and system), where the
/// platform tells it without `unsafe`: Linux's schedstat, in ns.
fn thread_cpu() -> Option<Duration> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let ns = text.split_whitespace().next()?.parse().ok()?;
    Some(Duration::from_nanos(ns))
}

/// The server's own cost: its thread's CPU time where known, else the
/// wall time of its run.
fn cost_unit() -> (&'static str, &'static str) {
    if thread_cpu().is_some() {
        ("server CPU", "µs CPU")
    } else {
        ("server wall time", "µs wall")
    }
}

/// The HTTP server on a thread of its own, on one backend.
struct Server {
    addr: SocketAddr,
    stop: AsyncSender,
    /// Its thread's CPU time (or wall time) over the run.
    thread: JoinHandle<Result<Duration, String>>,
}

impl Server {
    fn start(builder: &Builder, backend: &str) -> Result<Server, String> {
        let builder = builder.clone().backend(backend);
        let (tx, rx) = mpsc::channel();
        let thread = std::thread::spawn(move || -> Result<Duration, String> {
            let ready = (|| -> Result<_, String> {
                let mut lp: Loop<Conns<()>> = builder.build().map_err(|e| e.to_string())?;
                let listener = ListenOptions::new()
                    .backlog(4096)
                    .bind(SocketAddr::from(([127, 0, 0, 1], 0)))
                    .map_err(|e| e.to_string())?;
                let acceptor = serve(&mut lp, listener).map_err(|e| e.to_string())?;
                let (_, stop) = Async::new(&mut lp, |lp, _, _| lp.break_loop(Break::All))
                    .map_err(|e| e.to_string())?;
                Ok((lp, acceptor, stop))
            })();
            let (mut lp, acceptor, stop) = match ready {
                Ok(r) => r,
                Err(e) => {
                    let _ = tx.send(Err(e.clone()));
                    return Err(e);
                }
            };
            let _ = tx.send(Ok((acceptor.local_addr(), stop)));
            let (cpu, wall) = (thread_cpu(), Instant::now());
            lp.run(RunMode::Default, &mut Conns::new())
                .map_err(|e| e.to_string())?;
            Ok(match (cpu, thread_cpu()) {
                (Some(a), Some(b)) => b - a,
                _ => wall.elapsed(),
            })
        });
        match rx.recv() {
            Ok(Ok((addr, stop))) => Ok(Server { addr, stop, thread }),
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(e)
            }
            Err(_) => Err("the server thread panicked".into()),
        }
    }

    /// Stops the loop; its cost over the run.
    fn finish(self) -> Result<Duration, String> {
        self.stop.send().map_err(|e| e.to_string())?;
        self.thread
            .join()
            .map_err(|_| "the server thread panicked".to_string())?
    }
}

/// The answer to `GET /` ends with its 14-byte body.
const BODY_END: &[u8] = b"Hello, world!\n";

/// Reads one reply (`Connection: close`: up to the end of the stream).
fn one_connection(addr: SocketAddr) -> Result<(), String> {
    let mut s = TcpStream::connect(addr).map_err(|e| format!("connect: {e}"))?;
    s.write_all(b"GET / HTTP/1.1\r\nHost: compare\r\nConnection: close\r\n\r\n")
        .map_err(|e| format!("write: {e}"))?;
    let mut reply = Vec::with_capacity(128);
    s.read_to_end(&mut reply)
        .map_err(|e| format!("read: {e}"))?;
    if !reply.starts_with(b"HTTP/1.1 200") {
        return Err(format!("reply {:?}", String::from_utf8_lossy(&reply)));
    }
    Ok(())
}

pub struct Churn {
    /// Connections per round.
    pub connections: usize,
    /// Client threads (each connects in turn).
    pub clients: usize,
}

impl Churn {
    fn measure(&self, builder: &Builder, backend: &str) -> Result<(f64, f64), String> {
        let server = Server::start(builder, backend)?;
        let addr = server.addr;
        let per = self.connections.div_ceil(self.clients);
        let start = Instant::now();
        let clients: Vec<_> = (0..self.clients)
            .map(|_| std::thread::spawn(move || (0..per).try_for_each(|_| one_connection(addr))))
            .collect();
        let results: Vec<_> = clients.into_iter().map(|c| c.join()).collect();
        let wall = start.elapsed();
        let cost = server.finish()?;
        for r in results {
            r.map_err(|_| "a client thread panicked".to_string())??;
        }
        let n = (per * self.clients) as f64;
        Ok((cost.as_nanos() as f64 / 1e3 / n, n / wall.as_secs_f64()))
    }
}

impl Workload for Churn {
    fn name(&self) -> &'static str {
        "churn"
    }

    fn describe(&self) -> String {
        format!(
            "{} connections per round from {} client threads, each: connect, one request \
             (Connection: close), the reply, closed by the server (examples/http_server.rs \
             on evloop::net, one loop on its own thread)",
            self.connections, self.clients
        )
    }

    fn metrics(&self) -> Vec<Metric> {
        let (what, unit) = cost_unit();
        vec![
            Metric::lower(format!("churn, {what} per connection"), unit),
            Metric::higher("churn, connections per second", "conn/s"),
        ]
    }

    fn run(&mut self, builder: &Builder, backend: &str) -> Vec<Result<f64, String>> {
        match self.measure(builder, backend) {
            Ok((c, r)) => vec![Ok(c), Ok(r)],
            Err(e) => vec![Err(e.clone()), Err(e)],
        }
    }
}

/// Which load generator `http` uses.
#[derive(Clone, Copy, PartialEq, Debug)]
pub enum Load {
    Wrk,
    Builtin,
}

impl Load {
    /// wrk where it is on the PATH, else the built-in one.
    pub fn detect() -> Load {
        let found = std::env::var_os("PATH")
            .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join("wrk").is_file()));
        if found {
            Load::Wrk
        } else {
            Load::Builtin
        }
    }
}

pub struct Http {
    pub load: Load,
    /// Keep-alive connections.
    pub connections: usize,
    /// Load generator threads.
    pub threads: usize,
    pub duration: Duration,
}

/// What one load run gives: requests served, in how many seconds, and
/// the p99 latency.
struct Served {
    requests: f64,
    seconds: f64,
    p99_ms: f64,
}

/// wrk's latency value ("812.00us", "1.23ms", "2.01s") in ms.
fn wrk_ms(v: &str) -> Option<f64> {
    let (n, scale) = if let Some(n) = v.strip_suffix("us") {
        (n, 1e-3)
    } else if let Some(n) = v.strip_suffix("ms") {
        (n, 1.0)
    } else if let Some(n) = v.strip_suffix('s') {
        (n, 1e3)
    } else {
        return None;
    };
    Some(n.parse::<f64>().ok()? * scale)
}

impl Http {
    fn wrk(&self, addr: SocketAddr) -> Result<Served, String> {
        let out = std::process::Command::new("wrk")
            .arg(format!("-t{}", self.threads))
            .arg(format!("-c{}", self.connections.max(self.threads)))
            .arg(format!("-d{}s", self.duration.as_secs().max(1)))
            .arg("--latency")
            .arg(format!("http://{addr}/"))
            .output()
            .map_err(|e| format!("wrk: {e}"))?;
        let text = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            return Err(format!("wrk failed: {}", text.trim()));
        }
        for bad in ["Socket errors", "Non-2xx"] {
            if let Some(l) = text.lines().find(|l| l.contains(bad)) {
                return Err(format!("wrk: {}", l.trim()));
            }
        }
        let field = |prefix: &str| {
            text.lines()
                .map(str::trim)
                .find_map(|l| l.strip_prefix(prefix))
                .map(str::trim)
        };
        let rate: f64 = field("Requests/sec:")
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| format!("no Requests/sec in wrk's output: {text}"))?;
        let p99 = field("99%")
            .and_then(wrk_ms)
            .ok_or_else(|| format!("no 99% latency in wrk's output: {text}"))?;
        // "  123456 requests in 5.00s, 12.34MB read"
        let (requests, seconds) = text
            .lines()
            .find_map(|l| {
                let (n, rest) = l.trim().split_once(" requests in ")?;
                let secs = rest.split(',').next()?.strip_suffix('s')?;
                Some((n.parse::<f64>().ok()?, secs.parse::<f64>().ok()?))
            })
            .unwrap_or((rate, 1.0));
        Ok(Served {
            requests,
            seconds,
            p99_ms: p99,
        })
    }

    /// Client threads, each with its share of the connections: a request
    /// on each, then each reply, until the time is up.
    fn builtin(&self, addr: SocketAddr) -> Result<Served, String> {
        let per = self.connections.div_ceil(self.threads).max(1);
        let deadline = Instant::now() + self.duration;
        let start = Instant::now();
        let threads: Vec<JoinHandle<Result<Vec<u32>, String>>> = (0..self.threads)
            .map(|_| {
                std::thread::spawn(move || {
                    let mut conns = (0..per)
                        .map(|_| {
                            let s =
                                TcpStream::connect(addr).map_err(|e| format!("connect: {e}"))?;
                            s.set_nodelay(true).map_err(|e| e.to_string())?;
                            Ok(s)
                        })
                        .collect::<Result<Vec<_>, String>>()?;
                    let mut micros = vec![];
                    let mut buf = [0u8; 4096];
                    while Instant::now() < deadline {
                        let sent = Instant::now();
                        for c in &mut conns {
                            c.write_all(b"GET / HTTP/1.1\r\nHost: compare\r\n\r\n")
                                .map_err(|e| format!("write: {e}"))?;
                        }
                        for c in &mut conns {
                            let mut got = Vec::new();
                            while !got.ends_with(BODY_END) {
                                let n = c.read(&mut buf).map_err(|e| format!("read: {e}"))?;
                                if n == 0 {
                                    return Err("the server closed a keep-alive connection".into());
                                }
                                got.extend_from_slice(&buf[..n]);
                            }
                            if !got.starts_with(b"HTTP/1.1 200") {
                                return Err(format!("reply {:?}", String::from_utf8_lossy(&got)));
                            }
                            micros.push(sent.elapsed().as_micros() as u32);
                        }
                    }
                    Ok(micros)
                })
            })
            .collect();
        let mut all = vec![];
        for t in threads {
            all.extend(
                t.join()
                    .map_err(|_| "a client thread panicked".to_string())??,
            );
        }
        let seconds = start.elapsed().as_secs_f64();
        if all.is_empty() {
            return Err("no request completed".into());
        }
        all.sort_unstable();
        let p99 = all[(all.len() * 99 / 100).min(all.len() - 1)] as f64 / 1e3;
        Ok(Served {
            requests: all.len() as f64,
            seconds,
            p99_ms: p99,
        })
    }

    fn measure(&self, builder: &Builder, backend: &str) -> Result<[f64; 3], String> {
        let server = Server::start(builder, backend)?;
        let served = match self.load {
            Load::Wrk => self.wrk(server.addr),
            Load::Builtin => self.builtin(server.addr),
        };
        let cost = server.finish()?;
        let s = served?;
        Ok([
            s.requests / s.seconds,
            s.p99_ms,
            cost.as_nanos() as f64 / 1e3 / s.requests,
        ])
    }
}

impl Workload for Http {
    fn name(&self) -> &'static str {
        "http"
    }

    fn describe(&self) -> String {
        let load = match self.load {
            Load::Wrk => "wrk",
            Load::Builtin if Load::detect() == Load::Wrk => "the built-in load generator",
            Load::Builtin => "the built-in load generator (wrk is not on the PATH)",
        };
        format!(
            "HTTP/1.1 keep-alive, GET / (examples/http_server.rs on evloop::net, one loop on \
             its own thread) under {load}: {} threads, {} connections, {:?} per round",
            self.threads, self.connections, self.duration
        )
    }

    fn metrics(&self) -> Vec<Metric> {
        let (what, unit) = cost_unit();
        vec![
            Metric::higher("http, requests per second", "req/s"),
            Metric::lower("http, p99 latency", "ms"),
            Metric::lower(format!("http, {what} per request"), unit),
        ]
    }

    fn run(&mut self, builder: &Builder, backend: &str) -> Vec<Result<f64, String>> {
        match self.measure(builder, backend) {
            Ok(v) => v.map(Ok).to_vec(),
            Err(e) => vec![Err(e.clone()), Err(e.clone()), Err(e)],
        }
    }
}
