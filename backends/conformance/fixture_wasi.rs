//! The WASI part of [`OsFixture`](super::OsFixture): pairs of TCP
//! connections accepted on the preopened listener and relayed to each
//! other by a host program.
//!
//! A WASI guest cannot create a socketpair, a pipe or a socket of its own:
//! it can only accept connections on a listener the runtime preopened
//! (`wasmtime run -S preview2=n -S tcplisten=127.0.0.1:PORT`). So the kit
//! needs a *relay* on the host (the crate's `tests/wasi_kit.rs` is one):
//!
//! 1. the first connection the guest accepts is the relay's *control*
//!    connection;
//! 2. for each pair, the guest writes [`PAIR_REQUEST`] on it; the relay
//!    connects twice to the listener and copies what either connection
//!    brings to the other (with backpressure: it reads only what it can
//!    write), an EOF as a `shutdown(SHUT_WR)`, a reset as a reset
//!    (`SO_LINGER` 0); the guest accepts the two and makes them the pair's
//!    ends (the relay is symmetric: which is which does not matter);
//! 3. a "pipe" is such a pair, of which one end is only read and the other
//!    only written (as on Windows);
//! 4. for each [`SYNC_REQUEST`] the guest writes, the relay answers with
//!    the same byte once it has had nothing to move for a while (a fill's
//!    check that no more room comes).
//!
//! The scenarios step the loop with `RunMode::NoWait` right after a peer
//! action and expect its effect at once, as a socketpair gives it. Through
//! a relay it comes a moment later, so the ends make the effects of what
//! they do synchronous (each bounded by [`SETTLE_LIMIT`], reached only when
//! the effect never comes): they count the bytes written into each
//! direction and read out of it, and
//!
//! - a write that leaves a few bytes in flight (a peer's action: the
//!   scenarios' fills write 16 KiB chunks into a chain that backpressure
//!   keeps full) waits until the other end has them all (`FIONREAD`);
//! - a read while bytes are still in flight toward this end, or after the
//!   other end closed, first waits until it is readable; a read that finds
//!   nothing (every byte in, would block) waits until the other end is
//!   writable (the room a drain gives);
//! - a drop shuts the other end's write side down (a socketpair whose
//!   peer has closed is dead both ways: EOF, `EPIPE`, `HUP`) and waits
//!   until that end has its hang-up (the FIN, or the reset the relay
//!   carries when the dropped end had data unread).
//!
//! `FIONREAD` and `poll` are wasi-libc's, both on `poll_oneoff`.

use std::cell::{Cell, RefCell};
use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd};
use std::rc::Rc;
use std::time::{Duration, Instant};

use super::{RawSock, SharedStream};
use crate::RawFd;

/// What [`Fixture::pair`](super::Fixture::pair) gives on WASI: one end of
/// two relayed connections.
///
/// ```
/// fn watched_end(_: evloop::conformance::fixture::OsSock) {}
/// ```
pub type OsSock = WasiSock;
/// The read end of [`Fixture::pipe`](super::Fixture::pipe) on WASI: one
/// end of a relayed pair, only read.
///
/// ```
/// fn read_end(_: evloop::conformance::fixture::OsPipeR) {}
/// ```
pub type OsPipeR = WasiSock;
/// The write end of [`Fixture::pipe`](super::Fixture::pipe) on WASI: the
/// other end, only written.
///
/// ```
/// fn write_end(_: evloop::conformance::fixture::OsPipeW) {}
/// ```
pub type OsPipeW = WasiSock;

/// The byte the guest writes on the control connection to ask the relay
/// for a pair.
///
/// ```
/// assert_eq!(evloop::conformance::fixture::PAIR_REQUEST, b'P');
/// ```
pub const PAIR_REQUEST: u8 = b'P';

/// The byte the guest writes on the control connection to ask the relay
/// to answer (the same byte) once it has had nothing to move for a while.
///
/// ```
/// assert_eq!(evloop::conformance::fixture::SYNC_REQUEST, b'S');
/// ```
pub const SYNC_REQUEST: u8 = b'S';

