//! The process-wide signal hub, and the slots that tie each backend to it.
//!
//! # Slots
//!
//! Each backend that uses signals, children or a waker claims one [`Slot`]:
//! a few atomics that the signal handler and [`Wake`] read without locks.
//! Slots live in chunks of [`CHUNK`], linked from [`HEAD`]; a chunk is
//! allocated (by the claiming thread, never by the handler), fully
//! initialised, and then published by a compare-and-swap on `HEAD`. Chunks
//! are never freed and a published chunk's `next` never changes, so the
//! handler can walk the list at any moment.
//!
//! A slot owns its wake fd (see `wake.rs`). When its backend is dropped
//! the slot is released, drained and handed to the next backend that
//! claims one, with the same fd: a handler or waker that raced the
//! teardown writes into a descriptor that is still open (the new owner
//! sees at worst one spurious wake-up), never into a closed number that
//! may have been reused for someone else's file. A slot's pair is replaced
//! (and the old one closed) in two cases only:
//!
//! - in a forked child, for a slot whose `owner` is not the child's pid: no
//!   handler or waker of the child can pass the owner check for it, so none
//!   can be writing the old pair (and the child must not share its
//!   parent's eventfd);
//! - when the claiming backend cannot watch the slot's read end: a select
//!   backend (fds below `FD_SETSIZE` only) claiming a slot whose wake fd
//!   was made while every low fd was taken. The slot gets a new pair if a
//!   low enough number is free now (otherwise it keeps the old one, and
//!   the backend's registration fails with a clear error; the next claim
//!   tries again). The old pair is closed only once no write to it is in
//!   flight: every writer counts itself in `writers` before it loads
//!   `write` and out after its `write(2)`, and the claimer swaps `write`
//!   first, then waits for `writers` to be zero, reading it by a
//!   read-modify-write (all `SeqCst`: a writer that loaded the old number
//!   was counted before the swap, so the claimer sees it; one counted
//!   after the swap loads the new number).
//!   The wait is for a few instructions and one non-blocking system call
//!   of another thread; a writer never waits, so a signal handler on the
//!   claiming thread cannot deadlock it.
//!
//! # The handler
//!
//! Async-signal-safe: it saves and restores `errno`, calls only `getpid`
//! and `write` (both on POSIX's list), takes no lock (the count of writes
//! in flight is a lock-free atomic), allocates nothing and cannot panic. For each slot of this process (`owner == getpid()`, so
//! that a forked child never writes its parent's descriptors) that watches
//! the signal, it sets the signal's bit in `pending` and writes the slot's
//! wake fd.
//!
//! # Memory orderings
//!
//! - `HEAD`: `Release` on publication, `Acquire` on every load, so a walker
//!   that sees a chunk sees its initialised slots and its `next`.
//! - `used`: a claim is `compare_exchange(false, true, Acquire, _)` and a
//!   release `store(false, Release)`, so each claimer sees the slot as its
//!   previous owner left it (fields cleared).
//! - `owner`: stored with `Release` after `read`, `write`, `generation`,
//!   `pending` and `woke` are set up; the handler and wakers load it with
//!   `Acquire` before reading the others (`Relaxed`), so an owner they
//!   recognise comes with that owner's descriptors and generation.
//! - `pending` and `woke`: set (`fetch_or` / `store`, `Release`) *before*
//!   the write to the wake fd; the backend drains the fd and then takes
//!   them (`Acquire` load, `swap` if set). The write and the read of the fd
//!   order the two sides in practice (both are system calls, opaque to the
//!   compiler, and the kernel's lock on the eventfd or pipe is a full
//!   barrier), so a wait that ended because of a write sees the bit set
//!   before it; a bit seen without its write only costs a spurious wake-up.
//! - `watched`: changed only under the hub's lock (`fetch_or` /
//!   `fetch_and`, `Release`; read `Acquire` by the handler). An arrival
//!   that races a watch or an unwatch may be heard or not, as with any
//!   signal handler being installed.
//!
//! # Installing and restoring
//!
//! The hub's [`Mutex`] (never touched by the handler) guards every change
//! of a slot's `watched` mask and every `sigaction` call. The first watcher
//! of a signal in the process installs the handler (`SA_RESTART`, every
//! signal blocked while it runs) and keeps the previous action; when no
//! slot of this process watches the signal any more, the previous action
//! is put back as it was (handler, flags, mask), unless someone else
//! replaced ours meanwhile. The count is the slots' `watched` bits
//! themselves (of this process's slots only), so a forked child does not
//! count its parent's loops.
//!
//! One limit: a `fork` while another thread holds the hub's lock (inside a
//! watch or unwatch) leaves the child's copy locked, as with any mutex; a
//! child that then watches a signal waits forever.
//!
//! # Model check
//!
//! A loom model at the end of this file runs the handler's work on a slot
//! ([`Slot::arrive`]) and wakers against the loop's waits, watches,
//! unwatches, a release and a renumbering claim, in every interleaving:
//! `RUSTFLAGS="--cfg loom" cargo test --release --lib
//! backends::unix::hub::model`.
#![allow(unsafe_code)]

