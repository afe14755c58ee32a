//! The AFD driver's poll request, `IOCTL_AFD_POLL`: readiness of a socket
//! as a completion on an I/O completion port (what wepoll, mio, polling
//! and libuv build their Windows event loops on; the `iocp` backend's
//! only way to the sockets).
//!
//! - [`Afd`]: a handle to the driver (`\Device\Afd\Evloop`, opened with
//!   `NtCreateFile`), associated with the backend's port under a key of
//!   its choosing. Poll requests are issued through it, on any socket of
//!   the process; their completions arrive on the port, each carrying the
//!   address of its [`Request`].
//! - [`Request`]: one poll request's memory (the `IO_STATUS_BLOCK` and the
//!   `AFD_POLL_INFO` the driver writes its answer into). The driver owns
//!   it from [`Afd::poll`] until its completion has been dequeued from the
//!   port, even after [`Afd::cancel`]: the caller keeps it at a fixed
//!   address (boxed) until then.
//! - [`base_socket`]: the handle to poll is the socket's *base* handle
//!   (`SIO_BASE_HANDLE`), not the one a layered service provider (LSP)
//!   may have wrapped around it; where an LSP breaks that ioctl too, the
//!   `SIO_BSP_HANDLE_*` ones (as mio does).
//!
//! The request is one-shot by nature: it completes once, with the events
//! that were signalled when it completed (at once if one of them already
//! holds when it is issued), and must be issued again to hear more.
//!
//! Wine (8.0 here) implements the driver's poll in its server, completes
//! a pending request with `AFD_POLL_LOCAL_CLOSE` when its socket is
//! closed, and cancels through `NtCancelIoFileEx`; the `iocp` backend's
//! module documentation lists what it does differently.

use std::ffi::c_void;
use std::io;
use std::mem::size_of;
use std::ptr::{null, null_mut};

use windows_sys::Wdk::Foundation::OBJECT_ATTRIBUTES;
use windows_sys::Wdk::Storage::FileSystem::{NtCancelIoFileEx, NtCreateFile, FILE_OPEN};
use windows_sys::Wdk::System::IO::NtDeviceIoControlFile;
use windows_sys::Win32::Foundation::{
    CloseHandle, RtlNtStatusToDosError, HANDLE, NTSTATUS, STATUS_CANCELLED, STATUS_NOT_FOUND,
    STATUS_PENDING, STATUS_SUCCESS, UNICODE_STRING,
};
use windows_sys::Win32::Networking::WinSock::{
    WSAIoctl, SIO_BASE_HANDLE, SIO_BSP_HANDLE, SIO_BSP_HANDLE_POLL, SIO_BSP_HANDLE_SELECT, SOCKET,
    SOCKET_ERROR,
};
use windows_sys::Win32::Storage::FileSystem::{
    SetFileCompletionNotificationModes, FILE_SHARE_READ, FILE_SHARE_WRITE, SYNCHRONIZE,
};
use windows_sys::Win32::System::WindowsProgramming::FILE_SKIP_SET_EVENT_ON_HANDLE;
use windows_sys::Win32::System::IO::{CreateIoCompletionPort, IO_STATUS_BLOCK, IO_STATUS_BLOCK_0};

use crate::RawFd;

/// The poll ioctl (`FSCTL_AFD_BASE` 0x12, function 9, `METHOD_BUFFERED`).
const IOCTL_AFD_POLL: u32 = 0x0001_2024;

/// Data (or a graceful close's EOF) can be read.
pub(crate) const POLL_RECEIVE: u32 = 0x0001;
/// Out-of-band data can be read (not asked for: evloop has no such
/// interest).
#[allow(dead_code)]
pub(crate) const POLL_RECEIVE_EXPEDITED: u32 = 0x0002;
/// Data can be written.
pub(crate) const POLL_SEND: u32 = 0x0004;
/// The peer closed its side gracefully (a FIN: reads end in EOF).
pub(crate) const POLL_DISCONNECT: u32 = 0x0008;
/// The connection was reset or aborted.
pub(crate) const POLL_ABORT: u32 = 0x0010;
/// The socket was closed (by this process; the handle is gone).
pub(crate) const POLL_LOCAL_CLOSE: u32 = 0x0020;
/// A listening socket has a connection to accept.
pub(crate) const POLL_ACCEPT: u32 = 0x0080;
/// A connect failed.
pub(crate) const POLL_CONNECT_FAIL: u32 = 0x0100;

