//! Completion I/O on the ring ([`CompletionIo`]): what `evloop::net`'s
//! adopted sockets do instead of a readiness round trip.
//!
//! - **Receiving**: a stream is read by a multishot `RECV` (Linux 6.0)
//!   that picks its buffer from a *provided buffer ring* (5.19) the
//!   backend lends the kernel. Each completion names a buffer; it is
//!   *held* (queued on its fd) until the owner's [`recv`] copies it out,
//!   then given back to the ring. The fd is reported readable while it
//!   holds something (bytes, its end of file, its error).
//! - **Backpressure**: an fd that holds [`HOLD_MAX`] buffers has its
//!   receive cancelled until the owner reads; one whose interest drops
//!   `READABLE` (a paused or congested connection) too. When the ring has
//!   no buffer left (`ENOBUFS` ends the receive) the fd waits for one to
//!   come back: the data stays in the socket, nothing is lost.
//! - **Sending**: [`send`] copies the bytes into a buffer of the
//!   backend's and submits a `SEND` with `MSG_WAITALL` (the kernel sends
//!   them all, waiting for room as it must, even on a non-blocking socket)
//!   and `MSG_NOSIGNAL`; one send per fd is in flight, later bytes wait
//!   behind it, at most [`SEND_MAX`] in all (then `WouldBlock`, and the fd
//!   is reported writable when a send completes). A shutdown waits for
//!   the sends before it.
//! - **Accepting**: a listener has a multishot `ACCEPT` (5.19); accepted
//!   sockets (non-blocking, close-on-exec) wait on the listener, at most
//!   [`HOLD_MAX`] of them, for [`accept`]. An error (`EMFILE`) is handed
//!   over once, and the accept is armed again by the next interest
//!   change (the acceptor's back-off).
//! - Everything is queued for the `io_uring_enter` that waits: no syscall
//!   per request.
//!
//! **Memory the kernel uses.** The kernel writes into a buffer of the
//! ring only while it is *lent* (in the ring), and reads a send's bytes
//! until that send's last completion. So: a buffer's bytes are read only
//! between its completion and its return (it is then held, and the kernel
//! does not pick it); a send's buffer is owned by its request's record
//! ([`Op::Send`]), which is dropped only at its last completion (a
//! released fd's send goes on over a duplicate of the fd, as a closed
//! socket's send buffer is still sent); the ring's memory is unmapped only
//! after every request ended, and leaked if the kernel does not end them
//! in time. The buffers are raw memory, never a Rust reference while lent.
//!
//! [`recv`]: CompletionIo::recv
//! [`send`]: CompletionIo::send
//! [`accept`]: CompletionIo::accept

use std::cell::{RefCell, RefMut};
use std::collections::VecDeque;
use std::io;
use std::net::TcpStream;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU16, Ordering};

use ::io_uring::{cqueue, opcode, squeue, types, Submitter};

use crate::backend::{Adopt, CompletionIo, PollEvent};
use crate::{Interest, Ready};

/// The low half of a completion request's `user_data` (beyond any fd);
/// the high half indexes [`Completions::ops`].
pub(super) const OPS: u32 = u32::MAX - 3;
/// The buffer group of the provided buffers.
const GROUP: u16 = 0x4556;
/// Buffers in the ring (a power of two).
const BUFFERS: u16 = 1024;
/// Bytes per buffer.
const BUFFER_LEN: usize = 4096;
/// Buffers (or accepted sockets) one fd may hold before its receive (or
/// accept) is cancelled until the owner takes some.
pub(super) const HOLD_MAX: usize = 16;
/// Bytes one fd may have taken by `send` and not yet sent.
pub(super) const SEND_MAX: usize = 256 * 1024;

/// Whether the kernel has what completion I/O needs: the opcodes (probed)
/// and multishot receive (Linux 6.0, which the probe cannot tell), and
/// `EVLOOP_IO_URING_COMPLETION` is not `0`.
pub(super) fn supported(probe: &::io_uring::Probe) -> bool {
    if std::env::var_os("EVLOOP_IO_URING_COMPLETION").is_some_and(|v| v == "0") {
        tracing::trace!("io_uring: completion I/O off (EVLOOP_IO_URING_COMPLETION=0)");
        return false;
    }
    let ops = [
        opcode::Recv::CODE,
        opcode::Send::CODE,
        opcode::Accept::CODE,
        opcode::AsyncCancel::CODE,
    ];
    let has_ops = ops.iter().all(|&op| probe.is_supported(op));
    let release = kernel_release();
    let ok = has_ops && release >= (6, 0);
    tracing::trace!(
        has_ops,
        kernel = ?release,
        ok,
        "io_uring: completion I/O probed"
    );
    ok
}

