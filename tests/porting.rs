//! The evloop conformance kit on MyPoll. A test binary of its own: the
//! kit forks (the fork check), and installs a SIGUSR1 handler.

#[global_allocator]
static COUNTING: evloop::conformance::CountingAllocator = evloop::conformance::CountingAllocator;

#[test]
fn conformance() {
    evloop::conformance::run("mypoll", || Ok(Box::new(mypoll::MyPoll::new()?)));
}

// The backend: docs/porting.md's `src/lib.rs`, as the guide shows it
// (tests/docs_blocks.rs checks that the guide shows this file and the
// part of this one above as they are).
#[path = "porting/mypoll.rs"]
mod mypoll;
