//! The thread's recording sink: where the recorder backend and the
//! recording layer's wrappers (`Recorded` sockets, `replay::fd_io`) write
//! their records while a loop of this thread records, and where they find
//! the replay while one runs. A loop is not `Send`, so a thread is the
//! right scope: its callbacks run on the thread that made it.
//!
//! The hooks' fast path, with nothing recorded or replayed, is one
//! thread-local load and a branch.

use std::cell::{Cell, RefCell};
use std::collections::HashSet;
use std::io;
use std::rc::{Rc, Weak};

use super::format::{tag, Encoder};
use crate::{RawFd, SourceFd};

/// Nothing is recorded or replayed in this thread.
pub(crate) const OFF: u8 = 0;
/// A loop of this thread records.
pub(crate) const RECORDING: u8 = 1;
/// A replay runs in this thread.
pub(crate) const REPLAYING: u8 = 2;

/// What a replay does when the program acts on an OS fd through the
/// recording layer (the replay's sockets are virtual): it diverges. A
/// trait here, so that the player names the sink and not the other way
/// round.
pub(crate) trait Outside {
    /// The program did `what` on the OS fd `fd` through `path`.
    fn outside(&mut self, fd: RawFd, what: &str, path: &str);
}

thread_local! {
    static MODE: Cell<u8> = const { Cell::new(OFF) };
    static ENCODER: RefCell<Option<Encoder>> = const { RefCell::new(None) };
    static PLAYER: RefCell<Option<Weak<RefCell<dyn Outside>>>> = const { RefCell::new(None) };
    /// While recording: the fds of the `Recorded` sockets handed to the
    /// loop, so that an io watcher on any other fd is said to be
    /// unrecorded when it starts.
    static WRAPPED: RefCell<HashSet<RawFd>> = RefCell::new(HashSet::new());
}

/// What this thread does.
#[inline]
pub(crate) fn mode() -> u8 {
    MODE.with(Cell::get)
}

/// Whether this thread records or replays (the hooks' fast-path test).
#[inline]
pub(crate) fn active() -> bool {
    mode() != OFF
}

/// Claims the thread for a recording writing through `enc`.
pub(crate) fn start_recording(enc: Encoder) -> io::Result<()> {
    claim("record")?;
    ENCODER.with(|e| *e.borrow_mut() = Some(enc));
    MODE.with(|m| m.set(RECORDING));
    Ok(())
}

/// Ends the thread's recording: its encoder, to be finished.
pub(crate) fn stop_recording() -> Option<Encoder> {
    MODE.with(|m| m.set(OFF));
    WRAPPED.with(|w| std::mem::take(&mut *w.borrow_mut()));
    ENCODER.with(|e| e.borrow_mut().take())
}

/// Claims the thread for a replay.
pub(crate) fn start_replay(player: Rc<RefCell<dyn Outside>>) -> io::Result<()> {
    claim("replay")?;
    PLAYER.with(|p| *p.borrow_mut() = Some(Rc::downgrade(&player)));
    MODE.with(|m| m.set(REPLAYING));
    Ok(())
}

/// Ends the thread's replay.
pub(crate) fn stop_replay() {
    MODE.with(|m| m.set(OFF));
    PLAYER.with(|p| *p.borrow_mut() = None);
}

fn claim(what: &str) -> io::Result<()> {
    match mode() {
        OFF => Ok(()),
        m => Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!(
                "cannot {what}: this thread {} already (one recording or replay per thread at a time: \
                 drop that loop or replay first, or use another thread)",
                if m == RECORDING { "records a loop" } else { "runs a replay" }
            ),
        )),
    }
}

/// Runs `f` on the thread's encoder, if it records (and is not inside
/// another record's encoding).
#[inline(always)]
pub(crate) fn with_encoder(f: impl FnOnce(&mut Encoder)) {
    ENCODER.with(|e| {
        if let Ok(mut e) = e.try_borrow_mut() {
            if let Some(enc) = e.as_mut() {
                if !enc.is_dead() {
                    f(enc);
                }
            }
        }
    });
}

