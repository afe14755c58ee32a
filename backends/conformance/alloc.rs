//! The no-allocation check: a loop on the backend under test allocates
//! nothing in steady state (io events dispatched, timers pushed back,
//! iterations run), counted by [`CountingAllocator`], which the test binary
//! installs as its global allocator.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::io::{Read, Write};
use std::time::Duration;

use crate::backends::Factory;
use crate::{Interest, Loop, RunMode};

/// A global allocator that forwards to the system's and counts, per thread,
/// the allocations made while the kit measures. Install it in the test
/// binary that runs the kit, and the kit's no-allocation check runs; without
/// it the check is reported as skipped:
///
/// ```
/// #[global_allocator]
/// static COUNTING: evloop::conformance::CountingAllocator =
///     evloop::conformance::CountingAllocator;
///
/// assert!(evloop::conformance::CountingAllocator::installed());
/// ```
///
/// The count is per thread, so that tests running in parallel in the same
/// binary do not add to each other's. It also counts the frees and the
/// bytes held, for [`CountingAllocator::net_allocations_in`] (what a piece
/// of code left allocated: a leak) and [`CountingAllocator::peak_bytes_in`].
#[derive(Debug, Clone, Copy, Default)]
pub struct CountingAllocator;

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    /// This thread's allocations while `COUNTING` is set.
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
    /// This thread's frees while `COUNTING` is set.
    static FREES: Cell<u64> = const { Cell::new(0) };
    /// While `COUNTING` is set: the bytes this thread allocated less those
    /// it freed (negative if it frees what it had before), and the most
    /// that has been.
    static LIVE: Cell<i64> = const { Cell::new(0) };
    static PEAK: Cell<i64> = const { Cell::new(0) };
}

fn counting() -> bool {
    // `try_with`: the allocator may be called while thread-locals are torn
    // down, when there is nothing to count.
    COUNTING.try_with(Cell::get).unwrap_or(false)
}

fn note() {
    count(&ALLOCS);
}

fn count(counter: &'static std::thread::LocalKey<Cell<u64>>) {
    if counting() {
        let _ = counter.try_with(|n| n.set(n.get() + 1));
    }
}

/// `bytes` more (or fewer, if negative) live on this thread.
fn live(bytes: i64) {
    if counting() {
        let _ = LIVE.try_with(|l| {
            let now = l.get() + bytes;
            l.set(now);
            let _ = PEAK.try_with(|p| p.set(p.get().max(now)));
        });
    }
}

