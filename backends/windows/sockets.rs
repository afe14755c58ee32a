//! Winsock for the Windows backends: start-up (once per process, as
//! `std` does it for its own sockets) and the check that a handle the loop
//! is given is an open socket.

use std::io;
use std::sync::Once;

use windows_sys::Win32::Networking::WinSock::{
    getsockname, getsockopt, WSAGetLastError, WSAStartup, SOCKADDR_STORAGE, SOCKET, SOL_SOCKET,
    SO_TYPE, WSADATA, WSAEINVAL, WSAENOTSOCK,
};

use crate::RawFd;

/// Starts Winsock 2.2 for the process, once: a backend may wait before
/// the program made any socket through `std` (which starts it itself).
/// Never undone, as `std` never undoes its own.
pub(crate) fn startup() {
    static STARTED: Once = Once::new();
    STARTED.call_once(|| {
        // SAFETY: `data` is a valid, writable WSADATA for the call.
        unsafe {
            let mut data: WSADATA = std::mem::zeroed();
            WSAStartup(0x0202, &mut data);
        }
    });
}

/// The last Winsock error, as an `io::Error` (its raw code is the WSA
/// code: `WSAENOTSOCK` is 10038).
pub(crate) fn last_error() -> io::Error {
    // SAFETY: plain call, no arguments.
    io::Error::from_raw_os_error(unsafe { WSAGetLastError() })
}

/// Whether `socket` is an open socket: what `NoticeService::check_fd` asks on
/// Windows, so that [`Loop::io`](crate::Loop::io) refuses a closed socket,
/// or a handle that is not one (a file, a pipe), at once with the reason.
///
/// `getsockopt(SO_TYPE)` first; where it fails, `getsockname`, because
/// Wine 8's `getsockopt` fails with `WSAENOTSOCK` for a second handle of
/// a socket made by `DuplicateHandle` (which `select`, `recv` and the AFD
/// poll take as the socket it is), while its `getsockname` answers. An
/// unbound socket's `getsockname` fails with `WSAEINVAL`: still a socket.
/// A file's or a closed handle's fails otherwise (`WSAENOTSOCK`, or
/// `WSAEOPNOTSUPP` for a file under Wine), and `getsockopt`'s error is
/// the one reported.
pub(crate) fn check_socket(backend: &str, socket: RawFd) -> io::Result<()> {
    startup();
    let mut kind = 0i32;
    let mut len = std::mem::size_of::<i32>() as i32;
    // SAFETY: `kind` and `len` are live and writable for the call; any
    // handle value is acceptable to getsockopt (a non-socket fails).
    let rc = unsafe {
        getsockopt(
            socket as SOCKET,
            SOL_SOCKET,
            SO_TYPE,
            (&mut kind as *mut i32).cast(),
            &mut len,
        )
    };
    if rc == 0 {
        return Ok(());
    }
    let err = last_error();
    // SAFETY: a zeroed SOCKADDR_STORAGE is a valid (empty) address, and
    // `addr` and `addr_len` are live and writable for the call, whose
    // length says how much room `addr` has; any handle value is acceptable.
    let named = unsafe {
        let mut addr: SOCKADDR_STORAGE = std::mem::zeroed();
        let mut addr_len = std::mem::size_of::<SOCKADDR_STORAGE>() as i32;
        getsockname(
            socket as SOCKET,
            (&mut addr as *mut SOCKADDR_STORAGE).cast(),
            &mut addr_len,
        )
    };
    if named == 0 || last_error().raw_os_error() == Some(WSAEINVAL) {
        return Ok(());
    }
    let why = if err.raw_os_error() == Some(WSAENOTSOCK) {
        "not an open socket (closed, or a handle of another kind: on Windows only sockets can be watched)"
    } else {
        "its type could not be read"
    };
    Err(io::Error::new(
        err.kind(),
        format!("{backend}: socket {socket}: {why} ({err})"),
    ))
}
