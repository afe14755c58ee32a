//! Child processes: the checks and the reaping every Unix backend shares,
//! and the table of watched children of the epoll, poll and select
//! backends (kqueue has `EVFILT_PROC` instead).
//!
//! Only watched pids are ever reaped, never `waitpid(-1)`: another part of
//! the program may be waiting for its own children.
//!
//! - Linux: one `pidfd_open(pid)` per child, an internal fd in the
//!   backend's kernel set; readable once the child has exited, when
//!   `waitid(P_PIDFD, ..)` reaps it.
//! - Where pidfds are not available (`ENOSYS` on kernels before 5.3, `EPERM`
//!   under some seccomp filters; every other Unix), or when a test forces
//!   it: `SIGCHLD` through the hub (an internal watch, not reported to the
//!   loop unless it watches `SIGCHLD` itself), and on each arrival a
//!   `waitpid(pid, WNOHANG)` for each watched pid (and one at `watch_child`,
//!   for a child that has already exited).
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use crate::{ChildExit, ExitStatus};

/// Checks that `pid` is an unreaped child of this process, without reaping
/// it, and returns it as a `pid_t`.
pub(crate) fn check_child(backend: &str, pid: u32) -> io::Result<libc::pid_t> {
    let refuse = |err: io::Error| {
        io::Error::new(
            err.kind(),
            format!(
                "the {backend} backend cannot watch pid {pid}: it is not an unreaped child \
                 of this process ({err})"
            ),
        )
    };
    let id = match libc::pid_t::try_from(pid) {
        Ok(id) if id > 0 => id,
        _ => return Err(refuse(io::Error::from_raw_os_error(libc::ESRCH))),
    };
    peek(id).map(|_| id).map_err(refuse)
}

/// Whether child `pid` has exited (or is no child of ours any more), left
/// unreaped.
pub(crate) fn has_exited(pid: libc::pid_t) -> bool {
    peek(pid).unwrap_or(true)
}