/// The running kernel's (major, minor).
fn kernel_release() -> (u32, u32) {
    // SAFETY: `uname` fills the zeroed struct it is given.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to a utsname.
    if unsafe { libc::uname(&mut u) } != 0 {
        return (0, 0);
    }
    let release: Vec<u8> = u
        .release
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    let release = String::from_utf8_lossy(&release);
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    let major = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    let minor = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    (major, minor)
}

/// The provided buffers: an anonymous mapping of the ring's entries (the
/// kernel reads them) and one of the buffers (the kernel writes them).
struct BufRing {
    entries: *mut types::BufRingEntry,
    data: *mut u8,
    /// The next entry to fill (the tail the kernel sees once published).
    tail: u16,
    /// Buffers out of the ring: held by fds.
    held: usize,
}

/// An anonymous private mapping of `len` bytes.
fn map(len: usize) -> io::Result<*mut u8> {
    // SAFETY: a new anonymous mapping; no existing memory is touched.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok(p.cast())
}

const ENTRIES_LEN: usize = BUFFERS as usize * std::mem::size_of::<types::BufRingEntry>();
const DATA_LEN: usize = BUFFERS as usize * BUFFER_LEN;

impl BufRing {
    /// Maps the ring, lends every buffer and registers the group.
    fn new(submitter: &Submitter<'_>) -> io::Result<BufRing> {
        let entries = map(ENTRIES_LEN)?.cast::<types::BufRingEntry>();
        let data = match map(DATA_LEN) {
            Ok(d) => d,
            Err(e) => {
                // SAFETY: mapped just above, never shared.
                unsafe { libc::munmap(entries.cast(), ENTRIES_LEN) };
                return Err(e);
            }
        };
        let mut ring = BufRing {
            entries,
            data,
            tail: 0,
            held: BUFFERS as usize,
        };
        for bid in 0..BUFFERS {
            ring.lend(bid);
        }
        // SAFETY: the entries' mapping is page-aligned and BUFFERS entries
        // long; it is unmapped only once no request that could pick a
        // buffer is left (the backend's Drop waits for them; else it is
        // leaked), or after a fork, where the kernel uses the parent's.
        let r =
            unsafe { submitter.register_buf_ring_with_flags(entries as u64, BUFFERS, GROUP, 0) };
        if let Err(e) = r {
            ring.unmap();
            return Err(e);
        }
        Ok(ring)
    }

    /// Puts buffer `bid` back in the ring for the kernel to fill.
    fn lend(&mut self, bid: u16) {
        let mask = BUFFERS - 1;
        // SAFETY: `tail & mask` is within the mapping; the entry at the
        // tail is not the kernel's until the tail is published below.
        unsafe {
            let e = &mut *self.entries.add(usize::from(self.tail & mask));
            e.set_addr(self.data.add(usize::from(bid) * BUFFER_LEN) as u64);
            e.set_len(BUFFER_LEN as u32);
            e.set_bid(bid);
        }
        self.tail = self.tail.wrapping_add(1);
        // SAFETY: the tail field overlays the first entry's last two bytes
        // (io_uring_buf_ring); the kernel reads it with an acquire load.
        unsafe {
            let tail = types::BufRingEntry::tail(self.entries) as *const AtomicU16;
            (*tail).store(self.tail, Ordering::Release);
        }
        self.held -= 1;
    }

    /// The `len` bytes the kernel wrote into held buffer `bid`, from `at`.
    fn bytes(&self, bid: u16, at: usize, len: usize) -> &[u8] {
        debug_assert!(usize::from(bid) < usize::from(BUFFERS) && len <= BUFFER_LEN);
        // SAFETY: buffer `bid` is held (its completion came and it was not
        // lent again): the kernel does not write it, and the slice ends
        // within it.
        unsafe {
            std::slice::from_raw_parts(self.data.add(usize::from(bid) * BUFFER_LEN + at), len - at)
        }
    }

    fn unmap(&mut self) {
        // SAFETY: both mappings are ours; the caller made sure the kernel
        // no longer uses them (the group is unregistered, or never was).
        unsafe {
            libc::munmap(self.entries.cast(), ENTRIES_LEN);
            libc::munmap(self.data.cast(), DATA_LEN);
        }
    }
}

/// A received buffer an fd holds: buffer `bid`, its bytes `at..len`.
#[derive(Debug, Clone, Copy)]
struct Held {
    bid: u16,
    at: u32,
    len: u32,
}

/// What ends an fd's receiving: its end of file, or an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    Eof,
    Error(i32),
}