/// One socket's entry of `AFD_POLL_INFO`.
#[repr(C)]
struct PollHandleInfo {
    handle: HANDLE,
    events: u32,
    status: NTSTATUS,
}

/// `AFD_POLL_INFO` with room for one socket (evloop asks for one socket
/// per request, as wepoll and mio do).
#[repr(C)]
struct PollInfo {
    timeout: i64,
    number_of_handles: u32,
    exclusive: u32,
    handles: [PollHandleInfo; 1],
}

/// The memory of one poll request: what the driver writes while the
/// request is pending (the status block, and the poll info, which is both
/// the ioctl's input and its output), and the backend's note of whose it
/// is. Boxed by its owner and never moved; handed to the driver by
/// [`Afd::poll`], and the driver's until the request's completion has
/// been dequeued from the port.
#[repr(C)]
pub(crate) struct Request {
    iosb: IO_STATUS_BLOCK,
    info: PollInfo,
    /// The loop's name of the socket (its key in the backend's table).
    pub(crate) socket: RawFd,
    /// No socket owns the request any more (removed or re-registered while
    /// it was pending): free it when its completion arrives.
    pub(crate) orphan: bool,
}

/// How a completed request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// With these events (`POLL_*`; possibly none).
    Events(u32),
    /// Cancelled ([`Afd::cancel`]) before anything happened.
    Cancelled,
    /// The request itself failed, with this status.
    Failed(NTSTATUS),
}

impl Request {
    /// A new, idle request for `socket`, boxed (its address is what the
    /// driver and the completions know it by).
    pub(crate) fn boxed(socket: RawFd) -> Box<Request> {
        Box::new(Request {
            iosb: IO_STATUS_BLOCK {
                Anonymous: IO_STATUS_BLOCK_0 { Status: 0 },
                Information: 0,
            },
            info: PollInfo {
                timeout: 0,
                number_of_handles: 0,
                exclusive: 0,
                handles: [PollHandleInfo {
                    handle: null_mut(),
                    events: 0,
                    status: 0,
                }],
            },
            socket,
            orphan: false,
        })
    }

    /// What the driver answered. Read only once the request's completion
    /// has been dequeued (the driver no longer writes to it).
    pub(crate) fn outcome(&self) -> Outcome {
        // SAFETY: `Status` is the member of the union the driver writes
        // (and `poll` initialised); both are plain integers.
        let status = unsafe { self.iosb.Anonymous.Status };
        if status == STATUS_CANCELLED {
            Outcome::Cancelled
        } else if status < 0 {
            Outcome::Failed(status)
        } else if self.info.number_of_handles < 1 {
            Outcome::Events(0)
        } else {
            Outcome::Events(self.info.handles[0].events)
        }
    }
}

/// An NTSTATUS as an `io::Error` (through its Win32 error code).
pub(crate) fn nt_error(status: NTSTATUS) -> io::Error {
    // SAFETY: plain call.
    io::Error::from_raw_os_error(unsafe { RtlNtStatusToDosError(status) } as i32)
}

/// `\Device\Afd\Evloop`: the driver, and a name of ours after it (any
/// name opens the same driver; it shows in handle listings).
const DEVICE: [u16; 18] = {
    let s = b"\\Device\\Afd\\Evloop";
    let mut w = [0u16; 18];
    let mut i = 0;
    while i < s.len() {
        w[i] = s[i] as u16;
        i += 1;
    }
    w
};

