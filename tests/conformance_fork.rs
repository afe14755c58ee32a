//! Conformance, fork: the kit's fork check (`evloop::conformance::fork`)
//! on every OS backend of the host. `Loop::reinit_after_fork` in a child
//! re-creates the backend's kernel object and registers every active fd
//! again, so that the child's loop works and the parent's is left alone
//! (`backends/conformance/fork.rs` says how it is checked).
//!
//! Its own test binary, with a single test, so that no other test thread
//! runs when it forks (the check refuses to fork while one does).
//! `EVLOOP_CONFORMANCE_BACKEND=name` restricts it to one backend, as for
//! `tests/conformance`.
#![cfg(unix)]

use evloop::{backends, conformance};

/// Whether `backend` runs (the variable of `tests/conformance`).
fn selected(backend: &str) -> bool {
    match std::env::var("EVLOOP_CONFORMANCE_BACKEND") {
        Ok(want) if !want.is_empty() => {
            let known = backends::AVAILABLE.contains(&want.as_str()) || want == "sim";
            assert!(
                known,
                "EVLOOP_CONFORMANCE_BACKEND={want:?} names no backend of the suite (known here: \
                 {}, sim)",
                backends::AVAILABLE.join(", ")
            );
            want == backend
        }
        _ => true,
    }
}

#[test]
fn reinit_after_fork_gives_the_child_its_own_kernel_object() {
    for &name in backends::AVAILABLE {
        if selected(name) {
            let open = backends::factory(name).unwrap();
            conformance::fork(name, open).assert_passed();
            // The notifier after fork: the child's signals and waker work,
            // the parent's loop is not woken by them.
            conformance::notices::check_notice("notices/fork_reinit", name, open).assert_passed();
        }
    }
    // The simulator has no kernel object: `reinit` is the default no-op.
}
