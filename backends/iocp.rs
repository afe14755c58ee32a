//! The Windows backend, the default there: socket readiness through the
//! AFD driver's poll request (`IOCTL_AFD_POLL`) on an I/O completion port,
//! the design of wepoll, mio, polling and libuv.
//!
//! - **One port, AFD handles, one request per socket.** The backend owns
//!   a completion port and opens the AFD driver (`\Device\Afd\Evloop`,
//!   `NtCreateFile`) a few times, one handle per 32 sockets (as wepoll and
//!   mio: a cancel walks the handle's pending requests), each associated
//!   with the port. A watched socket has one poll request at a time, on
//!   its *base* handle (`SIO_BASE_HANDLE`, or the `SIO_BSP_HANDLE_*`
//!   ioctls beneath a layered service provider that breaks it). The
//!   request's memory (its `IO_STATUS_BLOCK` and `AFD_POLL_INFO`) is boxed
//!   and stays where it is, the driver's, from the ioctl until its
//!   completion is dequeued, even after a cancel; its address travels as
//!   the completion's `lpOverlapped`, which is how a completion finds its
//!   socket.
//! - **Level-triggered**, as the loop's default: a request completes once,
//!   so after each report the socket is queued and its request issued
//!   again just before the next wait (not at once: the callbacks run in
//!   between and may have read the data), where the driver completes it
//!   at once if the socket is still ready. A completion that reports
//!   nothing the loop asked for (a cancel, an event of an interest given
//!   up) is issued again within the same `poll`, which waits on for the
//!   time left.
//! - **One-shot is native** ([`Capabilities::oneshot`]): the request is
//!   one-shot already; after the report the socket is left idle until the
//!   loop re-arms it (`modify` from `Interest::NONE.with_trigger(Oneshot)`).
//! - **No edge trigger** ([`Capabilities::edge`] is false; the loop
//!   refuses edge watchers): the driver reports the state of a socket, not
//!   its changes, so a new arrival on a socket whose data is still unread
//!   cannot be told from the old data. (mio's "edge" is a one-shot that
//!   its own reads re-arm; evloop does not see the reads.)
//! - **Changing a socket's interest** while its request is pending: if
//!   the request already asks for everything now wanted, it stays (a
//!   completion for an interest given up is filtered, and the request
//!   issued again); otherwise it is cancelled (`NtCancelIoFileEx`), left
//!   to complete on its own (an *orphan*, freed when its completion
//!   arrives), and a new request is issued before the next wait. Forgetting
//!   a socket cancels and orphans its request the same way.
//! - **Events**: `AFD_POLL_RECEIVE`, `ACCEPT`, `DISCONNECT`, `ABORT` and
//!   `CONNECT_FAIL` are readable; `SEND`, `ABORT` and `CONNECT_FAIL`
//!   writable; `DISCONNECT` (the peer's FIN) and `ABORT` (a reset) are
//!   [`Ready::HUP`]; `ABORT` and `CONNECT_FAIL` are [`Ready::ERROR`]. A
//!   request reports what was signalled when it completed
//!   ([`Hangup::AsOfWakeup`]): data, then the peer's close before the wait
//!   gives `READABLE` without `HUP`, and the next report has it. A
//!   writer is told of the peer's FIN too (`HUP`), once while the socket
//!   is not writable (then its request leaves `DISCONNECT` out until it
//!   is, so that a writer blocked on a full buffer does not spin).
//! - **A socket closed behind the loop's back** ([`ClosedFd::AtNextWait`]):
//!   its pending request completes with `AFD_POLL_LOCAL_CLOSE` (every
//!   request asks for it), and a request issued on a closed handle fails
//!   at once; either way the next wait reports it [`Ready::INVALID`], and
//!   the socket is not polled again. (A handle value that Windows has
//!   given to a new socket meanwhile cannot be told from the old one: as
//!   on Unix, close a socket only after the loop has forgotten it.)
//! - **Wake-ups** (the shared Windows notifier's: async watchers, console events,
//!   child exits) are a completion posted to the port
//!   (`PostQueuedCompletionStatus`) under a key of their own, at most one
//!   in flight; the port's handle is shared with the wakers (an `Arc`), so
//!   that a waker used after the backend is gone posts to a port that
//!   still exists, which nobody reads.
//! - **The wait**: `GetQueuedCompletionStatusEx` into a buffer of entries
//!   (256, doubled up to 4096 whenever a wait fills it), for the
//!   [`Deadline`]'s time left rounded up to milliseconds; a wait that ends
//!   with nothing to report while time is left (Windows' waits may end a
//!   tick early by the monotonic clock) waits again, so a timer never
//!   fires early.
//! - **Drop** cancels every pending request and dequeues completions until
//!   each has arrived (up to two seconds), freeing their memory; a request
//!   that has not completed by then is leaked on purpose (its memory may
//!   still be written), never freed under the driver.
//!
//! **Under Wine** (8.0, where the tests run; Wine has had the AFD poll
//! since 7.13, and runs this design as it runs mio's), measured by
//! `tests/windows_iocp.rs`:
//!
//! - Wine's server answers the poll: a request that finds its socket
//!   ready completes at once, and its completion is on the port when the
//!   next `GetQueuedCompletionStatusEx` looks, even with a zero timeout
//!   (so level re-reports and interest changes show within one
//!   `RunMode::NoWait` iteration, as on Windows). The completion's data
//!   reaches the request's memory through the thread that issued it, while
//!   that thread is in a system call: the backend is not `Send`, and its
//!   requests are issued and dequeued by the loop's thread.
//! - The last handle of a socket closed completes its pending requests
//!   with `AFD_POLL_LOCAL_CLOSE`, as on Windows; a request issued on a
//!   closed handle fails at once. A pending request holds Wine's socket
//!   object open, so a forgotten socket's request is cancelled at once
//!   (`modify` to `Interest::NONE`), not left to complete: the peer sees
//!   the close when the program closes the socket.
//! - Wine reports `AFD_POLL_DISCONNECT` only once no data is left to read
//!   (it finds the peer's FIN by a zero-byte `MSG_PEEK`): data followed by
//!   the peer's close reports `READABLE` alone, even when the close came
//!   before the socket was armed, and the hang-up shows in the report after
//!   the data has been read. Windows reports the FIN as it arrives. The
//!   reads see the data, then EOF, either way.
//! - Wine's `SIO_BASE_HANDLE` hands back any handle it is given (a file's
//!   too), so a new socket is first checked to be one (`getsockopt`), and a
//!   handle of another kind is refused by `modify` with the reason, as
//!   [`Loop::io`](crate::Loop::io) refuses it (through `NoticeService::check_fd`).
//! - A reset (`SO_LINGER` 0 at the peer) is `AFD_POLL_ABORT`, as on
//!   Windows: `READABLE | WRITABLE | HUP | ERROR`.
#![allow(unsafe_code)]