/// A handle to the AFD driver, associated with a completion port.
pub(crate) struct Afd {
    handle: HANDLE,
}

impl std::fmt::Debug for Afd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Afd").field(&self.handle).finish()
    }
}

impl Afd {
    /// Opens the driver and associates the handle with `port`: every
    /// request issued through it completes there, under `key`.
    pub(crate) fn open(port: HANDLE, key: usize) -> io::Result<Afd> {
        let name = UNICODE_STRING {
            Length: (DEVICE.len() * size_of::<u16>()) as u16,
            MaximumLength: (DEVICE.len() * size_of::<u16>()) as u16,
            Buffer: DEVICE.as_ptr() as *mut u16,
        };
        let attributes = OBJECT_ATTRIBUTES {
            Length: size_of::<OBJECT_ATTRIBUTES>() as u32,
            RootDirectory: null_mut(),
            ObjectName: &name,
            Attributes: 0,
            SecurityDescriptor: null(),
            SecurityQualityOfService: null(),
        };
        let mut iosb = IO_STATUS_BLOCK {
            Anonymous: IO_STATUS_BLOCK_0 { Status: 0 },
            Information: 0,
        };
        let mut handle: HANDLE = null_mut();
        // SAFETY: every pointer is to a live local for the duration of the
        // call (the name's buffer is a static); no create options, so the
        // handle is for asynchronous I/O, as the port needs.
        let status = unsafe {
            NtCreateFile(
                &mut handle,
                SYNCHRONIZE,
                &attributes,
                &mut iosb,
                null(),
                0,
                FILE_SHARE_READ | FILE_SHARE_WRITE,
                FILE_OPEN,
                0,
                null(),
                0,
            )
        };
        if status != STATUS_SUCCESS {
            let err = nt_error(status);
            return Err(io::Error::new(
                err.kind(),
                format!(
                    "iocp: cannot open the AFD driver (\\Device\\Afd), which polls sockets: {err} \
                     (NTSTATUS {status:#x}; Wine before 7.13 lacks it: use the select backend there)"
                ),
            ));
        }
        let afd = Afd { handle };
        // SAFETY: `handle` is open and ours; `port` is an open completion
        // port (the caller's).
        if unsafe { CreateIoCompletionPort(handle, port, key, 0) }.is_null() {
            return Err(io::Error::last_os_error()); // `afd` closes the handle
        }
        // Completions need not signal the handle as an event too (nobody
        // waits on it). An optimisation only: a failure changes nothing.
        // SAFETY: `handle` is open.
        unsafe { SetFileCompletionNotificationModes(handle, FILE_SKIP_SET_EVENT_ON_HANDLE as u8) };
        Ok(afd)
    }

    /// Issues a poll of `base` (a base socket handle) for `events`
    /// (`POLL_*`) into `req`. `Ok`: the request is the driver's now, pending
    /// or already complete, and its completion will arrive on the port.
    /// `Err`: it failed at once (a closed socket: `ERROR_INVALID_HANDLE`),
    /// nothing will arrive, and `req` is the caller's again.
    ///
    /// # Safety
    ///
    /// `req` points to a live [`Request`] that no other request uses, and
    /// that stays at its address, untouched, until its completion has been
    /// dequeued from the port.
    pub(crate) unsafe fn poll(
        &self,
        req: *mut Request,
        base: SOCKET,
        events: u32,
    ) -> io::Result<()> {
        // SAFETY: `req` is live and not in the driver's hands (the
        // caller's contract), so it may be written here.
        let (iosb, info) = unsafe {
            (*req).iosb.Anonymous.Status = STATUS_PENDING;
            (*req).iosb.Information = 0;
            (*req).info = PollInfo {
                timeout: i64::MAX,
                number_of_handles: 1,
                exclusive: 0,
                handles: [PollHandleInfo {
                    handle: base as HANDLE,
                    events,
                    status: 0,
                }],
            };
            (
                std::ptr::addr_of_mut!((*req).iosb),
                std::ptr::addr_of_mut!((*req).info).cast::<c_void>(),
            )
        };
        let len = size_of::<PollInfo>() as u32;
        // SAFETY: `self.handle` is open; `iosb` and `info` point into the
        // caller's pinned request (contract above); the request's address
        // is the APC context, which its completion carries back.
        let status = unsafe {
            NtDeviceIoControlFile(
                self.handle,
                null_mut(),
                None,
                req as *const c_void,
                iosb,
                IOCTL_AFD_POLL,
                info,
                len,
                info,
                len,
            )
        };
        if status == STATUS_SUCCESS || status == STATUS_PENDING {
            Ok(())
        } else {
            Err(nt_error(status))
        }
    }

