//! Child exits on Windows: each watched process is opened by its id
//! (`OpenProcess`, for waiting and for its exit code) and waited on by the
//! system's thread pool (`RegisterWaitForSingleObject`); the wait's
//! callback queues the pid and wakes the backend, which reads the exit
//! code when the loop takes its notices.
//!
//! There is no reaping on Windows: any number of backends (of any number
//! of loops) may watch one process, each with its own handle, and each
//! reports its exit. A process handle keeps the pid from being reused, so
//! a child watched while its `std::process::Child` is still alive is the
//! right process however soon it exits.

use std::collections::HashMap;
use std::ffi::c_void;
use std::io;
use std::sync::{Arc, Mutex};

use windows_sys::Win32::Foundation::{CloseHandle, HANDLE, INVALID_HANDLE_VALUE};
use windows_sys::Win32::System::Threading::{
    GetExitCodeProcess, OpenProcess, RegisterWaitForSingleObject, TerminateProcess,
    UnregisterWaitEx, INFINITE, PROCESS_QUERY_LIMITED_INFORMATION, PROCESS_SYNCHRONIZE,
    PROCESS_TERMINATE, WT_EXECUTEONLYONCE,
};

use crate::backend::{ChildExit, Wake};
use crate::{ExitStatus, Signal};

/// What the wait's callback needs: whom to tell, and which pid it is.
struct Waiting {
    pid: u32,
    exited: Arc<Mutex<Vec<u32>>>,
    wake: Arc<dyn Wake>,
}

/// One watched process: its handle, the registered wait, and the
/// callback's context (boxed, so that its address is stable; freed only
/// after the wait is unregistered and its callback has returned).
struct Watched {
    process: HANDLE,
    wait: HANDLE,
    context: *mut Waiting,
}

impl Drop for Watched {
    fn drop(&mut self) {
        // SAFETY: `wait` was registered and is unregistered once, here;
        // INVALID_HANDLE_VALUE makes the call return only after a running
        // callback has finished, so `context` is no longer used when it is
        // freed. `process` is the handle OpenProcess gave, closed once.
        unsafe {
            UnregisterWaitEx(self.wait, INVALID_HANDLE_VALUE);
            drop(Box::from_raw(self.context));
            CloseHandle(self.process);
        }
    }
}

/// The children a backend watches.
pub(crate) struct Children {
    watched: HashMap<u32, Watched>,
    /// Pids whose process ended, queued by the wait callbacks.
    exited: Arc<Mutex<Vec<u32>>>,
    wake: Arc<dyn Wake>,
}

/// The thread pool's callback: the process ended (the wait is infinite,
/// so it never times out).
unsafe extern "system" fn ended(context: *mut c_void, _timed_out: bool) {
    // SAFETY: `context` is the `Waiting` boxed in `watch`, alive until the
    // wait is unregistered, which waits for this callback to return.
    let w = unsafe { &*(context as *const Waiting) };
    w.exited
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(w.pid);
    w.wake.wake();
}

impl Children {
    pub(crate) fn new(wake: Arc<dyn Wake>) -> Children {
        Children {
            watched: HashMap::new(),
            exited: Arc::new(Mutex::new(Vec::new())),
            wake,
        }
    }

    /// Starts waiting for process `pid` (watching it twice is once).
    /// Errors: the system's, for a pid that names no process or one this
    /// process may not open.
    pub(crate) fn watch(&mut self, pid: u32) -> io::Result<()> {
        if self.watched.contains_key(&pid) {
            return Ok(());
        }
        // SAFETY: plain call; a null result is checked.
        let process = unsafe {
            OpenProcess(
                PROCESS_SYNCHRONIZE | PROCESS_QUERY_LIMITED_INFORMATION,
                0,
                pid,
            )
        };
        if process.is_null() {
            return Err(io::Error::last_os_error());
        }
        let context = Box::into_raw(Box::new(Waiting {
            pid,
            exited: self.exited.clone(),
            wake: self.wake.clone(),
        }));
        let mut wait: HANDLE = std::ptr::null_mut();
        // SAFETY: `process` is open with SYNCHRONIZE; `ended` and `context`
        // stay valid until the wait is unregistered (`Watched::drop`).
        let ok = unsafe {
            RegisterWaitForSingleObject(
                &mut wait,
                process,
                Some(ended),
                context as *const c_void,
                INFINITE,
                WT_EXECUTEONLYONCE,
            )
        };
        if ok == 0 {
            let err = io::Error::last_os_error();
            // SAFETY: nothing was registered: the context and the handle
            // are ours alone.
            unsafe {
                drop(Box::from_raw(context));
                CloseHandle(process);
            }
            return Err(err);
        }
        self.watched.insert(
            pid,
            Watched {
                process,
                wait,
                context,
            },
        );
        Ok(())
    }

    /// Stops waiting for `pid` (nothing if it is not watched).
    pub(crate) fn unwatch(&mut self, pid: u32) {
        self.watched.remove(&pid);
    }

    /// Ends process `pid`: `Signal::KILL` and `Signal::TERM` terminate it
    /// (exit code 1, as libuv's `uv_kill`); 0 checks that it exists.
    pub(crate) fn signal(&mut self, pid: u32, signal: i32) -> io::Result<()> {
        let access = match signal {
            0 => PROCESS_QUERY_LIMITED_INFORMATION,
            Signal::KILL | Signal::TERM => PROCESS_TERMINATE,
            _ => {
                return Err(io::Error::new(
                    io::ErrorKind::Unsupported,
                    format!(
                        "signal {signal}: on Windows a process can only be terminated \
                         (Signal::KILL or Signal::TERM) or checked (0)"
                    ),
                ))
            }
        };
        // SAFETY: plain call; a null result is checked, the handle closed.
        unsafe {
            let process = OpenProcess(access, 0, pid);
            if process.is_null() {
                return Err(io::Error::last_os_error());
            }
            let ok = signal == 0 || TerminateProcess(process, 1) != 0;
            let err = io::Error::last_os_error();
            CloseHandle(process);
            if ok {
                Ok(())
            } else {
                Err(err)
            }
        }
    }

    /// The watched processes that ended, each reported once and then
    /// forgotten.
    pub(crate) fn take(&mut self, exits: &mut Vec<ChildExit>) {
        let ended: Vec<u32> =
            std::mem::take(&mut *self.exited.lock().unwrap_or_else(|e| e.into_inner()));
        for pid in ended {
            let Some(w) = self.watched.remove(&pid) else {
                continue; // unwatched since
            };
            let mut code = 0u32;
            // SAFETY: `w.process` is open with QUERY_LIMITED_INFORMATION.
            unsafe { GetExitCodeProcess(w.process, &mut code) };
            exits.push(ChildExit {
                pid,
                // Exit codes are 32-bit unsigned; std reports them as i32
                // too (an NTSTATUS such as 0xC0000005 is negative).
                status: ExitStatus::Exited(code as i32),
            });
        }
    }
}
