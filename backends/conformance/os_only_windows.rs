//! The kernel-only scenarios on Windows: a socket handle's value reused,
//! and handles that are not sockets (a file, a directory) refused. (The
//! simulator never reuses a number and has no files.)

use std::fs::{File, OpenOptions};
use std::net::{TcpListener, TcpStream};
use std::os::windows::fs::OpenOptionsExt;
use std::os::windows::io::{AsRawHandle, AsRawSocket, AsSocket, BorrowedSocket, FromRawSocket};

use windows_sys::Win32::Storage::FileSystem::FILE_FLAG_BACKUP_SEMANTICS;

use crate::{Error, Interest, Loop, RawFd, RunMode, RunOutcome};

use super::fixture::{creating, duplicate, handles_exclusive, socketpair, Fixture, OsFixture};
use super::record::{drain, write_all, Record};
use super::scenarios::{reader, refused_beside_a_pipe, sleeper, start};

use RunMode::NoWait;

/// Handle value reuse: removing an owned watcher deregisters the socket
/// *before* closing its handle, so a new socket whose handle gets the same
/// value at once starts clean: its registration works, and nothing of the
/// old socket (still open through another handle, with unread data)
/// reaches the new watcher. A backend that keyed what it has pending (an
/// AFD poll request) on the value alone, and did not cancel it at the
/// removal, would report the old socket's data for the new one.
pub fn fd_reuse(f: &OsFixture) -> Record {
    let backend = f.backend();
    let _handles = handles_exclusive();
    let (old, old_peer) = socketpair();
    let n = duplicate(old.as_raw_socket());
    // SAFETY: `n` was just made by `duplicate` and is owned by nobody
    // else; it is a handle of the same socket as `old`.
    let old_high = unsafe { TcpStream::from_raw_socket(n) };
    let (mut lp, mut log) = start(f);
    log.name_fd(&old_high, "old");
    let io = lp.io(old_high, Interest::READABLE, sleeper("old")).unwrap();
    write_all(&old_peer, b"stale"); // never read through `n`
    log.step(&mut lp, NoWait);
    log.expect(&["old:r"], &[]);

    // The listener is made before the removal, so that the socket that
    // connects to it is the first handle made after: it gets the value
    // the removal frees (Wine gives out the lowest free value, Windows a
    // freed entry at once; no other scenario of the kit runs meanwhile).
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    // Deregisters, then closes `n`; `old` keeps the socket open.
    lp.remove(io).unwrap();
    let new_high = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let m = new_high.as_raw_socket();
    assert_eq!(
        m, n,
        "{backend}: the handle value is not reused (another handle took it meanwhile)"
    );
    log.step(&mut lp, NoWait);
    log.expect_outcome(RunOutcome::NoActiveWatchers);
    log.expect_modifies(&["old: r => -"]);

    let (new_peer, _) = listener.accept().unwrap();
    for s in [&new_high, &new_peer] {
        s.set_nonblocking(true).unwrap();
        s.set_nodelay(true).unwrap();
    }
    log.name_fd(&new_high, "new");
    lp.io(new_high, Interest::READABLE, reader("new")).unwrap();
    log.step(&mut lp, NoWait);
    log.expect(&[], &[]);
    log.expect_modifies(&["new: - => r"]);

    write_all(&new_peer, b"fresh");
    log.step(&mut lp, NoWait);
    log.expect(&["new:r"], &["new read \"fresh\" then would-block"]);
    let (left, _) = drain(&old);
    assert_eq!(left, "read \"stale\" then would-block", "{backend}");
    log.into_record()
}

/// Not written for Windows ([`Scenario::not_applicable`](super::Scenario::not_applicable)
/// says so, and [`Scenario::check`](super::Scenario::check) skips it before
/// it gets here).
pub fn closed_fd_reuse(f: &OsFixture) -> Record {
    let why = super::Scenario::ClosedFdReuse.not_applicable();
    panic!(
        "{}: closed_fd_reuse: {}",
        f.backend(),
        why.unwrap_or("not written")
    )
}

/// A handle that is not a socket, given to the loop as one: on Windows no
/// type stands for that (a `File` is not `AsSocket`), but a program can
/// build one from a raw value.
#[derive(Clone, Copy)]
struct NotASocket(RawFd);

impl AsSocket for NotASocket {
    fn as_socket(&self) -> BorrowedSocket<'_> {
        // SAFETY: deliberately not a socket: a file's or a directory's
        // handle, which the scenario keeps open until the loop is gone,
        // to check that the backend refuses it. The loop only passes the
        // value to the backend, and Winsock answers WSAENOTSOCK for it.
        unsafe { BorrowedSocket::borrow_raw(self.0) }
    }
}

/// Files and directories refused by every Windows backend (only sockets
/// can be watched there): [`Loop::io`] fails at once with
/// [`Error::InvalidFd`] (the backend's `check_fd`), and a handle that gets
/// past that check (the probe around the backend has none, so the
/// scenario sees the backend's `modify` itself, as on Unix) is refused by
/// `modify`: the watcher gets `Ready::ERROR` and is stopped.
pub fn regular_file(f: &OsFixture) -> Record {
    let backend = f.backend();
    let (file, dir) = {
        let _creating = creating();
        let file = File::open(std::env::current_exe().unwrap()).unwrap();
        // A directory opens only with backup semantics.
        let dir = OpenOptions::new()
            .read(true)
            .custom_flags(FILE_FLAG_BACKUP_SEMANTICS)
            .open(std::env::temp_dir())
            .unwrap();
        (file, dir)
    };
    let file_h = NotASocket(file.as_raw_handle() as RawFd);
    let dir_h = NotASocket(dir.as_raw_handle() as RawFd);

    // What a program sees: the call that gave the handle fails, with the
    // reason.
    {
        let plain = {
            let _creating = creating();
            f.open()
        };
        let mut plain: Loop<'static, ()> = Loop::from(plain);
        for (h, what) in [(file_h, "a file"), (dir_h, "a directory")] {
            match plain.io(h, Interest::READABLE, |_, _, _| {}) {
                Err(Error::InvalidFd { fd, .. }) => assert_eq!(fd, h.0, "{backend}"),
                other => panic!(
                    "{backend}: {what}'s handle given as a socket: {:?}, not Error::InvalidFd \
                     from the backend's check_fd",
                    other.map(|_| ())
                ),
            }
        }
    }

    let (lp, record) = refused_beside_a_pipe(f, (file_h, dir_h, file_h), super::fixture::pipe());
    // The loop, which still has `file_h`, goes before the file does.
    drop(lp);
    drop((file, dir));
    record
}
