//! A small `epoll(7)` backend with a [`Flaw`] switch, in two modes: native
//! level triggering, or edge-only (every registration `EPOLLET`, as a
//! mechanism that is always edge-triggered gives, level emulated by
//! re-arming each reported fd with `EPOLL_CTL_MOD` before the next wait,
//! which queues a new event if the fd is still ready). Without a flaw both
//! modes pass the conformance kit.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

use evloop::backend::{Backend, Capabilities, ClosedFd, Hangup, Level, PollEvent, PollStatus};
use evloop::backends::util::{Clock, Deadline};
use evloop::{Interest, Ready, Trigger};

use crate::flaw::Flaw;

/// What one `epoll_wait` returns at most.
const EVENTS: usize = 64;

/// What the backend gave the kernel for one fd number.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Entry {
    /// The `epoll_event.events` mask (0: not registered).
    mask: u32,
    /// Level asked for on an edge-only instance: re-armed after each
    /// report.
    emulated: bool,
}

/// The mini epoll backend.
pub struct MiniEpoll {
    flaw: Flaw,
    edge_only: bool,
    epfd: OwnedFd,
    /// By fd number.
    entries: Vec<Entry>,
    /// A `DEL` or `MOD` missed its registration: rebuild before the next
    /// wait.
    rebuild: bool,
    /// Emulated-level fds reported by the last wait, re-armed before the
    /// next.
    rearm: Vec<RawFd>,
    buf: Vec<libc::epoll_event>,
    clock: Clock,
}

/// `epoll_create1(EPOLL_CLOEXEC)`, owned.
fn create() -> io::Result<OwnedFd> {
    // SAFETY: a plain syscall without pointer arguments.
    let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by epoll_create1, open and owned by
    // nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn errno(err: &io::Error, code: libc::c_int) -> bool {
    err.raw_os_error() == Some(code)
}

impl MiniEpoll {
    /// The backend with `flaw`, edge-only or not, boxed (a `Factory`'s
    /// result).
    pub fn open(edge_only: bool, flaw: Flaw) -> io::Result<Box<dyn Backend>> {
        Ok(Box::new(MiniEpoll {
            flaw,
            edge_only,
            epfd: create()?,
            entries: Vec::new(),
            rebuild: false,
            rearm: Vec::with_capacity(EVENTS),
            buf: vec![libc::epoll_event { events: 0, u64: 0 }; EVENTS],
            clock: Clock::new(),
        }))
    }

    fn ctl(&self, op: libc::c_int, fd: RawFd, mask: u32) -> io::Result<()> {
        let mut ev = libc::epoll_event {
            events: mask,
            u64: fd as u64,
        };
        // SAFETY: `ev` is a valid epoll_event for the call's duration.
        let r = unsafe { libc::epoll_ctl(self.epfd.as_raw_fd(), op, fd, &mut ev) };
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    }

    fn entry(&self, fd: RawFd) -> Entry {
        usize::try_from(fd)
            .ok()
            .and_then(|i| self.entries.get(i).copied())
            .unwrap_or_default()
    }

    fn set(&mut self, idx: usize, entry: Entry) {
        if idx >= self.entries.len() {
            self.entries.resize(idx + 1, Entry::default());
        }
        self.entries[idx] = entry;
    }

    /// A new instance with the table's registrations: the only way to drop
    /// a registration whose file lives on under a closed number. An fd
    /// that cannot be added again (closed) leaves the table and is
    /// reported invalid.
    fn rebuild(&mut self, events: &mut Vec<PollEvent>) -> io::Result<()> {
        self.epfd = create()?;
        self.rebuild = false;
        self.rearm.clear();
        for idx in 0..self.entries.len() {
            let entry = self.entries[idx];
            if entry.mask == 0 {
                continue;
            }
            let fd = idx as RawFd;
            if self.ctl(libc::EPOLL_CTL_ADD, fd, entry.mask).is_err() {
                self.entries[idx] = Entry::default();
                events.push(PollEvent {
                    fd,
                    ready: Ready::INVALID,
                });
            }
        }
        Ok(())
    }
}

/// What an `epoll_event.events` mask reports.
fn ready(events: u32) -> Ready {
    let ev = events as libc::c_int;
    let mut r = Ready::EMPTY;
    if ev & libc::EPOLLIN != 0 {
        r |= Ready::READABLE;
    }
    if ev & libc::EPOLLOUT != 0 {
        r |= Ready::WRITABLE;
    }
    if ev & (libc::EPOLLHUP | libc::EPOLLRDHUP) != 0 {
        r |= Ready::HUP | Ready::READABLE;
    }
    if ev & libc::EPOLLERR != 0 {
        r |= Ready::ERROR | Ready::READABLE | Ready::WRITABLE;
    }
    r
}