use std::collections::HashMap;
use std::io;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use windows_sys::Win32::Foundation::{
    CloseHandle, GetLastError, HANDLE, INVALID_HANDLE_VALUE, STATUS_INVALID_HANDLE, WAIT_TIMEOUT,
};
use windows_sys::Win32::Networking::WinSock::SOCKET;
use windows_sys::Win32::System::Threading::INFINITE;
use windows_sys::Win32::System::IO::{
    CreateIoCompletionPort, GetQueuedCompletionStatusEx, PostQueuedCompletionStatus,
    OVERLAPPED_ENTRY,
};

use super::windows::afd::{self, Afd, Outcome, Request};
use super::windows::{sockets, Notifier};
use super::{Clock, Deadline};
use crate::backend::{
    Backend, Capabilities, ClosedFd, Hangup, NoticeService, PollEvent, PollStatus, Wake,
};
use crate::{Interest, RawFd, Ready, Trigger};

/// The completion key of the AFD handles' completions.
const AFD_KEY: usize = 1;
/// The completion key of a wake-up.
const WAKE_KEY: usize = 2;
/// Sockets per AFD handle.
const GROUP_SIZE: usize = 32;
/// Entries one wait can dequeue at first, and at most.
const INITIAL_ENTRIES: usize = 256;
const MAX_ENTRIES: usize = 4096;
/// Finished requests kept for reuse.
const SPARE_REQUESTS: usize = 64;
/// How long `Drop` waits for cancelled requests to come back.
const DRAIN_TIME: Duration = Duration::from_secs(2);

/// The completion port's handle, shared by the backend and its wakers.
struct Port(HANDLE);