use std::io;
use std::mem;
use std::os::fd::RawFd;
use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::{Mutex, MutexGuard};

// The slots' atomics, and the wake fd's system calls, which the model
// check (`--cfg loom`, `mod model` at the end of this file; loom is a
// dev-dependency, so in the unit tests only) replaces with loom's atomics
// and a model descriptor table. `HEAD` stays std's (a static): the model
// makes its slots by hand.
#[cfg(all(test, loom))]
use loom::{
    sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64},
    thread::yield_now,
};
#[cfg(all(test, loom))]
use model::fds as wake;
#[cfg(not(all(test, loom)))]
use std::{
    sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64},
    thread::yield_now,
};

#[cfg(not(all(test, loom)))]
use super::wake;

/// Slots per chunk.
const CHUNK: usize = 16;

/// One backend's link to the hub; see the module documentation.
#[derive(Debug)]
pub(crate) struct Slot {
    /// Claimed by a backend.
    used: AtomicBool,
    /// The pid of the process whose backend owns the slot; 0 while free.
    owner: AtomicI32,
    /// The wake fd's read end (-1 before the first claim).
    read: AtomicI32,
    /// Its write end (the same descriptor for an eventfd).
    write: AtomicI32,
    /// The process that created `read` and `write`.
    fd_pid: AtomicI32,
    /// Bumped by every claim: a waker of an earlier owner does nothing.
    generation: AtomicU64,
    /// Bit `n - 1`: signal `n` is watched by this slot's backend.
    watched: AtomicU64,
    /// Bit `n - 1`: signal `n` arrived since the backend last looked.
    pending: AtomicU64,
    /// The backend's waker was used since it last looked.
    woke: AtomicBool,
    /// Writes to the wake fd in flight (see the module documentation).
    writers: AtomicU32,
}

struct Chunk {
    slots: [Slot; CHUNK],
    /// The chunk published before this one; set before publication, then
    /// never changed.
    next: *const Chunk,
}

/// The most recently published chunk.
static HEAD: AtomicPtr<Chunk> = AtomicPtr::new(ptr::null_mut());

fn getpid() -> libc::pid_t {
    // SAFETY: no arguments; async-signal-safe.
    unsafe { libc::getpid() }
}

/// Every slot ever published (for code outside the handler).
fn slots() -> impl Iterator<Item = &'static Slot> {
    let mut chunk = HEAD.load(Ordering::Acquire) as *const Chunk;
    std::iter::from_fn(move || {
        // SAFETY: published chunks are initialised and never freed.
        let c: &'static Chunk = unsafe { chunk.as_ref()? };
        chunk = c.next;
        Some(&c.slots)
    })
    .flatten()
}

impl Slot {
    fn new() -> Slot {
        Slot {
            used: AtomicBool::new(false),
            owner: AtomicI32::new(0),
            read: AtomicI32::new(-1),
            write: AtomicI32::new(-1),
            fd_pid: AtomicI32::new(0),
            generation: AtomicU64::new(0),
            watched: AtomicU64::new(0),
            pending: AtomicU64::new(0),
            woke: AtomicBool::new(false),
            writers: AtomicU32::new(0),
        }
    }

    /// Writes the wake fd, counted in `writers` (see the module
    /// documentation). Async-signal-safe: atomics and one `write(2)`.
    #[inline]
    fn write_wake_fd(&self) {
        self.writers.fetch_add(1, Ordering::SeqCst);
        wake::poke(self.write.load(Ordering::SeqCst));
        self.writers.fetch_sub(1, Ordering::Release);
    }

    fn try_take(&self) -> bool {
        !self.used.load(Ordering::Relaxed)
            && self
                .used
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
    }

    /// Makes a slot just taken ready for its new owner, this process, a
    /// backend that can watch fds below `limit` (any if `None`).
    fn prepare(&self, limit: Option<RawFd>) -> io::Result<()> {
        let me = getpid();
        if self.fd_pid.load(Ordering::Relaxed) != me {
            // A fresh slot, or one a forked child inherited: not ours to
            // share. Nothing of this process writes the old pair (its
            // owner is another process, or none).
            self.replace_fds(me)?;
        } else {
            if limit.is_some_and(|limit| self.read.load(Ordering::Relaxed) >= limit) {
                self.renumber(limit.unwrap_or(RawFd::MAX))?;
            }
            wake::drain(self.read.load(Ordering::Relaxed));
        }
        self.generation.fetch_add(1, Ordering::Relaxed);
        self.pending.store(0, Ordering::Relaxed);
        self.woke.store(false, Ordering::Relaxed);
        self.owner.store(me, Ordering::Release);
        Ok(())
    }