fn size(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

// SAFETY: forwards every call to the system allocator unchanged; counting
// touches only const-initialised thread-locals without destructors (no
// allocation, no lock).
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note();
        live(size(layout.size()));
        // SAFETY: the caller's contract is `GlobalAlloc::alloc`'s, passed on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note();
        live(size(layout.size()));
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        count(&FREES);
        live(-size(layout.size()));
        // SAFETY: `ptr` was allocated by `System` with `layout` (every
        // allocation of this allocator is).
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note();
        count(&FREES);
        live(size(new_size) - size(layout.size()));
        // SAFETY: as for `dealloc`, and `new_size` is the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

impl CountingAllocator {
    /// The allocations `f` made on this thread (0 whatever it did if the
    /// allocator is not installed: see [`CountingAllocator::installed`]).
    ///
    /// ```
    /// # #[global_allocator]
    /// # static COUNTING: evloop::conformance::CountingAllocator =
    /// #     evloop::conformance::CountingAllocator;
    /// use evloop::conformance::CountingAllocator;
    /// assert_eq!(CountingAllocator::allocations_in(|| {}), 0);
    /// let n = CountingAllocator::allocations_in(|| drop(std::hint::black_box(vec![1u8; 64])));
    /// assert_eq!(n, 1);
    /// ```
    pub fn allocations_in(f: impl FnOnce()) -> u64 {
        let before = ALLOCS.with(Cell::get);
        let was = COUNTING.with(|c| c.replace(true));
        f();
        COUNTING.with(|c| c.set(was));
        ALLOCS.with(Cell::get) - before
    }

    /// The most memory, in bytes, that `f` held allocated at once on this
    /// thread (what it allocated less what it freed, at its peak; 0 if the
    /// allocator is not installed). Failed allocations count as made.
    ///
    /// ```
    /// # #[global_allocator]
    /// # static COUNTING: evloop::conformance::CountingAllocator =
    /// #     evloop::conformance::CountingAllocator;
    /// use evloop::conformance::CountingAllocator;
    /// let peak = CountingAllocator::peak_bytes_in(|| {
    ///     for _ in 0..10 {
    ///         drop(std::hint::black_box(vec![0u8; 1000]));
    ///     }
    /// });
    /// assert_eq!(peak, 1000);
    /// ```
    pub fn peak_bytes_in(f: impl FnOnce()) -> u64 {
        let saved = (LIVE.with(Cell::get), PEAK.with(Cell::get));
        LIVE.with(|l| l.set(0));
        PEAK.with(|p| p.set(0));
        let was = COUNTING.with(|c| c.replace(true));
        f();
        COUNTING.with(|c| c.set(was));
        let peak = PEAK.with(Cell::get);
        // An enclosing measure goes on from where it was, with this peak
        // on top of it.
        LIVE.with(|l| l.set(saved.0 + LIVE.with(Cell::get)));
        PEAK.with(|p| p.set(saved.1.max(saved.0 + peak)));
        u64::try_from(peak).unwrap_or(0)
    }

    /// The allocations `f` made on this thread minus the frees it made:
    /// how many blocks it left allocated (a leak, or a cache it filled;
    /// run it once first to fill those). A `realloc` counts as a free
    /// and an allocation.
    ///
    /// ```
    /// # #[global_allocator]
    /// # static COUNTING: evloop::conformance::CountingAllocator =
    /// #     evloop::conformance::CountingAllocator;
    /// use evloop::conformance::CountingAllocator;
    /// assert_eq!(CountingAllocator::net_allocations_in(|| drop(vec![1u8; 64])), 0);
    /// let n = CountingAllocator::net_allocations_in(|| std::mem::forget(vec![1u8; 64]));
    /// assert_eq!(n, 1);
    /// ```
    pub fn net_allocations_in(f: impl FnOnce()) -> i64 {
        let frees = FREES.with(Cell::get);
        let allocs = CountingAllocator::allocations_in(f);
        allocs as i64 - (FREES.with(Cell::get) - frees) as i64
    }

    /// Whether it is the global allocator of this program (an allocation
    /// made to find out is counted).
    pub fn installed() -> bool {
        CountingAllocator::allocations_in(|| drop(std::hint::black_box(Box::new(0u64)))) > 0
    }
}

#[derive(Default)]
struct Stats {
    io: u64,
    fired: u64,
}

/// A connected pair: the end the loop watches (non-blocking), and the
/// peer's (blocking).
fn pair() -> (super::fixture::OsSock, super::fixture::OsSock) {
    cfg_if::cfg_if! {
        if #[cfg(windows)] {
            // A TCP loopback pair: Windows has no socketpair.
            let (a, b) = super::fixture::socketpair();
            b.set_nonblocking(false).unwrap();
        } else if #[cfg(target_os = "wasi")] {
            // A relayed pair (the fixture's): the guest makes no socket.
            let (a, b) = super::fixture::socketpair();
        } else {
            let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
            a.set_nonblocking(true).unwrap();
        }
    }
    (a, b)
}

/// Twenty socket pairs, a byte read per callback and a timer pushed back
/// per event, warmed up, then 200 iterations: none may allocate. Panics
/// with the count if one does.
pub fn check(name: &str, open: Factory) {
    let backend = open().unwrap_or_else(|e| panic!("cannot create the {name} backend: {e}"));
    let mut lp: Loop<Stats> = Loop::from(backend);
    let mut peers = Vec::new();
    for _ in 0..20 {
        let (a, mut b) = pair();
        b.write_all(b"x").unwrap();
        peers.push(b);
        let timeout = lp
            .timer(Duration::ZERO, Duration::from_secs(30), |_, st, _| {
                st.fired += 1
            })
            .unwrap();
        timeout.again(&mut lp).unwrap();
        lp.io(a, Interest::READABLE, move |lp, st, ev| {
            // One byte per round arrives from the peer; read one.
            let mut byte = [0u8; 1];
            if ev.source.read(&mut byte).unwrap_or(0) == 1 {
                st.io += 1;
                timeout.again(lp).unwrap();
            }
        })
        .unwrap();
    }
    let mut st = Stats::default();
    let mut round = |lp: &mut Loop<Stats>, st: &mut Stats| {
        for p in peers.iter_mut() {
            p.write_all(b"x").unwrap();
        }
        lp.run(RunMode::Once, st).unwrap();
    };
    for _ in 0..20 {
        round(&mut lp, &mut st);
    }
    let n = CountingAllocator::allocations_in(|| {
        for _ in 0..200 {
            round(&mut lp, &mut st);
        }
    });
    assert!(st.io >= 200 * 20, "{name}: {} events", st.io);
    assert_eq!(
        n, 0,
        "{name}: {n} allocations in 200 steady-state iterations (20 sockets, a byte and a \
         timer restart per event)"
    );
}