/// How long an end waits for the effect of an action to reach the other
/// end (only reached when it never comes: the scenario then fails on what
/// it expected).
///
/// ```
/// assert_eq!(evloop::conformance::fixture::SETTLE_LIMIT.as_secs(), 5);
/// ```
pub const SETTLE_LIMIT: Duration = Duration::from_secs(5);

/// A write that leaves at most this many bytes in flight waits for them
/// (see the module documentation).
const SMALL_WRITE: u64 = 4096;

/// The listener and the control connection, made at the first pair.
struct Relay {
    listener: TcpListener,
    control: TcpStream,
}

thread_local! {
    static RELAY: RefCell<Option<Relay>> = const { RefCell::new(None) };
}

/// The first listener the runtime preopened (this kit's guest takes
/// them all, once).
fn preopened_listener() -> TcpListener {
    crate::backends::wasi::preopened_listeners()
        .ok()
        .and_then(|all| all.into_iter().next())
        .unwrap_or_else(|| {
            panic!(
                "no preopened listener: run the guest with wasmtime's `-S preview2=n -S \
                 tcplisten=127.0.0.1:PORT` and a relay on the host (the kit's WASI fixture, \
                 backends/conformance/fixture_wasi.rs)"
            )
        })
}

/// A connection accepted on the listener (which wasmtime gives
/// non-blocking), waited for up to [`SETTLE_LIMIT`]: the relay connects
/// at once.
fn accept(listener: &TcpListener) -> TcpStream {
    let deadline = Instant::now() + SETTLE_LIMIT;
    loop {
        match listener.accept() {
            Ok((s, _)) => return s,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock && Instant::now() < deadline => {
                wait_for_ms(listener.as_raw_fd(), libc::POLLRDNORM, 100);
            }
            Err(e) => panic!(
                "accept on the preopened listener: {e} (is the relay running? see \
                 backends/conformance/fixture_wasi.rs)"
            ),
        }
    }
}

/// Runs `f` with the relay, connected at the first call.
fn with_relay<R>(f: impl FnOnce(&mut Relay) -> R) -> R {
    RELAY.with(|r| {
        let mut r = r.borrow_mut();
        let relay = r.get_or_insert_with(|| {
            // Kept in this thread-local for the rest of the program.
            let listener = preopened_listener();
            let control = accept(&listener);
            Relay { listener, control }
        });
        f(relay)
    })
}

/// Asks the relay to answer once it has nothing left to move, and waits
/// for the answer (at most [`SETTLE_LIMIT`]).
fn relay_sync() {
    with_relay(|relay| {
        relay
            .control
            .write_all(&[SYNC_REQUEST])
            .unwrap_or_else(|e| panic!("asking the relay for a sync: {e}"));
        let fd = relay.control.as_raw_fd();
        let deadline = Instant::now() + SETTLE_LIMIT;
        let mut answer = [0u8; 1];
        loop {
            match (&relay.control).read(&mut answer) {
                Ok(1) => return,
                Ok(_) => panic!("the relay closed the control connection"),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock && Instant::now() < deadline => {
                    wait_for_ms(fd, libc::POLLRDNORM, 100);
                }
                Err(e) => panic!("waiting for the relay's sync: {e}"),
            }
        }
    })
}

/// What the two ends of a pair share: the bytes written into each
/// direction, the bytes read out of it, which end is closed.
struct Link {
    /// Each end's fd (changed by [`renumber`]).
    fds: [Cell<RawFd>; 2],
    /// `sent[i]`: bytes end `i` has written (toward end `1 - i`).
    sent: [Cell<u64>; 2],
    /// `got[i]`: bytes end `i` has read.
    got: [Cell<u64>; 2],
    closed: [Cell<bool>; 2],
    /// End `i` has read an EOF or an error.
    ended: [Cell<bool>; 2],
}

impl Link {
    /// Bytes written toward end `i` that it has not read.
    fn in_flight_to(&self, i: usize) -> u64 {
        self.sent[1 - i].get() - self.got[i].get()
    }
}