    /// Asks the driver to end the pending request `req` early: it then
    /// completes with `STATUS_CANCELLED` (or has completed already, with
    /// events). Either way its completion still arrives on the port, and
    /// `req` stays the driver's until then.
    ///
    /// # Safety
    ///
    /// `req` was issued through this handle by [`Afd::poll`] and its
    /// completion has not been dequeued yet.
    pub(crate) unsafe fn cancel(&self, req: *mut Request) -> io::Result<()> {
        let mut iosb = IO_STATUS_BLOCK {
            Anonymous: IO_STATUS_BLOCK_0 { Status: 0 },
            Information: 0,
        };
        // SAFETY: `self.handle` is open; the request's status block is
        // only named (as the request to cancel), not accessed here.
        let status =
            unsafe { NtCancelIoFileEx(self.handle, std::ptr::addr_of!((*req).iosb), &mut iosb) };
        // NOT_FOUND: it completed before the cancel came.
        if status == STATUS_SUCCESS || status == STATUS_NOT_FOUND {
            Ok(())
        } else {
            Err(nt_error(status))
        }
    }
}

impl Drop for Afd {
    fn drop(&mut self) {
        // SAFETY: the handle is ours, closed once. Requests still pending
        // on it are cancelled by the close; the backend waits for them (or
        // leaks their memory) before it lets an `Afd` go.
        unsafe { CloseHandle(self.handle) };
    }
}

/// One `WSAIoctl` that returns a socket handle.
fn socket_ioctl(socket: SOCKET, code: u32) -> Result<SOCKET, io::Error> {
    let mut out: SOCKET = 0;
    let mut bytes = 0u32;
    // SAFETY: `out` and `bytes` are live and writable for the call, `out`
    // has room for the SOCKET the ioctl writes; no overlapped I/O.
    let rc = unsafe {
        WSAIoctl(
            socket,
            code,
            null(),
            0,
            (&mut out as *mut SOCKET).cast(),
            size_of::<SOCKET>() as u32,
            &mut bytes,
            null_mut(),
            None,
        )
    };
    if rc == SOCKET_ERROR {
        Err(super::sockets::last_error())
    } else {
        Ok(out)
    }
}

/// The base handle of `socket`: the one the AFD driver knows, beneath any
/// layered service provider. `SIO_BASE_HANDLE` is not supposed to be
/// intercepted by an LSP, but some LSPs do break it: then the handle of
/// the provider below them, from the `SIO_BSP_HANDLE_*` ioctls, if it
/// differs from `socket` (as mio does). Errors: `SIO_BASE_HANDLE`'s (a
/// closed socket, a handle that is not a socket: `WSAENOTSOCK`).
pub(crate) fn base_socket(socket: RawFd) -> io::Result<SOCKET> {
    let socket = socket as SOCKET;
    let err = match socket_ioctl(socket, SIO_BASE_HANDLE) {
        Ok(base) => return Ok(base),
        Err(err) => err,
    };
    for code in [SIO_BSP_HANDLE_POLL, SIO_BSP_HANDLE_SELECT, SIO_BSP_HANDLE] {
        if let Ok(base) = socket_ioctl(socket, code) {
            if base != socket {
                return Ok(base);
            }
        }
    }
    Err(err)
}