    /// A new wake fd for this process; the old pair, if any, is closed.
    /// Only for a slot whose `owner` is not this process.
    fn replace_fds(&self, me: libc::pid_t) -> io::Result<()> {
        let (read, write) = wake::create()?;
        let old_read = self.read.swap(read, Ordering::Relaxed);
        let old_write = self.write.swap(write, Ordering::SeqCst);
        // No writer of this process is counted for a slot it does not own;
        // a count copied from the parent by `fork` is stale.
        self.writers.store(0, Ordering::SeqCst);
        if old_read >= 0 {
            wake::close(old_read, old_write);
        }
        self.fd_pid.store(me, Ordering::Relaxed);
        Ok(())
    }

    /// A slot of this process, just claimed, whose read end is `limit` or
    /// more: a new pair if its read end is below `limit` now (the old
    /// pair closed once no write to it is in flight); otherwise the slot
    /// keeps its pair (the backend's registration of it then fails).
    fn renumber(&self, limit: RawFd) -> io::Result<()> {
        let (read, write) = wake::create()?;
        if read >= limit {
            wake::close(read, write);
            return Ok(());
        }
        let old_read = self.read.swap(read, Ordering::Relaxed);
        let old_write = self.write.swap(write, Ordering::SeqCst);
        // A read-modify-write, not a load: in `writers`' modification
        // order it comes after a writer's count (and sees it), or before
        // it, and then the writer's count reads it, which orders the swap
        // above before that writer's load of `write`. (`SeqCst` loads
        // would do in the C++ model too; this is what the loom model can
        // verify, loom treating `SeqCst` as `AcqRel`: with a load it
        // finds a write to the closed fd.)
        while self.writers.fetch_add(0, Ordering::SeqCst) != 0 {
            yield_now();
        }
        wake::close(old_read, old_write);
        tracing::trace!(
            old_read,
            read,
            "a hub slot's wake fd renumbered below {limit}"
        );
        Ok(())
    }

    /// The handler's work on one slot, for signal bit `bit` in process
    /// `me`: if the slot is this process's and watches the signal, the bit
    /// is set, then the wake fd written. Async-signal-safe.
    #[inline]
    fn arrive(&self, me: libc::pid_t, bit: u64) {
        if self.owner.load(Ordering::Acquire) == me
            && self.watched.load(Ordering::Acquire) & bit != 0
        {
            self.pending.fetch_or(bit, Ordering::Release);
            self.write_wake_fd();
        }
    }

    /// [`watch`]'s change of the slot, under the hub's lock: an arrival
    /// from before the watch is not news. False if it watched `bit`
    /// already.
    fn start_watching(&self, bit: u64) -> bool {
        if self.watched.load(Ordering::Relaxed) & bit != 0 {
            return false;
        }
        self.pending.fetch_and(!bit, Ordering::Relaxed);
        self.watched.fetch_or(bit, Ordering::Release);
        true
    }

    /// [`unwatch`]'s, under the hub's lock: whether it watched `bit`.
    fn stop_watching(&self, bit: u64) -> bool {
        if self.watched.fetch_and(!bit, Ordering::Release) & bit == 0 {
            return false;
        }
        self.pending.fetch_and(!bit, Ordering::Relaxed);
        true
    }

    /// The wake fd's read end, which the backend watches.
    pub(crate) fn read_fd(&self) -> RawFd {
        self.read.load(Ordering::Relaxed)
    }

    /// The current owner's generation, for its wakers.
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Relaxed)
    }

    /// The signals that arrived since the last call (bit `n - 1` for
    /// signal `n`), cleared.
    pub(crate) fn take_pending(&self) -> u64 {
        if self.pending.load(Ordering::Acquire) == 0 {
            return 0;
        }
        self.pending.swap(0, Ordering::Acquire)
    }

    /// Whether a waker was used since the last call, cleared.
    pub(crate) fn take_woke(&self) -> bool {
        self.woke.load(Ordering::Acquire) && self.woke.swap(false, Ordering::Acquire)
    }

    /// Makes the owner's next wait return, without a notice of its own
    /// (the owner has news to deliver after it, such as an exit it found).
    pub(crate) fn poke(&self) {
        self.write_wake_fd();
    }

    /// [`Slot::poke`] for the owner of `generation` only: nothing if the
    /// slot has changed hands (or process) since. What another backend
    /// uses to hand this one news (a child exit it reaped for both, see
    /// `children.rs`), from any thread.
    pub(crate) fn poke_for(&self, generation: u64) {
        if self.owner.load(Ordering::Acquire) != getpid()
            || self.generation.load(Ordering::Relaxed) != generation
        {
            return;
        }
        self.write_wake_fd();
    }

    /// [`Wake::wake`](crate::backend::Wake::wake) for the owner of `generation`:
    /// nothing if the slot has changed hands (or process) since.
    pub(crate) fn wake(&self, generation: u64) {
        if self.owner.load(Ordering::Acquire) != getpid()
            || self.generation.load(Ordering::Relaxed) != generation
        {
            return;
        }
        self.woke.store(true, Ordering::Release);
        self.write_wake_fd();
    }
}