/// An adopted fd.
#[derive(Default)]
struct Adopted {
    role: Option<Adopt>,
    /// What the loop registered (`READABLE`, `WRITABLE`).
    interest: Interest,
    /// Registered with the loop at least once since it was adopted.
    registered: bool,
    /// The socket's identity at adoption (`st_dev`, `st_ino`): an fd number
    /// registered again after a pause is checked to be the same socket.
    identity: (u64, u64),
    /// The multishot receive (or accept) in the kernel, by op index.
    arm: Option<usize>,
    /// Its cancellation was asked for.
    cancelling: bool,
    /// The receive ended for lack of buffers: armed again when one is
    /// given back.
    starved: bool,
    held: VecDeque<Held>,
    accepted: VecDeque<OwnedFd>,
    /// After what is held: the end of file or the error (an accept's error
    /// for a listener, handed over once).
    end: Option<End>,
    /// The send in the kernel, by op index, and its length.
    sending: Option<usize>,
    in_flight: usize,
    /// Bytes taken while a send was in the kernel.
    next: Vec<u8>,
    /// A send failed: every later one fails with it.
    send_error: Option<i32>,
    /// `shutdown_write` waits for the sends.
    shut: bool,
    /// In `Completions::ready`.
    listed: bool,
    /// Edge-triggered: reported once per event (a completion, an interest
    /// change), not while the condition holds.
    edge: bool,
}

/// A request in the kernel.
enum Op {
    /// Multishot receive or accept of fd `fd`, adopted under `generation`.
    /// Kept in the table, once ended, until the cancellations aimed at it
    /// completed: its index is not reused by a request they would hit.
    Arm {
        fd: RawFd,
        generation: u32,
        role: Adopt,
        cancels: u32,
        ended: bool,
    },
    /// A send of `buf[done..]` on `fd`. `then` is set once the fd is
    /// released: the rest to send, and whether to shut down, over the
    /// duplicate `fd` this request then owns.
    Send {
        fd: RawFd,
        generation: u32,
        buf: Vec<u8>,
        done: usize,
        then: Option<Drain>,
    },
    /// A cancellation of request `target`.
    Cancel { target: usize },
}

/// A released fd's sends that still go out, over a duplicate of the fd.
struct Drain {
    rest: Vec<u8>,
    shut: bool,
}

/// The completion state of a ring (part of the backend's `Tables`).
#[derive(Default)]
pub(super) struct Completions {
    /// Offered (the kernel has it, see [`supported`], and the buffer ring
    /// is set up).
    pub(super) on: bool,
    bufs: Option<BufRing>,
    fds: Vec<Adopted>,
    /// Generation per fd number, advanced by every adoption and release:
    /// the requests of an older one are stale.
    generations: Vec<u32>,
    ops: slab::Slab<Op>,
    /// Fds that may have something to report (level: kept while they do).
    ready: Vec<RawFd>,
    /// Fds whose requests to submit were changed (arm, next send).
    dirty: Vec<RawFd>,
    /// Fds waiting for a buffer to come back.
    starved: Vec<RawFd>,
    /// Requests to queue for the next `io_uring_enter`.
    pub(super) sqes: Vec<squeue::Entry>,
    /// Send buffers for reuse.
    spare: Vec<Vec<u8>>,
    /// Requests that must be submitted at once (a cancellation before a
    /// close: the kernel must let go of the file).
    pub(super) urgent: bool,
}

impl Drop for Completions {
    fn drop(&mut self) {
        // Held accepted sockets close with their `OwnedFd`s. The ring's
        // memory: unmapped only if no request can use it any more (the
        // backend's Drop waits for them); otherwise leaked.
        if let Some(mut bufs) = self.bufs.take() {
            if self.ops.is_empty() {
                bufs.unmap();
            }
        }
    }
}

/// The identity of the socket `fd`.
fn identity(fd: RawFd) -> io::Result<(u64, u64)> {
    // SAFETY: `fstat` fills the zeroed struct it is given.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to a stat.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    if st.st_mode & libc::S_IFMT != libc::S_IFSOCK {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "io_uring completion I/O: not a socket",
        ));
    }
    Ok((st.st_dev, st.st_ino))
}

fn errno(e: i32) -> io::Error {
    io::Error::from_raw_os_error(e)
}

fn would_block() -> io::Error {
    io::ErrorKind::WouldBlock.into()
}

fn op_data(index: usize) -> u64 {
    (index as u64) << 32 | u64::from(OPS)
}

impl Completions {
    /// Whether `fd` is adopted.
    pub(super) fn owns(&self, fd: RawFd) -> bool {
        self.fds.get(fd as usize).is_some_and(|a| a.role.is_some())
    }

    fn adopted(&mut self, fd: RawFd) -> Option<&mut Adopted> {
        self.fds.get_mut(fd as usize).filter(|a| a.role.is_some())
    }

    fn generation(&self, fd: RawFd) -> u32 {
        self.generations.get(fd as usize).copied().unwrap_or(0)
    }