// SAFETY: a completion port's handle may be used from any thread: posting
// to and dequeuing from a port are synchronised by the system. The handle
// is closed only when the last holder drops the `Port`, so no thread can
// use it closed (or reused for another object).
unsafe impl Send for Port {}
// SAFETY: as above: `&Port` only hands out the handle for thread-safe
// calls (`PostQueuedCompletionStatus`).
unsafe impl Sync for Port {}

impl Drop for Port {
    fn drop(&mut self) {
        // SAFETY: the handle is the port's, closed once, by its last owner.
        unsafe { CloseHandle(self.0) };
    }
}

/// The backend's own wake-up: one completion under [`WAKE_KEY`], posted
/// unless one is already in flight.
struct PortWake {
    port: Arc<Port>,
    /// A wake-up completion is on the port and not dequeued yet.
    posted: AtomicBool,
}

impl Wake for PortWake {
    fn wake(&self) {
        if self.posted.swap(true, Ordering::AcqRel) {
            return; // the one in flight wakes the wait
        }
        // SAFETY: the port is open while `self.port` is held; a null
        // OVERLAPPED is allowed (the completion carries only the key).
        let ok = unsafe { PostQueuedCompletionStatus(self.port.0, 0, WAKE_KEY, std::ptr::null()) };
        if ok == 0 {
            // Not posted (out of memory?): let the next wake try again.
            self.posted.store(false, Ordering::Release);
        }
    }
}

/// An AFD handle and how many sockets it polls.
struct Group {
    afd: Afd,
    users: usize,
}

/// Where a socket's request is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Ours: not issued, or its completion was dequeued.
    Idle,
    /// The driver's, issued with this `POLL_*` mask.
    Pending(u32),
}

/// A watched socket.
struct Sock {
    /// Its request (boxed, owned: freed or orphaned when the socket is
    /// forgotten).
    req: NonNull<Request>,
    state: State,
    /// What the loop asked for last.
    interest: Interest,
    /// The handle the driver polls.
    base: SOCKET,
    /// Its AFD handle (index in `groups`).
    group: usize,
    /// In `queue`: its request is issued before the next wait.
    queued: bool,
    /// A writer was told of the peer's FIN while not writable: leave
    /// `DISCONNECT` out until it is (see the module documentation).
    quiet_hup: bool,
}

/// The `iocp` backend (Windows): socket readiness through the AFD
/// driver's poll on an I/O completion port. See the [module
/// documentation](self) for the design.
///
/// ```
/// use evloop::backend::{Backend, PollEvent};
/// use evloop::backends::iocp::Iocp;
/// use evloop::{Interest, Ready};
/// use std::io::Write;
/// use std::net::{TcpListener, TcpStream};
/// use std::os::windows::io::AsRawSocket;
/// use std::time::Duration;
///
/// let listener = TcpListener::bind("127.0.0.1:0")?;
/// let mut client = TcpStream::connect(listener.local_addr()?)?;
/// let (server, _) = listener.accept()?;
/// let mut b = Iocp::new()?;
/// b.modify(server.as_raw_socket(), Interest::NONE, Interest::READABLE)?;
/// client.write_all(b"ping")?;
/// let mut events = Vec::new();
/// b.poll(Some(Duration::from_secs(5)), &mut events)?;
/// assert_eq!(events, [PollEvent { fd: server.as_raw_socket(), ready: Ready::READABLE }]);
/// b.modify(server.as_raw_socket(), Interest::READABLE, Interest::NONE)?;
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct Iocp {
    port: Arc<Port>,
    wake: Arc<PortWake>,
    groups: Vec<Group>,
    socks: HashMap<RawFd, Sock>,
    /// Sockets whose request is issued before the next wait (each once:
    /// `Sock::queued`; a forgotten one is skipped).
    queue: Vec<RawFd>,
    /// Sockets whose request is issued again within this `poll` (their
    /// completion reported nothing).
    again: Vec<RawFd>,
    /// Requests the driver holds: the sockets' pending ones and orphans.
    outstanding: usize,
    /// Finished requests, for reuse.
    spare: Vec<NonNull<Request>>,
    entries: Vec<OVERLAPPED_ENTRY>,
    clock: Clock,
    notifier: Notifier,
}

impl std::fmt::Debug for Iocp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Iocp")
            .field("port", &self.port.0)
            .field("sockets", &self.socks.len())
            .field("afd_handles", &self.groups.len())
            .field("outstanding", &self.outstanding)
            .finish_non_exhaustive()
    }
}

