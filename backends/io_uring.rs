//! The Linux `io_uring(7)` readiness backend (cargo feature `io-uring`):
//! `IORING_OP_POLL_ADD` requests on a ring, submitted and waited for in one
//! `io_uring_enter`.
//!
//! - **Level** registrations are single-shot polls: a completion reports the
//!   fd, and the next [`Backend::poll`] submits a new poll for it in the
//!   same `io_uring_enter` that waits (submit and wait are one syscall). A
//!   poll on an fd that is still ready completes at once, so an unread fd
//!   is reported on every iteration, as epoll's level triggering does.
//! - **Edge** registrations are multishot polls (`IORING_POLL_ADD_MULTI`,
//!   Linux 5.13): the kernel posts a completion per wake-up of the file and
//!   keeps the poll armed; nothing is submitted per event. Offered
//!   ([`Capabilities::edge`]) only where the start-up probe finds them; a
//!   multishot poll the kernel ends (its completion without
//!   `IORING_CQE_F_MORE`, as when the completion queue overflowed) is armed
//!   again by the next poll. Several wake-ups between two polls are merged
//!   into one report.
//! - **One-shot** is native: a single-shot poll that is not re-armed until
//!   the loop changes the fd again (from `NONE.with_trigger(Oneshot)`).
//!   Re-arming costs no syscall: the new poll waits in the submission queue
//!   for the next `io_uring_enter`.
//! - Every request carries `user_data = generation << 32 | fd`, with a
//!   generation per fd that every new poll request advances. A completion
//!   whose generation is not the fd's current one (a poll the loop removed
//!   or replaced, completed or cancelled after the change) is dropped, so a
//!   stale completion is never reported, not even for a new file that got
//!   the same number. Interest changes are a `POLL_REMOVE` of the old
//!   request and a `POLL_ADD` of the new one, queued for the next wait.
//! - **Forgetting** an fd whose poll is in the kernel submits its
//!   `POLL_REMOVE` at once (one `io_uring_enter`, as epoll's `DEL` is one
//!   `epoll_ctl`): a pending poll holds a reference to the *file*, and the
//!   loop closes an owned source right after `modify(fd, _, NONE)`; the
//!   cancellation must have dropped that reference by then, or the socket
//!   would stay open (its peer seeing no EOF) until the next wait. A
//!   level or one-shot fd whose poll has completed has nothing in the
//!   kernel: its removal costs nothing. Dropping the backend cancels every
//!   pending poll the same way (the kernel's own teardown of a ring is
//!   asynchronous).
//! - Readiness: a readable registration asks for `POLLIN | POLLRDHUP`, a
//!   writable one for `POLLOUT`; `POLLHUP` and `POLLRDHUP` are reported as
//!   `HUP | READABLE`, `POLLERR` as `ERROR | READABLE | WRITABLE`,
//!   `POLLNVAL` as [`Ready::INVALID`]. The kernel adds `POLLRDHUP` to every
//!   poll request, asked for or not (`IO_POLL_UNMASK`): for a write-only
//!   registration it is dropped, and a completion that carries nothing else
//!   (a full socket whose peer shut down its write side) is not reported.
//!   Since a new single-shot poll would complete at once again, such an fd
//!   is *parked* on a multishot poll, which completes only on wake-ups, until
//!   a completion brings `POLLOUT`, `POLLERR` or `POLLHUP`; then it goes
//!   back to its own trigger. Without multishot polls (before Linux 5.13)
//!   it is polled again by the next wait instead, which then cannot end
//!   on its writability.
//! - **An fd closed behind the loop's back**: a pending poll holds a
//!   reference to the file, so the file stays open (the close does not
//!   release a socket, and its peer sees no EOF) and the poll stays armed.
//!   Nothing is reported while the file stays quiet; the loop learns at its
//!   next change of the fd: the new `POLL_ADD` on the closed number fails
//!   with `EBADF`, and the next poll reports [`Ready::INVALID`] (the loop
//!   stops the fd's watchers with [`Ready::ERROR`]). `modify` itself does
//!   not fail: its requests complete in the wait. If the file does become
//!   ready (the peer writes or closes), the poll completes and is reported
//!   under the closed number, as it would be on a dup that epoll still
//!   watches; a level fd's re-arm then fails with `EBADF` and the poll
//!   after reports it invalid. A closed number that was reused meanwhile is
//!   polled as the new file, as on every backend that keys on numbers.
//! - **Regular files and directories** are refused (`EPERM`, checked with
//!   `fstat` when an fd is first registered), as on every backend: a poll
//!   request would call them always ready.
//! - **Timeouts** go in the wait itself (`IORING_ENTER_EXT_ARG` with a
//!   relative timespec, Linux 5.11): nanosecond resolution on
//!   `CLOCK_MONOTONIC`, so a wait never ends before its deadline. An
//!   `io_uring_enter` that returns early (interrupted by a signal, `EINTR`;
//!   or with nothing but stale completions) waits again for the time left
//!   (`backends/unix`'s `Deadline`). A zero timeout does not wait at all:
//!   its enter submits and runs the completions with `min_complete` 0 (a
//!   zero timespec with `min_complete` 1 is a timed wait that the kernel
//!   ends with `ETIME`, tens of microseconds an iteration).
//! - **Start-up** probes what the backend relies on and refuses to start
//!   without it, with an error that says what is missing: `io_uring_setup`
//!   itself (refused on kernels without io_uring, under
//!   `sysctl kernel.io_uring_disabled`, by seccomp filters such as container
//!   runtimes' default profiles), `IORING_FEAT_NODROP` (completions are
//!   never lost, Linux 5.5), `IORING_FEAT_EXT_ARG` (the wait's timeout,
//!   5.11) and the `POLL_ADD` and `POLL_REMOVE` opcodes. Multishot polls
//!   are probed with a real request; without them the backend starts, and
//!   refuses edge triggering.
//! - **After `fork()`** the ring is shared with the parent (the child has
//!   a descriptor and the mappings of the same ring, and a cancellation
//!   from the child would cancel the parent's polls): [`Backend::reinit`]
//!   makes a new ring (the old one is unmapped and its descriptor closed,
//!   nothing is cancelled through it), forgets every registration, and the
//!   loop adds every fd again. A backend dropped in a forked child that
//!   never called `reinit` cancels nothing either.
//! - Signals, child exits, wake-ups, wall-clock steps and path hints are
//!   the loop's (its Unix notifier, `backends/unix/`): their fds come
//!   through `modify` like any other.
//! - **Task work**: where the kernel has them (Linux 6.1), the ring is
//!   created with `IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN`:
//!   a poll's completion is run only when the loop's thread enters the ring
//!   (to wait, or to submit a forget), never on its way back from another
//!   system call, and the ring is that thread's alone (the backend is not
//!   `Send`). Where they are refused (`EINVAL`), the ring is created
//!   without them: the kernel then completes polls with task work
//!   signalled to the loop's thread, which can make a blocking `poll(2)`,
//!   `select(2)` or `epoll_wait(2)` *inside a callback* return `EINTR` when
//!   one of the ring's polls fires meanwhile (std's I/O retries `EINTR`).
//!   The unit tests run on both kinds of ring.
#![allow(unsafe_code)]

use std::io;
use std::marker::PhantomData;
use std::os::fd::RawFd;
use std::time::Duration;

use ::io_uring::{
    cqueue, opcode, squeue, types, CompletionQueue, EnterFlags, IoUring as Ring, SubmissionQueue,
    Submitter,
};

mod completion;

use super::{Clock, Deadline};
use crate::backend::{Backend, Capabilities, CompletionIo, PollEvent, PollStatus};
use crate::{Interest, Ready, Trigger};
use std::rc::Rc;

/// Submission queue entries: how many requests can wait for the next
/// `io_uring_enter` (more are submitted early, without waiting).
const SQ_ENTRIES: u32 = 256;
/// Completion queue entries. A full queue loses nothing (the kernel keeps
/// the overflow, `IORING_FEAT_NODROP`); it only costs an extra enter.
const CQ_ENTRIES: u32 = 4096;
/// The longest single wait; the loop simply polls again after it.
const MAX_WAIT: Duration = Duration::from_secs(1 << 32);

/// The `user_data` of `POLL_REMOVE` requests, whose completions are
/// ignored.
const REMOVE: u64 = u64::MAX;
/// The `user_data` of the start-up probe's poll.
const PROBE: u64 = u64::MAX - 1;
/// The low half of a loop removal's `user_data` (beyond any fd); the high half indexes `Tables::removing`, which holds
/// the `user_data` of the poll being removed.
const REMOVAL: u32 = u32::MAX - 2;

const POLLIN: u32 = libc::POLLIN as u32;
const POLLOUT: u32 = libc::POLLOUT as u32;
const POLLERR: u32 = libc::POLLERR as u32;
const POLLHUP: u32 = libc::POLLHUP as u32;
const POLLNVAL: u32 = libc::POLLNVAL as u32;
const POLLRDHUP: u32 = libc::POLLRDHUP as u32;
/// What every registration reports, asked for or not.
const ALWAYS: u32 = POLLERR | POLLHUP | POLLNVAL;
/// The bits a poll request asks for (the rest of `Slot::want`).
const REQUEST: u32 = POLLIN | POLLRDHUP | POLLOUT;