/// One end of a relayed pair (see the module documentation): a
/// non-blocking TCP connection that makes its actions' effects on the
/// other end synchronous.
///
/// ```no_run
/// // In a guest run under wasmtime with a preopened listener and a relay
/// // on the host (the crate's tests/wasi_kit.rs is one):
/// use evloop::conformance::fixture::SharedStream;
/// let (a, b) = evloop::conformance::fixture::socketpair();
/// b.write_some(b"x")?; // returns once `a` has the byte
/// let mut buf = [0u8; 1];
/// assert_eq!(a.read_some(&mut buf)?, 1);
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct WasiSock {
    stream: Option<TcpStream>,
    link: Rc<Link>,
    end: usize,
}

impl WasiSock {
    fn stream(&self) -> &TcpStream {
        self.stream.as_ref().expect("an open end")
    }

    fn other_open(&self) -> bool {
        !self.link.closed[1 - self.end].get()
    }

    fn other_fd(&self) -> RawFd {
        self.link.fds[1 - self.end].get()
    }

    /// One read, with the waits of the module documentation.
    fn read_counted(&self, buf: &mut [u8]) -> io::Result<usize> {
        let link = &self.link;
        let i = self.end;
        let peer_gone = !self.other_open() && !link.ended[i].get();
        if link.in_flight_to(i) > 0 || peer_gone {
            wait_for(self.stream().as_raw_fd(), libc::POLLRDNORM);
        }
        let r = (&mut self.stream()).read(buf);
        match &r {
            Ok(0) => link.ended[i].set(true),
            Ok(n) => link.got[i].set(link.got[i].get() + *n as u64),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if self.other_open() && link.in_flight_to(i) == 0 {
                    // Drained: the other end's room comes back.
                    wait_for(self.other_fd(), libc::POLLWRNORM);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => link.ended[i].set(true),
        }
        r
    }

    /// One write, with the wait of the module documentation.
    fn write_counted(&self, buf: &[u8]) -> io::Result<usize> {
        let link = &self.link;
        let i = self.end;
        let n = (&mut self.stream()).write(buf)?;
        link.sent[i].set(link.sent[i].get() + n as u64);
        let to = 1 - i;
        let in_flight = link.in_flight_to(to);
        if self.other_open() && in_flight <= SMALL_WRITE {
            let deadline = Instant::now() + SETTLE_LIMIT;
            while fionread(self.other_fd()).is_ok_and(|k| (k as u64) < in_flight)
                && Instant::now() < deadline
            {
                wait_for_ms(self.other_fd(), libc::POLLRDNORM, 1);
            }
        }
        Ok(n)
    }
}

impl Drop for WasiSock {
    fn drop(&mut self) {
        self.link.closed[self.end].set(true);
        drop(self.stream.take());
        let other = 1 - self.end;
        if self.link.closed[other].get() {
            return;
        }
        // A socketpair whose peer has closed is dead both ways: reads give
        // the data left, then EOF; writes fail with EPIPE; a poll says
        // HUP. A TCP end whose peer has closed gets only a FIN (or a reset,
        // with data left unread, which the relay carries): its own write
        // side is shut down here, so that it writes no more, and its HUP
        // comes with the FIN. Waited for, as a socketpair's is there when
        // the close returns.
        let fd = self.link.fds[other].get();
        // A FIN behind bytes the relay still holds (the other end full,
        // never read) comes only when they are read: nothing to wait for.
        let in_flight = self.link.in_flight_to(other);
        let delivered = fionread(fd).is_ok_and(|n| n as u64 >= in_flight);
        // SAFETY: the other end's fd, open (not closed: see above) and
        // owned by that end: borrowed for one shutdown, never closed here.
        let other_stream = std::mem::ManuallyDrop::new(unsafe { TcpStream::from_raw_fd(fd) });
        let _ = other_stream.shutdown(std::net::Shutdown::Write);
        let deadline = Instant::now() + SETTLE_LIMIT;
        while delivered && Instant::now() < deadline {
            if poll1(fd, libc::POLLRDNORM, 20) & (libc::POLLHUP | libc::POLLERR) != 0 {
                return;
            }
        }
    }
}

impl AsFd for WasiSock {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.stream().as_fd()
    }
}