/// Claims a slot for a new backend of this process, with a drained wake fd
/// and no signal watched. A backend that can watch only fds below `limit`
/// (select) gets a wake fd below it if one is free (see the module
/// documentation); it checks the fd itself when it registers it.
pub(crate) fn claim_within(limit: Option<RawFd>) -> io::Result<&'static Slot> {
    let slot = match slots().find(|s| s.try_take()) {
        Some(slot) => slot,
        None => publish_chunk(),
    };
    if let Err(err) = slot.prepare(limit) {
        slot.used.store(false, Ordering::Release);
        return Err(err);
    }
    Ok(slot)
}

/// [`claim_within`] for a backend that can watch any fd (for tests).
#[cfg(test)]
pub(crate) fn claim() -> io::Result<&'static Slot> {
    claim_within(None)
}

/// Allocates and publishes a chunk, and returns its first slot, already
/// taken by the caller.
fn publish_chunk() -> &'static Slot {
    let chunk = Box::into_raw(Box::new(Chunk {
        slots: std::array::from_fn(|_| Slot::new()),
        next: ptr::null(),
    }));
    // SAFETY: `chunk` is a valid allocation that nobody else can see yet.
    unsafe { (*chunk).slots[0].used.store(true, Ordering::Relaxed) };
    let mut head = HEAD.load(Ordering::Relaxed);
    loop {
        // SAFETY: still unpublished: this thread is its only user.
        unsafe { (*chunk).next = head };
        match HEAD.compare_exchange_weak(head, chunk, Ordering::Release, Ordering::Relaxed) {
            Ok(_) => break,
            Err(now) => head = now,
        }
    }
    // SAFETY: published chunks are never freed or moved, and from here on
    // only shared references to them exist.
    unsafe { &(*chunk).slots[0] }
}

/// Gives a slot back: every signal it watched is unwatched (restoring the
/// previous disposition of those no other slot of this process watches),
/// and the slot is free for the next claim, its wake fd kept open.
pub(crate) fn release(slot: &Slot) {
    let mut hub = lock();
    let bits = slot.watched.swap(0, Ordering::Release);
    for signal in signals_of(bits) {
        hub.settle(signal);
    }
    drop(hub);
    slot.owner.store(0, Ordering::Release);
    slot.used.store(false, Ordering::Release);
}

/// After `fork()`, in the child: the slot gets a wake fd of the child's
/// own (the inherited one is shared with the parent's backend) and
/// forgets its signals, whose handlers stay installed: the loop watches
/// them again at once, and an arrival in between must not take the
/// default action. Nothing to do in the process that claimed the slot
/// (a `reinit` without a fork).
pub(crate) fn reinit(slot: &Slot) -> io::Result<()> {
    let me = getpid();
    {
        let _hub = lock();
        slot.watched.store(0, Ordering::Release);
    }
    if slot.owner.load(Ordering::Relaxed) == me {
        return Ok(());
    }
    slot.replace_fds(me)?;
    slot.pending.store(0, Ordering::Relaxed);
    slot.woke.store(false, Ordering::Relaxed);
    slot.owner.store(me, Ordering::Release);
    Ok(())
}

/// Starts delivering `signal` to `slot`, installing the hub's handler if
/// no slot of this process had it.
pub(crate) fn watch(slot: &Slot, signal: i32) -> io::Result<()> {
    let bit = bit(signal).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("cannot watch signal {signal}: not a signal number (1 to 64)"),
        )
    })?;
    let mut hub = lock();
    if !slot.start_watching(bit) {
        return Ok(());
    }
    if let Err(err) = hub.install(signal) {
        slot.watched.fetch_and(!bit, Ordering::Release);
        return Err(io::Error::new(
            err.kind(),
            format!("cannot watch signal {signal}: sigaction failed ({err})"),
        ));
    }
    Ok(())
}

/// Stops delivering `signal` to `slot`; the previous disposition comes
/// back when no slot of this process watches it any more.
pub(crate) fn unwatch(slot: &Slot, signal: i32) {
    let Some(bit) = bit(signal) else { return };
    let mut hub = lock();
    if slot.stop_watching(bit) {
        hub.settle(signal);
    }
}

/// Bit `n - 1` for signal `n` in 1..=64.
pub(crate) fn bit(signal: i32) -> Option<u64> {
    (1..=64).contains(&signal).then(|| 1u64 << (signal - 1))
}