    fn advance(&mut self, fd: RawFd) {
        let i = fd as usize;
        if i >= self.generations.len() {
            self.generations.resize(i + 1, 0);
        }
        self.generations[i] = self.generations[i].wrapping_add(1);
    }

    fn list(&mut self, fd: RawFd) {
        if let Some(a) = self.adopted(fd) {
            if !a.listed {
                a.listed = true;
                self.ready.push(fd);
            }
        }
    }

    fn mark(&mut self, fd: RawFd) {
        self.dirty.push(fd);
    }

    /// Adopts `fd` (the buffer ring is set up at the first adoption).
    pub(super) fn adopt(&mut self, fd: RawFd, role: Adopt) -> io::Result<()> {
        if !self.on || self.bufs.is_none() {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "io_uring completion I/O is not available on this ring",
            ));
        }
        let Ok(i) = usize::try_from(fd) else {
            return Err(errno(libc::EBADF));
        };
        if self.owns(fd) {
            return Ok(());
        }
        let identity = identity(fd)?;
        if i >= self.fds.len() {
            self.fds.resize_with(i + 1, Adopted::default);
        }
        self.advance(fd);
        let a = &mut self.fds[i];
        *a = Adopted {
            role: Some(role),
            identity,
            held: std::mem::take(&mut a.held),
            next: std::mem::take(&mut a.next),
            listed: a.listed, // an entry of the list may be left
            ..Adopted::default()
        };
        tracing::trace!(fd, ?role, "io_uring: adopted");
        Ok(())
    }

    /// The loop's interest in adopted `fd` changed. `Ok(false)`: not
    /// adopted (any more), the readiness path takes it.
    pub(super) fn modify(&mut self, fd: RawFd, new: Interest) -> io::Result<bool> {
        let Some(a) = self.adopted(fd) else {
            return Ok(false);
        };
        if new.is_empty() {
            // Paused, or about to be closed (the owner releases first; a
            // watcher removed behind its back is caught by the identity
            // check if the number comes back).
            a.interest = Interest::NONE;
            self.disarm(fd);
            self.urgent = true;
            return Ok(true);
        }
        if a.registered && a.interest.is_empty() && identity(fd).ok() != Some(a.identity) {
            // Closed and reused behind the owner's back: not ours.
            self.release(fd);
            return Ok(false);
        }
        let a = self.adopted(fd).expect("adopted");
        a.registered = true;
        a.edge = new.trigger() == crate::Trigger::Edge;
        a.interest = Interest::NONE
            | if new.is_readable() {
                Interest::READABLE
            } else {
                Interest::NONE
            }
            | if new.is_writable() {
                Interest::WRITABLE
            } else {
                Interest::NONE
            };
        if !new.is_readable() {
            self.disarm(fd);
        }
        self.mark(fd);
        self.list(fd);
        Ok(true)
    }

    /// Cancels `fd`'s multishot receive or accept, if in the kernel.
    fn disarm(&mut self, fd: RawFd) {
        let Some(a) = self.adopted(fd) else { return };
        if let Some(op) = a.arm {
            if !a.cancelling {
                a.cancelling = true;
                self.cancel(op);
            }
        }
    }

    fn cancel(&mut self, op: usize) {
        if let Some(Op::Arm { cancels, .. }) = self.ops.get_mut(op) {
            *cancels += 1;
        }
        let c = self.ops.insert(Op::Cancel { target: op });
        self.sqes.push(
            opcode::AsyncCancel::new(op_data(op))
                .build()
                .user_data(op_data(c)),
        );
    }

    /// Queues the requests the changed fds need: a receive or accept to
    /// arm, the next send, a shutdown.
    pub(super) fn settle(&mut self) {
        while let Some(fd) = self.dirty.pop() {
            self.settle_fd(fd);
        }
    }

    fn settle_fd(&mut self, fd: RawFd) {
        let generation = self.generation(fd);
        let Some(a) = self.adopted(fd) else { return };
        let role = a.role.expect("adopted");
        let room = match role {
            Adopt::Stream => a.held.len() < HOLD_MAX,
            Adopt::Listener => a.accepted.len() < HOLD_MAX,
        };
        if a.interest.is_readable() && a.arm.is_none() && a.end.is_none() && room && !a.starved {
            let entry = match role {
                Adopt::Stream => opcode::RecvMulti::new(types::Fd(fd), GROUP).build(),
                Adopt::Listener => opcode::AcceptMulti::new(types::Fd(fd))
                    .flags(libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC)
                    .build(),
            };
            let op = self.ops.insert(Op::Arm {
                fd,
                generation,
                role,
                cancels: 0,
                ended: false,
            });
            self.sqes.push(entry.user_data(op_data(op)));
            self.adopted(fd).expect("adopted").arm = Some(op);
        }
        let a = self.adopted(fd).expect("adopted");
        if a.sending.is_none() && !a.next.is_empty() && a.send_error.is_none() {
            let spare = self.spare.pop().unwrap_or_default();
            let a = self.adopted(fd).expect("adopted");
            let buf = std::mem::replace(&mut a.next, spare);
            a.in_flight = buf.len();
            let op = self.ops.insert(Op::Send {
                fd,
                generation,
                buf,
                done: 0,
                then: None,
            });
            self.adopted(fd).expect("adopted").sending = Some(op);
            self.push_send(op);
        }
        let a = self.adopted(fd).expect("adopted");
        if a.shut && a.sending.is_none() && a.next.is_empty() {
            a.shut = false;
            // SAFETY: plain system call; `fd` is the adopted, open socket.
            unsafe { libc::shutdown(fd, libc::SHUT_WR) };
        }
    }

    /// Queues op `op`'s send of what it has left.
    fn push_send(&mut self, op: usize) {
        let Some(Op::Send { fd, buf, done, .. }) = self.ops.get(op) else {
            return;
        };
        let rest = &buf[*done..];
        let entry = opcode::Send::new(types::Fd(*fd), rest.as_ptr(), rest.len() as u32)
            .flags(libc::MSG_WAITALL | libc::MSG_NOSIGNAL)
            .build()
            .user_data(op_data(op));
        self.sqes.push(entry);
    }

    /// The reports of this poll: an fd is readable while it holds
    /// something, writable while sends have room, in error after a failed
    /// send. Fds with nothing to report leave the list.
    pub(super) fn report(&mut self, events: &mut Vec<PollEvent>) {
        let mut i = 0;
        while i < self.ready.len() {
            let fd = self.ready[i];
            let Some(a) = self.fds.get_mut(fd as usize) else {
                self.ready.swap_remove(i);
                continue;
            };
            let ready = if a.role.is_some() {
                reportable(a)
            } else {
                Ready::EMPTY // released
            };
            if ready.is_empty() {
                a.listed = false;
                self.ready.swap_remove(i);
                continue;
            }
            events.push(PollEvent { fd, ready });
            if a.edge {
                // Once: the next completion lists it again.
                a.listed = false;
                self.ready.swap_remove(i);
                continue;
            }
            i += 1;
        }
    }

    /// Whether the next poll reports something without waiting (fds with
    /// nothing to report leave the list).
    pub(super) fn has_ready(&mut self) -> bool {
        let mut i = 0;
        while i < self.ready.len() {
            let fd = self.ready[i];
            match self.fds.get_mut(fd as usize) {
                Some(a) if a.role.is_some() && !reportable(a).is_empty() => i += 1,
                // Released, or nothing to report: off the list.
                Some(a) => {
                    a.listed = false;
                    self.ready.swap_remove(i);
                }
                None => {
                    self.ready.swap_remove(i);
                }
            }
        }
        !self.ready.is_empty()
    }

    /// How many fds wait for a buffer (for the tests).
    #[cfg(test)]
    pub(super) fn starved_count(&self) -> usize {
        self.starved.len()
    }

    /// Whether requests wait to be queued or submitted.
    pub(super) fn pending(&self) -> bool {
        !self.dirty.is_empty() || !self.sqes.is_empty()
    }

    /// Whether `settle` has fds to look at.
    pub(super) fn dirty_any(&self) -> bool {
        !self.dirty.is_empty()
    }

    /// A completion of request `index`.
    pub(super) fn complete(&mut self, index: usize, res: i32, flags: u32) {
        if cqueue::buffer_select(flags).is_some() {
            if let Some(b) = self.bufs.as_mut() {
                b.held += 1; // the kernel filled one: ours until lent again
            }
        }
        let more = cqueue::more(flags);
        let Some(op) = self.ops.get_mut(index) else {
            return;
        };
        match op {
            Op::Cancel { target } => {
                let target = *target;
                self.ops.remove(index);
                if let Some(Op::Arm { cancels, ended, .. }) = self.ops.get_mut(target) {
                    *cancels -= 1;
                    if *ended && *cancels == 0 {
                        self.ops.remove(target);
                    }
                }
            }
            Op::Arm {
                fd,
                generation,
                role,
                cancels,
                ended,
            } => {
                if *ended {
                    return; // cannot happen: its last completion came
                }
                let (fd, generation, role) = (*fd, *generation, *role);
                if !more {
                    if *cancels == 0 {
                        self.ops.remove(index);
                    } else {
                        *ended = true;
                    }
                }
                self.armed(fd, generation, role, index, res, flags);
            }
            Op::Send { .. } => self.sent(index, res),
        }
    }

    /// A receive's or accept's completion.
    fn armed(
        &mut self,
        fd: RawFd,
        generation: u32,
        role: Adopt,
        index: usize,
        res: i32,
        flags: u32,
    ) {
        let more = cqueue::more(flags);
        let current = self.generation(fd) == generation && self.owns(fd);
        if !current {
            // Stale: the fd was released. Give back what came.
            if let Some(bid) = cqueue::buffer_select(flags) {
                self.give_back(bid);
            } else if res >= 0 && role == Adopt::Listener {
                self.stale_accept(res);
            }
            return;
        }
        let a = self.adopted(fd).expect("adopted");
        if !more {
            a.arm = None;
            a.cancelling = false;
        }
        match role {
            Adopt::Stream => {
                if res > 0 {
                    let bid = cqueue::buffer_select(flags).expect("a receive names its buffer");
                    a.held.push_back(Held {
                        bid,
                        at: 0,
                        len: res as u32,
                    });
                    if a.held.len() >= HOLD_MAX && more && !a.cancelling {
                        a.cancelling = true;
                        self.cancel(index);
                    }
                } else if res == 0 {
                    // An error noted first (a failed send's) stays: it
                    // comes before the end of file, as a socket's does.
                    a.end.get_or_insert(End::Eof);
                } else if res == -libc::ENOBUFS {
                    a.starved = true;
                    self.starved.push(fd);
                } else if res != -libc::ECANCELED {
                    a.end = Some(End::Error(-res));
                }
            }
            Adopt::Listener => {
                if res >= 0 {
                    // SAFETY: the kernel just made this descriptor for this
                    // accept; nothing else owns it.
                    let s = unsafe { OwnedFd::from_raw_fd(res) };
                    a.accepted.push_back(s);
                    if a.accepted.len() >= HOLD_MAX && more && !a.cancelling {
                        a.cancelling = true;
                        self.cancel(index);
                    }
                } else if res != -libc::ECANCELED {
                    a.end = Some(End::Error(-res));
                }
            }
        }
        if !more {
            self.mark(fd);
        }
        self.list(fd);
    }

    /// An accepted socket for an fd that was released: closed.
    fn stale_accept(&mut self, res: i32) {
        // SAFETY: the kernel made this descriptor for an accept nobody
        // wants any more; it is owned here and closed.
        drop(unsafe { OwnedFd::from_raw_fd(res) });
    }

    /// A send's completion.
    fn sent(&mut self, index: usize, res: i32) {
        let Some(Op::Send {
            fd,
            generation,
            buf,
            done,
            then,
        }) = self.ops.get_mut(index)
        else {
            return;
        };
        let (fd, generation) = (*fd, *generation);
        if res > 0 && *done + (res as usize) < buf.len() {
            // Short (interrupted): the rest, in the same request.
            *done += res as usize;
            return self.push_send(index);
        }
        if res >= 0 {
            if let Some(drain) = then {
                // A released fd, over its duplicate: the next bytes, then
                // the shutdown and the close.
                if !drain.rest.is_empty() {
                    *buf = std::mem::take(&mut drain.rest);
                    *done = 0;
                    return self.push_send(index);
                }
                if drain.shut {
                    // SAFETY: `fd` is the duplicate this request owns.
                    unsafe { libc::shutdown(fd, libc::SHUT_WR) };
                }
            }
        }
        let Op::Send { mut buf, then, .. } = self.ops.remove(index) else {
            unreachable!()
        };
        if then.is_some() {
            // SAFETY: the duplicate this request owned, no longer used.
            unsafe { libc::close(fd) };
        }
        buf.clear();
        if self.spare.len() < 64 {
            self.spare.push(buf);
        }
        if then.is_some() || self.generation(fd) != generation {
            return;
        }
        let Some(a) = self.adopted(fd) else { return };
        a.sending = None;
        a.in_flight = 0;
        if res < 0 {
            a.send_error = Some(-res);
            a.next.clear();
            // The read side reports it too (as a socket's error is), after
            // what was received; over an end of input too, as a socket's
            // pending error comes before its end of file (else a reply
            // lost to a peer's reset would end in a graceful close).
            if !matches!(a.end, Some(End::Error(_))) {
                a.end = Some(End::Error(-res));
            }
        }
        self.mark(fd);
        self.list(fd);
    }

    /// Gives buffer `bid` back to the ring; starved fds may arm again.
    fn give_back(&mut self, bid: u16) {
        if let Some(b) = self.bufs.as_mut() {
            b.lend(bid);
        }
        self.wake_starved();
    }

    /// Buffers came back: the fds that ran out may arm again.
    fn wake_starved(&mut self) {
        for fd in std::mem::take(&mut self.starved) {
            if let Some(a) = self.adopted(fd) {
                a.starved = false;
                self.dirty.push(fd);
            }
        }
    }

    /// Releases `fd` (see [`CompletionIo::release`]).
    pub(super) fn release(&mut self, fd: RawFd) {
        if !self.owns(fd) {
            return;
        }
        self.disarm(fd);
        self.urgent = true;
        self.advance(fd);
        let a = &mut self.fds[fd as usize];
        let mut held = std::mem::take(&mut a.held);
        let sending = a.sending;
        let rest = std::mem::take(&mut a.next);
        let shut = a.shut;
        let listed = a.listed;
        *a = Adopted {
            held: VecDeque::new(),
            listed,
            ..Adopted::default()
        };
        for h in held.drain(..) {
            self.give_back(h.bid);
        }
        self.fds[fd as usize].held = held; // keep the allocation
        if sending.is_none() && rest.is_empty() {
            if shut {
                // SAFETY: plain system call on the still-open fd.
                unsafe { libc::shutdown(fd, libc::SHUT_WR) };
            }
            tracing::trace!(fd, "io_uring: released");
            return;
        }
        // What was taken goes out after the close, over a duplicate of the
        // fd that the send request owns (and closes when done).
        // SAFETY: plain system call on the still-open fd.
        let dup = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
        if dup < 0 {
            // Out of descriptors: what is not in the kernel yet is lost,
            // as an abort's would be.
            tracing::trace!(fd, "io_uring: released; no descriptor to finish sending on");
            return;
        }
        match sending {
            Some(op) => {
                if let Some(Op::Send { fd: f, then, .. }) = self.ops.get_mut(op) {
                    *f = dup;
                    *then = Some(Drain { rest, shut });
                }
            }
            None => {
                let op = self.ops.insert(Op::Send {
                    fd: dup,
                    generation: 0,
                    buf: rest,
                    done: 0,
                    then: Some(Drain {
                        rest: Vec::new(),
                        shut,
                    }),
                });
                self.push_send(op);
            }
        }
        tracing::trace!(fd, "io_uring: released");
    }

    /// Sets up the buffer ring on a new ring (at start-up, after a fork),
    /// if completion I/O is offered; without it, it is not.
    pub(super) fn start(&mut self, submitter: &Submitter<'_>, supported: bool) {
        self.on = false;
        if !supported {
            return;
        }
        match BufRing::new(submitter) {
            Ok(b) => {
                self.bufs = Some(b);
                self.on = true;
            }
            Err(e) => tracing::trace!(%e, "io_uring: the provided buffer ring was refused"),
        }
    }

    /// Forgets everything after a fork (the requests are the parent's
    /// ring's); the memory is the child's copy, freed. `start` sets it up
    /// again on the new ring.
    pub(super) fn clear(&mut self) {
        self.ops.clear();
        *self = Completions::default();
    }

    /// Whether requests are in the kernel.
    pub(super) fn busy(&self) -> bool {
        !self.ops.is_empty()
    }

    /// Cancels the receives and accepts, and the sends if `sends` (the
    /// backend is dropped).
    pub(super) fn cancel_all(&mut self, sends: bool) {
        let indexes: Vec<usize> = self
            .ops
            .iter()
            .filter(|(_, op)| match op {
                Op::Cancel { .. } | Op::Arm { ended: true, .. } => false,
                Op::Arm { .. } => true,
                Op::Send { .. } => sends,
            })
            .map(|(i, _)| i)
            .collect();
        for i in indexes {
            self.cancel(i);
        }
    }
}