/// This backend, for the platform's list (backends/mod.rs).
pub(super) const OFFERED: super::Offered = super::Offered {
    name: "iocp",
    open: || Ok(Box::new(Iocp::new()?)),
};

/// The `POLL_*` mask a request asks for.
fn afd_mask(interest: Interest, quiet_hup: bool) -> u32 {
    let mut mask = 0;
    if interest.is_readable() {
        mask |= afd::POLL_RECEIVE | afd::POLL_ACCEPT | afd::POLL_DISCONNECT;
    }
    if interest.is_writable() {
        mask |= afd::POLL_SEND;
        if !quiet_hup {
            mask |= afd::POLL_DISCONNECT;
        }
    }
    if mask != 0 {
        mask |= afd::POLL_ABORT | afd::POLL_CONNECT_FAIL | afd::POLL_LOCAL_CLOSE;
    }
    mask
}

/// What a completion's `POLL_*` events report.
fn ready_of(events: u32) -> Ready {
    let mut r = Ready::EMPTY;
    if events
        & (afd::POLL_RECEIVE
            | afd::POLL_ACCEPT
            | afd::POLL_DISCONNECT
            | afd::POLL_ABORT
            | afd::POLL_CONNECT_FAIL)
        != 0
    {
        r |= Ready::READABLE;
    }
    if events & (afd::POLL_SEND | afd::POLL_ABORT | afd::POLL_CONNECT_FAIL) != 0 {
        r |= Ready::WRITABLE;
    }
    if events & (afd::POLL_DISCONNECT | afd::POLL_ABORT) != 0 {
        r |= Ready::HUP;
    }
    if events & (afd::POLL_ABORT | afd::POLL_CONNECT_FAIL) != 0 {
        r |= Ready::ERROR;
    }
    r
}

impl Iocp {
    /// Creates the completion port and opens the AFD driver once (so that
    /// a system without it fails here, with the reason, not at the first
    /// socket).
    ///
    /// ```
    /// use evloop::backend::Backend;
    /// use evloop::{backends::iocp::Iocp, Loop};
    /// let b = Iocp::new()?;
    /// assert!(b.capabilities().oneshot && !b.capabilities().edge);
    /// let lp: Loop = Loop::with_backend(b);
    /// assert_eq!(lp.backend_name(), "iocp");
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn new() -> io::Result<Iocp> {
        sockets::startup();
        // SAFETY: plain call: a new port, not associated with any file.
        let handle =
            unsafe { CreateIoCompletionPort(INVALID_HANDLE_VALUE, std::ptr::null_mut(), 0, 1) };
        if handle.is_null() {
            return Err(io::Error::last_os_error());
        }
        let port = Arc::new(Port(handle));
        let first = Afd::open(port.0, AFD_KEY)?;
        let wake = Arc::new(PortWake {
            port: port.clone(),
            posted: AtomicBool::new(false),
        });
        let notifier = Notifier::new("iocp", wake.clone());
        let zero = OVERLAPPED_ENTRY {
            lpCompletionKey: 0,
            lpOverlapped: std::ptr::null_mut(),
            Internal: 0,
            dwNumberOfBytesTransferred: 0,
        };
        tracing::trace!(port = ?port.0, "iocp: new");
        Ok(Iocp {
            port,
            wake,
            groups: vec![Group {
                afd: first,
                users: 0,
            }],
            socks: HashMap::new(),
            queue: Vec::new(),
            again: Vec::new(),
            outstanding: 0,
            spare: Vec::new(),
            entries: vec![zero; INITIAL_ENTRIES],
            clock: Clock::new(),
            notifier,
        })
    }

    /// A request for `socket`: a spare one, or a new one.
    fn new_request(&mut self, socket: RawFd) -> NonNull<Request> {
        match self.spare.pop() {
            Some(req) => {
                // SAFETY: a spare request is ours alone (its completion was
                // dequeued), live and boxed.
                unsafe {
                    (*req.as_ptr()).socket = socket;
                    (*req.as_ptr()).orphan = false;
                }
                req
            }
            // `Box::into_raw` is never null.
            None => NonNull::from(Box::leak(Request::boxed(socket))),
        }
    }

    /// Takes back a request the driver is done with.
    fn recycle(&mut self, req: NonNull<Request>) {
        if self.spare.len() < SPARE_REQUESTS {
            self.spare.push(req);
        } else {
            // SAFETY: made by `Box::leak` in `new_request`, the driver is
            // done with it, and no socket owns it: freed once, here.
            drop(unsafe { Box::from_raw(req.as_ptr()) });
        }
    }