/// The io_uring backend (Linux, cargo feature `io-uring`). Not `Send`: the
/// kernel ties each poll request to the thread that submitted it.
///
/// ```
/// use evloop::backend::{Backend, PollEvent};
/// use evloop::backends::io_uring::IoUring;
/// use evloop::{Interest, Ready};
/// use std::io::Write;
/// use std::os::fd::AsRawFd;
/// use std::os::unix::net::UnixStream;
/// use std::time::Duration;
///
/// # if IoUring::new().is_err() { return Ok(()) } // io_uring refused here
/// let mut ring = IoUring::new()?;
/// let (a, mut b) = UnixStream::pair()?;
/// ring.modify(a.as_raw_fd(), Interest::NONE, Interest::READABLE)?;
/// b.write_all(b"ping")?;
/// let mut events = Vec::new();
/// ring.poll(Some(Duration::from_secs(5)), &mut events)?;
/// assert_eq!(events, [PollEvent { fd: a.as_raw_fd(), ready: Ready::READABLE }]);
/// ring.modify(a.as_raw_fd(), Interest::READABLE, Interest::NONE)?;
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct IoUring {
    set: Set,
    clock: Clock,
    /// Not `Send`: a poll request belongs to the thread that submitted it
    /// (its completion is task work of that thread, and the kernel cancels
    /// it when the thread exits), so the backend stays on its thread.
    _thread: PhantomData<*const ()>,
}

/// The ring and what the backend knows of the requests in it.
struct Set {
    /// Deferred task work asked for (used where the kernel has it).
    defer: bool,
    ring: Ring,
    t: Tables,
    /// The process that made the ring: only it cancels through it.
    owner: libc::pid_t,
    /// How many `io_uring_enter`s asked the kernel to wait for a
    /// completion (`min_complete` 1). A poll with a zero timeout never
    /// does (the unit tests count them).
    waits: u64,
    /// Completion requests are in the submission queue, not submitted.
    comp_queued: bool,
}

/// The per-fd state, apart from the ring so that completions can be
/// handled while the completion queue is borrowed.
#[derive(Default)]
struct Tables {
    /// By fd number: what the loop registered, and the request in flight.
    /// Never shrunk but by `reinit`.
    fds: Vec<Slot>,
    /// Level (and ended edge) fds whose poll completed: the next poll
    /// submits a new one.
    rearm: Vec<RawFd>,
    /// Write-only fds whose poll saw nothing they asked for: parked on a
    /// multishot poll (submitted after the completions are read).
    park: Vec<RawFd>,
    /// Parked multishot polls that reported, and removals the kernel
    /// answered `EALREADY`: removed after the completions are read.
    cancel: Vec<u64>,
    /// The polls whose `POLL_REMOVE` is in the kernel, by the removal's
    /// index: a removal answered `EALREADY` (a multishot poll's task work
    /// was pending, as with deferred task work; the poll then arms again
    /// and keeps its file, the socket staying open) is submitted again.
    removing: slab::Slab<u64>,
    /// Completions read early, when a submission found the completion
    /// queue overflowing (kernels before 5.19 refuse to submit then).
    backlog: Vec<(u64, i32, u32)>,
    /// Counts `poll` calls: `Slot::epoch` says whether an fd was reported
    /// in this one already.
    epoch: u32,
    /// Multishot polls work (probed at start-up): edge triggering, and
    /// parking.
    multishot: bool,
    /// Completion I/O: the adopted sockets (completion.rs), shared with
    /// their owners.
    comp: Rc<completion::Shared>,
}

/// One fd of the loop.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Slot {
    /// The generation of the fd's current (or last) poll request.
    generation: u32,
    /// The `POLL*` bits the fd reports: those asked for, and `ALWAYS`
    /// (0: not registered).
    want: u32,
    state: State,
    trigger: Trigger,
    /// The `poll` call that last reported the fd, and where in its events.
    epoch: u32,
    at: u32,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum State {
    /// Not registered; nothing in the kernel.
    #[default]
    Off,
    /// Poll request `generation` is in the kernel (or queued for it): single-shot
    /// for level and one-shot, multishot for edge.
    Armed,
    /// Multishot request `generation` is in the kernel, waiting for a bit the
    /// write-only registration asked for.
    Parked,
    /// Registered, nothing in the kernel: the poll completed (a level fd is
    /// in `rearm`; a one-shot fd waits for the loop).
    Fired,
    /// The poll request failed (`EBADF`: closed); reported invalid.
    Dead,
}

impl std::fmt::Debug for IoUring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let t = &self.set.t;
        f.debug_struct("IoUring")
            .field(
                "registered",
                &t.fds.iter().filter(|s| s.state != State::Off).count(),
            )
            .field("multishot", &t.multishot)
            // The backend asks for SINGLE_ISSUER only with DEFER_TASKRUN,
            // and the kernel keeps the flags it accepted.
            .field(
                "deferred_task_work",
                &self.set.ring.params().is_setup_single_issuer(),
            )
            .finish_non_exhaustive()
    }
}

/// `user_data` of a loop fd's poll.
fn user_data(fd: RawFd, generation: u32) -> u64 {
    (u64::from(generation) << 32) | u64::from(fd as u32)
}

/// A `POLL_ADD` request.
fn poll_add(fd: RawFd, mask: u32, multi: bool, ud: u64) -> squeue::Entry {
    opcode::PollAdd::new(types::Fd(fd), mask)
        .multi(multi)
        .build()
        .user_data(ud)
}

/// A `POLL_REMOVE` of the request with `user_data` `ud`, whose own
/// completion is ignored (the probe's).
fn poll_remove(ud: u64) -> squeue::Entry {
    opcode::PollRemove::new(ud).build().user_data(REMOVE)
}

/// A `POLL_REMOVE` of the request with `user_data` `ud`, its own
/// completion tagged with `index` into `Tables::removing`.
fn poll_removal(ud: u64, index: usize) -> squeue::Entry {
    opcode::PollRemove::new(ud)
        .build()
        .user_data((index as u64) << 32 | u64::from(REMOVAL))
}

/// The `POLL*` bits an interest reports (`Slot::want`).
fn want(interest: Interest) -> u32 {
    let mut want = ALWAYS;
    if interest.is_readable() {
        want |= POLLIN | POLLRDHUP;
    }
    if interest.is_writable() {
        want |= POLLOUT;
    }
    want
}

/// What a poll completion's mask (already filtered by `Slot::want`)
/// reports.
#[inline]
fn ready(got: u32) -> Ready {
    // The common case first: one compare.
    if got == POLLIN {
        return Ready::READABLE;
    }
    if got & POLLNVAL != 0 {
        return Ready::INVALID;
    }
    let mut r = Ready::EMPTY;
    if got & POLLIN != 0 {
        r |= Ready::READABLE;
    }
    if got & POLLOUT != 0 {
        r |= Ready::WRITABLE;
    }
    if got & (POLLHUP | POLLRDHUP) != 0 {
        r |= Ready::HUP | Ready::READABLE;
    }
    if got & POLLERR != 0 {
        r |= Ready::ERROR | Ready::READABLE | Ready::WRITABLE;
    }
    r
}

fn is_errno(err: &io::Error, errno: libc::c_int) -> bool {
    err.raw_os_error() == Some(errno)
}

/// The error of a refused start, saying what was refused and why.
fn cannot_start(what: &str, why: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::Unsupported,
        format!("the io_uring backend cannot start: {what}: {why}"),
    )
}

