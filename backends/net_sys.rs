//! The few syscalls the `net` helpers need that `std` and `socket2` do not
//! offer safely: `accept4(2)` with `SOCK_NONBLOCK | SOCK_CLOEXEC` (one call
//! where `std` makes two), and the descriptor limit (`RLIMIT_NOFILE`). On
//! Windows both are `std` (sockets there have no per-process limit).
//!
//! On WASI (wasm32-wasip1), where socket2 does not build: accept is std's
//! (`sock_accept`), there is no descriptor limit to read or raise, and
//! `exec::AsyncFd` makes a borrowed fd non-blocking with `fcntl` here
//! (and `exec::hyper` shuts its write side with `shutdown`).
//!
//! Everything here is reached through `evloop::net` (and, on WASI,
//! `evloop::exec`); nothing is public from this module itself.

#![allow(unsafe_code)]

use std::io;
#[cfg(feature = "net")]
use std::net::{TcpListener, TcpStream};

/// Accepts one connection: the new socket is non-blocking and
/// close-on-exec, in one `accept4(2)` call. The peer's address is not
/// asked for (`TcpStream::peer_addr` gets it when wanted).
#[cfg(any(
    target_os = "linux",
    target_os = "android",
    target_os = "freebsd",
    target_os = "netbsd",
    target_os = "openbsd",
    target_os = "dragonfly",
    target_os = "illumos"
))]
pub(crate) fn accept(listener: &TcpListener) -> io::Result<TcpStream> {
    use std::os::fd::{AsRawFd, FromRawFd};
    let flags = libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC;
    // SAFETY: the listener is borrowed, so its fd stays open for the call;
    // accept4(2) allows a null address and length (no address wanted).
    let fd = unsafe {
        libc::accept4(
            listener.as_raw_fd(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            flags,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: accept4 returned a new descriptor that nothing else owns.
    Ok(unsafe { TcpStream::from_raw_fd(fd) })
}

/// Accepts one connection where there is no `accept4` (macOS): `std`'s
/// accept (close-on-exec set by `std`), then non-blocking.
#[cfg(not(any(
    windows,
    target_os = "wasi",
    target_os = "linux",
    target_os = "android",
    target_os = "freebsd",
    target_os = "netbsd",
    target_os = "openbsd",
    target_os = "dragonfly",
    target_os = "illumos"
)))]
pub(crate) fn accept(listener: &TcpListener) -> io::Result<TcpStream> {
    let (stream, _) = listener.accept()?;
    stream.set_nonblocking(true)?;
    Ok(stream)
}

/// Accepts one connection on Windows: `std`'s accept (the new socket is not
/// inheritable), then non-blocking.
#[cfg(windows)]
pub(crate) fn accept(listener: &TcpListener) -> io::Result<TcpStream> {
    let (stream, _) = listener.accept()?;
    stream.set_nonblocking(true)?;
    Ok(stream)
}

/// Windows limits sockets by memory only: no limit to report or raise.
#[cfg(windows)]
pub(crate) fn fd_limits() -> io::Result<(u64, u64)> {
    Ok((u64::MAX, u64::MAX))
}

/// Nothing to raise on Windows.
#[cfg(windows)]
pub(crate) fn set_fd_soft_limit(_soft: u64) -> io::Result<()> {
    Ok(())
}

/// The soft and hard limits on open descriptors (`RLIMIT_NOFILE`).
#[cfg(unix)]
pub(crate) fn fd_limits() -> io::Result<(u64, u64)> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a live, writable rlimit for the call to fill.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // rlim_t is u64 on Linux and macOS, i64 on some BSDs.
    #[allow(clippy::unnecessary_cast)]
    Ok((lim.rlim_cur as u64, lim.rlim_max as u64))
}

/// Sets the soft limit on open descriptors (at most the hard limit).
#[cfg(unix)]
pub(crate) fn set_fd_soft_limit(soft: u64) -> io::Result<()> {
    let (_, hard) = fd_limits()?;
    let lim = libc::rlimit {
        rlim_cur: soft.min(hard) as libc::rlim_t,
        rlim_max: hard as libc::rlim_t,
    };
    // SAFETY: `lim` is a live rlimit, only read by the call.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Accepts one connection on WASI: `std`'s accept (`sock_accept`, on a
/// listener the runtime preopened), then non-blocking. WASI has no exec,
/// so no close-on-exec either.
#[cfg(all(target_os = "wasi", feature = "net"))]
pub(crate) fn accept(listener: &TcpListener) -> io::Result<TcpStream> {
    let (stream, _) = listener.accept()?;
    stream.set_nonblocking(true)?;
    Ok(stream)
}

/// WASI (wasm32-wasip1) has no `getrlimit`: the runtime's descriptor
/// table has no limit a guest can read.
#[cfg(all(target_os = "wasi", feature = "net"))]
pub(crate) fn fd_limits() -> io::Result<(u64, u64)> {
    Err(super::wasi::refused(
        "cannot read the descriptor limit: it has no getrlimit",
    ))
}

/// WASI (wasm32-wasip1) has no `setrlimit` (nor a limit to raise).
#[cfg(all(target_os = "wasi", feature = "net"))]
pub(crate) fn set_fd_soft_limit(_soft: u64) -> io::Result<()> {
    Err(super::wasi::refused(
        "cannot raise the descriptor limit: it has no setrlimit",
    ))
}

/// Makes a borrowed descriptor non-blocking on WASI, where socket2 (which
/// does it elsewhere) does not build: `fcntl(F_SETFL)` adds `O_NONBLOCK`
/// (wasi-libc's `fd_fdstat_set_flags`).
#[cfg(all(target_os = "wasi", feature = "exec"))]
pub(crate) fn set_nonblocking(fd: std::os::fd::BorrowedFd<'_>) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let fd = fd.as_raw_fd();
    // SAFETY: the fd is borrowed, so it stays open for both calls; F_GETFL
    // and F_SETFL take and return plain ints, no memory.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    if flags & libc::O_NONBLOCK != 0 {
        return Ok(());
    }
    // SAFETY: as above.
    if unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Shuts a borrowed socket's write side on WASI (`sock_shutdown`), where
/// socket2 (which does it elsewhere) does not build.
#[cfg(all(target_os = "wasi", feature = "hyper"))]
pub(crate) fn shutdown_write(fd: std::os::fd::BorrowedFd<'_>) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // wasi-libc's SHUT_WR (__WASI_SDFLAGS_WR); the libc crate names it
    // for wasip2 only.
    const SHUT_WR: libc::c_int = 2;
    // SAFETY: the fd is borrowed, so it stays open for the call, which
    // takes no memory.
    if unsafe { libc::shutdown(fd.as_raw_fd(), SHUT_WR) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