/// `waitid(P_PID, pid, WEXITED | WNOHANG | WNOWAIT)`: whether the child has
/// exited, without reaping it; `ECHILD` if it is not an unreaped child.
fn peek(pid: libc::pid_t) -> io::Result<bool> {
    loop {
        // SAFETY: all-zero is a valid siginfo_t, which waitid fills in.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: `info` is writable; the flags only inspect the child.
        let r = unsafe {
            libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
            )
        };
        if r == 0 {
            // SAFETY: filled by waitid, or left zero if the child runs.
            return Ok(unsafe { info.si_pid() } != 0);
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

/// The status `waitpid` reported.
pub(crate) fn exit_status(status: libc::c_int) -> ExitStatus {
    if libc::WIFSIGNALED(status) {
        ExitStatus::Signaled {
            signal: libc::WTERMSIG(status),
            core_dumped: libc::WCOREDUMP(status),
        }
    } else {
        ExitStatus::Exited(libc::WEXITSTATUS(status))
    }
}

/// `waitpid(pid)`, with `WNOHANG` unless `block`: `None` if it is still
/// running.
pub(crate) fn reap(pid: libc::pid_t, block: bool) -> io::Result<Option<ExitStatus>> {
    let flags = if block { 0 } else { libc::WNOHANG };
    loop {
        let mut status = 0;
        // SAFETY: `status` is writable; only this pid is waited for.
        let r = unsafe { libc::waitpid(pid, &mut status, flags) };
        if r > 0 {
            return Ok(Some(exit_status(status)));
        }
        if r == 0 {
            return Ok(None);
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

/// One watched child.
#[derive(Debug)]
struct Child {
    pid: libc::pid_t,
    /// `None`: watched through `SIGCHLD`.
    pidfd: Option<OwnedFd>,
}

/// What [`Children::add`] did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Added {
    /// A pidfd to register in the kernel set.
    Pidfd(RawFd),
    /// Watched through `SIGCHLD`: the caller watches it for the table.
    Sigchld,
}

/// The watched children of a backend without `EVFILT_PROC`, and the exits
/// found but not yet handed to the loop. Lookups are linear: a backend
/// watches few children, and each is looked up once or twice.
#[derive(Debug, Default)]
pub(crate) struct Children {
    /// Never try pidfds (forced, or the kernel refused them once).
    sigchld_only: bool,
    watched: Vec<Child>,
    exits: Vec<ChildExit>,
}

impl Children {
    /// For tests: watch through `SIGCHLD` even where pidfds work.
    pub(crate) fn force_sigchld(&mut self) {
        self.sigchld_only = true;
    }

    pub(crate) fn is_watched(&self, pid: libc::pid_t) -> bool {
        self.watched.iter().any(|c| c.pid == pid)
    }

    /// Whether some child is watched through `SIGCHLD`.
    pub(crate) fn uses_sigchld(&self) -> bool {
        self.watched.iter().any(|c| c.pidfd.is_none())
    }

    /// The pidfds to keep in the kernel set.
    pub(crate) fn pidfds(&self) -> impl Iterator<Item = RawFd> + '_ {
        self.watched
            .iter()
            .filter_map(|c| c.pidfd.as_ref().map(|fd| fd.as_raw_fd()))
    }

    /// Starts watching `pid` (a child: [`check_child`]), with a pidfd if
    /// the kernel has them.
    pub(crate) fn add(&mut self, backend: &str, pid: libc::pid_t) -> io::Result<Added> {
        let pidfd = if self.sigchld_only {
            None
        } else {
            match pidfd_open(pid) {
                Ok(fd) => Some(fd),
                Err(err)
                    if matches!(err.raw_os_error(), Some(libc::ENOSYS) | Some(libc::EPERM)) =>
                {
                    tracing::debug!(%err, "no pidfds: child exits through SIGCHLD");
                    self.sigchld_only = true;
                    None
                }
                Err(err) => {
                    return Err(io::Error::new(
                        err.kind(),
                        format!(
                        "the {backend} backend cannot watch pid {pid}: pidfd_open failed ({err})"
                    ),
                    ))
                }
            }
        };
        let added = match &pidfd {
            Some(fd) => Added::Pidfd(fd.as_raw_fd()),
            None => Added::Sigchld,
        };
        self.watched.push(Child { pid, pidfd });
        Ok(added)
    }

    /// Stops watching `pid` without reaping it; its pidfd, if any, is
    /// returned for the caller to take out of the kernel set (and close).
    /// An exit of it not yet taken is dropped: the loop no longer asks.
    pub(crate) fn remove(&mut self, pid: libc::pid_t) -> Option<Option<OwnedFd>> {
        self.exits.retain(|e| e.pid != pid as u32);
        let i = self.watched.iter().position(|c| c.pid == pid)?;
        Some(self.watched.swap_remove(i).pidfd)
    }

    /// After a `SIGCHLD`: reaps every child watched through it that has
    /// exited.
    pub(crate) fn scan(&mut self) {
        let mut i = 0;
        while i < self.watched.len() {
            if self.watched[i].pidfd.is_some() || !self.try_reap(i) {
                i += 1;
            }
        }
    }

    /// `waitpid(WNOHANG)` for `watched[i]`; true if it left the table.
    fn try_reap(&mut self, i: usize) -> bool {
        let pid = self.watched[i].pid;
        match reap(pid, false) {
            Ok(None) => false,
            Ok(Some(status)) => {
                self.watched.swap_remove(i);
                self.exits.push(ChildExit {
                    pid: pid as u32,
                    status,
                });
                true
            }
            Err(err) => {
                // Reaped by someone else (a `waitpid(-1)` elsewhere): its
                // status is gone.
                tracing::debug!(pid, %err, "a watched child was reaped elsewhere");
                self.watched.swap_remove(i);
                true
            }
        }
    }

    /// A pidfd of the table is readable: reaps its child. Returns the pidfd
    /// if the child left the table (for the caller to take out of the
    /// kernel set); `None` if `fd` is not one of the table's, or the child
    /// has not exited after all.
    pub(crate) fn pidfd_ready(&mut self, fd: RawFd) -> Option<OwnedFd> {
        let i = self
            .watched
            .iter()
            .position(|c| c.pidfd.as_ref().is_some_and(|p| p.as_raw_fd() == fd))?;
        let pid = self.watched[i].pid;
        match pidfd_reap(fd) {
            Ok(None) => return None,
            Ok(Some(status)) => self.exits.push(ChildExit {
                pid: pid as u32,
                status,
            }),
            Err(err) => tracing::debug!(pid, %err, "a watched child was reaped elsewhere"),
        }
        self.watched.swap_remove(i).pidfd
    }

    /// Moves the exits found into `out`.
    pub(crate) fn take_exits(&mut self, out: &mut Vec<ChildExit>) {
        out.append(&mut self.exits);
    }

    /// Forgets every child (after `fork`: they are the parent's), closing
    /// their pidfds, and any exit not yet taken.
    pub(crate) fn clear(&mut self) {
        self.watched.clear();
        self.exits.clear();
    }
}

cfg_if::cfg_if! {
    if #[cfg(any(target_os = "linux", target_os = "android"))] {
        /// `pidfd_open(pid, 0)` (close-on-exec by definition).
        fn pidfd_open(pid: libc::pid_t) -> io::Result<OwnedFd> {
            use std::os::fd::FromRawFd;
            // SAFETY: plain system call with integer arguments.
            let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
            if fd < 0 {
                return Err(io::Error::last_os_error());
            }
            // SAFETY: a new descriptor, owned by nobody else.
            Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
        }

        /// `waitid(P_PIDFD, fd, WEXITED | WNOHANG)`: `None` if the child is
        /// still running.
        fn pidfd_reap(fd: RawFd) -> io::Result<Option<ExitStatus>> {
            loop {
                // SAFETY: all-zero is a valid siginfo_t, which waitid fills.
                let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
                // SAFETY: `info` is writable; `fd` is a pidfd we own.
                let r = unsafe {
                    libc::waitid(libc::P_PIDFD, fd as libc::id_t, &mut info, libc::WEXITED | libc::WNOHANG)
                };
                if r < 0 {
                    let err = io::Error::last_os_error();
                    if err.kind() == io::ErrorKind::Interrupted {
                        continue;
                    }
                    return Err(err);
                }
                // SAFETY: waitid filled `info` for a child event (or left it
                // zero: no child has changed state).
                let (pid, status) = unsafe { (info.si_pid(), info.si_status()) };
                if pid == 0 {
                    return Ok(None);
                }
                return Ok(Some(match info.si_code {
                    libc::CLD_KILLED => ExitStatus::Signaled { signal: status, core_dumped: false },
                    libc::CLD_DUMPED => ExitStatus::Signaled { signal: status, core_dumped: true },
                    _ => ExitStatus::Exited(status),
                }));
            }
        }
    } else {
        /// No pidfds here: every child is watched through `SIGCHLD`.
        fn pidfd_open(_pid: libc::pid_t) -> io::Result<OwnedFd> {
            Err(io::Error::from_raw_os_error(libc::ENOSYS))
        }

        fn pidfd_reap(_fd: RawFd) -> io::Result<Option<ExitStatus>> {
            Err(io::Error::from_raw_os_error(libc::ENOSYS))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn statuses() {
        // The encodings of wait(2) on Linux and the BSDs alike.
        assert_eq!(exit_status(3 << 8), ExitStatus::Exited(3));
        assert_eq!(
            exit_status(libc::SIGKILL),
            ExitStatus::Signaled {
                signal: libc::SIGKILL,
                core_dumped: false
            }
        );
        assert_eq!(
            exit_status(libc::SIGABRT | 0x80),
            ExitStatus::Signaled {
                signal: libc::SIGABRT,
                core_dumped: true
            }
        );
    }

    #[test]
    fn only_unreaped_children_pass() {
        let mut child = Command::new("true").spawn().unwrap();
        let pid = child.id();
        assert_eq!(check_child("t", pid).unwrap(), pid as libc::pid_t);
        child.wait().unwrap();
        let err = check_child("t", pid).unwrap_err().to_string();
        assert!(err.contains("not an unreaped child"), "{err}");
        assert!(err.contains(&format!("os error {}", libc::ECHILD)), "{err}");
        assert!(check_child("t", std::process::id()).is_err(), "ourselves");
        assert!(check_child("t", 0).is_err() && check_child("t", u32::MAX).is_err());
    }

    #[test]
    #[allow(clippy::zombie_processes)] // `mine` is reaped by the table
    fn sigchld_table_reaps_only_its_children() {
        let mut table = Children::default();
        table.force_sigchld();
        let mine = Command::new("true").spawn().unwrap();
        let other = Command::new("true").spawn().unwrap();
        let pid = check_child("t", mine.id()).unwrap();
        assert_eq!(table.add("t", pid).unwrap(), Added::Sigchld);
        assert!(table.uses_sigchld());
        let mut exits = Vec::new();
        let give_up = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while exits.is_empty() {
            assert!(std::time::Instant::now() < give_up, "never reaped");
            table.scan();
            table.take_exits(&mut exits);
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(
            exits,
            [ChildExit {
                pid: mine.id(),
                status: ExitStatus::Exited(0)
            }]
        );
        assert!(!table.uses_sigchld());
        // The other child was left to its owner.
        let mut other = other;
        assert!(other.wait().unwrap().success());
    }
}