    /// Gives the pending request `req` (issued through group `group`) up:
    /// cancelled, and freed when its completion arrives.
    fn orphan(&mut self, req: NonNull<Request>, group: usize) {
        // SAFETY: the request is pending (the driver may write its status
        // block and poll info, never this flag, which only `complete`
        // reads, after the completion); it was issued through this group's
        // handle and has not been dequeued.
        unsafe {
            (*req.as_ptr()).orphan = true;
            if let Err(err) = self.groups[group].afd.cancel(req.as_ptr()) {
                // It completes when its socket next changes or closes.
                tracing::trace!(%err, "iocp: cancel failed");
            }
        }
    }

    /// The AFD handle for a new socket: the first with room, or a new one.
    fn group_for_new(&mut self) -> io::Result<usize> {
        if let Some(i) = self.groups.iter().position(|g| g.users < GROUP_SIZE) {
            return Ok(i);
        }
        let afd = Afd::open(self.port.0, AFD_KEY)?;
        self.groups.push(Group { afd, users: 0 });
        Ok(self.groups.len() - 1)
    }

    /// Queues `fd`'s request to be issued before the next wait.
    fn enqueue(queue: &mut Vec<RawFd>, fd: RawFd, sock: &mut Sock) {
        if !sock.queued {
            sock.queued = true;
            queue.push(fd);
        }
    }

    /// Issues the requests of the sockets in `list` (emptied) that are
    /// idle and still queued; a socket whose request fails at once (closed
    /// behind the loop's back) is reported [`Ready::INVALID`].
    fn issue(&mut self, list: &mut Vec<RawFd>, events: &mut Vec<PollEvent>) {
        for fd in list.drain(..) {
            let Some(s) = self.socks.get_mut(&fd) else {
                continue; // forgotten since
            };
            if !s.queued {
                continue; // a second entry of one socket
            }
            s.queued = false;
            let mask = afd_mask(s.interest, s.quiet_hup);
            if s.state != State::Idle || mask == 0 {
                continue;
            }
            let afd = &self.groups[s.group].afd;
            // SAFETY: the request is idle (ours), boxed and owned by the
            // socket, which keeps it where it is until its completion is
            // dequeued (or hands it to the driver as an orphan).
            match unsafe { afd.poll(s.req.as_ptr(), s.base, mask) } {
                Ok(()) => {
                    s.state = State::Pending(mask);
                    self.outstanding += 1;
                }
                Err(err) => {
                    // A closed handle (ERROR_INVALID_HANDLE), or one the
                    // driver will not poll: the loop cannot watch it.
                    tracing::trace!(fd, %err, "iocp: poll request refused");
                    events.push(PollEvent {
                        fd,
                        ready: Ready::INVALID,
                    });
                }
            }
        }
    }

    /// One wait of at most `ms` milliseconds; the number of entries
    /// dequeued into `entries`.
    fn wait(&mut self, ms: u32) -> io::Result<usize> {
        let mut removed = 0u32;
        let len = self.entries.len() as u32;
        // SAFETY: `entries` has room for `len` entries, which the call
        // fills (and `removed` says how many); not alertable, so no APC
        // of ours runs in it.
        let ok = unsafe {
            GetQueuedCompletionStatusEx(
                self.port.0,
                self.entries.as_mut_ptr(),
                len,
                &mut removed,
                ms,
                0,
            )
        };
        if ok != 0 {
            return Ok(removed as usize);
        }
        // SAFETY: plain call.
        match unsafe { GetLastError() } {
            WAIT_TIMEOUT => Ok(0),
            err => Err(io::Error::from_raw_os_error(err as i32)),
        }
    }

