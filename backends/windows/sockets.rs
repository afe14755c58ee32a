//! Winsock for the Windows backends: start-up (once per process, as
//! `std` does it for its own sockets) and the check that a handle the loop
//! is given is an open socket.

use std::io;
use std::sync::Once;

use windows_sys::Win32::Networking::WinSock::{
    getsockopt, WSAGetLastError, WSAStartup, SOCKET, SOL_SOCKET, SO_TYPE, WSADATA, WSAENOTSOCK,
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

/// Whether `socket` is an open socket: what `Backend::check_fd` asks on
/// Windows, so that [`Loop::io`](crate::Loop::io) refuses a closed socket,
/// or a handle that is not one (a file, a pipe), at once with the reason.
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
