//! Records itself, then replays itself: a line server on loopback TCP,
//! run on the default backend (or `EVLOOP_BACKEND`) with the loop recorded
//! to a file, serving a few clients; then the same server replayed from
//! that file, callback by callback, and checked against the recording;
//! then a changed server (it shouts its replies) replayed from the same
//! file, which diverges at its first reply, and the report printed.
//!
//! Usage: `record_replay [TRACE]` (default: a file in the temporary
//! directory, removed at the end unless named). Exits 0 when the replay
//! matched and the changed server diverged, 1 otherwise.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};

use evloop::net::{Acceptor, ConnEvent, ConnOptions, Conns, ListenOptions, Listener, Stream};
use evloop::replay::{Divergence, Recorded, Replay, ReplaySummary};
use evloop::{Break, Loop, RawFd, RunMode, Source};

/// The server's state: its connections, and what its handlers saw.
#[derive(Default)]
struct Server {
    conns: Conns<()>,
    shout: bool,
    log: Vec<String>,
    left: usize,
}

impl AsMut<Conns<()>> for Server {
    fn as_mut(&mut self) -> &mut Conns<()> {
        &mut self.conns
    }
}

/// The program: "echo: LINE" for each line, a graceful close at the end
/// of the client's input; on any listener, so that it runs on a real
/// one and on a replay's alike.
fn serve<L>(lp: &mut Loop<'static, Server>, listener: L) -> evloop::Result<Acceptor>
where
    L: Listener,
    L::Stream: Stream,
{
    Acceptor::start(lp, listener, |lp, st: &mut Server, accepted| {
        let Ok(stream) = accepted else { return };
        let opened = st.conns.open(
            lp,
            stream,
            ConnOptions::new(),
            (),
            |lp, st: &mut Server, id, ev| {
                let c = &mut st.conns[id];
                match ev {
                    ConnEvent::Data => {
                        while let Some(end) = c.input().iter().position(|&b| b == b'\n') {
                            let line = String::from_utf8_lossy(&c.input()[..end]).into_owned();
                            c.consume(end + 1);
                            let reply = if st.shout {
                                line.to_uppercase()
                            } else {
                                line.clone()
                            };
                            c.write(lp, format!("echo: {reply}\n").as_bytes());
                            st.log.push(format!(
                                "iteration {} at {:?}: {line:?}",
                                lp.iteration(),
                                lp.now()
                            ));
                        }
                    }
                    ConnEvent::Eof => c.close(lp),
                    ConnEvent::Closed(_) => {
                        st.left -= 1;
                        if st.left == 0 {
                            lp.break_loop(Break::All);
                        }
                    }
                    _ => {}
                }
            },
        );
        if let Err(e) = opened {
            eprintln!("cannot serve a connection: {e}");
        }
    })
}

const CLIENTS: usize = 3;

/// Recorded: the server on a real listener, with clients in a thread.
fn record(trace: &std::path::Path) -> Result<(RawFd, Vec<String>), Box<dyn std::error::Error>> {
    let listener = ListenOptions::new().bind("127.0.0.1:0".parse()?)?;
    let (addr, listener_fd) = (listener.local_addr()?, listener.source_fd().number());
    let mut lp: Loop<'static, Server> = Loop::builder().record_to(trace).build()?;
    let clients = std::thread::spawn(move || -> std::io::Result<Vec<String>> {
        let mut got = Vec::new();
        for i in 0..CLIENTS {
            let mut c = TcpStream::connect(addr)?;
            c.write_all(format!("hello {i}\nbye {i}\n").as_bytes())?;
            c.shutdown(Shutdown::Write)?;
            let mut back = String::new();
            c.read_to_string(&mut back)?;
            got.push(back);
        }
        Ok(got)
    });
    // Recorded: what the server accepts, reads and writes goes to the trace.
    let acceptor = serve(&mut lp, Recorded::new(listener))?;
    let mut st = Server {
        left: CLIENTS,
        ..Server::default()
    };
    lp.run(RunMode::Default, &mut st)?;
    acceptor.close(&mut lp)?;
    drop(lp); // completes the trace
    let replies = clients.join().map_err(|_| "the clients panicked")??;
    println!(
        "recorded on {}: {} requests, replies {replies:?}",
        Loop::builder().backend_name(),
        st.log.len()
    );
    Ok((listener_fd, st.log))
}

/// What a replay's server logged, and how the replay ended.
type Replayed = (Vec<String>, Result<ReplaySummary, Divergence>);

/// Replayed: the server (shouting or not) on the replay's listener.
fn replay(
    trace: &std::path::Path,
    listener_fd: RawFd,
    shout: bool,
) -> Result<Replayed, Box<dyn std::error::Error>> {
    let replay = Replay::open(trace)?;
    let mut lp: Loop<'static, Server> = Loop::with_backend(replay.backend());
    let acceptor = serve(&mut lp, replay.listener(listener_fd))?;
    let mut st = Server {
        left: CLIENTS,
        shout,
        ..Server::default()
    };
    if lp.run(RunMode::Default, &mut st).is_ok() {
        acceptor.close(&mut lp)?;
    }
    drop(lp);
    Ok((st.log, replay.finish()))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let named = std::env::args_os().nth(1).map(std::path::PathBuf::from);
    let trace = named.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("evloop-record-replay-{}.trace", std::process::id()))
    });
    let (listener_fd, recorded) = record(&trace)?;
    println!(
        "trace: {} ({} bytes)",
        trace.display(),
        std::fs::metadata(&trace)?.len()
    );

    let (replayed, finished) = replay(&trace, listener_fd, false)?;
    let same = replayed == recorded;
    match &finished {
        Ok(s) => println!(
            "replayed: {} polls, {} bytes read, {} written; same callbacks, times and data: {same}",
            s.polls, s.bytes_read, s.bytes_written
        ),
        Err(d) => println!("replay diverged: {d}"),
    }

    let (_, changed) = replay(&trace, listener_fd, true)?;
    match &changed {
        Err(d) => println!("the shouting server diverged, as it should: {d}"),
        Ok(_) => println!("the shouting server did not diverge"),
    }
    if named.is_none() {
        let _ = std::fs::remove_file(&trace);
    }
    if same && finished.is_ok() && changed.is_err() {
        Ok(())
    } else {
        std::process::exit(1)
    }
}
