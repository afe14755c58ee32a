//! The evloop conformance kit on the mio backend, registered for the
//! process and checked by name, as a program would pick it. A test binary
//! of its own: the kit forks (the fork check), and installs a SIGUSR1
//! handler.

#[global_allocator]
static COUNTING: evloop::conformance::CountingAllocator = evloop::conformance::CountingAllocator;

#[test]
fn conformance() {
    mio_backend::register().unwrap();
    let report = evloop::conformance::run_named(mio_backend::NAME);
    // Every check ran (none skipped) and passed; `run_named` panics on a
    // failure.
    let skipped: Vec<String> = report.skipped().map(|r| r.to_string()).collect();
    assert!(skipped.is_empty(), "not run: {skipped:?}");
}