    /// Takes the `n` dequeued completions: events for the loop into
    /// `events`, sockets to issue again at once into `again`. True if the
    /// backend was woken.
    fn complete(&mut self, n: usize, events: &mut Vec<PollEvent>, again: &mut Vec<RawFd>) -> bool {
        let mut woken = false;
        for i in 0..n {
            let entry = self.entries[i];
            match entry.lpCompletionKey {
                WAKE_KEY => {
                    // Before the loop takes the notices: a wake-up after
                    // this posts again.
                    self.wake.posted.store(false, Ordering::Release);
                    woken = true;
                }
                AFD_KEY => {
                    let Some(req) = NonNull::new(entry.lpOverlapped.cast::<Request>()) else {
                        continue;
                    };
                    self.outstanding -= 1;
                    // SAFETY: the AFD handles' completions carry the
                    // addresses of our requests (the APC context of
                    // `Afd::poll`); dequeued, the request is ours again.
                    let (orphan, fd, outcome) = unsafe {
                        let r = &*req.as_ptr();
                        (r.orphan, r.socket, r.outcome())
                    };
                    if orphan {
                        self.recycle(req);
                        continue;
                    }
                    self.took(fd, req, outcome, events, again);
                }
                _ => {}
            }
        }
        woken
    }

    /// The completion of socket `fd`'s request `req`.
    fn took(
        &mut self,
        fd: RawFd,
        req: NonNull<Request>,
        outcome: Outcome,
        events: &mut Vec<PollEvent>,
        again: &mut Vec<RawFd>,
    ) {
        let Some(s) = self.socks.get_mut(&fd) else {
            // Cannot be: a forgotten socket's request is an orphan.
            tracing::trace!(fd, "iocp: completion of an unknown socket");
            return;
        };
        if s.req != req {
            tracing::trace!(fd, "iocp: completion of another request");
            return;
        }
        s.state = State::Idle;
        tracing::trace!(fd, ?outcome, "iocp: completion");
        let ready = match outcome {
            Outcome::Events(ev) if ev & afd::POLL_LOCAL_CLOSE != 0 => Ready::INVALID,
            Outcome::Events(ev) => {
                if !s.interest.is_readable() && ev & afd::POLL_DISCONNECT != 0 {
                    s.quiet_hup = ev & afd::POLL_SEND == 0;
                } else if ev & afd::POLL_SEND != 0 {
                    s.quiet_hup = false;
                }
                ready_of(ev)
            }
            // Not by us (we cancel only orphans): ask again.
            Outcome::Cancelled => Ready::EMPTY,
            Outcome::Failed(STATUS_INVALID_HANDLE) => Ready::INVALID,
            Outcome::Failed(_) => Ready::ERROR | Ready::READABLE | Ready::WRITABLE,
        };
        if ready == Ready::INVALID {
            // Gone: never polled again (the loop forgets it).
            events.push(PollEvent { fd, ready });
            return;
        }
        let ready = ready & (Ready::from_interest(s.interest) | Ready::HUP | Ready::ERROR);
        if ready.is_empty() {
            // Nothing the loop asked for: ask again, within this poll.
            Self::enqueue(again, fd, s);
            return;
        }
        events.push(PollEvent { fd, ready });
        if s.interest.trigger() != Trigger::Oneshot {
            Self::enqueue(&mut self.queue, fd, s);
        }
        // One-shot: disarmed until the loop re-arms it.
    }
}