/// A `/proc/sys` integer, if readable.
fn sysctl(name: &str) -> Option<i64> {
    std::fs::read_to_string(format!("/proc/sys/{name}"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Why `io_uring_setup` failed with `err`, as far as can be told.
fn setup_refused(err: io::Error) -> io::Error {
    let errno = err.raw_os_error().unwrap_or(0);
    let why = match errno {
        libc::ENOSYS => "this kernel has no io_uring (Linux before 5.1, or built without \
                         CONFIG_IO_URING), or a seccomp filter answers ENOSYS for it"
            .to_string(),
        libc::EPERM | libc::EACCES => match sysctl("kernel/io_uring_disabled") {
            Some(2) => "io_uring is disabled on this system (sysctl kernel.io_uring_disabled = 2)"
                .to_string(),
            Some(1) => format!(
                "io_uring is restricted to privileged processes and to the group \
                 kernel.io_uring_group ({}) (sysctl kernel.io_uring_disabled = 1), and this \
                 process is neither",
                sysctl("kernel/io_uring_group").map_or("?".to_string(), |g| g.to_string())
            ),
            _ => "a seccomp filter (a container runtime's default profile, a sandbox) or a \
                  security module refuses io_uring_setup to this process"
                .to_string(),
        },
        libc::ENOMEM => "the kernel could not allocate or lock the rings (before Linux 5.12 \
                         they count against RLIMIT_MEMLOCK)"
            .to_string(),
        libc::EMFILE | libc::ENFILE => "out of file descriptors".to_string(),
        libc::EINVAL => "this kernel's io_uring does not know the setup the backend asks for \
                         (a completion queue size of its own, clamped sizes: Linux 5.6; the \
                         backend needs 5.11)"
            .to_string(),
        _ => "unexpected error".to_string(),
    };
    io::Error::new(
        err.kind(),
        format!("the io_uring backend cannot start: io_uring_setup was refused ({err}): {why}"),
    )
}

/// A ring with everything the backend needs, and whether multishot polls
/// work on it.
fn create(defer: bool) -> io::Result<(Ring, bool, bool)> {
    let mut builder = Ring::builder();
    builder.setup_cqsize(CQ_ENTRIES).setup_clamp();
    let mut ring = None;
    if defer {
        // Linux 6.1: completions run only when the loop's thread enters
        // to wait (or to cancel), never on its way back from another
        // syscall, and the ring is that thread's alone.
        let mut deferred = builder.clone();
        deferred.setup_single_issuer().setup_defer_taskrun();
        match deferred.build(SQ_ENTRIES) {
            Ok(r) => ring = Some(r),
            Err(e) if is_errno(&e, libc::EINVAL) => {} // older: without
            Err(e) => return Err(setup_refused(e)),
        }
    }
    let ring = match ring {
        Some(r) => r,
        None => builder.build(SQ_ENTRIES).map_err(setup_refused)?,
    };
    let p = ring.params();
    if !p.is_feature_nodrop() {
        return Err(cannot_start(
            "this kernel's io_uring lacks IORING_FEAT_NODROP (Linux 5.5)",
            "completions could be lost when the completion queue is full",
        ));
    }
    if !p.is_feature_ext_arg() {
        return Err(cannot_start(
            "this kernel's io_uring lacks IORING_FEAT_EXT_ARG (Linux 5.11)",
            "the backend puts the wait's timeout in io_uring_enter itself",
        ));
    }
    let mut probe = ::io_uring::Probe::new();
    if let Err(err) = ring.submitter().register_probe(&mut probe) {
        return Err(cannot_start(
            "IORING_REGISTER_PROBE failed",
            &format!("cannot tell which operations this kernel supports ({err})"),
        ));
    }
    for (code, name) in [
        (opcode::PollAdd::CODE, "IORING_OP_POLL_ADD"),
        (opcode::PollRemove::CODE, "IORING_OP_POLL_REMOVE"),
    ] {
        if !probe.is_supported(code) {
            return Err(cannot_start(
                &format!("this kernel's io_uring does not support {name}"),
                "readiness is what the backend asks the ring for",
            ));
        }
    }
    let mut ring = ring;
    let multishot = probe_multishot(&mut ring)?;
    let completion = multishot && completion::supported(&probe);
    Ok((ring, multishot, completion))
}

/// Whether the kernel accepts multishot polls (Linux 5.13): a multishot
/// poll of an eventfd that is never readable, then its removal. Older
/// kernels fail the poll with `EINVAL` (its `len` field must be 0 there).
fn probe_multishot(ring: &mut Ring) -> io::Result<bool> {
    // SAFETY: plain system call with integer arguments.
    let efd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if efd < 0 {
        return Err(io::Error::last_os_error());
    }
    let result = (|| {
        let add = poll_add(efd, POLLIN, true, PROBE);
        // SAFETY: neither request refers to memory of this process; the
        // eventfd stays open until both completed (or the ring is gone).
        unsafe {
            ring.submission()
                .push_multiple(&[add, poll_remove(PROBE)])
                .map_err(|_| io::Error::other("the new ring's submission queue is full"))?;
        }
        let mut seen = None;
        let mut removed = false;
        let deadline = Deadline::new(Some(Duration::from_secs(5)));
        while seen.is_none() || !removed {
            let Some(left) = deadline.remaining().filter(|d| !d.is_zero()) else {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the io_uring backend cannot start: the probe of multishot polls got no \
                     completion",
                ));
            };
            let ts = types::Timespec::from(left);
            let args = types::SubmitArgs::new().timespec(&ts);
            match ring.submitter().submit_with_args(1, &args) {
                Ok(_) => {}
                Err(e) if is_errno(&e, libc::EINTR) || is_errno(&e, libc::ETIME) => {}
                Err(e) => return Err(e),
            }
            for cqe in ring.completion() {
                match cqe.user_data() {
                    PROBE => seen = Some(cqe.result()),
                    REMOVE => removed = true,
                    _ => {}
                }
            }
        }
        // -ECANCELED: armed, then removed. -EINVAL: refused.
        Ok(seen != Some(-libc::EINVAL))
    })();
    // SAFETY: `efd` was created above and is owned here; the ring holds no
    // request on it any more (both completions were read) or is failing.
    unsafe { libc::close(efd) };
    result
}

/// Queues `entry` for the next `io_uring_enter`; submits what is queued
/// first if the queue is full.
#[inline]
fn push(
    submitter: &Submitter<'_>,
    sq: &mut SubmissionQueue<'_>,
    cq: &mut CompletionQueue<'_>,
    backlog: &mut Vec<(u64, i32, u32)>,
    entry: &squeue::Entry,
) -> io::Result<()> {
    loop {
        // SAFETY: the backend's requests (POLL_ADD, POLL_REMOVE) refer to
        // no memory of this process: the kernel reads the entry when it is
        // submitted and nothing after.
        if unsafe { sq.push(entry) }.is_ok() {
            return Ok(());
        }
        submit(submitter, sq, cq, backlog)?;
    }
}

/// Submits what is queued, and reads the completions that are there,
/// without waiting (a forget, a poll with a zero timeout).
fn submit(
    submitter: &Submitter<'_>,
    sq: &mut SubmissionQueue<'_>,
    cq: &mut CompletionQueue<'_>,
    backlog: &mut Vec<(u64, i32, u32)>,
) -> io::Result<()> {
    sq.sync();
    for _ in 0..64 {
        // GETEVENTS without waiting: the completions of what is submitted
        // (a cancelled poll letting go of its file) are run now, on a ring
        // with deferred task work too.
        let flags = EnterFlags::GETEVENTS.bits();
        // SAFETY: no argument pointer (and no EXT_ARG flag); `to_submit`
        // is what the queue holds.
        let r = unsafe { submitter.enter::<libc::sigset_t>(sq.len() as u32, 0, flags, None) };
        match r {
            Ok(_) => {
                sq.sync();
                return Ok(());
            }
            Err(e) if is_errno(&e, libc::EINTR) => {}
            Err(e) if is_errno(&e, libc::EBUSY) || is_errno(&e, libc::EAGAIN) => {
                // The completion queue overflowed (older kernels refuse to
                // submit until it is read): keep what is there for the next
                // poll, and try again.
                cq.sync();
                for cqe in &mut *cq {
                    backlog.push((cqe.user_data(), cqe.result(), cqe.flags()));
                }
                cq.sync();
            }
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::other(
        "the io_uring backend cannot submit: the kernel keeps refusing (EBUSY)",
    ))
}

impl Set {
    /// Queues `entry` for the next `io_uring_enter`; submits what is
    /// queued first if the queue is full.
    fn push(&mut self, entry: &squeue::Entry) -> io::Result<()> {
        let (submitter, mut sq, mut cq) = self.ring.split();
        push(&submitter, &mut sq, &mut cq, &mut self.t.backlog, entry)
    }

    /// Queues the `POLL_REMOVE` of the poll `ud`, whose answer is checked
    /// (`Tables::removed`).
    fn push_removal(&mut self, ud: u64) -> io::Result<()> {
        let index = self.t.removing.insert(ud);
        let r = self.push(&poll_removal(ud, index));
        if r.is_err() {
            self.t.removing.remove(index);
        }
        r
    }

    /// Submits what is queued, without waiting.
    fn submit(&mut self) -> io::Result<()> {
        self.comp_queued = false;
        let (submitter, mut sq, mut cq) = self.ring.split();
        submit(&submitter, &mut sq, &mut cq, &mut self.t.backlog)
    }

    /// A new poll request for loop fd `fd` (registered), in `mode`.
    fn arm(&mut self, fd: RawFd, parked: bool) -> io::Result<()> {
        let slot = &mut self.t.fds[fd as usize];
        slot.generation = slot.generation.wrapping_add(1);
        slot.state = if parked { State::Parked } else { State::Armed };
        let multi = parked || slot.trigger == Trigger::Edge;
        let entry = poll_add(
            fd,
            slot.want & REQUEST,
            multi,
            user_data(fd, slot.generation),
        );
        self.push(&entry)
    }

    /// Cancels loop fd `fd`'s request, if one is in the kernel.
    fn disarm(&mut self, fd: RawFd) -> io::Result<bool> {
        let slot = self.t.fds[fd as usize];
        match slot.state {
            State::Armed | State::Parked => {
                self.push_removal(user_data(fd, slot.generation))?;
                Ok(true)
            }
            State::Off | State::Fired | State::Dead => Ok(false),
        }
    }

    /// Submits the polls the last one left to re-arm: level fds that
    /// reported, ended multishot polls.
    fn rearm(&mut self) -> io::Result<()> {
        if !self.t.rearm.is_empty() {
            // `arm`, in one borrow of the submission queue for them all.
            let t = &mut self.t;
            let (submitter, mut sq, mut cq) = self.ring.split();
            let mut result = Ok(());
            for &fd in &t.rearm {
                let slot = &mut t.fds[fd as usize];
                if slot.state != State::Fired {
                    continue; // changed by the loop meanwhile
                }
                slot.generation = slot.generation.wrapping_add(1);
                slot.state = State::Armed;
                let multi = slot.trigger == Trigger::Edge;
                let ud = user_data(fd, slot.generation);
                let entry = poll_add(fd, slot.want & REQUEST, multi, ud);
                if let Err(e) = push(&submitter, &mut sq, &mut cq, &mut t.backlog, &entry) {
                    result = Err(e);
                    break;
                }
            }
            t.rearm.clear();
            result?;
        }
        Ok(())
    }

    /// Submits what is queued and waits for a completion, at most `left`
    /// (`None`: forever). An interrupted or timed-out wait is not an error.
    /// A zero `left` does not wait at all: `min_complete` 0 with
    /// `GETEVENTS` submits, runs the completions' task work (deferred or
    /// not) and returns. (`min_complete` 1 with a zero timespec is a timed
    /// wait the kernel ends with `ETIME`, tens of microseconds later.)
    fn wait(&mut self, left: Option<Duration>) -> io::Result<()> {
        if left == Some(Duration::ZERO) {
            return self.submit();
        }
        self.comp_queued = false;
        self.waits += 1;
        let r = match left {
            None => self.ring.submit_and_wait(1),
            Some(d) => {
                let ts = types::Timespec::from(d.min(MAX_WAIT));
                let args = types::SubmitArgs::new().timespec(&ts);
                self.ring.submitter().submit_with_args(1, &args)
            }
        };
        match r {
            Ok(_) => Ok(()),
            Err(e) if is_errno(&e, libc::EINTR) || is_errno(&e, libc::ETIME) => Ok(()),
            Err(e) if is_errno(&e, libc::EBUSY) || is_errno(&e, libc::EAGAIN) => {
                // The completion queue overflowed: reading it (next) makes
                // room; the loop around this call enters again.
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Reads every completion: the loop's reports into `events`. Then
    /// submits the parking polls
    /// and cancellations they asked for.
    fn reap(&mut self, events: &mut Vec<PollEvent>) -> io::Result<()> {
        let t = &mut self.t;
        if !t.backlog.is_empty() {
            let backlog = std::mem::take(&mut t.backlog);
            for &(ud, res, flags) in &backlog {
                t.complete(ud, res, flags, events);
            }
            t.backlog = backlog;
            t.backlog.clear();
        }
        // A completion queue that overflowed is refilled from the kernel's
        // overflow list by an enter: read until it is empty.
        for _ in 0..64 {
            for cqe in self.ring.completion() {
                t.complete(cqe.user_data(), cqe.result(), cqe.flags(), events);
            }
            if !self.ring.submission().cq_overflow() {
                break;
            }
            // Flushes the overflow (the flag makes it an enter with
            // GETEVENTS) without waiting.
            match self.ring.submit() {
                Ok(_) => {}
                Err(e) if is_errno(&e, libc::EINTR) || is_errno(&e, libc::EBUSY) => {}
                Err(e) => return Err(e),
            }
        }
        if !self.t.park.is_empty() || !self.t.cancel.is_empty() {
            self.settle()?;
        }
        Ok(())
    }

    /// Submits (queues) the parking polls and the cancellations of parked
    /// polls that `complete` asked for.
    #[cold]
    fn settle(&mut self) -> io::Result<()> {
        let mut park = std::mem::take(&mut self.t.park);
        let mut cancel = std::mem::take(&mut self.t.cancel);
        let mut result = Ok(());
        for &ud in &cancel {
            if let Err(e) = self.push_removal(ud) {
                result = Err(e);
            }
        }
        for &fd in &park {
            if self.t.fds[fd as usize].state == State::Fired {
                let parked = self.t.multishot;
                if !parked {
                    // Polled again by the next wait instead.
                    self.t.rearm.push(fd);
                } else if let Err(e) = self.arm(fd, true) {
                    result = Err(e);
                }
            }
        }
        park.clear();
        cancel.clear();
        self.t.park = park;
        self.t.cancel = cancel;
        result
    }

    /// Queues the requests the completion state asked for (settling the
    /// fds it changed), and submits at once if one must be (a
    /// cancellation before a close).
    fn flush_completions(&mut self) -> io::Result<()> {
        let mut c = self.t.comp.get();
        if c.dirty_any() {
            c.settle();
        }
        let urgent = std::mem::take(&mut c.urgent);
        if !c.sqes.is_empty() {
            let sqes = std::mem::take(&mut c.sqes);
            drop(c);
            let (submitter, mut sq, mut cq) = self.ring.split();
            let mut result = Ok(());
            for e in &sqes {
                if let Err(err) = push(&submitter, &mut sq, &mut cq, &mut self.t.backlog, e) {
                    result = Err(err);
                }
            }
            drop((sq, cq));
            self.comp_queued = true;
            let mut sqes = sqes;
            sqes.clear();
            self.t.comp.get().sqes = sqes;
            result?;
        } else {
            drop(c);
        }
        if urgent {
            self.submit()?;
        }
        Ok(())
    }

    /// Lets the sends finish (a quarter of a second at most: what `send`
    /// took goes out, as a closed socket's send buffer does), cancels the
    /// rest and waits (a second at most) for their last completions:
    /// until then the kernel may use their buffers. Those still out after
    /// it keep their memory (leaked).
    fn drain_completions(&mut self) {
        if !self.t.comp.get().busy() {
            return;
        }
        self.t.comp.get().cancel_all(false);
        let _ = self.flush_completions();
        self.reap_completions_for(Duration::from_millis(250));
        if self.t.comp.get().busy() {
            self.t.comp.get().cancel_all(true);
            let _ = self.flush_completions();
            self.reap_completions_for(Duration::from_secs(1));
        }
    }

    /// Waits for completion requests' completions until none is left or
    /// `limit` has passed (the backend is being dropped: other
    /// completions are ignored).
    fn reap_completions_for(&mut self, limit: Duration) {
        let deadline = Deadline::new(Some(limit));
        while self.t.comp.get().busy() {
            let Some(left) = deadline.remaining().filter(|d| !d.is_zero()) else {
                break;
            };
            if self
                .wait(Some(left.min(Duration::from_millis(10))))
                .is_err()
            {
                break;
            }
            for cqe in self.ring.completion() {
                let (ud, res, flags) = (cqe.user_data(), cqe.result(), cqe.flags());
                if ud as u32 == completion::OPS {
                    self.t.comp.get().complete((ud >> 32) as usize, res, flags);
                }
            }
            let _ = self.flush_completions();
        }
    }

    /// Cancels every request in the kernel, and waits until the kernel has
    /// let go of their files (when the backend is dropped).
    fn cancel_all(&mut self) {
        for fd in 0..self.t.fds.len() {
            let _ = self.disarm(fd as RawFd);
        }
        let _ = self.submit();
    }
}

impl Tables {
    /// One completion.
    #[inline(always)]
    fn complete(&mut self, ud: u64, res: i32, flags: u32, events: &mut Vec<PollEvent>) {
        let fd = ud as u32;
        if fd == completion::OPS {
            return self.comp.get().complete((ud >> 32) as usize, res, flags);
        }
        // Removals and the probe carry a value beyond any fd in the fd
        // half: no table entry matches.
        let Some(slot) = self.fds.get_mut(fd as usize) else {
            return self.complete_other(ud, res);
        };
        if slot.generation != (ud >> 32) as u32 {
            return; // stale: a request the loop removed or replaced
        }
        let more = cqueue::more(flags);
        match slot.state {
            State::Armed => {}
            State::Parked => return self.parked(fd, res, more, events),
            // Its request is over, or being cancelled (a parked poll that
            // reported): a late completion of it.
            State::Off | State::Fired | State::Dead => return,
        }
        if res < 0 {
            // Closed (`EBADF`), or the kernel could not poll it.
            slot.state = State::Dead;
            return report(slot, fd, Ready::INVALID, self.epoch, events);
        }
        let got = res as u32 & slot.want;
        if !more {
            // A single-shot poll completed, or the kernel ended a
            // multishot one.
            slot.state = State::Fired;
            if got == 0 {
                // Only bits the fd did not ask for (POLLRDHUP on a
                // write-only registration): not reported, and a new
                // single-shot poll would complete at once again.
                self.park.push(fd as RawFd);
                return;
            }
            if slot.trigger != Trigger::Oneshot {
                self.rearm.push(fd as RawFd);
            }
        } else if got == 0 {
            return; // a multishot wake-up with nothing asked for
        }
        report(slot, fd, ready(got), self.epoch, events)
    }

    /// A completion of a parked fd's multishot poll.
    #[cold]
    fn parked(&mut self, fd: u32, res: i32, more: bool, events: &mut Vec<PollEvent>) {
        let slot = &mut self.fds[fd as usize];
        if res < 0 {
            // Polled again, by a poll of its own kind.
            slot.state = State::Fired;
            self.rearm.push(fd as RawFd);
            return;
        }
        let got = res as u32 & slot.want;
        if got == 0 {
            if !more {
                // The kernel ended it: park again.
                slot.state = State::Fired;
                self.park.push(fd as RawFd);
            }
            return;
        }
        // What the fd asked for: reported, and back to its own trigger
        // (a level or edge fd is polled again by the next poll, a one-shot
        // fd is disarmed).
        if more {
            self.cancel.push(user_data(fd as RawFd, slot.generation));
        }
        slot.state = State::Fired;
        if slot.trigger != Trigger::Oneshot {
            self.rearm.push(fd as RawFd);
        }
        report(slot, fd, ready(got), self.epoch, events)
    }

    /// A completion that is not a loop fd's: a removal's, the probe's,
    /// or of an fd beyond the table (nothing the loop has now).
    #[cold]
    fn complete_other(&mut self, ud: u64, res: i32) {
        if ud as u32 == REMOVAL && ud != REMOVE && ud != PROBE {
            self.removed((ud >> 32) as usize, res);
        }
    }

    /// A loop removal's answer: `EALREADY` (the poll was completing) is
    /// tried again after these completions, when its task work has run;
    /// anything else (removed, or over already: `ENOENT`) ends it.
    #[cold]
    fn removed(&mut self, index: usize, res: i32) {
        let Some(ud) = self.removing.try_remove(index) else {
            return;
        };
        if res == -libc::EALREADY {
            self.cancel.push(ud);
        }
    }

    /// Forgets everything (a new ring).
    fn clear(&mut self) {
        self.fds.clear();
        self.rearm.clear();
        self.park.clear();
        self.cancel.clear();
        self.removing.clear();
        self.backlog.clear();
        self.comp.get().clear();
    }
}

/// Appends a report of `fd`, or merges it into this poll's earlier one.
#[inline(always)]
fn report(slot: &mut Slot, fd: u32, ready: Ready, epoch: u32, events: &mut Vec<PollEvent>) {
    let fd = fd as RawFd;
    if slot.epoch == epoch {
        if let Some(e) = events.get_mut(slot.at as usize) {
            if e.fd == fd {
                e.ready = if ready.is_invalid() {
                    ready
                } else {
                    e.ready | ready
                };
                return;
            }
        }
    }
    slot.epoch = epoch;
    slot.at = events.len() as u32;
    events.push(PollEvent { fd, ready });
}

impl IoUring {
    /// A new ring, after probing what the backend needs of the kernel.
    ///
    /// Errors: the kernel refused `io_uring_setup` (no io_uring, disabled
    /// by `sysctl kernel.io_uring_disabled`, refused by a seccomp filter or
    /// a security module, out of memory or descriptors), or its io_uring
    /// lacks what the backend needs (Linux 5.11: `IORING_FEAT_NODROP`,
    /// `IORING_FEAT_EXT_ARG`, `POLL_ADD`, `POLL_REMOVE`). The message says
    /// which, and why.
    ///
    /// ```
    /// use evloop::backend::Backend;
    /// use evloop::backends::io_uring::IoUring;
    /// match IoUring::new() {
    ///     Ok(ring) => assert!(ring.capabilities().oneshot),
    ///     Err(err) => assert!(err.to_string().contains("cannot start"), "{err}"),
    /// }
    /// ```
    pub fn new() -> io::Result<IoUring> {
        IoUring::create(true)
    }

    /// A ring without deferred task work (as [`IoUring::new`] makes on
    /// kernels before 6.1): the one whose fd another loop can watch
    /// ([`Backend::pollable_fd`], [`Loop::pollable_fd`](crate::Loop::pollable_fd),
    /// [`Embed::new`](crate::Embed::new)). A ring with deferred task
    /// work posts a poll's completion only when its own thread enters it,
    /// so its fd is never woken by one; without it, the kernel completes
    /// polls with task work signalled to the loop's thread, which ends a
    /// wait of that thread (another loop's, blocked on the ring's fd) with
    /// `EINTR` and makes the ring's fd readable (the crate's backends
    /// retry `EINTR`; std's blocking I/O does too). The unit tests run
    /// the backend on both kinds of ring. Errors: those of
    /// [`IoUring::new`].
    ///
    /// ```
    /// use evloop::backends::io_uring::IoUring;
    /// use evloop::Loop;
    /// let Ok(ring) = IoUring::without_deferred_task_work() else { return };
    /// let lp: Loop = Loop::with_backend(ring);
    /// assert!(lp.pollable_fd().is_ok());
    /// ```
    pub fn without_deferred_task_work() -> io::Result<IoUring> {
        IoUring::create(false)
    }

    fn create(defer: bool) -> io::Result<IoUring> {
        let (ring, multishot, completion) = create(defer)?;
        let t = Tables {
            multishot,
            ..Tables::default()
        };
        t.comp.get().start(&ring.submitter(), completion);
        Ok(IoUring {
            set: Set {
                defer,
                ring,
                t,
                // SAFETY: plain system call without arguments.
                owner: unsafe { libc::getpid() },
                waits: 0,
                comp_queued: false,
            },
            clock: Clock::new(),
            _thread: PhantomData,
        })
    }

    /// Behaves as on a kernel without multishot polls (before Linux 5.13):
    /// no edge triggering, no parking. For tests of that path; call it
    /// before the backend is handed to a loop. Not part of the API.
    ///
    /// ```
    /// use evloop::backend::Backend;
    /// # let Ok(mut ring) = evloop::backends::io_uring::IoUring::new() else { return };
    /// ring.force_no_multishot();
    /// assert!(!ring.capabilities().edge);
    /// ```
    #[doc(hidden)]
    pub fn force_no_multishot(&mut self) {
        self.set.t.multishot = false;
    }
}

/// This backend, for the platform's list (backends/mod.rs).
pub(super) const OFFERED: super::Offered = super::Offered {
    name: "io_uring",
    open: || Ok(Box::new(IoUring::new()?)),
};

impl Backend for IoUring {
    fn name(&self) -> &'static str {
        "io_uring"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            edge: self.set.t.multishot,
            oneshot: true,
            virtual_fds: false,
            max_fd: None,
            // A poll completes at the first wake-up after it is armed,
            // with that wake-up's events: data, then a close before the
            // wait, gives `POLLIN` alone.
            hangup: crate::backend::Hangup::AsOfWakeup,
            // The pending poll holds the file: nothing while it is quiet;
            // the change's new poll fails (`EBADF`) in the next wait.
            closed_fd: crate::backend::ClosedFd::InvalidAfterChange,
            level: crate::backend::Level::Native,
            completion: self.set.t.comp.get().on,
        }
    }

    fn modify(&mut self, fd: RawFd, _old: Interest, new: Interest) -> io::Result<()> {
        let Ok(idx) = usize::try_from(fd) else {
            return Err(io::Error::from_raw_os_error(libc::EBADF));
        };
        let set = &mut self.set;
        let owned = set.t.comp.get().owns(fd);
        if owned && set.t.comp.get().modify(fd, new)? {
            // Adopted while registered for readiness: that poll goes.
            if set.t.fds.get(idx).is_some_and(|s| s.state != State::Off) {
                set.disarm(fd)?;
                set.t.fds[idx].state = State::Off;
                set.t.fds[idx].want = 0;
            }
            return set.flush_completions();
        }
        if new.is_empty() {
            // A release's cancellations, before the close that follows.
            set.flush_completions()?;
        }
        if new.is_empty() {
            if idx >= set.t.fds.len() {
                return Ok(()); // never added
            }
            // Submitted now, not with the next wait: the kernel must let
            // go of the file before the loop closes the fd. A failure
            // leaves the removal queued, and its poll's completions stale.
            if let Ok(true) = set.disarm(fd) {
                let _ = set.submit();
            }
            let slot = &mut set.t.fds[idx];
            slot.state = State::Off;
            slot.want = 0;
            return Ok(());
        }
        if new.trigger() == Trigger::Edge && !set.t.multishot {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "the io_uring backend offers edge triggering only with multishot polls \
                 (Linux 5.13)",
            ));
        }
        if idx >= set.t.fds.len() {
            set.t.fds.resize(idx + 1, Slot::default());
        }
        if matches!(set.t.fds[idx].state, State::Off | State::Dead) {
            super::util::refuse_files("io_uring", fd)?;
        }
        set.disarm(fd)?;
        let slot = &mut set.t.fds[idx];
        slot.want = want(new);
        slot.trigger = new.trigger();
        set.arm(fd, false)
    }

    /// The ring's fd, readable while its completion queue holds a
    /// completion (a watched fd's poll, the loop's internal ones too) once the queued
    /// polls are submitted (`expose_changes`); only for a ring without
    /// deferred task work ([`IoUring::without_deferred_task_work`]).
    /// A ring with it (what [`IoUring::new`] makes from Linux 6.1) is
    /// refused: its completions are posted only when the loop's thread
    /// enters the ring, and nothing wakes a wait on its fd meanwhile
    /// (measured: a `poll(2)` of the fd sleeps through a ready socket's
    /// completion until its timeout).
    fn pollable_fd(&self) -> io::Result<std::os::fd::BorrowedFd<'_>> {
        use std::os::fd::{AsRawFd, BorrowedFd};
        // The backend asks for SINGLE_ISSUER only with DEFER_TASKRUN, and
        // the kernel keeps the flags it accepted.
        if self.set.ring.params().is_setup_single_issuer() {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "the ring was made with deferred task work \
                 (IORING_SETUP_DEFER_TASKRUN), which posts a poll's completion only when the \
                 loop's own thread enters the ring, so nothing wakes a wait on the ring's fd; \
                 make the loop's ring with IoUring::without_deferred_task_work()",
            ));
        }
        // SAFETY: the ring's descriptor is open for as long as the ring,
        // which `self` owns and replaces only through `&mut self` (reinit):
        // the borrow cannot outlive it. (The io-uring crate's own `AsFd`
        // is behind a feature this crate does not enable.)
        Ok(unsafe { BorrowedFd::borrow_raw(self.set.ring.as_raw_fd()) })
    }

    /// Submits the queued polls and re-arms the level fds the last poll
    /// reported, without waiting: their completions stay in the
    /// completion queue for the next poll, and make the ring's fd readable
    /// meanwhile. Holds reports: completions read early (a submission
    /// that found the completion queue overflowing), which the ring's fd
    /// does not show.
    fn expose_changes(&mut self) -> io::Result<bool> {
        let set = &mut self.set;
        set.rearm()?;
        if !set.ring.submission().is_empty() {
            set.submit()?;
        }
        Ok(!set.t.backlog.is_empty())
    }

    fn poll(
        &mut self,
        timeout: Option<Duration>,
        events: &mut Vec<PollEvent>,
    ) -> io::Result<PollStatus> {
        let set = &mut self.set;
        set.t.epoch = set.t.epoch.wrapping_add(1);
        set.rearm()?;
        let from = events.len();
        let deadline = Deadline::new(timeout);
        loop {
            // What completions changed (a receive to arm again, the next
            // send) goes with this wait.
            set.flush_completions()?;
            // Adopted fds with something to report: do not wait.
            let ready_now = set.t.comp.get().has_ready();
            let left = if ready_now {
                Some(Duration::ZERO)
            } else {
                deadline.remaining()
            };
            set.wait(left)?;
            set.reap(events)?;
            {
                let mut c = set.t.comp.get();
                if c.has_ready() {
                    c.report(events);
                }
            }
            if events.len() > from || ready_now {
                break;
            }
            if left.is_some_and(|d| d.is_zero()) || deadline.remaining() == Some(Duration::ZERO) {
                break;
            }
            // Interrupted, or only stale completions: wait again, for the
            // time left.
        }
        Ok(PollStatus::Done)
    }

    fn now(&mut self) -> Duration {
        self.clock.now()
    }

    /// The sends completion I/O queued (and what else waits in the
    /// submission queue), submitted without waiting; nothing when no
    /// completion request waits.
    fn submit_pending(&mut self) -> io::Result<()> {
        let set = &mut self.set;
        if !set.t.comp.get().pending() && !set.comp_queued {
            return Ok(());
        }
        set.flush_completions()?;
        set.submit()
    }

    /// The ring's completion I/O (completion.rs), where the kernel has it.
    fn completion_io(&mut self) -> Option<Rc<dyn CompletionIo>> {
        if self.set.t.comp.get().on {
            Some(self.set.t.comp.clone())
        } else {
            None
        }
    }

    fn reinit(&mut self) -> io::Result<()> {
        // The old ring is the parent's too: unmapped and closed here when
        // replaced, nothing cancelled through it.
        let (ring, multishot, completion) = create(self.set.defer)?;
        self.set.ring = ring;
        self.set.t.clear();
        self.set.t.multishot &= multishot;
        let on = self.set.t.comp.get().on;
        let submitter = self.set.ring.submitter();
        self.set.t.comp.get().start(&submitter, on && completion);
        // SAFETY: plain system call without arguments.
        self.set.owner = unsafe { libc::getpid() };
        Ok(())
    }
}