fn signals_of(bits: u64) -> impl Iterator<Item = i32> {
    (1..=64).filter(move |s| bits & (1u64 << (s - 1)) != 0)
}

/// What the hub's lock guards besides the slots' `watched` masks.
struct Hub {
    /// Per signal number, the action that was in place before the hub's
    /// handler was installed (`None`: not installed by the hub).
    previous: [Option<libc::sigaction>; 65],
}

// SAFETY: `sigaction` is plain data (a handler address, flags, a mask);
// the raw pointers some platforms declare in it are never dereferenced.
unsafe impl Send for Hub {}

const NOT_INSTALLED: Option<libc::sigaction> = None;
static HUB: Mutex<Hub> = Mutex::new(Hub {
    previous: [NOT_INSTALLED; 65],
});

fn lock() -> MutexGuard<'static, Hub> {
    // The guarded state is consistent after any panic (each change is one
    // assignment), so a poisoned lock is still usable.
    HUB.lock().unwrap_or_else(|e| e.into_inner())
}

impl Hub {
    /// Installs the handler for `signal` unless it already is.
    fn install(&mut self, signal: i32) -> io::Result<()> {
        let entry = &mut self.previous[signal as usize];
        if entry.is_some() {
            return Ok(());
        }
        // SAFETY: all-zero is a valid sigaction (no handler, no flags, an
        // empty mask), and the fields that matter are set below.
        let mut action: libc::sigaction = unsafe { mem::zeroed() };
        action.sa_sigaction = handler as extern "C" fn(libc::c_int) as libc::sighandler_t;
        action.sa_flags = libc::SA_RESTART;
        // SAFETY: `sa_mask` is a valid sigset_t to fill; `old` is written
        // by sigaction on success.
        let mut old: libc::sigaction = unsafe { mem::zeroed() };
        let r = unsafe {
            libc::sigfillset(&mut action.sa_mask);
            libc::sigaction(signal, &action, &mut old)
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        *entry = Some(old);
        Ok(())
    }

    /// Restores `signal`'s previous action if no slot of this process
    /// watches it any more.
    fn settle(&mut self, signal: i32) {
        let me = getpid();
        let Some(bit) = bit(signal) else { return };
        let watched = slots().any(|s| {
            s.owner.load(Ordering::Relaxed) == me && s.watched.load(Ordering::Relaxed) & bit != 0
        });
        if watched {
            return;
        }
        let Some(previous) = self.previous[signal as usize].take() else {
            return;
        };
        // SAFETY: `now` is written by sigaction; `previous` is the action
        // sigaction handed back when the hub installed its own.
        unsafe {
            let mut now: libc::sigaction = mem::zeroed();
            if libc::sigaction(signal, ptr::null(), &mut now) == 0 && now.sa_sigaction != ours() {
                // Someone replaced the hub's handler: theirs stays.
                return;
            }
            libc::sigaction(signal, &previous, ptr::null_mut());
        }
    }
}

fn ours() -> libc::sighandler_t {
    handler as extern "C" fn(libc::c_int) as libc::sighandler_t
}

/// A pointer to the calling thread's `errno`.
fn errno_location() -> *mut libc::c_int {
    cfg_if::cfg_if! {
        if #[cfg(target_os = "linux")] {
            // SAFETY: returns the calling thread's errno; async-signal-safe.
            unsafe { libc::__errno_location() }
        } else if #[cfg(any(target_os = "android", target_os = "netbsd", target_os = "openbsd"))] {
            // SAFETY: as above.
            unsafe { libc::__errno() }
        } else if #[cfg(any(target_os = "illumos", target_os = "solaris"))] {
            // Three underscores: illumos' libc names it `___errno`.
            // SAFETY: as above.
            unsafe { libc::___errno() }
        } else {
            // macOS, iOS, FreeBSD, DragonFly.
            // SAFETY: as above.
            unsafe { libc::__error() }
        }
    }
}