impl Backend for Iocp {
    fn name(&self) -> &'static str {
        "iocp"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            edge: false,
            oneshot: true,
            virtual_fds: false,
            max_fd: None,
            hangup: Hangup::AsOfWakeup,
            closed_fd: ClosedFd::AtNextWait,
            level: crate::backend::Level::Native,
            completion: false,
        }
    }

    fn modify(&mut self, fd: RawFd, _old: Interest, new: Interest) -> io::Result<()> {
        if !new.is_readable() && !new.is_writable() {
            let Some(s) = self.socks.remove(&fd) else {
                return Ok(());
            };
            self.groups[s.group].users -= 1;
            match s.state {
                State::Pending(_) => self.orphan(s.req, s.group),
                State::Idle => self.recycle(s.req),
            }
            return Ok(());
        }
        if let Some(s) = self.socks.get_mut(&fd) {
            s.interest = new;
            s.quiet_hup = false;
            let want = afd_mask(new, false);
            match s.state {
                // The pending request asks for all of it already.
                State::Pending(asked) if want & !asked == 0 => {}
                State::Pending(_) => {
                    let (old, group) = (s.req, s.group);
                    s.state = State::Idle;
                    // (Reborrowed below: `orphan` and `new_request` take
                    // the whole backend.)
                    self.orphan(old, group);
                    let req = self.new_request(fd);
                    let s = self.socks.get_mut(&fd).expect("just seen");
                    s.req = req;
                    Self::enqueue(&mut self.queue, fd, s);
                }
                State::Idle => Self::enqueue(&mut self.queue, fd, s),
            }
            return Ok(());
        }
        // The loop asked `check_fd` already; a direct caller may not have.
        // (And Wine's `SIO_BASE_HANDLE` hands back any handle it is
        // given, a file's too: only the driver's poll would fail, later.)
        sockets::check_socket("iocp", fd)?;
        let base = afd::base_socket(fd).map_err(|err| {
            io::Error::new(
                err.kind(),
                format!("iocp: socket {fd}: its base socket cannot be read: not an open socket? ({err})"),
            )
        })?;
        let group = self.group_for_new()?;
        let req = self.new_request(fd);
        self.groups[group].users += 1;
        let mut s = Sock {
            req,
            state: State::Idle,
            interest: new,
            base,
            group,
            queued: false,
            quiet_hup: false,
        };
        Self::enqueue(&mut self.queue, fd, &mut s);
        self.socks.insert(fd, s);
        Ok(())
    }

    fn poll(
        &mut self,
        timeout: Option<Duration>,
        events: &mut Vec<PollEvent>,
    ) -> io::Result<PollStatus> {
        let deadline = Deadline::new(timeout);
        let start = events.len();
        let mut list = std::mem::take(&mut self.queue);
        self.issue(&mut list, events);
        self.queue = list;
        let mut again = std::mem::take(&mut self.again);
        // Passes that only issued requests again with no time left: a
        // bound, should a request keep completing with nothing to say.
        let mut spent = 0;
        let result = loop {
            let ms = if events.len() > start {
                0
            } else {
                match deadline.millis() {
                    -1 => INFINITE,
                    ms => ms as u32,
                }
            };
            let n = match self.wait(ms) {
                Ok(n) => n,
                Err(err) => break Err(err),
            };
            let full = n == self.entries.len();
            let woken = self.complete(n, events, &mut again);
            if full && self.entries.len() < MAX_ENTRIES {
                let zero = self.entries[0];
                self.entries.resize(self.entries.len() * 2, zero);
            }
            if events.len() > start || woken {
                break Ok(());
            }
            let time_left = deadline.remaining().is_none_or(|d| !d.is_zero());
            if !again.is_empty() {
                // Asked again: look once more, with the time left if any.
                if !time_left {
                    spent += 1;
                    if spent > 8 {
                        break Ok(());
                    }
                }
                self.issue(&mut again, events);
                continue;
            }
            if !time_left {
                break Ok(());
            }
            // A wait that ended early, or with only orphans' completions:
            // wait again for what is left.
        };
        self.again = again;
        result.map(|()| PollStatus::Done)
    }

    fn now(&mut self) -> Duration {
        self.clock.now()
    }

    fn notices(&mut self) -> Option<&mut dyn NoticeService> {
        Some(&mut self.notifier)
    }
}

impl Drop for Iocp {
    fn drop(&mut self) {
        let socks: Vec<Sock> = self.socks.drain().map(|(_, s)| s).collect();
        for s in socks {
            match s.state {
                State::Pending(_) => self.orphan(s.req, s.group),
                State::Idle => self.recycle(s.req),
            }
        }
        for req in self.spare.drain(..) {
            // SAFETY: spare requests are ours alone, made by `Box::leak`.
            drop(unsafe { Box::from_raw(req.as_ptr()) });
        }
        let until = Instant::now() + DRAIN_TIME;
        while self.outstanding > 0 {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            let ms = left.as_millis().clamp(1, 100) as u32;
            let Ok(n) = self.wait(ms) else {
                break;
            };
            for i in 0..n {
                let entry = self.entries[i];
                if entry.lpCompletionKey != AFD_KEY || entry.lpOverlapped.is_null() {
                    continue;
                }
                self.outstanding -= 1;
                // SAFETY: every socket's request was orphaned above, so
                // this completion's request is an orphan, dequeued: ours
                // again, made by `Box::leak`, freed once, here.
                drop(unsafe { Box::from_raw(entry.lpOverlapped.cast::<Request>()) });
            }
        }
        if self.outstanding > 0 {
            // Their memory may still be written by the driver (when the
            // AFD handles close below): leaked, never freed.
            tracing::trace!(
                outstanding = self.outstanding,
                "iocp: requests not back in time, leaked"
            );
        }
        // The AFD handles close with `groups`; the port with the last
        // holder of `port` (a waker may outlive the backend).
    }
}