impl Backend for MiniEpoll {
    fn name(&self) -> &'static str {
        if self.edge_only {
            "mini-epoll-edge-only"
        } else {
            "mini-epoll"
        }
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            edge: true,
            hangup: Hangup::Always,
            closed_fd: ClosedFd::ModifyFails,
            // Edge-only: level is its emulation, as a mio backend's is.
            level: if self.edge_only {
                Level::Rearmed
            } else {
                Level::Native
            },
            ..Capabilities::default()
        }
    }

    fn modify(&mut self, fd: RawFd, _old: Interest, new: Interest) -> io::Result<()> {
        let Ok(idx) = usize::try_from(fd) else {
            return Err(io::Error::from_raw_os_error(libc::EBADF));
        };
        let held = self.entry(fd);
        if new.is_empty() {
            if held.mask == 0 {
                return Ok(());
            }
            self.set(idx, Entry::default());
            return match self.ctl(libc::EPOLL_CTL_DEL, fd, 0) {
                Ok(()) => Ok(()),
                Err(e) => {
                    // Closed, or another file now: the old file's
                    // registration may live on through a dup.
                    if self.flaw != Flaw::NoRebuild {
                        self.rebuild = true;
                    }
                    if errno(&e, libc::EBADF) || errno(&e, libc::ENOENT) || errno(&e, libc::EPERM) {
                        Ok(())
                    } else {
                        Err(e)
                    }
                }
            };
        }
        let mut mask = 0;
        if new.is_readable() {
            mask |= (libc::EPOLLIN | libc::EPOLLRDHUP) as u32;
        }
        if new.is_writable() {
            mask |= libc::EPOLLOUT as u32;
        }
        let emulated = match new.trigger() {
            Trigger::Level => self.edge_only,
            Trigger::Edge => false,
            Trigger::Oneshot => {
                return Err(io::Error::new(
                    io::ErrorKind::Unsupported,
                    "mini-epoll does not declare native one-shot",
                ))
            }
        };
        if self.edge_only || new.trigger() == Trigger::Edge {
            mask |= libc::EPOLLET as u32;
        }
        let (first, second) = if held.mask != 0 {
            (libc::EPOLL_CTL_MOD, libc::EPOLL_CTL_ADD)
        } else {
            (libc::EPOLL_CTL_ADD, libc::EPOLL_CTL_MOD)
        };
        let result = match self.ctl(first, fd, mask) {
            Err(e) if errno(&e, libc::EEXIST) || errno(&e, libc::ENOENT) => {
                if first == libc::EPOLL_CTL_MOD && self.flaw != Flaw::NoRebuild {
                    self.rebuild = true; // the number was closed and reused
                }
                self.ctl(second, fd, mask)
            }
            r => r,
        };
        result?;
        self.set(idx, Entry { mask, emulated });
        Ok(())
    }

    fn poll(
        &mut self,
        timeout: Option<Duration>,
        events: &mut Vec<PollEvent>,
    ) -> io::Result<PollStatus> {
        let mut timeout = timeout;
        if self.rebuild {
            let before = events.len();
            self.rebuild(events)?;
            if events.len() > before {
                timeout = Some(Duration::ZERO); // the invalid fds are news
            }
        }
        if self.flaw != Flaw::NoLevelRearm {
            // Level on an edge-only instance: a MOD re-checks readiness
            // and queues a new edge if the fd is still ready.
            let rearm = std::mem::take(&mut self.rearm);
            for &fd in &rearm {
                let entry = self.entry(fd);
                if entry.emulated {
                    // Fails only for a number closed behind the loop's
                    // back: the loop's next change of it fails too.
                    let _ = self.ctl(libc::EPOLL_CTL_MOD, fd, entry.mask);
                }
            }
            self.rearm = rearm;
        }
        self.rearm.clear();
        let deadline = Deadline::new(timeout);
        let n = loop {
            // SAFETY: `buf` holds `EVENTS` initialised epoll_events that
            // the kernel may overwrite; `epfd` is open.
            let n = unsafe {
                libc::epoll_wait(
                    self.epfd.as_raw_fd(),
                    self.buf.as_mut_ptr(),
                    EVENTS as libc::c_int,
                    deadline.millis(),
                )
            };
            if n >= 0 {
                break n as usize;
            }
            let err = io::Error::last_os_error();
            if err.kind() != io::ErrorKind::Interrupted {
                return Err(err);
            }
        };
        for i in 0..n {
            let (got, data) = (self.buf[i].events, self.buf[i].u64);
            let fd = data as RawFd;
            let entry = self.entry(fd);
            if entry.mask == 0 {
                continue; // not ours (any more): dropped
            }
            if entry.emulated {
                self.rearm.push(fd);
            }
            events.push(PollEvent {
                fd,
                ready: ready(got),
            });
        }
        Ok(PollStatus::Done)
    }

    fn now(&mut self) -> Duration {
        self.clock.now()
    }

    fn reinit(&mut self) -> io::Result<()> {
        if self.flaw == Flaw::NoReinit {
            return Ok(());
        }
        // The inherited instance is shared with the parent: a new one, and
        // the loop adds every fd again.
        self.epfd = create()?;
        self.entries.clear();
        self.rearm.clear();
        self.rebuild = false;
        Ok(())
    }
}