/// The hub's signal handler; see the module documentation.
extern "C" fn handler(signal: libc::c_int) {
    let errno = errno_location();
    // SAFETY: `errno` points to this thread's errno, valid for the
    // thread's life.
    let saved = unsafe { *errno };
    if (1..=64).contains(&signal) {
        let bit = 1u64 << (signal - 1);
        let me = getpid();
        let mut chunk = HEAD.load(Ordering::Acquire) as *const Chunk;
        // SAFETY: published chunks are initialised and never freed.
        while let Some(c) = unsafe { chunk.as_ref() } {
            for slot in &c.slots {
                slot.arrive(me, bit);
            }
            chunk = c.next;
        }
    }
    // SAFETY: as above.
    unsafe { *errno = saved };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The action in place for `signal`.
    fn current(signal: i32) -> libc::sigaction {
        // SAFETY: `now` is written by sigaction.
        unsafe {
            let mut now: libc::sigaction = mem::zeroed();
            assert_eq!(libc::sigaction(signal, ptr::null(), &mut now), 0);
            now
        }
    }

    fn installed(signal: i32) -> bool {
        lock().previous[signal as usize].is_some()
    }

    /// A signal no other unit test uses (each test its own).
    fn test_signal(n: i32) -> i32 {
        if cfg!(any(target_os = "linux", target_os = "android")) {
            libc::SIGRTMIN() + 20 + n
        } else {
            [libc::SIGUSR1, libc::SIGUSR2, libc::SIGWINCH][n as usize]
        }
    }

    #[test]
    fn counting_and_restore() {
        let signal = test_signal(0);
        // A previous disposition to come back: ignored, with a flag.
        // SAFETY: zeroed is a valid sigaction; SIG_IGN needs no handler.
        unsafe {
            let mut ign: libc::sigaction = mem::zeroed();
            ign.sa_sigaction = libc::SIG_IGN;
            ign.sa_flags = libc::SA_NODEFER;
            assert_eq!(libc::sigaction(signal, &ign, ptr::null_mut()), 0);
        }
        let (a, b) = (claim().unwrap(), claim().unwrap());
        assert!(!ptr::eq(a, b));
        watch(a, signal).unwrap();
        assert!(installed(signal));
        assert_eq!(current(signal).sa_sigaction, ours());
        assert_ne!(current(signal).sa_flags & libc::SA_RESTART, 0);
        watch(b, signal).unwrap();
        watch(b, signal).unwrap(); // idempotent
        unwatch(a, signal);
        assert_eq!(current(signal).sa_sigaction, ours(), "b still watches");
        unwatch(a, signal); // not watched: no effect
        assert_eq!(current(signal).sa_sigaction, ours());
        watch(a, signal).unwrap();
        unwatch(b, signal);
        assert_eq!(current(signal).sa_sigaction, ours(), "a watches again");
        release(a); // releasing unwatches
        let now = current(signal);
        assert_eq!(now.sa_sigaction, libc::SIG_IGN, "previous disposition back");
        assert_ne!(now.sa_flags & libc::SA_NODEFER, 0, "with its flags");
        assert!(!installed(signal));
        release(b);
        // SAFETY: back to the default for the other tests' sake.
        unsafe { libc::signal(signal, libc::SIG_DFL) };
    }

    #[test]
    fn arrivals_reach_every_watching_slot_and_coalesce() {
        let signal = test_signal(1);
        let (a, b, c) = (claim().unwrap(), claim().unwrap(), claim().unwrap());
        watch(a, signal).unwrap();
        watch(b, signal).unwrap();
        let sbit = bit(signal).unwrap();
        for _ in 0..3 {
            // SAFETY: the hub's handler is installed for `signal`.
            unsafe { libc::raise(signal) };
        }
        assert_eq!(a.take_pending(), sbit, "three arrivals, one bit");
        assert_eq!(b.take_pending(), sbit);
        assert_eq!(c.take_pending(), 0, "c does not watch it");
        assert_eq!(a.take_pending(), 0, "taken");
        // Unwatched: an arrival is no longer recorded (b still installs).
        unwatch(a, signal);
        // SAFETY: as above.
        unsafe { libc::raise(signal) };
        assert_eq!((a.take_pending(), b.take_pending()), (0, sbit));
        for s in [a, b, c] {
            release(s);
        }
        assert!(!installed(signal));
    }

    #[test]
    fn a_released_slot_is_reused_with_its_fd_and_old_wakers_do_nothing() {
        let a = claim().unwrap();
        let (fd, generation) = (a.read_fd(), a.generation());
        a.wake(generation);
        assert!(a.take_woke());
        release(a);
        // Another test may take it first; claim until it comes back (or
        // give up: a test holding it for long proves nothing wrong).
        let mut held = Vec::new();
        let mut again = None;
        for _ in 0..1000 {
            let s = claim().unwrap();
            if ptr::eq(s, a) {
                again = Some(s);
                break;
            }
            held.push(s);
        }
        for s in held {
            release(s);
        }
        let Some(again) = again else { return };
        assert_eq!(again.read_fd(), fd, "the slot keeps its descriptor");
        assert_ne!(again.generation(), generation);
        again.wake(generation); // a waker of the previous owner
        assert!(!again.take_woke());
        again.wake(again.generation());
        assert!(again.take_woke());
        release(again);
    }

    #[test]
    fn refuses_what_is_not_a_signal() {
        let a = claim().unwrap();
        assert!(watch(a, 0).is_err() && watch(a, 65).is_err());
        let err = watch(a, libc::SIGKILL).unwrap_err();
        assert!(err.to_string().contains("sigaction"), "{err}");
        assert!(!installed(libc::SIGKILL));
        release(a);
    }
}

