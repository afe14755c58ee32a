//! A buffered connection's hot path allocates nothing once warmed up: an
//! echo round trip (read into the reused buffer, queue, write, interest
//! unchanged, idle timer pushed back) on every OS backend, counted by a
//! per-thread counting allocator, as in tests/no_alloc.rs.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use evloop::net::{ConnEvent, ConnOptions, Conns};
use evloop::{Loop, RunMode};

struct Counting;

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

fn note() {
    if COUNTING.try_with(|c| c.get()).unwrap_or(false) {
        let _ = ALLOCS.try_with(|n| n.set(n.get() + 1));
    }
}

// SAFETY (test code): forwards to the system allocator unchanged.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note();
        // SAFETY: the caller's contract, passed on unchanged.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note();
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations_in(f: impl FnOnce()) -> u64 {
    let before = ALLOCS.with(|n| n.get());
    COUNTING.with(|c| c.set(true));
    f();
    COUNTING.with(|c| c.set(false));
    ALLOCS.with(|n| n.get()) - before
}

#[test]
fn an_echo_round_trip_allocates_nothing_in_steady_state() {
    for backend in evloop::backends::AVAILABLE {
        let (mine, mut peer) = UnixStream::pair().unwrap();
        mine.set_nonblocking(true).unwrap();
        let mut lp: Loop<Conns<()>> = Loop::builder().backend(backend).build().unwrap();
        let mut conns = Conns::new();
        let opts = ConnOptions::new().idle_timeout(Some(Duration::from_secs(60)));
        conns
            .open(&mut lp, mine, opts, (), |lp, conns, id, ev| {
                if let ConnEvent::Data = ev {
                    let n = conns[id].input().len();
                    conns[id].write_from_input(lp, n);
                }
            })
            .unwrap();
        let msg = [7u8; 200];
        let mut back = [0u8; 200];
        let mut round_trip = |lp: &mut Loop<Conns<()>>, conns: &mut Conns<()>| {
            peer.write_all(&msg).unwrap();
            lp.run(RunMode::Once, conns).unwrap();
            peer.read_exact(&mut back).unwrap();
        };
        for _ in 0..100 {
            round_trip(&mut lp, &mut conns);
        }
        let n = allocations_in(|| {
            for _ in 0..1000 {
                round_trip(&mut lp, &mut conns);
            }
        });
        assert_eq!(n, 0, "{backend}: allocations in 1,000 echo round trips");
    }
}
