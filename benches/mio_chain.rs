//! The bench.c chain workload on mio 1.x, for comparison (shared by
//! `benches/chain.rs` and `benches/bare_chain.rs` with `#[path]`; the
//! including crate must also include `chain_workload.rs` at its root).
//!
//! mio registers fds edge-triggered with epoll and has no timers, so this
//! is the plain variant only. Each wakeup reads what is there (normally one
//! byte) with one `read` and passes each byte on with one `write`, so the
//! syscalls match bench.c's one read and one write per byte, except when
//! two bytes meet in one pair (then one read serves both).

use std::io::{ErrorKind, Read, Write};
use std::time::Instant;

use mio::net::UnixStream;
use mio::{Events, Interest, Poll, Token};

use crate::chain_workload::{Outcome, Shape};

/// A prepared workload on mio, ready to run repeatedly.
pub struct MioChain {
    poll: Poll,
    events: Events,
    readers: Vec<UnixStream>,
    writers: Vec<UnixStream>,
    shape: Shape,
}

/// `shape.pairs` socket pairs registered with a mio `Poll` (`shape.timers`
/// is ignored).
pub fn build(shape: Shape) -> std::io::Result<MioChain> {
    let poll = Poll::new()?;
    let (mut readers, mut writers) = (Vec::new(), Vec::new());
    for i in 0..shape.pairs {
        let (mut r, w) = UnixStream::pair()?;
        poll.registry()
            .register(&mut r, Token(i), Interest::READABLE)?;
        readers.push(r);
        writers.push(w);
    }
    Ok(MioChain {
        poll,
        events: Events::with_capacity(1024),
        readers,
        writers,
        shape,
    })
}

impl MioChain {
    /// One run: prime `active` chains, poll until every byte was read.
    pub fn run(&mut self) -> Outcome {
        let Shape {
            pairs,
            active,
            writes,
            ..
        } = self.shape;
        let space = pairs / active;
        let start = Instant::now();
        for c in 0..active {
            self.writers[c * space].write_all(b"e").unwrap();
        }
        let (mut writes_left, mut fired, target) = (writes, 0, active + writes);
        while fired < target {
            self.poll.poll(&mut self.events, None).unwrap();
            for ev in self.events.iter() {
                let i = ev.token().0;
                let mut buf = [0u8; 16];
                let n = match self.readers[i].read(&mut buf) {
                    Ok(n) => n,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => 0,
                    Err(e) => panic!("read: {e}"),
                };
                for _ in 0..n {
                    fired += 1;
                    if writes_left > 0 {
                        writes_left -= 1;
                        self.writers[(i + 1) % pairs].write_all(b"e").unwrap();
                    }
                }
            }
        }
        Outcome {
            events: fired,
            elapsed: start.elapsed(),
        }
    }
}