/// The model check of the slots' lock-free protocol: loom runs a signal
/// handler (a thread standing in for it: the handler's work on a slot is
/// [`Slot::arrive`]) and wakers against the loop's thread (its waits,
/// drains and takes, its watches and unwatches, a release and the next
/// claim) in every interleaving its memory model allows; the atomics above
/// are loom's under `--cfg loom`, and the wake fds are a model descriptor
/// table (`fds`). `RUSTFLAGS="--cfg loom" cargo test --release --lib
/// backends::unix::hub::model` (`.ci/run` does). What it checks, the
/// module documentation's invariants: an arrival on a slot that watches
/// the signal is taken once (two arrivals at most twice), never lost (the
/// loop never sleeps with it set and its fd drained), and reaches no other
/// slot (one that does not watch it, or another process's); a watch does
/// not report an arrival from before it; a late handler and a previous
/// owner's waker that race a release, a claim and the renumbering of the
/// slot's wake fd never write a closed descriptor, and the new owner's
/// wake-up is not lost. It fails when the handler writes the fd before it
/// sets the bit, when a watch keeps an old bit, and when the renumbering
/// closes the old fd before the writes in flight are done (or a writer
/// loads the fd before it counts itself in).
#[cfg(all(test, loom))]
mod model {
    use super::*;
    use loom::sync::atomic::AtomicUsize;
    use loom::sync::Arc;

    /// The wake fds' model: a descriptor table whose numbers are reused
    /// lowest first, as the kernel's are, each open one an eventfd's
    /// counter (and how many writes it ever took). The table's lock stands
    /// for the kernel's lock on an eventfd or a pipe, the full barrier
    /// between a write and the read that sees it that the module
    /// documentation relies on. A write to a closed number panics: it
    /// would reach whoever is given the number next.
    pub(super) mod fds {
        use loom::sync::Mutex;
        use std::io;
        use std::os::fd::RawFd;

        /// An open model fd: its counter, and every write it took.
        #[derive(Clone, Copy, Default)]
        pub struct Fd {
            pub count: u64,
            pub writes: u64,
        }

        loom::lazy_static! {
            static ref TABLE: Mutex<Vec<Option<Fd>>> = Mutex::new(Vec::new());
        }

        pub fn create() -> io::Result<(RawFd, RawFd)> {
            let mut table = TABLE.lock().unwrap();
            let n = match table.iter().position(Option::is_none) {
                Some(n) => n,
                None => {
                    table.push(None);
                    table.len() - 1
                }
            };
            table[n] = Some(Fd::default());
            Ok((n as RawFd, n as RawFd))
        }

        pub fn close(read: RawFd, write: RawFd) {
            let mut table = TABLE.lock().unwrap();
            for fd in [read, write] {
                table[fd as usize] = None;
            }
        }

        pub fn poke(write: RawFd) {
            let mut table = TABLE.lock().unwrap();
            let Some(Some(fd)) = table.get_mut(write as usize) else {
                panic!("a write to fd {write}, which is closed (its number may be someone else's)");
            };
            fd.count += 1;
            fd.writes += 1;
        }

        pub fn drain(read: RawFd) {
            if let Some(Some(fd)) = TABLE.lock().unwrap().get_mut(read as usize) {
                fd.count = 0;
            }
        }

        /// The fd's state (it must be open).
        pub fn state(fd: RawFd) -> Fd {
            TABLE.lock().unwrap()[fd as usize].expect("an open fd")
        }
    }

    /// Signal `n`'s bit.
    fn sig(n: i32) -> u64 {
        bit(n).unwrap()
    }

    /// A slot claimed by a backend of this process (what `claim_within`
    /// does to the slot it takes: the model makes its slots itself).
    fn claimed(limit: Option<RawFd>) -> Arc<Slot> {
        let slot = Arc::new(Slot::new());
        assert!(slot.try_take());
        slot.prepare(limit).unwrap();
        slot
    }

    /// One wait of the loop on `slot`'s wake fd, then the drain and the
    /// take, in the order of the backends (the wait reports the fd, the
    /// notifier drains it; `take_notices` after the wait): the signal bits
    /// taken. The wait blocks until the fd is readable, or for ever once
    /// every handler is done without a write: then no watched bit may be
    /// left set (that would be a lost signal; the model lets the wait
    /// time out there).
    fn wait_and_take(slot: &Slot, done: &AtomicUsize, handlers: usize) -> u64 {
        let fd = slot.read_fd();
        loop {
            // `done` first: a handler's write comes before its `done`.
            let finished = done.load(Ordering::SeqCst) == handlers;
            if fds::state(fd).count > 0 {
                break;
            }
            if finished {
                let left =
                    slot.pending.load(Ordering::SeqCst) & slot.watched.load(Ordering::SeqCst);
                assert_eq!(left, 0, "lost: a signal is set and the loop sleeps unwoken");
                break;
            }
            yield_now();
        }
        fds::drain(fd);
        slot.take_pending()
    }

