//! A trace is untrusted input: any bytes, decoded by
//! `Replay::from_bytes` and, if it accepts them, replayed through the
//! program of tests/replay/program.rs. A panic (an overflow too: the
//! target is built with overflow checks) is a crash; a replay that holds
//! more than [`program::bound`] of the input's size fails the assertion
//! below; libFuzzer's `-timeout` catches a loop that never ends.
#![no_main]

use std::sync::OnceLock;

use evloop::conformance::CountingAllocator;
use libfuzzer_sys::fuzz_target;

#[path = "../../replay/program.rs"]
mod program;

/// Counts what the replay holds.
#[global_allocator]
static COUNTING: CountingAllocator = CountingAllocator;

/// The recorded socket's fd, which the program replays on (the fd of
/// the seeds' recordings, as in tests/replay/untrusted.rs).
fn fd() -> i32 {
    static FD: OnceLock<i32> = OnceLock::new();
    *FD.get_or_init(|| program::seeds()[0].2)
}

fuzz_target!(|data: &[u8]| {
    let fd = fd();
    let trace = data.to_vec();
    let peak = CountingAllocator::peak_bytes_in(|| program::replay(trace, fd));
    let bound = program::bound(data.len());
    assert!(
        peak <= bound,
        "{peak} bytes held for a trace of {} bytes (bound {bound})",
        data.len()
    );
});