/// A `Recorded` socket's fd was asked for (as the loop does when an io
/// watcher starts on it): while recording, it is known as recorded.
#[inline]
pub(crate) fn wrapped(src: SourceFd<'_>) {
    if mode() == RECORDING {
        WRAPPED.with(|w| w.borrow_mut().insert(number(src)));
    }
}

/// Whether `fd` is a `Recorded` socket's (see [`wrapped`]).
pub(crate) fn is_wrapped(fd: RawFd) -> bool {
    WRAPPED.with(|w| w.borrow().contains(&fd))
}

/// Runs `f` on the thread's replay, if one runs.
fn with_player(f: impl FnOnce(&mut dyn Outside)) {
    let player = PLAYER.with(|p| p.borrow().as_ref().and_then(Weak::upgrade));
    if let Some(p) = player {
        if let Ok(mut p) = p.try_borrow_mut() {
            f(&mut *p);
        }
    }
}

/// The number of an OS fd, or `None` for a virtual one.
fn os_fd(src: SourceFd<'_>) -> Option<RawFd> {
    match src {
        SourceFd::Os(fd) => Some(crate::source::raw(fd)),
        SourceFd::Virtual(_) => None,
    }
}

use crate::source::number;

/// A read through a `Recorded` stream: recorded,
/// or, during a replay, a read on an OS descriptor reported (the replay's
/// own sockets answer their reads themselves).
#[inline]
pub(crate) fn read(src: SourceFd<'_>, len: usize, r: &io::Result<usize>, data: &[u8]) {
    if active() {
        transfer_slow(tag::READ, src, len, r, data);
    }
}

/// A write through a `Recorded` stream: as [`read`].
#[inline]
pub(crate) fn wrote(src: SourceFd<'_>, len: usize, r: &io::Result<usize>, data: &[u8]) {
    if active() {
        transfer_slow(tag::WRITE, src, len, r, data);
    }
}

#[inline(never)]
fn transfer_slow(t: u8, src: SourceFd<'_>, len: usize, r: &io::Result<usize>, data: &[u8]) {
    match mode() {
        RECORDING => with_encoder(|e| e.transfer(t, number(src), len, r.as_ref().copied(), data)),
        _ => {
            if let Some(fd) = os_fd(src) {
                let what = if t == tag::READ { "a read" } else { "a write" };
                outside(fd, what, "evloop::replay::Recorded");
            }
        }
    }
}

/// An accept on a `Recorded` listener: recorded (the new
/// connection's fd, or the error), or reported during a replay if the
/// listener is an OS one.
#[inline]
pub(crate) fn accepted(listener: SourceFd<'_>, r: Result<SourceFd<'_>, &io::Error>) {
    if !active() {
        return;
    }
    match mode() {
        RECORDING => with_encoder(|e| e.accept(number(listener), r.map(number))),
        _ => {
            if let Some(fd) = os_fd(listener) {
                outside(fd, "an accept", "evloop::replay::Recorded");
            }
        }
    }
}

/// A `Recorded` stream's half-close (`net::Stream::shutdown_write`): as
/// [`read`].
#[inline]
pub(crate) fn shut_down(src: SourceFd<'_>, r: &io::Result<()>) {
    if !active() {
        return;
    }
    match mode() {
        RECORDING => with_encoder(|e| e.call(tag::SHUTDOWN, &[number(src) as i64], r)),
        _ => {
            if let Some(fd) = os_fd(src) {
                outside(fd, "a half-close", "evloop::replay::Recorded");
            }
        }
    }
}

/// The completion I/O's unsent bytes of a `Recorded` stream, as a
/// connection's close asked: recorded (a replay gives the answer back).
#[inline]
pub(crate) fn unsent(src: SourceFd<'_>, n: usize) {
    if mode() == RECORDING {
        with_encoder(|e| e.unsent(number(src), n as u64));
    }
}

/// During a replay: `what` was done on the OS fd `fd` through `path`,
/// which no replay can answer (the replay's sockets are virtual): the
/// replay diverges here.
pub(crate) fn outside(fd: RawFd, what: &str, path: &str) {
    with_player(|p| p.outside(fd, what, path));
}
