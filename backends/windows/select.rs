//! The Winsock `select` backend (Windows): level-triggered, any number of
//! sockets.
//!
//! - Winsock's `fd_set` is not a bitmap but a count followed by an array
//!   of sockets, and `select` reads as many as the count says:
//!   `FD_SETSIZE` (64) bounds only the C structure, not the call. The
//!   backend builds its own sets of the size it needs (a `Vec<usize>`
//!   laid out as `FD_SET`: the count, then the sockets), as libev does on
//!   Windows, so [`Capabilities::max_fd`] is `None` (under Wine 8 one
//!   wait over 2200 sockets reports every ready one). The registrations are
//!   kept in an array with a socket → slot index (forgetting one
//!   swap-removes it); each wait copies them into the three sets, whose
//!   buffers are reused: nothing is allocated in steady state.
//! - Only level-triggered registrations: the loop refuses edge-triggered
//!   watchers on this backend and emulates one-shot ones.
//! - Readable set: data, a pending `accept`, EOF or a reset (which the next
//!   read reports). Writable set: room to send, a `connect` that
//!   completed. The exception set holds the sockets watched for writing:
//!   there Winsock reports a `connect` that failed (and out-of-band
//!   data, unless `SO_OOBINLINE`), which the backend reports as
//!   `READABLE | WRITABLE`, so that the next read or write (or
//!   `take_error`) returns the error. There is no hang-up or error bit
//!   ([`Hangup::Never`](crate::backend::Hangup::Never)).
//! - A socket closed behind the loop's back makes the whole `select` fail
//!   with `WSAENOTSOCK` (under Wine, `WSAEOPNOTSUPP` if the number now
//!   names a handle of another kind, a file, and no other socket is
//!   registered: Wine gives out the lowest free value again at once): the
//!   backend then checks each registered socket (`getsockopt(SO_TYPE)`,
//!   and `getsockname` where Wine's `getsockopt` refuses a duplicated
//!   handle) and reports those that are no longer sockets
//!   as [`Ready::INVALID`] (the loop stops their watchers with
//!   [`Ready::ERROR`] and forgets them) and leaves out of the sets; a
//!   second `select` without them, which does not wait, gives the others'
//!   readiness in the same report
//!   ([`ClosedFd::AtNextWait`](crate::backend::ClosedFd::AtNextWait), as
//!   the Unix select's `EBADF`).
//! - Handles that are not sockets (files, pipes) are refused at once
//!   (`NoticeService::check_fd`, and again when a socket is first registered):
//!   Winsock's `select` takes only sockets.
//! - Wake-ups from other threads (async watchers, console events, child
//!   exits: the shared notifier, `backends/windows/`) arrive on a UDP
//!   socket bound to `127.0.0.1:0` and connected to itself (one datagram
//!   until it is drained), always in the read set (so
//!   the sets are never all empty, which `select` refuses with
//!   `WSAEINVAL`), never reported to the loop, drained when it is
//!   readable; the wait then returns so that the loop takes the notices.
//! - Timeouts are rounded up to whole microseconds (`TIMEVAL`'s unit), and
//!   a wait that ends before its deadline with nothing to report (an
//!   early time-out of a coarser system timer, or `WSAEINTR`) goes on for
//!   the time that is left, so timers never fire early. (Measured under
//!   Wine 8: a 1 µs `TIMEVAL` returns at once, 100 µs to 999 µs wait about
//!   a millisecond: never less than asked.)
#![allow(unsafe_code)]

use std::collections::HashMap;
use std::io;
use std::net::{Ipv4Addr, UdpSocket};
use std::os::windows::io::AsRawSocket;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use windows_sys::Win32::Networking::WinSock::{
    select, FD_SET, SOCKET, SOCKET_ERROR, TIMEVAL, WSAEINTR, WSAENOTSOCK, WSAEOPNOTSUPP,
};

use super::windows::{sockets, Notifier};
use super::{Clock, Deadline};
use crate::backend::{Backend, Capabilities, NoticeService, PollEvent, PollStatus, Wake};
use crate::{Interest, RawFd, Ready, Trigger};

