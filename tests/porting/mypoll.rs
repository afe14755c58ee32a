use std::io;
use std::os::fd::RawFd;
use std::time::Duration;

use evloop::backend::{Backend, Capabilities, PollEvent, PollStatus};
use evloop::backends::util::{refuse_files, Clock, Deadline};
use evloop::{Interest, Ready, Trigger};

pub struct MyPoll {
    fds: Vec<libc::pollfd>,
    clock: Clock,
}

impl MyPoll {
    pub fn new() -> io::Result<MyPoll> {
        Ok(MyPoll {
            fds: Vec::new(),
            clock: Clock::new(),
        })
    }
}

impl Backend for MyPoll {
    fn name(&self) -> &'static str {
        "mypoll"
    }

    fn capabilities(&self) -> Capabilities {
        // Level only: the loop refuses edge and emulates one-shot. Hang-ups
        // always reported (POLLHUP), a closed fd at the next wait (POLLNVAL):
        // the defaults.
        Capabilities::default()
    }

    fn modify(&mut self, fd: RawFd, _old: Interest, new: Interest) -> io::Result<()> {
        let pos = self.fds.iter().position(|p| p.fd == fd);
        if new.is_empty() {
            // Forget at once (the removal rule); an unknown fd (closed,
            // never added) is not an error.
            if let Some(i) = pos {
                self.fds.swap_remove(i);
            }
            return Ok(());
        }
        debug_assert_eq!(new.trigger(), Trigger::Level);
        let mut events = 0;
        if new.is_readable() {
            events |= libc::POLLIN;
        }
        if new.is_writable() {
            events |= libc::POLLOUT;
        }
        match pos {
            Some(i) => self.fds[i].events = events,
            None => {
                // Regular files and directories: EPERM, as epoll.
                refuse_files("mypoll", fd)?;
                self.fds.push(libc::pollfd {
                    fd,
                    events,
                    revents: 0,
                });
            }
        }
        Ok(())
    }

    fn poll(
        &mut self,
        timeout: Option<Duration>,
        events: &mut Vec<PollEvent>,
    ) -> io::Result<PollStatus> {
        let deadline = Deadline::new(timeout);
        loop {
            // The time left, rounded up to whole milliseconds: never wake
            // before the deadline.
            let ms = deadline.millis();
            // SAFETY: `fds` is a valid array of `fds.len()` pollfds.
            let n = unsafe { libc::poll(self.fds.as_mut_ptr(), self.fds.len() as _, ms) };
            if n >= 0 {
                break;
            }
            let err = io::Error::last_os_error();
            if err.kind() != io::ErrorKind::Interrupted {
                return Err(err);
            }
            // EINTR: wait again for the time that is left.
        }
        for p in &self.fds {
            let r = p.revents;
            if r == 0 {
                continue;
            }
            let ready = if r & libc::POLLNVAL != 0 {
                Ready::INVALID // closed behind the loop's back
            } else {
                let mut ready = Ready::EMPTY;
                if r & libc::POLLIN != 0 {
                    ready |= Ready::READABLE;
                }
                if r & libc::POLLOUT != 0 {
                    ready |= Ready::WRITABLE;
                }
                if r & libc::POLLHUP != 0 {
                    ready |= Ready::HUP | Ready::READABLE;
                }
                if r & libc::POLLERR != 0 {
                    ready |= Ready::ERROR | Ready::READABLE | Ready::WRITABLE;
                }
                ready
            };
            events.push(PollEvent { fd: p.fd, ready });
        }
        Ok(PollStatus::Done)
    }

    fn now(&mut self) -> Duration {
        self.clock.now()
    }
}
