//! The Windows part of [`OsFixture`](super::OsFixture): connected TCP
//! loopback pairs for the pairs and the pipes, sockets closed behind the
//! loop's back with `closesocket`, handle values reused on purpose.
//!
//! Windows has no socketpair, and its pipes (anonymous or named) are not
//! sockets: select and AFD poll, all a Windows backend watches, refuse
//! them. So a "pipe" here is a TCP pair of which one end is only read and
//! the other only written, which is the same observable thing for what
//! the scenarios do with pipes (data through, the writer's close giving
//! EOF, a full writer whose reader leaves woken and its write failing).
//!
//! Handle values, unlike fd numbers, cannot be kept apart by number
//! (Wine gives out the lowest free value, Windows reuses a freed entry
//! soon): a scenario that closes a socket behind the loop's back, or
//! reuses a value on purpose, holds [`handles_exclusive`] for the whole
//! scenario, and every other scenario of the kit (on the simulator too)
//! holds the lock shared, so that while the first runs no other scenario
//! of the kit runs, or makes a handle that could take the value. (A handle
//! made outside the kit, by another test of the same binary, could still
//! take it: the scenario then fails with that reason, it does not hang.)

use std::cell::Cell;
use std::io::{self, Write};
use std::net::{TcpListener, TcpStream};
use std::os::windows::io::{AsRawSocket, AsSocket, BorrowedSocket, RawSocket};
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

use windows_sys::Win32::Networking::WinSock::{
    closesocket, recv, send, WSADuplicateSocketW, WSAGetLastError, WSAPoll, WSASocketW,
    FROM_PROTOCOL_INFO, INVALID_SOCKET, POLLWRNORM, SOCKET, WSAPOLLFD, WSAPROTOCOL_INFOW,
    WSA_FLAG_NO_HANDLE_INHERIT, WSA_FLAG_OVERLAPPED,
};
use windows_sys::Win32::System::Threading::GetCurrentProcessId;

use super::SharedStream;
use crate::RawFd;

/// What [`Fixture::pair`](super::Fixture::pair) gives on this platform: a
/// connected TCP loopback pair.
pub type OsSock = TcpStream;
/// The read end of [`Fixture::pipe`](super::Fixture::pipe) on this
/// platform: one end of a TCP pair, only read.
pub type OsPipeR = TcpStream;
/// The write end of [`Fixture::pipe`](super::Fixture::pipe) on this
/// platform: the other end, only written.
pub type OsPipeW = TcpStream;

impl SharedStream for TcpStream {
    fn read_some(&self, buf: &mut [u8]) -> io::Result<usize> {
        let mut s = self;
        std::io::Read::read(&mut s, buf)
    }
    fn write_some(&self, buf: &[u8]) -> io::Result<usize> {
        let mut s = self;
        std::io::Write::write(&mut s, buf)
    }
    /// A loopback TCP sender whose peer has just read can still get room
    /// after a write would block: the window update and the queued bytes
    /// move after `recv` returns (seen under Wine in CI: a filled socket
    /// writable again an iteration later). 50 ms of no room is taken as
    /// full.
    fn room_comes_soon(&self) -> bool {
        let mut p = WSAPOLLFD {
            fd: self.as_raw_socket() as SOCKET,
            events: POLLWRNORM,
            revents: 0,
        };
        // SAFETY: one initialised WSAPOLLFD, valid for the call; the
        // socket is open (borrowed from `self`).
        let n = unsafe { WSAPoll(&mut p, 1, 50) };
        n > 0 && p.revents & POLLWRNORM != 0
    }
}

/// The number of a borrowed socket.
pub(crate) fn raw(socket: BorrowedSocket<'_>) -> RawFd {
    socket.as_raw_socket()
}

/// The handles the fixture makes, and those it closes or reuses on
/// purpose (see the module documentation).
static HANDLES: RwLock<()> = RwLock::new(());

/// What this thread holds of [`HANDLES`].
#[derive(Clone, Copy, PartialEq, Eq)]
enum Held {
    Nothing,
    Shared,
    Exclusive,
}

thread_local! {
    static HELD_HERE: Cell<Held> = const { Cell::new(Held::Nothing) };
}

/// A hold on the fixture's handles (nothing if this thread holds them
/// already: the lock is not re-entrant).
pub struct Handles {
    _guard: Option<Guard>,
}