impl Drop for IoUring {
    fn drop(&mut self) {
        // SAFETY: plain system call without arguments.
        if unsafe { libc::getpid() } == self.set.owner {
            self.set.cancel_all();
            self.set.drain_completions();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::os::unix::net::UnixStream;
    use std::sync::mpsc;
    use std::time::Instant;

    thread_local! {
        /// Whether [`ring`] asks for deferred task work (on this thread).
        static DEFER: std::cell::Cell<bool> = const { std::cell::Cell::new(true) };
    }

    /// Runs `body` twice, on a ring with deferred task work and on one
    /// without (as before Linux 6.1), each on a thread of its own, and
    /// fails if it has not finished within five seconds, so that a spin or
    /// a hang fails fast.
    fn watchdog(body: impl Fn() + Send + Sync + 'static) {
        let body = std::sync::Arc::new(body);
        for defer in [true, false] {
            let (done, finished) = mpsc::channel();
            let body = body.clone();
            let thread = std::thread::spawn(move || {
                DEFER.with(|d| d.set(defer));
                body();
                let _ = done.send(());
            });
            match finished.recv_timeout(Duration::from_secs(5)) {
                Ok(()) | Err(mpsc::RecvTimeoutError::Disconnected) => {
                    if let Err(panic) = thread.join() {
                        eprintln!("with deferred task work: {defer}");
                        std::panic::resume_unwind(panic);
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    panic!("not finished after 5 s (deferred task work: {defer}): the backend spins or hangs")
                }
            }
        }
    }

    /// A backend, or `None` where the kernel refuses io_uring (the tests
    /// then pass without running: CI runs them only where it works).
    fn ring() -> Option<IoUring> {
        let r = if DEFER.with(|d| d.get()) {
            IoUring::new()
        } else {
            IoUring::without_deferred_task_work()
        };
        match r {
            Ok(r) => Some(r),
            Err(e) => {
                eprintln!("skipped: {e}");
                None
            }
        }
    }

    fn poll(r: &mut IoUring, timeout: Duration) -> Vec<PollEvent> {
        let mut events = Vec::new();
        r.poll(Some(timeout), &mut events).unwrap();
        events
    }

    const LONG: Duration = Duration::from_secs(5);

    /// Three polls of 50 ms: none reports anything, each blocks for its
    /// timeout (a spin returns at once).
    fn assert_waits(r: &mut IoUring) {
        for _ in 0..3 {
            let t = Instant::now();
            let events = poll(r, Duration::from_millis(50));
            let took = t.elapsed();
            assert_eq!(events, [], "after {took:?}");
            assert!(took >= Duration::from_millis(50), "returned after {took:?}");
        }
    }

    fn pair() -> (UnixStream, UnixStream) {
        let (a, b) = UnixStream::pair().unwrap();
        a.set_nonblocking(true).unwrap();
        b.set_nonblocking(true).unwrap();
        (a, b)
    }

    /// Fills `s`'s send buffer.
    fn fill(s: &mut UnixStream) {
        let chunk = [0u8; 4096];
        while s.write(&chunk).is_ok() {}
    }

    const R: Interest = Interest::READABLE;
    const W: Interest = Interest::WRITABLE;

    fn ev(fd: &impl AsRawFd, ready: Ready) -> PollEvent {
        PollEvent {
            fd: fd.as_raw_fd(),
            ready,
        }
    }

    #[test]
    fn masks() {
        assert_eq!(want(R), POLLIN | POLLRDHUP | ALWAYS);
        assert_eq!(want(W), POLLOUT | ALWAYS);
        assert_eq!(want(W) & REQUEST, POLLOUT, "RDHUP not asked for a writer");
        assert_eq!(ready(POLLIN), Ready::READABLE);
        assert_eq!(ready(POLLOUT), Ready::WRITABLE);
        assert_eq!(ready(POLLHUP), Ready::HUP | Ready::READABLE);
        assert_eq!(ready(POLLIN | POLLRDHUP), Ready::HUP | Ready::READABLE);
        let err = Ready::ERROR | Ready::READABLE | Ready::WRITABLE;
        assert_eq!(ready(POLLERR), err);
        assert_eq!(ready(POLLNVAL | POLLIN), Ready::INVALID);
        let ud = user_data(7, 9);
        assert_eq!((ud as u32, (ud >> 32) as u32), (7, 9));
        assert_ne!(ud, REMOVE);
    }

    /// The completions, one by one, through the state machine: a stale
    /// generation is dropped, a level fd goes to `rearm`, a one-shot fd
    /// does not, a multishot poll's wake-ups merge into one report, and an
    /// ended multishot poll is re-armed.
    /// A removal the kernel answered `EALREADY` (a multishot poll whose
    /// task work was pending arms again and keeps its file) is submitted
    /// again; one that removed its poll, or found it over, is done.
    #[test]
    fn a_removal_answered_ealready_is_tried_again() {
        let mut t = Tables::default();
        let mut events = Vec::new();
        let (a, b) = (user_data(5, 1), user_data(6, 1));
        let (ia, ib) = (t.removing.insert(a), t.removing.insert(b));
        let tag = |i: usize| (i as u64) << 32 | u64::from(REMOVAL);
        t.complete(tag(ia), -libc::EALREADY, 0, &mut events);
        t.complete(tag(ib), 0, 0, &mut events);
        assert_eq!(t.cancel, [a]);
        assert!(t.removing.is_empty());
        assert!(events.is_empty());
        // A late or unknown removal completion changes nothing.
        t.complete(tag(ia), -libc::EALREADY, 0, &mut events);
        assert_eq!(t.cancel, [a]);
    }

    #[test]
    fn completions() {
        let mut t = Tables {
            multishot: true,
            epoch: 1,
            ..Tables::default()
        };
        t.fds.resize(8, Slot::default());
        let arm = |t: &mut Tables, fd: usize, i: Interest| {
            let s = &mut t.fds[fd];
            s.generation += 1;
            s.want = want(i);
            s.trigger = i.trigger();
            s.state = State::Armed;
            user_data(fd as RawFd, s.generation)
        };
        let mut events = Vec::new();
        let more = 1 << 1; // IORING_CQE_F_MORE

        // Level: reported, re-armed by the next poll.
        let old = arm(&mut t, 3, R);
        let new = arm(&mut t, 3, R);
        t.complete(old, POLLIN as i32, 0, &mut events);
        assert_eq!(events, [], "a replaced request's completion");
        t.complete(new, POLLIN as i32, 0, &mut events);
        let r3 = PollEvent {
            fd: 3,
            ready: Ready::READABLE,
        };
        assert_eq!(events, [r3]);
        assert_eq!((t.fds[3].state, &t.rearm[..]), (State::Fired, &[3][..]));
        t.complete(new, POLLIN as i32, 0, &mut events);
        assert_eq!(events, [r3], "a completed request completes once");

        // One-shot: reported, not re-armed.
        let once = arm(&mut t, 4, R.with_trigger(Trigger::Oneshot));
        t.complete(once, POLLIN as i32, 0, &mut events);
        assert_eq!(t.fds[4].state, State::Fired);
        assert_eq!(t.rearm, [3]);

        // Edge: every wake-up of this poll merges into one report; the
        // kernel's end of the poll re-arms it.
        let edge = arm(&mut t, 5, Interest::BOTH.with_trigger(Trigger::Edge));
        t.complete(edge, POLLIN as i32, more, &mut events);
        t.complete(edge, POLLOUT as i32, more, &mut events);
        assert_eq!(events.len(), 3);
        assert_eq!(events[2].ready, Ready::READABLE | Ready::WRITABLE);
        assert_eq!(t.fds[5].state, State::Armed);
        t.complete(edge, POLLIN as i32, 0, &mut events);
        assert_eq!((t.fds[5].state, &t.rearm[..]), (State::Fired, &[3, 5][..]));

        // A failed poll: reported invalid, once.
        let bad = arm(&mut t, 6, R);
        t.complete(bad, -libc::EBADF, 0, &mut events);
        t.complete(bad, -libc::EBADF, 0, &mut events);
        assert_eq!(events.last().unwrap().ready, Ready::INVALID);
        assert_eq!(events.len(), 4);
        assert_eq!(t.fds[6].state, State::Dead);

        // A writer that saw only POLLRDHUP: parked, not reported; a parked
        // poll's wake-up without POLLOUT is ignored, one with it reported
        // (and the parked poll cancelled).
        let w = arm(&mut t, 7, W);
        t.complete(w, POLLRDHUP as i32, 0, &mut events);
        assert_eq!((events.len(), &t.park[..]), (4, &[7][..]));
        t.park.clear();
        t.fds[7].state = State::Parked;
        t.fds[7].generation += 1;
        let parked = user_data(7, t.fds[7].generation);
        t.complete(parked, POLLRDHUP as i32, more, &mut events);
        assert_eq!(events.len(), 4);
        t.complete(parked, (POLLRDHUP | POLLOUT) as i32, more, &mut events);
        assert_eq!(
            events.last().unwrap(),
            &PollEvent {
                fd: 7,
                ready: Ready::WRITABLE
            }
        );
        assert_eq!(t.cancel, [parked]);
        assert_eq!(t.fds[7].state, State::Fired);

        // Removals, fds beyond the table.
        t.complete(REMOVE, 0, 0, &mut events);
        t.complete(user_data(1 << 20, 1), POLLIN as i32, 0, &mut events);
        assert_eq!(events.len(), 5);
    }

    /// An interest change before the wait: the old poll, submitted in the
    /// same `io_uring_enter` and complete at once (the fd is readable),
    /// must not be reported.
    #[test]
    fn a_replaced_poll_is_never_reported() {
        watchdog(move || {
            let Some(mut r) = ring() else { return };
            let (a, mut b) = pair();
            b.write_all(b"x").unwrap();
            let fd = a.as_raw_fd();
            r.modify(fd, Interest::NONE, R).unwrap();
            r.modify(fd, R, W).unwrap();
            assert_eq!(poll(&mut r, LONG), [ev(&a, Ready::WRITABLE)]);
            r.modify(fd, W, Interest::NONE).unwrap();
            assert_waits(&mut r);
        });
    }

    /// Level: reported on every poll while unread; silent once read.
    #[test]
    fn level_is_polled_again_by_every_wait() {
        watchdog(move || {
            let Some(mut r) = ring() else { return };
            let (mut a, mut b) = pair();
            r.modify(a.as_raw_fd(), Interest::NONE, R).unwrap();
            assert_waits(&mut r);
            b.write_all(b"xy").unwrap();
            for _ in 0..3 {
                assert_eq!(poll(&mut r, LONG), [ev(&a, Ready::READABLE)]);
            }
            a.read_exact(&mut [0; 2]).unwrap();
            assert_waits(&mut r);
        });
    }

    /// Edge: once per arrival, however long it stays unread; two arrivals
    /// between polls are one report.
    #[test]
    fn edge_is_reported_once_per_arrival() {
        watchdog(move || {
            let Some(mut r) = ring() else { return };
            if !r.capabilities().edge {
                return;
            }
            let (a, mut b) = pair();
            let edge = R.with_trigger(Trigger::Edge);
            r.modify(a.as_raw_fd(), Interest::NONE, edge).unwrap();
            assert_waits(&mut r);
            b.write_all(b"x").unwrap();
            b.write_all(b"y").unwrap();
            assert_eq!(poll(&mut r, LONG), [ev(&a, Ready::READABLE)]);
            assert_waits(&mut r);
            b.write_all(b"z").unwrap();
            assert_eq!(poll(&mut r, LONG), [ev(&a, Ready::READABLE)]);
            assert_waits(&mut r);
        });
    }

    /// Forgetting an fd whose poll is pending releases the file before
    /// `modify` returns: closed right after, the socket's peer sees EOF at
    /// once, as with epoll.
    #[test]
    fn forgetting_an_fd_lets_go_of_its_file_at_once() {
        watchdog(move || {
            let Some(mut r) = ring() else { return };
            let (a, mut b) = pair();
            r.modify(a.as_raw_fd(), Interest::NONE, R).unwrap();
            assert_eq!(poll(&mut r, Duration::ZERO), []); // submitted, pending
            r.modify(a.as_raw_fd(), R, Interest::NONE).unwrap();
            drop(a);
            assert_eq!(b.read(&mut [0; 1]).unwrap(), 0, "EOF at once");
        });
    }

    /// So does dropping the backend.
    #[test]
    fn dropping_the_backend_lets_go_of_the_files() {
        watchdog(move || {
            let Some(mut r) = ring() else { return };
            let (a, mut b) = pair();
            let edge = R.with_trigger(Trigger::Edge);
            let multi = if r.capabilities().edge { edge } else { R };
            r.modify(a.as_raw_fd(), Interest::NONE, multi).unwrap();
            let (c, mut d) = pair();
            r.modify(c.as_raw_fd(), Interest::NONE, R).unwrap();
            assert_eq!(poll(&mut r, Duration::ZERO), []); // both pending
            drop(r);
            drop((a, c));
            assert_eq!(b.read(&mut [0; 1]).unwrap(), 0, "EOF at once");
            assert_eq!(d.read(&mut [0; 1]).unwrap(), 0, "EOF at once");
        });
    }

    /// Keeps the numbers from `HIGH` up for one test at a time.
    static HIGH_FDS: std::sync::Mutex<()> = std::sync::Mutex::new(());
    /// Above what the other tests' files get (the lowest free numbers), so
    /// that a number closed by a test is not reused meanwhile (the epoll
    /// backend's tests use 700 and up).
    const HIGH: RawFd = 760;

    /// An fd closed behind the loop's back: the pending poll keeps the
    /// file open (no EOF for the peer) and reports nothing; the next
    /// change's poll fails (`EBADF`), reported invalid, once; forgetting
    /// it then releases the file.
    #[test]
    fn a_closed_fd_is_invalid_at_its_next_change() {
        watchdog(move || {
            let Some(mut r) = ring() else { return };
            let _high = HIGH_FDS.lock().unwrap_or_else(|e| e.into_inner());
            let (a, mut b) = pair();
            // The only descriptor of `a`'s socket, at a number no other
            // test gets while the lock is held.
            // SAFETY: duplicates an open fd into a new one, owned here.
            let high = unsafe { libc::fcntl(a.as_raw_fd(), libc::F_DUPFD_CLOEXEC, HIGH) };
            assert!(high >= HIGH, "F_DUPFD: {}", io::Error::last_os_error());
            drop(a);
            // SAFETY: `high` was just created and is owned by no one else;
            // closed below behind the backend's back, never used after.
            let fd = unsafe { OwnedFd::from_raw_fd(high) };
            let n = fd.as_raw_fd();
            assert_eq!(
                r.capabilities().closed_fd,
                crate::backend::ClosedFd::InvalidAfterChange
            );
            r.modify(n, Interest::NONE, R).unwrap();
            assert_eq!(poll(&mut r, Duration::ZERO), []);
            drop(fd);
            let err = b.read(&mut [0; 1]).unwrap_err();
            assert_eq!(
                err.kind(),
                io::ErrorKind::WouldBlock,
                "the ring holds the file"
            );
            assert_waits(&mut r);
            r.modify(n, R, Interest::BOTH).unwrap();
            let gone = PollEvent {
                fd: n,
                ready: Ready::INVALID,
            };
            assert_eq!(poll(&mut r, LONG), [gone]);
            assert_waits(&mut r);
            r.modify(n, Interest::BOTH, Interest::NONE).unwrap();
            assert_eq!(b.read(&mut [0; 1]).unwrap(), 0, "released: EOF");
        });
    }

    /// What the kernel does with a hang-up that comes right after data, and
    /// with one already there when the fd is armed: the declaration
    /// (`Hangup::AsOfWakeup`) covers both.
    #[test]
    fn a_hang_up_is_reported_as_of_the_wake_up() {
        watchdog(|| {
            let Some(mut r) = ring() else { return };
            assert_eq!(r.capabilities().hangup, crate::backend::Hangup::AsOfWakeup);
            // Armed, then data, then the close, before the wait.
            let (a, mut b) = pair();
            r.modify(a.as_raw_fd(), Interest::NONE, R).unwrap();
            assert_eq!(poll(&mut r, Duration::ZERO), []);
            b.write_all(b"x").unwrap();
            drop(b);
            let got = poll(&mut r, LONG);
            eprintln!("data then a close, armed before: {got:?}");
            assert_eq!(got.len(), 1, "{got:?}");
            assert!(got[0].ready.is_readable(), "{got:?}");
            // The next poll has the hang-up whole.
            let got = poll(&mut r, LONG);
            assert_eq!(got.len(), 1, "{got:?}");
            assert_eq!(got[0].ready, Ready::READABLE | Ready::HUP, "{got:?}");
            r.modify(a.as_raw_fd(), R, Interest::NONE).unwrap();
            // Already hung up when armed: HUP with the first report.
            let (c, d) = pair();
            drop(d);
            r.modify(c.as_raw_fd(), Interest::NONE, R).unwrap();
            let got = poll(&mut r, LONG);
            assert_eq!(got.len(), 1, "{got:?}");
            assert_eq!(got[0].ready, Ready::READABLE | Ready::HUP, "{got:?}");
            r.modify(c.as_raw_fd(), R, Interest::NONE).unwrap();
        });
    }

    /// A writer on a full socket whose peer shut down its write side: the
    /// kernel adds `POLLRDHUP` to every poll, which a writer did not ask
    /// for. Nothing is reported and nothing spins (the fd is parked on a
    /// multishot poll, or, without those, waits for the next poll), and
    /// the room the peer makes is reported.
    #[test]
    fn a_writer_does_not_spin_on_its_peer_s_half_close() {
        for multishot in [true, false] {
            watchdog(move || {
                let Some(mut r) = ring() else { return };
                if !multishot {
                    r.force_no_multishot();
                }
                let (mut a, mut b) = pair();
                fill(&mut a);
                b.shutdown(std::net::Shutdown::Write).unwrap();
                r.modify(a.as_raw_fd(), Interest::NONE, W).unwrap();
                assert_waits(&mut r);
                if multishot {
                    // The parked poll ends a wait blocked meanwhile.
                    let reader = std::thread::spawn(move || {
                        std::thread::sleep(Duration::from_millis(30));
                        drain(&mut b);
                        b
                    });
                    let start = Instant::now();
                    // A minute's wait: ended by the parked poll, it takes
                    // about 30 ms however loaded the machine is.
                    let got = poll(&mut r, Duration::from_secs(60));
                    assert!(
                        start.elapsed() < Duration::from_secs(30),
                        "{:?}",
                        start.elapsed()
                    );
                    assert_eq!(got, [ev(&a, Ready::WRITABLE)]);
                    b = reader.join().unwrap();
                } else {
                    drain(&mut b);
                    // Polled again by the next wait.
                    let got = poll(&mut r, Duration::from_millis(50));
                    assert_eq!(got, [ev(&a, Ready::WRITABLE)]);
                }
                assert_eq!(poll(&mut r, LONG), [ev(&a, Ready::WRITABLE)], "level");
                r.modify(a.as_raw_fd(), W, Interest::NONE).unwrap();
                drop(b);
            });
        }
    }

    fn drain(s: &mut UnixStream) {
        let mut buf = [0u8; 65536];
        while let Ok(n) = s.read(&mut buf) {
            if n == 0 {
                break;
            }
        }
    }

    /// The wait's timeout: never early, whatever the resolution asked for.
    #[test]
    fn timeouts_never_end_early() {
        watchdog(move || {
            let Some(mut r) = ring() else { return };
            let (a, _b) = pair();
            r.modify(a.as_raw_fd(), Interest::NONE, R).unwrap();
            for us in [1, 300, 1500, 10_000] {
                let t = Duration::from_micros(us);
                let start = Instant::now();
                assert_eq!(poll(&mut r, t), []);
                assert!(start.elapsed() >= t, "{t:?}: {:?}", start.elapsed());
            }
        });
    }

    /// A zero timeout (`RunMode::NoWait`, an idle watcher, pending work)
    /// submits and reaps without asking the kernel to wait: not one of a
    /// thousand idle polls makes a waiting `io_uring_enter` (each used to
    /// be a timed wait that ended with `ETIME`). And it still reports what
    /// is ready: a new poll on a ready fd, a level fd again and again, an
    /// armed poll completed by a write, an edge fd once, a wake-up.
    #[test]
    fn a_zero_timeout_never_waits_and_still_reports() {
        watchdog(move || {
            let Some(mut r) = ring() else { return };
            let zero = Duration::ZERO;
            let (mut a, mut b) = pair();
            r.modify(a.as_raw_fd(), Interest::NONE, R).unwrap();
            for _ in 0..1000 {
                assert_eq!(poll(&mut r, zero), []);
            }
            assert_eq!(r.set.waits, 0, "a zero-timeout poll asked to wait");

            // An armed poll, completed by a write.
            b.write_all(b"x").unwrap();
            assert_eq!(poll(&mut r, zero), [ev(&a, Ready::READABLE)]);
            // Level: re-armed and reported again by each zero poll.
            for _ in 0..3 {
                assert_eq!(poll(&mut r, zero), [ev(&a, Ready::READABLE)]);
            }
            a.read_exact(&mut [0; 1]).unwrap();
            assert_eq!(poll(&mut r, zero), []);
            // A new poll on an fd that is ready already.
            let (c, mut d) = pair();
            d.write_all(b"y").unwrap();
            r.modify(c.as_raw_fd(), Interest::NONE, R).unwrap();
            assert_eq!(poll(&mut r, zero), [ev(&c, Ready::READABLE)]);
            r.modify(c.as_raw_fd(), R, Interest::NONE).unwrap();
            // Edge: once per arrival.
            if r.capabilities().edge {
                let edge = R.with_trigger(Trigger::Edge);
                r.modify(a.as_raw_fd(), R, edge).unwrap();
                assert_eq!(poll(&mut r, zero), []);
                b.write_all(b"z").unwrap();
                assert_eq!(poll(&mut r, zero), [ev(&a, Ready::READABLE)]);
                assert_eq!(poll(&mut r, zero), []);
            }
            assert_eq!(r.set.waits, 0, "a zero-timeout poll asked to wait");
            // A wait that is not zero does wait.
            assert_eq!(poll(&mut r, Duration::from_millis(1)), []);
            assert_eq!(r.set.waits, 1);
        });
    }

    /// Whether the running kernel is Linux `major.minor` or later.
    fn kernel_at_least(major: u32, minor: u32) -> bool {
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        let mut parts = release
            .split(|c: char| !c.is_ascii_digit())
            .map(|p| p.parse::<u32>().unwrap_or(0));
        let found = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
        found >= (major, minor)
    }

    /// Both kinds of ring (deferred task work wherever the kernel has it,
    /// Linux 6.1), and the probe's findings.
    #[test]
    fn debug_tells_the_ring_s_kind() {
        watchdog(|| {
            let Some(r) = ring() else { return };
            let shown = format!("{r:?}");
            let defer = DEFER.with(|d| d.get());
            if !defer {
                assert!(shown.contains("deferred_task_work: false"), "{shown}");
            } else if kernel_at_least(6, 1) {
                assert!(shown.contains("deferred_task_work: true"), "{shown}");
            }
            eprintln!("{shown}");
        });
    }

    /// Regular files and directories are refused (`EPERM`), at once.
    #[test]
    fn files_are_refused() {
        let Some(mut r) = ring() else { return };
        let file = std::fs::File::open("Cargo.toml").unwrap();
        let err = r.modify(file.as_raw_fd(), Interest::NONE, R).unwrap_err();
        assert_eq!(err.raw_os_error(), None);
        assert!(err.to_string().contains("regular file"), "{err}");
    }

    /// After `reinit` (a new ring) the loop's fds work once added again.
    #[test]
    fn fds_work_after_reinit() {
        watchdog(move || {
            let Some(mut r) = ring() else { return };
            let (a, mut b) = pair();
            r.modify(a.as_raw_fd(), Interest::NONE, R).unwrap();
            r.reinit().unwrap();
            assert_waits(&mut r);
            r.modify(a.as_raw_fd(), Interest::NONE, R).unwrap();
            b.write_all(b"x").unwrap();
            assert_eq!(poll(&mut r, LONG), [ev(&a, Ready::READABLE)]);
        });
    }

    /// Installs a seccomp filter on the calling thread (only) that fails
    /// `io_uring_setup` with `EPERM`, as a container runtime's default
    /// profile does.
    fn refuse_io_uring_setup_on_this_thread() {
        const LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
        const JEQ_K: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
        const RET_K: u16 = 0x06; // BPF_RET | BPF_K
        const RET_ALLOW: u32 = 0x7fff_0000;
        let insn = |code, jt, jf, k| libc::sock_filter { code, jt, jf, k };
        let mut filter = [
            insn(LD_W_ABS, 0, 0, 0), // seccomp_data.nr
            insn(JEQ_K, 0, 1, libc::SYS_io_uring_setup as u32),
            insn(RET_K, 0, 0, libc::SECCOMP_RET_ERRNO | libc::EPERM as u32),
            insn(RET_K, 0, 0, RET_ALLOW),
        ];
        let prog = libc::sock_fprog {
            len: filter.len() as u16,
            filter: filter.as_mut_ptr(),
        };
        // SAFETY: `prog` points to a valid filter program that outlives
        // the call (the kernel copies it); without SECCOMP_FILTER_FLAG_TSYNC
        // it applies to this thread alone, which the caller made for it.
        unsafe {
            assert_eq!(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 0);
            let r = libc::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER as libc::c_ulong,
                &prog as *const libc::sock_fprog as libc::c_ulong,
            );
            assert_eq!(r, 0, "seccomp: {}", io::Error::last_os_error());
        }
    }

    /// A refused `io_uring_setup` is a clear error from the constructor,
    /// from `backends::open` and from the loop's builder.
    #[test]
    fn a_refused_setup_says_so() {
        std::thread::spawn(|| {
            refuse_io_uring_setup_on_this_thread();
            let err = IoUring::new().unwrap_err();
            let msg = err.to_string();
            assert_eq!(err.kind(), io::ErrorKind::PermissionDenied, "{msg}");
            assert!(msg.contains("io_uring_setup was refused"), "{msg}");
            assert!(
                msg.contains("seccomp") || msg.contains("io_uring_disabled"),
                "{msg}"
            );
            let Err(err) = crate::backends::open("io_uring") else {
                panic!("opened")
            };
            assert!(matches!(
                err,
                crate::Error::Backend {
                    backend: "io_uring",
                    ..
                }
            ));
            let err = crate::Loop::builder()
                .backend("io_uring")
                .build::<()>()
                .unwrap_err()
                .to_string();
            assert!(err.contains("io_uring_setup was refused"), "{err}");
            // The default backend is not affected.
            crate::Loop::<()>::new().unwrap();
        })
        .join()
        .unwrap();
    }

    /// Completion I/O with more data arriving than the ring has buffers:
    /// 100 adopted sockets get 96 KiB each while nothing is read, so
    /// receives end with `ENOBUFS` (each fd holds at most `HOLD_MAX`
    /// buffers, 100 of them more than the ring's 1024); reading then gives
    /// back buffers, the starved receives are armed again, and every byte
    /// arrives in order.
    #[test]
    fn completion_io_loses_nothing_when_the_buffer_ring_runs_out() {
        use crate::backend::Adopt;
        watchdog(|| {
            let Some(mut r) = ring() else { return };
            let Some(_) = r.completion_io() else {
                eprintln!("skipped: no completion I/O on this kernel");
                return;
            };
            const N: usize = 100;
            const EACH: usize = 96 * 1024;
            let byte = |c: usize, i: usize| (c * 31 + i / 7) as u8;
            let pairs: Vec<_> = (0..N).map(|_| pair()).collect();
            for (a, _) in &pairs {
                let io = r.completion_io().unwrap();
                io.adopt(a.as_raw_fd(), Adopt::Stream).unwrap();
                r.modify(a.as_raw_fd(), Interest::NONE, R).unwrap();
            }
            // Writers on threads: the socket buffers are smaller than EACH.
            let writers: Vec<_> = pairs
                .iter()
                .enumerate()
                .map(|(c, (_, b))| {
                    let mut b = b.try_clone().unwrap();
                    b.set_nonblocking(false).unwrap();
                    std::thread::spawn(move || {
                        let data: Vec<u8> = (0..EACH).map(|i| byte(c, i)).collect();
                        b.write_all(&data).unwrap();
                    })
                })
                .collect();
            // Polls without reading until the ring has run dry.
            let t = Instant::now();
            while r.set.t.comp.get().starved_count() == 0 {
                assert!(t.elapsed() < LONG, "the ring never ran out");
                poll(&mut r, Duration::from_millis(10));
            }
            let mut got = vec![0usize; N];
            let mut buf = [0u8; 8192];
            while got.iter().any(|&g| g < EACH) {
                for ev in poll(&mut r, LONG) {
                    let c = pairs
                        .iter()
                        .position(|(a, _)| a.as_raw_fd() == ev.fd)
                        .unwrap();
                    let io = r.completion_io().unwrap();
                    loop {
                        match io.recv(ev.fd, &mut buf) {
                            Ok(n) => {
                                assert!(n > 0, "no end of file was sent");
                                for (k, &b) in buf[..n].iter().enumerate() {
                                    assert_eq!(b, byte(c, got[c] + k), "socket {c}");
                                }
                                got[c] += n;
                            }
                            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                            Err(e) => panic!("{e}"),
                        }
                    }
                }
            }
            for w in writers {
                w.join().unwrap();
            }
            for (a, _) in &pairs {
                r.completion_io().unwrap().release(a.as_raw_fd());
                r.modify(a.as_raw_fd(), R, Interest::NONE).unwrap();
            }
        });
    }
}
