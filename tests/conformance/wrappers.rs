//! Broken backends, wrapped around the poll backend, that the kit must
//! catch.

use std::io;
use std::os::fd::RawFd;
use std::time::Duration;

use evloop::backends::poll::Poll;
use evloop::{Backend, Capabilities, Interest, PollEvent, PollStatus};

/// A backend that loses the first report of every fd it is told of: the
/// differential check must show every scenario that differs, not only the
/// first.
pub struct LosesFirstReports {
    inner: Poll,
    reported: Vec<RawFd>,
}

impl LosesFirstReports {
    pub fn open() -> io::Result<Box<dyn Backend>> {
        Ok(Box::new(LosesFirstReports {
            inner: Poll::new(),
            reported: Vec::new(),
        }))
    }
}

impl Backend for LosesFirstReports {
    fn name(&self) -> &'static str {
        "loses-first-reports"
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    fn modify(&mut self, fd: RawFd, old: Interest, new: Interest) -> io::Result<()> {
        self.inner.modify(fd, old, new)
    }

    fn poll(
        &mut self,
        timeout: Option<Duration>,
        events: &mut Vec<PollEvent>,
    ) -> io::Result<PollStatus> {
        let from = events.len();
        let status = self.inner.poll(timeout, events)?;
        let mut i = from;
        while i < events.len() {
            if self.reported.contains(&events[i].fd) {
                i += 1;
            } else {
                self.reported.push(events[i].fd);
                events.remove(i);
            }
        }
        Ok(status)
    }

    fn now(&mut self) -> Duration {
        self.inner.now()
    }
}