    /// Two arrivals of a signal, racing the loop's waits: each wait that
    /// ends takes what arrived, no arrival is lost or taken twice, and
    /// none reaches a slot that does not watch the signal or belongs to
    /// another process (a forked parent's, say, which watches it).
    #[test]
    fn arrivals_are_taken_once_never_lost_and_reach_only_their_slot() {
        let mut model = loom::model::Builder::new();
        model.preemption_bound = Some(3);
        model.check(|| {
            let me = getpid();
            let (s, t) = (sig(10), sig(12));
            let mine = claimed(None);
            assert!(mine.start_watching(s));
            let other_signal = claimed(None);
            assert!(other_signal.start_watching(t));
            let other_process = claimed(None);
            assert!(other_process.start_watching(s));
            other_process.owner.store(me + 1, Ordering::Release);
            let slots = [mine.clone(), other_signal.clone(), other_process.clone()];
            let done = Arc::new(AtomicUsize::new(0));
            let handler = {
                let done = done.clone();
                loom::thread::spawn(move || {
                    for _ in 0..2 {
                        for slot in &slots {
                            slot.arrive(me, s);
                        }
                    }
                    done.fetch_add(1, Ordering::SeqCst);
                })
            };
            let mut taken = 0;
            for _ in 0..2 {
                taken += (wait_and_take(&mine, &done, 1) & s != 0) as usize;
            }
            handler.join().unwrap();
            fds::drain(mine.read_fd());
            taken += (mine.take_pending() & s != 0) as usize;
            assert!((1..=2).contains(&taken), "two arrivals taken {taken} times");
            assert_eq!(mine.take_pending(), 0);
            for slot in [&other_signal, &other_process] {
                assert_eq!(
                    slot.take_pending(),
                    0,
                    "a signal reached a slot that does not watch it, or another process's"
                );
                assert_eq!(
                    fds::state(slot.read_fd()).writes,
                    0,
                    "another slot's fd written"
                );
            }
        });
    }

    /// An unwatch racing an arrival: the arrival may be heard or not (as
    /// with a handler being installed), once at most; and a watch made
    /// after it does not report it.
    #[test]
    fn a_watch_does_not_report_an_arrival_from_before_it() {
        loom::model(|| {
            let me = getpid();
            let s = sig(10);
            let slot = claimed(None);
            assert!(slot.start_watching(s));
            let handler = {
                let slot = slot.clone();
                loom::thread::spawn(move || slot.arrive(me, s))
            };
            let before = slot.take_pending() & s != 0;
            assert!(slot.stop_watching(s));
            let after = slot.take_pending() & s != 0;
            handler.join().unwrap();
            assert!(!(before && after), "one arrival taken twice");
            assert!(slot.start_watching(s));
            assert_eq!(
                slot.take_pending(),
                0,
                "a watch reported an arrival from before it"
            );
        });
    }

    /// A late handler and a waker of the slot's previous owner race its
    /// release and its next claim, by a backend that watches only fds
    /// below 1 (select's limit, in the model's numbers): the claim gives
    /// the slot a new wake fd (number 0, free again) and closes the old
    /// one once no write to it is in flight. No write reaches a closed
    /// fd, and the new owner's own wake-up is not lost. (At worst the new
    /// owner sees a spurious wake-up, and the previous owner's signal bit
    /// left set, which the notifier drops: it keeps only the bits of the
    /// signals its backend watches, and a watch clears the bit first.)
    #[test]
    fn a_released_slot_renumbered_for_its_next_owner_is_never_written_closed() {
        let mut model = loom::model::Builder::new();
        model.preemption_bound = Some(3);
        model.check(|| {
            let me = getpid();
            let s = sig(10);
            let (filler, _) = fds::create().unwrap();
            let slot = claimed(None);
            assert_eq!(slot.read_fd(), 1);
            fds::close(filler, filler);
            assert!(slot.start_watching(s));
            let old = slot.generation();
            let late = {
                let slot = slot.clone();
                loom::thread::spawn(move || {
                    slot.arrive(me, s);
                    slot.wake(old);
                })
            };
            release(&slot);
            assert!(slot.try_take());
            slot.prepare(Some(1)).unwrap();
            assert_eq!(slot.read_fd(), 0, "renumbered below the limit");
            let new = slot.generation();
            let waker = {
                let slot = slot.clone();
                loom::thread::spawn(move || slot.wake(new))
            };
            late.join().unwrap();
            waker.join().unwrap();
            assert!(fds::state(0).count > 0, "the new owner's wake-up lost");
            fds::drain(0);
            assert!(slot.take_woke());
        });
    }
}