impl SharedStream for WasiSock {
    fn read_some(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.read_counted(buf)
    }
    fn write_some(&self, buf: &[u8]) -> io::Result<usize> {
        self.write_counted(buf)
    }
    /// Bytes move on along the relay's chain (this connection, the relay,
    /// the other connection) after a write would block: room within 50 ms
    /// says so at once; otherwise the relay is asked to answer once it has
    /// nothing left to move ([`SYNC_REQUEST`]), and 50 ms more of no room
    /// is taken as full. (A relay starved of the CPU, or an ACK delayed,
    /// would otherwise make room after the stream was taken as full.)
    fn room_comes_soon(&self) -> bool {
        let fd = self.stream().as_raw_fd();
        if poll1(fd, libc::POLLWRNORM, 50) & libc::POLLWRNORM != 0 {
            return true;
        }
        relay_sync();
        poll1(fd, libc::POLLWRNORM, 50) & libc::POLLWRNORM != 0
    }
}

impl Read for WasiSock {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.read_counted(buf)
    }
}

impl Read for &WasiSock {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.read_counted(buf)
    }
}

impl Write for WasiSock {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_counted(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Write for &WasiSock {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_counted(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// One `poll` of `fd` for `events`, at most `ms` milliseconds; the
/// `revents` (0 on a timeout or a failed poll).
fn poll1(fd: RawFd, events: libc::c_short, ms: i32) -> libc::c_short {
    let mut p = libc::pollfd {
        fd,
        events,
        revents: 0,
    };
    // SAFETY: one initialised pollfd, valid for the call.
    let n = unsafe { libc::poll(&mut p, 1, ms) };
    if n > 0 {
        p.revents
    } else {
        0
    }
}

/// Waits (at most `ms`) until `fd` has `events`, an error or a hang-up.
fn wait_for_ms(fd: RawFd, events: libc::c_short, ms: i32) -> bool {
    poll1(fd, events, ms) != 0
}

/// Waits until `fd` has `events`, an error or a hang-up, at most
/// [`SETTLE_LIMIT`].
fn wait_for(fd: RawFd, events: libc::c_short) {
    let deadline = Instant::now() + SETTLE_LIMIT;
    while Instant::now() < deadline {
        let left = deadline.saturating_duration_since(Instant::now());
        if wait_for_ms(fd, events, left.as_millis().clamp(1, 100) as i32) {
            return;
        }
    }
}

/// The bytes readable on `fd` now (wasmtime says at least 1 at an EOF).
fn fionread(fd: RawFd) -> io::Result<usize> {
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes one int through the pointer.
    let r = unsafe { libc::ioctl(fd, libc::FIONREAD, &mut n) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n.max(0) as usize)
    }
}

/// A relayed pair (see the module documentation): both ends non-blocking.
///
/// ```no_run
/// // In a guest run under wasmtime with a preopened listener and a relay
/// // on the host (the crate's tests/wasi_kit.rs is one):
/// use evloop::conformance::fixture::SharedStream;
/// let (a, b) = evloop::conformance::fixture::socketpair();
/// b.write_some(b"x")?; // returns once `a` has the byte
/// let mut buf = [0u8; 1];
/// assert_eq!(a.read_some(&mut buf)?, 1);
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn socketpair() -> (WasiSock, WasiSock) {
    let (a, b) = with_relay(|relay| {
        relay
            .control
            .write_all(&[PAIR_REQUEST])
            .unwrap_or_else(|e| panic!("asking the relay for a pair: {e}"));
        (accept(&relay.listener), accept(&relay.listener))
    });
    for s in [&a, &b] {
        s.set_nonblocking(true).unwrap();
    }
    let link = Rc::new(Link {
        fds: [Cell::new(a.as_raw_fd()), Cell::new(b.as_raw_fd())],
        sent: Default::default(),
        got: Default::default(),
        closed: Default::default(),
        ended: Default::default(),
    });
    let end = |stream, end| WasiSock {
        stream: Some(stream),
        link: link.clone(),
        end,
    };
    (end(a, 0), end(b, 1))
}

/// Moves `end`'s connection to the fd number `to` (`fd_renumber`), which
/// must be open: its file is closed, as `dup2` closes it. WASI has no dup,
/// and wasmtime never hands out a closed number again: this is the one way
/// to reuse a number at once.
pub(crate) fn renumber(end: &mut WasiSock, to: RawFd) {
    let from = std::os::fd::IntoRawFd::into_raw_fd(end.stream.take().expect("an open end"));
    // SAFETY: `from` was just taken out of its stream and is owned by
    // nobody; `to` is the caller's to close.
    let r = unsafe { libc::__wasilibc_fd_renumber(from, to) };
    assert_eq!(
        r,
        0,
        "fd_renumber({from}, {to}): {}",
        io::Error::last_os_error()
    );
    // SAFETY: `to` now holds `from`'s connection, owned by this end.
    end.stream = Some(unsafe { TcpStream::from_raw_fd(to) });
    end.link.fds[end.end].set(to);
}

/// Takes `end`'s fd out of it, for the caller to close or reuse (it is
/// marked closed: the other end's actions no longer wait on it).
pub(crate) fn take_fd(mut end: WasiSock) -> RawFd {
    let fd = std::os::fd::IntoRawFd::into_raw_fd(end.stream.take().expect("an open end"));
    end.link.closed[end.end].set(true);
    // Not dropped: its drop would shut the other end down and wait.
    std::mem::forget(end);
    fd
}

/// A "pipe": a relayed pair, (the end that is only read, the end that is
/// only written).
///
/// ```no_run
/// // In a guest, with the relay running (see socketpair).
/// use evloop::conformance::fixture::SharedStream;
/// let (r, w) = evloop::conformance::fixture::pipe();
/// w.write_some(b"x")?;
/// assert_eq!(r.read_some(&mut [0u8; 1])?, 1);
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn pipe() -> (WasiSock, WasiSock) {
    socketpair()
}

/// The doomed fd of an [`OsFixture`](super::OsFixture), and its pair's
/// link (the close marks the end closed there).
///
/// ```
/// use evloop::conformance::fixture::{Fixture, OsDoom, OsFixture};
/// fn doom_of(_: &<OsFixture as Fixture>::Doom) {}
/// let _: fn(&OsDoom) = doom_of;
/// ```
pub struct OsDoom {
    fd: RawFd,
    link: Rc<Link>,
}

/// A relayed pair whose first end can be closed behind the loop's back:
/// its stream is taken out of the end (which then closes nothing), the
/// number kept.
pub(crate) fn doomed_pair() -> (RawSock, WasiSock, OsDoom) {
    let (mut a, b) = socketpair();
    let fd = std::os::fd::IntoRawFd::into_raw_fd(a.stream.take().unwrap());
    let link = a.link.clone();
    // Not dropped: its drop would mark the end closed and wait.
    std::mem::forget(a);
    (RawSock::owning_nothing(fd), b, OsDoom { fd, link })
}

/// `close` on the doomed fd.
pub(crate) fn close_behind_back(doom: &OsDoom) {
    // SAFETY: `doom.fd` was taken out of its stream by `doomed_pair` and is
    // owned by nobody (the watcher holds a `RawSock`, which never closes).
    let r = unsafe { libc::close(doom.fd) };
    assert_eq!(r, 0, "close: {}", io::Error::last_os_error());
    doom.link.closed[0].set(true);
}

/// Nothing to settle: the end knows already that its peer has gone (the
/// peer's drop shut its write side down).
pub(crate) fn settle_peer_close(_end: &WasiSock) {}

/// Never called: nothing interrupts a wait on WASI
/// ([`Scenario::not_applicable`](super::super::Scenario::not_applicable)
/// says so for `wait_interrupted`).
pub(crate) fn interrupt_waits<R>(_span: Duration, _f: impl FnOnce() -> R) -> (R, usize) {
    panic!("no signal interrupts a wait on WASI: wait_interrupted does not apply there")
}

/// A read after the reset returns the reset (wasmtime passes the host's
/// `ECONNRESET` on).
pub(crate) fn reset_reads_as_eof() -> bool {
    false
}

/// A FIN behind unread data: what a poll says of it is checked as
/// declared.
pub(crate) fn fin_hidden_by_data() -> bool {
    false
}