#[allow(dead_code)] // held for its drop
enum Guard {
    Shared(RwLockReadGuard<'static, ()>),
    Exclusive(RwLockWriteGuard<'static, ()>),
}

impl Drop for Handles {
    fn drop(&mut self) {
        if self._guard.is_some() {
            HELD_HERE.with(|h| h.set(Held::Nothing));
        }
    }
}

/// Holds the fixture's handles for the whole of a scenario: shared, or
/// for this thread alone (`exclusive`: a scenario that closes a socket
/// behind the loop's back or reuses a value), so that while one of those
/// runs no other scenario of the kit runs at all (each waits at its
/// start, making nothing).
pub(crate) fn scenario_lock(exclusive: bool) -> Handles {
    match HELD_HERE.with(Cell::get) {
        Held::Exclusive => return Handles { _guard: None },
        Held::Shared => {
            assert!(
                !exclusive,
                "the fixture's handles are held shared on this thread"
            );
            return Handles { _guard: None };
        }
        Held::Nothing => {}
    }
    let guard = if exclusive {
        HELD_HERE.with(|h| h.set(Held::Exclusive));
        Guard::Exclusive(HANDLES.write().unwrap_or_else(|p| p.into_inner()))
    } else {
        HELD_HERE.with(|h| h.set(Held::Shared));
        Guard::Shared(HANDLES.read().unwrap_or_else(|p| p.into_inner()))
    };
    Handles {
        _guard: Some(guard),
    }
}

/// Held while the fixture makes sockets or a loop (a backend makes
/// handles: a completion port, an AFD handle, a wake socket) outside a
/// scenario (the no-allocation check).
pub(crate) fn creating() -> Handles {
    scenario_lock(false)
}

/// Takes the fixture's handles for this thread alone (see the module
/// documentation).
pub fn handles_exclusive() -> Handles {
    scenario_lock(true)
}

/// A connected, non-blocking TCP loopback pair with `TCP_NODELAY` (the
/// name says what it stands for: Windows has no socketpair). A byte
/// written to one end can be read from the other at once on loopback.
pub fn socketpair() -> (TcpStream, TcpStream) {
    let _creating = creating();
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    let a = TcpStream::connect(listener.local_addr().unwrap()).expect("connect");
    let (b, from) = listener.accept().expect("accept");
    // Nobody else knows the port; but if somebody connected, this is not
    // our pair.
    assert_eq!(from, a.local_addr().unwrap(), "accepted a stranger");
    for s in [&a, &b] {
        s.set_nonblocking(true).unwrap();
        s.set_nodelay(true).unwrap();
        // Fixed buffers: under Wine a loopback socket is the host's, whose
        // receive buffer grows as data comes (autotuning), so that a
        // filled end finds room again later with nobody reading; a size
        // set by hand stays.
        let s = socket2::SockRef::from(s);
        s.set_recv_buffer_size(64 * 1024).unwrap();
        s.set_send_buffer_size(64 * 1024).unwrap();
    }
    (a, b)
}

/// A "pipe": a TCP pair, (the end that is only read, the end that is only
/// written).
pub fn pipe() -> (TcpStream, TcpStream) {
    socketpair()
}

/// The last Winsock error.
fn wsa_error() -> io::Error {
    // SAFETY: no arguments, no preconditions.
    io::Error::from_raw_os_error(unsafe { WSAGetLastError() })
}

/// A socket registered by number only: it owns nothing and closes nothing
/// when dropped, so that a test can `closesocket` it behind the loop's
/// back without anything closing it a second time.
pub struct RawSock {
    socket: RawSocket,
}

impl AsSocket for RawSock {
    fn as_socket(&self) -> BorrowedSocket<'_> {
        // SAFETY: deliberately weaker than `borrow_raw` asks: the socket is
        // open when the watcher is registered, and the test closes it while
        // the watcher is active to check what the loop does then. The loop
        // only passes the number to the backend; nothing reads through it
        // after the close but Winsock, which reports WSAENOTSOCK.
        unsafe { BorrowedSocket::borrow_raw(self.socket) }
    }
}

impl SharedStream for RawSock {
    fn read_some(&self, buf: &mut [u8]) -> io::Result<usize> {
        let len = buf.len().min(i32::MAX as usize) as i32;
        // SAFETY: `buf` is valid for `len` bytes; a closed socket gives
        // WSAENOTSOCK.
        let n = unsafe { recv(self.socket as SOCKET, buf.as_mut_ptr(), len, 0) };
        if n < 0 {
            Err(wsa_error())
        } else {
            Ok(n as usize)
        }
    }
    fn write_some(&self, buf: &[u8]) -> io::Result<usize> {
        let len = buf.len().min(i32::MAX as usize) as i32;
        // SAFETY: `buf` is valid for `len` bytes; a closed socket gives
        // WSAENOTSOCK.
        let n = unsafe { send(self.socket as SOCKET, buf.as_ptr(), len, 0) };
        if n < 0 {
            Err(wsa_error())
        } else {
            Ok(n as usize)
        }
    }
}

/// The doomed socket of an [`OsFixture`](super::OsFixture), and the lock
/// that keeps its value from being reused until the scenario ends.
pub struct OsDoom {
    socket: RawSocket,
    _exclusive: Handles,
}

/// A TCP pair whose first end can be closed behind the loop's back.
pub(crate) fn doomed_pair() -> (RawSock, TcpStream, OsDoom) {
    let exclusive = handles_exclusive();
    let (a, b) = socketpair();
    let socket = std::os::windows::io::IntoRawSocket::into_raw_socket(a);
    (
        RawSock { socket },
        b,
        OsDoom {
            socket,
            _exclusive: exclusive,
        },
    )
}

/// `closesocket` on the doomed socket.
pub(crate) fn close_behind_back(doom: &OsDoom) {
    // SAFETY: `doom.socket` was taken out of its `TcpStream` by
    // `doomed_pair` and is owned by nobody (the watcher holds a `RawSock`,
    // which never closes); no other scenario can have reused the value
    // while the exclusive lock is held.
    let r = unsafe { closesocket(doom.socket as SOCKET) };
    assert_eq!(r, 0, "closesocket: {}", wsa_error());
}

/// A TCP end does not know that its peer has stopped reading until it
/// writes and the peer's stack answers with a reset (a socketpair knows at
/// once): one byte, whose fate does not matter. On loopback the reset is
/// back before `send` returns.
pub(crate) fn settle_peer_close(end: &TcpStream) {
    let _ = (&*end).write(b"\0");
}

/// Never called: no signal interrupts a wait on Windows
/// ([`Scenario::not_applicable`](super::super::Scenario::not_applicable)
/// says so for `wait_interrupted`).
pub(crate) fn interrupt_waits<R>(_span: Duration, _f: impl FnOnce() -> R) -> (R, usize) {
    panic!(
        "no signal interrupts a wait on Windows: wait_interrupted does not apply to the Windows \
         backends"
    )
}

/// A second socket handle of `socket`'s socket, owned by the caller:
/// `WSADuplicateSocketW` into this process and `WSASocketW` from what it
/// gives, so that Winsock (Wine's too, which refuses a `DuplicateHandle`
/// copy in select) takes it for a socket. The underlying socket stays
/// open until its last handle is closed (as `dup` keeps a file open), so
/// that what one handle has pending can still arrive after the other is
/// closed.
pub fn duplicate(socket: RawSocket) -> RawSocket {
    // SAFETY: WSAPROTOCOL_INFOW is plain data, for WSADuplicateSocketW to
    // fill in; `socket` is an open socket of this process; WSASocketW only
    // reads the filled-in structure. The new socket is the caller's.
    unsafe {
        let mut info: WSAPROTOCOL_INFOW = std::mem::zeroed();
        let r = WSADuplicateSocketW(socket as SOCKET, GetCurrentProcessId(), &mut info);
        assert_eq!(r, 0, "WSADuplicateSocketW: {}", wsa_error());
        let dup = WSASocketW(
            FROM_PROTOCOL_INFO,
            FROM_PROTOCOL_INFO,
            FROM_PROTOCOL_INFO,
            &info,
            0,
            WSA_FLAG_OVERLAPPED | WSA_FLAG_NO_HANDLE_INHERIT,
        );
        assert!(dup != INVALID_SOCKET, "WSASocketW: {}", wsa_error());
        dup as RawSocket
    }
}

/// Whether a read after the peer's reset returns EOF rather than the
/// reset: under Wine 8, whose recv returns 0 there (Windows returns
/// `WSAECONNRESET`).
pub(crate) fn reset_reads_as_eof() -> bool {
    under_wine()
}

/// Whether a FIN behind unread data goes unreported until the data is
/// read: under Wine 8, which finds a hang-up by peeking at the socket (the
/// peek returns the data). Windows' AFD, as far as is known (not run
/// here), reports `AFD_POLL_DISCONNECT` when the FIN arrives.
pub(crate) fn fin_hidden_by_data() -> bool {
    under_wine()
}

/// Whether this program runs under Wine (whose ntdll exports
/// `wine_get_version`): where Wine is known to differ from Windows, a
/// scenario says so, loudly, and checks what Wine does.
pub fn under_wine() -> bool {
    use windows_sys::Win32::System::LibraryLoader::{GetModuleHandleA, GetProcAddress};
    // SAFETY: both names are NUL-terminated; ntdll is always loaded, and a
    // null module is handled.
    unsafe {
        let ntdll = GetModuleHandleA(c"ntdll.dll".as_ptr().cast());
        !ntdll.is_null() && GetProcAddress(ntdll, c"wine_get_version".as_ptr().cast()).is_some()
    }
}