/// The longest single wait, in seconds: `TIMEVAL` holds 32-bit fields.
/// The loop simply polls again after it.
const MAX_WAIT_SECS: u64 = 100_000_000;

// The sets are `Vec<usize>` laid out as `FD_SET`: the count in the first
// word (a `u32`, padded to the alignment of `SOCKET` on 64-bit targets;
// Windows is little-endian, so the word's value is the count), then the
// sockets. `FD_SET` is exactly that with room for 64 sockets.
const _: () = assert!(std::mem::size_of::<SOCKET>() == std::mem::size_of::<usize>());
const _: () = assert!(std::mem::size_of::<FD_SET>() == std::mem::size_of::<usize>() * 65);
#[cfg(not(target_endian = "little"))]
compile_error!("the Winsock select sets assume a little-endian target");

/// The Winsock `select` backend (Windows; any number of sockets).
///
/// ```
/// use evloop::backend::{Backend, PollEvent};
/// use evloop::backends::select::Select;
/// use evloop::{Interest, Ready};
/// use std::io::Write;
/// use std::net::{TcpListener, TcpStream};
/// use std::os::windows::io::AsRawSocket;
/// use std::time::Duration;
///
/// let mut s = Select::new()?;
/// assert_eq!(s.capabilities().max_fd, None);
/// let listener = TcpListener::bind("127.0.0.1:0")?;
/// let mut client = TcpStream::connect(listener.local_addr()?)?;
/// let (server, _) = listener.accept()?;
/// let fd = server.as_raw_socket();
/// s.modify(fd, Interest::NONE, Interest::READABLE)?;
/// client.write_all(b"ping")?;
/// let mut events = Vec::new();
/// s.poll(Some(Duration::from_secs(5)), &mut events)?;
/// assert_eq!(events, [PollEvent { fd, ready: Ready::READABLE }]);
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct Select {
    /// The registered sockets, in no particular order.
    regs: Vec<Reg>,
    /// The slot in `regs` of each registered socket.
    slot: HashMap<RawFd, usize>,
    /// The sets handed to `select` (reused).
    read: Vec<usize>,
    write: Vec<usize>,
    except: Vec<usize>,
    /// The slots found ready by the last wait (reused).
    touched: Vec<usize>,
    waker: Arc<SocketWaker>,
    clock: Clock,
    notifier: Notifier,
}

/// One registered socket.
struct Reg {
    socket: SOCKET,
    interest: Interest,
    /// What the current wait found (empty between waits).
    ready: Ready,
    /// Found closed and reported [`Ready::INVALID`]: left out of the sets
    /// until the loop forgets it (or registers a socket of that number
    /// again).
    dead: bool,
}

impl std::fmt::Debug for Select {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Select")
            .field("registered", &self.regs.len())
            .finish_non_exhaustive()
    }
}

/// What ends a wait from another thread: a datagram to the backend's own
/// wake socket (bound to a loopback port and connected to itself), sent
/// at most once until the backend drains it.
struct SocketWaker {
    socket: UdpSocket,
    /// A datagram was sent and not yet drained.
    pending: AtomicBool,
}

impl SocketWaker {
    fn new() -> io::Result<SocketWaker> {
        let socket = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))?;
        socket.connect(socket.local_addr()?)?;
        socket.set_nonblocking(true)?;
        Ok(SocketWaker {
            socket,
            pending: AtomicBool::new(false),
        })
    }

    /// Reads every datagram queued on the wake socket, then lets the next
    /// wake send again. (A wake between the two sends nothing, but what it
    /// recorded before waking is taken by the loop after this wait, which
    /// is returning.)
    fn drain(&self) {
        let mut buf = [0u8; 16];
        // Until WouldBlock (empty); any other error (a reset reported on
        // a UDP socket) leaves nothing more to read now either.
        while self.socket.recv(&mut buf).is_ok() {}
        self.pending.store(false, Ordering::Release);
    }
}

impl Wake for SocketWaker {
    fn wake(&self) {
        if !self.pending.swap(true, Ordering::AcqRel) {
            // A full buffer (WouldBlock) already holds a datagram: the
            // wait ends anyway.
            let _ = self.socket.send(&[1]);
        }
    }
}

