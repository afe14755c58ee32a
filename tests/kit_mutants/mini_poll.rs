//! A small `poll(2)` backend with a [`Flaw`] switch: without a flaw it
//! passes the conformance kit (the same contract as the crate's poll
//! backend, written from docs/porting.md); each flaw is one bug of the
//! kind a backend author makes.

use std::io;
use std::os::fd::RawFd;
use std::time::Duration;

use evloop::backend::{Backend, Capabilities, ClosedFd, PollEvent, PollStatus};
use evloop::backends::util::{refuse_files, Clock, Deadline};
use evloop::{Interest, Ready, Trigger};

use crate::flaw::Flaw;

/// What the backend knows of one fd number.
#[derive(Debug, Clone, Copy, Default)]
struct Entry {
    /// The `pollfd.events` of the fd.
    events: libc::c_short,
    /// Its index in `MiniPoll::set`, if it is in the set.
    slot: Option<usize>,
}

/// The mini poll backend.
pub struct MiniPoll {
    flaw: Flaw,
    /// The array handed to `poll(2)`.
    set: Vec<libc::pollfd>,
    /// By fd number.
    entries: Vec<Option<Entry>>,
    clock: Clock,
}

impl MiniPoll {
    /// The backend with `flaw`, boxed (a `Factory`'s result).
    pub fn open(flaw: Flaw) -> io::Result<Box<dyn Backend>> {
        Ok(Box::new(MiniPoll {
            flaw,
            set: Vec::new(),
            entries: Vec::new(),
            clock: Clock::new(),
        }))
    }

    /// Takes `fd` out of the set (its entry is the caller's business).
    fn unset(&mut self, idx: usize) {
        let Some(Some(entry)) = self.entries.get_mut(idx) else {
            return;
        };
        let Some(slot) = entry.slot.take() else {
            return;
        };
        self.set.swap_remove(slot);
        if let Some(moved) = self.set.get(slot) {
            let moved = moved.fd as usize;
            if let Some(Some(e)) = self.entries.get_mut(moved) {
                e.slot = Some(slot);
            }
        }
    }

    /// What `revents` reports (flawed as configured).
    fn ready(&self, revents: libc::c_short) -> Ready {
        if revents & libc::POLLNVAL != 0 {
            return Ready::INVALID;
        }
        let mut r = Ready::EMPTY;
        if revents & libc::POLLIN != 0 {
            r |= Ready::READABLE;
        }
        if revents & libc::POLLOUT != 0 {
            r |= Ready::WRITABLE;
        }
        if revents & libc::POLLHUP != 0 {
            r |= if self.flaw == Flaw::NoHup {
                Ready::READABLE
            } else {
                Ready::HUP | Ready::READABLE
            };
        }
        if revents & libc::POLLERR != 0 {
            r |= if self.flaw == Flaw::NoError {
                Ready::READABLE | Ready::WRITABLE
            } else {
                Ready::ERROR | Ready::READABLE | Ready::WRITABLE
            };
        }
        r
    }
}

/// The `pollfd.events` of an interest.
fn poll_events(interest: Interest) -> libc::c_short {
    let mut ev = 0;
    if interest.is_readable() {
        ev |= libc::POLLIN;
    }
    if interest.is_writable() {
        ev |= libc::POLLOUT;
    }
    ev
}

impl Backend for MiniPoll {
    fn name(&self) -> &'static str {
        "mini-poll"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            edge: self.flaw == Flaw::EdgeClaimedLevelDelivered,
            oneshot: self.flaw == Flaw::FalseOneshot,
            closed_fd: if self.flaw == Flaw::WrongClosedFd {
                ClosedFd::ModifyFails
            } else {
                ClosedFd::AtNextWait
            },
            ..Capabilities::default()
        }
    }

    fn modify(&mut self, fd: RawFd, old: Interest, new: Interest) -> io::Result<()> {
        let Ok(idx) = usize::try_from(fd) else {
            return Err(io::Error::from_raw_os_error(libc::EBADF));
        };
        if new.is_empty() {
            match self.flaw {
                Flaw::NoDeregistration => {}
                Flaw::EntryKeptAfterForget => self.unset(idx),
                _ => {
                    self.unset(idx);
                    if let Some(e) = self.entries.get_mut(idx) {
                        *e = None;
                    }
                }
            }
            return Ok(());
        }
        let flawed_trigger = match new.trigger() {
            Trigger::Level => false,
            Trigger::Edge => self.flaw != Flaw::EdgeClaimedLevelDelivered,
            Trigger::Oneshot => self.flaw != Flaw::FalseOneshot,
        };
        if flawed_trigger {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!(
                    "mini-poll registers level only, and does not declare {:?}",
                    new.trigger()
                ),
            ));
        }
        if idx >= self.entries.len() {
            self.entries.resize(idx + 1, None);
        }
        if self.entries[idx].is_none() {
            refuse_files("mini-poll", fd)?;
        }
        let entry = self.entries[idx].get_or_insert_with(Entry::default);
        // The change, applied as a delta from `old` to the entry.
        entry.events = (entry.events & !poll_events(old)) | poll_events(new);
        let events = entry.events;
        match entry.slot {
            Some(slot) => self.set[slot].events = events,
            None => {
                entry.slot = Some(self.set.len());
                self.set.push(libc::pollfd {
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
        let mut n = loop {
            let millis = if self.flaw == Flaw::TimeoutRoundedDown {
                deadline
                    .remaining()
                    .map_or(-1, |d| d.as_millis().min(i32::MAX as u128) as libc::c_int)
            } else {
                deadline.millis()
            };
            // SAFETY: `set` is a valid, initialised array of `set.len()`
            // pollfds, which the kernel reads and whose `revents` it writes.
            let n = unsafe {
                libc::poll(
                    self.set.as_mut_ptr(),
                    self.set.len() as libc::nfds_t,
                    millis,
                )
            };
            if n >= 0 {
                break n as usize;
            }
            let err = io::Error::last_os_error();
            if err.kind() != io::ErrorKind::Interrupted || self.flaw == Flaw::EintrAsError {
                return Err(err);
            }
        };
        for pfd in &self.set {
            if n == 0 {
                break;
            }
            if pfd.revents != 0 {
                n -= 1;
                events.push(PollEvent {
                    fd: pfd.fd,
                    ready: self.ready(pfd.revents),
                });
            }
        }
        Ok(PollStatus::Done)
    }

    fn now(&mut self) -> Duration {
        self.clock.now()
    }
}