/// What adopted fd `a` reports now.
fn reportable(a: &Adopted) -> Ready {
    let mut ready = Ready::EMPTY;
    if a.interest.is_readable() && (!a.held.is_empty() || !a.accepted.is_empty() || a.end.is_some())
    {
        ready |= Ready::READABLE;
    }
    let unsent = a.in_flight + a.next.len();
    // After a shutdown, writable means everything was sent.
    if a.interest.is_writable() && unsent < SEND_MAX && !(a.shut && unsent > 0) {
        ready |= Ready::WRITABLE;
    }
    if a.send_error.is_some() && !a.interest.is_empty() {
        ready |= Ready::ERROR | Ready::READABLE | Ready::WRITABLE;
    }
    ready
}

/// `recv(2)` on an fd that is not adopted.
fn recv_raw(fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: `buf` is valid for `buf.len()` bytes; `fd` is the caller's.
    let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), 0) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

/// `send(2)` on an fd that is not adopted (no `SIGPIPE`).
fn send_raw(fd: RawFd, bytes: &[u8]) -> io::Result<usize> {
    // SAFETY: `bytes` is valid for its length; `fd` is the caller's.
    let n = unsafe { libc::send(fd, bytes.as_ptr().cast(), bytes.len(), libc::MSG_NOSIGNAL) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

/// `accept4(2)` on a listener that is not adopted.
fn accept_raw(fd: RawFd) -> io::Result<TcpStream> {
    // SAFETY: null address pointers are allowed; `fd` is the caller's.
    let s = unsafe {
        libc::accept4(
            fd,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
        )
    };
    if s < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just made `s` for this call; owned here.
    Ok(TcpStream::from(unsafe { OwnedFd::from_raw_fd(s) }))
}

/// The completion state, shared: the backend's (it reaps and submits)
/// and its owners' (net's connections, exec's sockets: they read, write
/// and accept through [`CompletionIo`]). Requests are queued for the
/// backend's next enter; a release's cancellations go with the removal's
/// `modify` that follows it (before the close).
#[derive(Default)]
pub(super) struct Shared(RefCell<Completions>);

impl Shared {
    /// The state. Never held across a call out: the backend borrows it
    /// only inside its own calls, the owners only inside theirs.
    pub(super) fn get(&self) -> RefMut<'_, Completions> {
        self.0.borrow_mut()
    }
}

impl CompletionIo for Shared {
    fn adopt(&self, fd: RawFd, role: Adopt) -> io::Result<()> {
        self.get().adopt(fd, role)
    }

    fn release(&self, fd: RawFd) {
        let mut c = self.get();
        c.release(fd);
    }

    fn recv(&self, fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
        let c = &mut *self.get();
        let Some(a) = c.fds.get_mut(fd as usize).filter(|a| a.role.is_some()) else {
            return recv_raw(fd, buf);
        };
        let mut n = 0;
        let mut given = 0;
        while n < buf.len() {
            let Some(h) = a.held.front_mut() else { break };
            let bytes =
                c.bufs
                    .as_ref()
                    .expect("held buffers")
                    .bytes(h.bid, h.at as usize, h.len as usize);
            let k = bytes.len().min(buf.len() - n);
            buf[n..n + k].copy_from_slice(&bytes[..k]);
            n += k;
            h.at += k as u32;
            if h.at == h.len {
                let bid = h.bid;
                a.held.pop_front();
                if let Some(b) = c.bufs.as_mut() {
                    b.lend(bid);
                }
                given += 1;
            }
        }
        let (end, drained) = (a.end, a.held.is_empty());
        if given > 0 {
            if a.arm.is_none() {
                c.dirty.push(fd); // room to receive again
            }
            c.wake_starved();
        }
        if n > 0 || !drained {
            return Ok(n); // (0 only for an empty `buf`)
        }
        match end {
            Some(End::Eof) => Ok(0),
            Some(End::Error(e)) => Err(errno(e)),
            None => Err(would_block()),
        }
    }

    fn send(&self, fd: RawFd, bytes: &[u8]) -> io::Result<usize> {
        let c = &mut *self.get();
        let Some(a) = c.fds.get_mut(fd as usize).filter(|a| a.role.is_some()) else {
            return send_raw(fd, bytes);
        };
        if let Some(e) = a.send_error {
            return Err(errno(e));
        }
        let pending = a.in_flight + a.next.len();
        let n = bytes.len().min(SEND_MAX.saturating_sub(pending));
        if n == 0 {
            return if bytes.is_empty() {
                Ok(0)
            } else {
                Err(would_block())
            };
        }
        if a.next.capacity() == 0 {
            if let Some(spare) = c.spare.pop() {
                a.next = spare;
            }
        }
        a.next.extend_from_slice(&bytes[..n]);
        if a.sending.is_none() {
            c.dirty.push(fd);
        }
        Ok(n)
    }

    fn shutdown_write(&self, fd: RawFd) -> io::Result<()> {
        let c = &mut *self.get();
        let Some(a) = c.fds.get_mut(fd as usize).filter(|a| a.role.is_some()) else {
            // SAFETY: plain system call on the caller's fd.
            return match unsafe { libc::shutdown(fd, libc::SHUT_WR) } {
                0 => Ok(()),
                _ => Err(io::Error::last_os_error()),
            };
        };
        a.shut = true;
        c.dirty.push(fd);
        Ok(())
    }

    fn unsent(&self, fd: RawFd) -> usize {
        self.get()
            .adopted(fd)
            .map_or(0, |a| a.in_flight + a.next.len())
    }

    fn accept(&self, fd: RawFd) -> io::Result<TcpStream> {
        let c = &mut *self.get();
        let Some(a) = c.fds.get_mut(fd as usize).filter(|a| a.role.is_some()) else {
            return accept_raw(fd);
        };
        if let Some(s) = a.accepted.pop_front() {
            if a.arm.is_none() {
                c.dirty.push(fd);
            }
            return Ok(TcpStream::from(s));
        }
        if let Some(End::Error(e)) = a.end.take() {
            // Handed over once; armed again by the next settle, if the
            // listener is still watched (an acceptor backing off is not).
            c.dirty.push(fd);
            return Err(errno(e));
        }
        Err(would_block())
    }
}