impl Select {
    /// An empty select set with its wake socket.
    ///
    /// Errors: the wake socket could not be made (no loopback interface,
    /// out of sockets).
    ///
    /// ```
    /// use evloop::{backends::select::Select, Loop};
    /// let lp: Loop = Loop::with_backend(Select::new()?);
    /// assert_eq!(lp.backend_name(), "select");
    /// assert_eq!(lp.capabilities().max_fd, None);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn new() -> io::Result<Select> {
        sockets::startup();
        let waker = Arc::new(SocketWaker::new()?);
        let wake: Arc<dyn Wake> = waker.clone();
        Ok(Select {
            regs: Vec::new(),
            slot: HashMap::new(),
            read: Vec::new(),
            write: Vec::new(),
            except: Vec::new(),
            touched: Vec::new(),
            waker,
            clock: Clock::new(),
            notifier: Notifier::new("select", wake),
        })
    }

    /// Fills the three sets from the registrations.
    fn fill_sets(&mut self) {
        let wake = self.waker.socket.as_raw_socket() as SOCKET;
        for set in [&mut self.read, &mut self.write, &mut self.except] {
            set.clear();
            set.push(0);
        }
        self.read.push(wake);
        for r in self.regs.iter().filter(|r| !r.dead) {
            if r.interest.is_readable() {
                self.read.push(r.socket);
            }
            if r.interest.is_writable() {
                self.write.push(r.socket);
                self.except.push(r.socket);
            }
        }
        for set in [&mut self.read, &mut self.write, &mut self.except] {
            set[0] = set.len() - 1;
        }
    }

    /// Records `what` for every socket in `set` (a set `select` returned),
    /// but the wake socket, whose readiness it returns.
    fn collect(&mut self, which: Which, what: Ready) -> bool {
        let wake = self.waker.socket.as_raw_socket() as SOCKET;
        let set = match which {
            Which::Read => &self.read,
            Which::Write => &self.write,
            Which::Except => &self.except,
        };
        let count = (set[0] & 0xffff_ffff).min(set.len() - 1);
        let mut woken = false;
        for &socket in &set[1..=count] {
            if socket == wake && which == Which::Read {
                woken = true;
                continue;
            }
            if let Some(&s) = self.slot.get(&(socket as RawFd)) {
                let reg = &mut self.regs[s];
                if reg.ready.is_empty() {
                    self.touched.push(s);
                }
                reg.ready |= what;
            }
        }
        woken
    }

    /// After `select` failed with `WSAENOTSOCK` (or `WSAEOPNOTSUPP`): reports the registered
    /// sockets that are no longer sockets, and leaves them out of the
    /// sets from now on. Returns how many it found.
    fn report_invalid(&mut self, events: &mut Vec<PollEvent>) -> usize {
        let before = events.len();
        for r in self.regs.iter_mut().filter(|r| !r.dead) {
            if sockets::check_socket("select", r.socket as RawFd).is_err() {
                r.dead = true;
                events.push(PollEvent {
                    fd: r.socket as RawFd,
                    ready: Ready::INVALID,
                });
            }
        }
        events.len() - before
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Which {
    Read,
    Write,
    Except,
}

/// A `TIMEVAL` for `d`, rounded up to the microsecond.
fn timeval(d: Duration) -> TIMEVAL {
    let micros = d.as_nanos().div_ceil(1_000);
    let secs = (micros / 1_000_000).min(MAX_WAIT_SECS as u128);
    let usecs = if secs == MAX_WAIT_SECS as u128 {
        0
    } else {
        micros % 1_000_000
    };
    TIMEVAL {
        tv_sec: secs as i32,
        tv_usec: usecs as i32,
    }
}

/// A set as `select` takes it.
fn set_ptr(set: &mut [usize]) -> *mut FD_SET {
    set.as_mut_ptr().cast()
}

/// This backend, for the platform's list (backends/mod.rs).
pub(super) const OFFERED: super::Offered = super::Offered {
    name: "select",
    open: || Ok(Box::new(Select::new()?)),
};

impl Backend for Select {
    fn name(&self) -> &'static str {
        "select"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            edge: false,
            oneshot: false,
            virtual_fds: false,
            max_fd: None,
            hangup: crate::backend::Hangup::Never,
            closed_fd: crate::backend::ClosedFd::AtNextWait,
            level: crate::backend::Level::Native,
            completion: false,
        }
    }

    fn modify(&mut self, fd: RawFd, _old: Interest, new: Interest) -> io::Result<()> {
        if new.is_empty() {
            // Forget: swap-remove the slot and fix the index of the socket
            // moved into it. Forgetting an unknown socket succeeds.
            if let Some(s) = self.slot.remove(&fd) {
                self.regs.swap_remove(s);
                if let Some(moved) = self.regs.get(s) {
                    self.slot.insert(moved.socket as RawFd, s);
                }
            }
            return Ok(());
        }
        if new.trigger() != Trigger::Level {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "the select backend supports only level-triggered registrations",
            ));
        }
        match self.slot.get(&fd) {
            Some(&s) => {
                let reg = &mut self.regs[s];
                if reg.dead {
                    // Registered again under the number of a socket found
                    // closed: a new socket, or still nothing.
                    sockets::check_socket("select", fd)?;
                    reg.dead = false;
                }
                reg.interest = new;
            }
            None => {
                if fd == crate::source::NO_FD {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        "select: INVALID_SOCKET cannot be watched",
                    ));
                }
                sockets::check_socket("select", fd)?;
                self.slot.insert(fd, self.regs.len());
                self.regs.push(Reg {
                    socket: fd as SOCKET,
                    interest: new,
                    ready: Ready::EMPTY,
                    dead: false,
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
        // Sockets found closed were reported: the others are then only
        // looked at, without waiting, so that their events come with them.
        let mut reported_invalid = false;
        loop {
            self.fill_sets();
            let tv = if reported_invalid {
                Some(timeval(Duration::ZERO))
            } else {
                deadline.remaining().map(timeval)
            };
            let tv_ptr = tv
                .as_ref()
                .map_or(std::ptr::null(), |tv| tv as *const TIMEVAL);
            // SAFETY: each set is a live, writable buffer laid out as
            // FD_SET (the count, then that many sockets: see the
            // assertions above), which select reads up to its count and
            // rewrites in place with a count no larger; `tv_ptr` is null
            // or points to a live TIMEVAL. The first argument is ignored.
            let n = unsafe {
                select(
                    0,
                    set_ptr(&mut self.read),
                    set_ptr(&mut self.write),
                    set_ptr(&mut self.except),
                    tv_ptr,
                )
            };
            if n == SOCKET_ERROR {
                let err = sockets::last_error();
                match err.raw_os_error() {
                    Some(WSAEINTR) => continue,
                    // A closed socket; or (Wine) a handle of another kind
                    // now under a closed socket's number: WSAEOPNOTSUPP.
                    Some(WSAENOTSOCK | WSAEOPNOTSUPP) if self.report_invalid(events) > 0 => {
                        tracing::trace!(
                            closed = events.len(),
                            "select: sockets closed behind the loop's back"
                        );
                        reported_invalid = true;
                        continue;
                    }
                    // The closed ones are reported: never lose that.
                    _ if reported_invalid => return Ok(PollStatus::Done),
                    _ => return Err(err),
                }
            }
            if n == 0 {
                if reported_invalid {
                    return Ok(PollStatus::Done);
                }
                if deadline.remaining().is_some_and(|left| left.is_zero()) {
                    return Ok(PollStatus::Done);
                }
                // Woke before the deadline with nothing: wait for the rest.
                continue;
            }
            let woken = self.collect(Which::Read, Ready::READABLE);
            self.collect(Which::Write, Ready::WRITABLE);
            self.collect(Which::Except, Ready::READABLE | Ready::WRITABLE);
            for &s in &self.touched {
                let reg = &mut self.regs[s];
                events.push(PollEvent {
                    fd: reg.socket as RawFd,
                    ready: std::mem::replace(&mut reg.ready, Ready::EMPTY),
                });
            }
            self.touched.clear();
            if woken {
                self.waker.drain();
            }
            return Ok(PollStatus::Done);
        }
    }

    fn now(&mut self) -> Duration {
        self.clock.now()
    }

    fn notices(&mut self) -> Option<&mut dyn NoticeService> {
        Some(&mut self.notifier)
    }
}
