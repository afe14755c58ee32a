//! The conformance kit on the `wasi` backend, inside a `wasm32-wasip1`
//! guest: every scenario (those that apply pass; the others are skipped
//! with their reason), the differential check, the simulator's scenarios,
//! the notice and pollable checks and the no-allocation check.
//!
//! Not run by itself: `tests/wasi_kit.rs` (Linux) starts it under
//! wasmtime with a preopened listener and is the relay its fixture needs
//! (backends/conformance/fixture_wasi.rs). Each check prints `BEGIN name`
//! when it starts and `RESULT name: ...` when it ends, straight to stdout
//! (not captured): wasm32-wasip1 aborts at a panic, so a failing check
//! ends the guest, and the last `BEGIN` names it.
#![cfg(target_os = "wasi")]

use std::io::Write;

use evloop::conformance::{self, CountingAllocator, Outcome, Scenario};

#[global_allocator]
static COUNTING: CountingAllocator = CountingAllocator;

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// Prints the outcome; whether it failed.
fn show(name: &str, outcome: &Outcome) -> bool {
    match outcome {
        Outcome::Passed => say(&format!("RESULT {name}: passed")),
        Outcome::Skipped(why) => say(&format!("RESULT {name}: skipped: {why}")),
        Outcome::Failed(message) => {
            let one_line = message.replace('\n', " | ");
            say(&format!("RESULT {name}: FAILED: {one_line}"));
        }
    }
    outcome.failed()
}

#[test]
fn kit_on_wasi() {
    let open = evloop::backends::factory("wasi").expect("the wasi backend is offered");
    let mut failed = 0;
    let mut check = |name: &str, f: &mut dyn FnMut() -> Outcome| {
        say(&format!("BEGIN {name}"));
        let t = std::time::Instant::now();
        let outcome = f();
        say(&format!("TOOK {name}: {:?}", t.elapsed()));
        if show(name, &outcome) {
            failed += 1;
        }
    };
    for &s in Scenario::ALL {
        check(s.name(), &mut || s.check("wasi", open));
    }
    for &s in Scenario::ALL {
        check(&format!("sim/{s}"), &mut || s.check_sim());
    }
    check("fork", &mut || conformance::fork("wasi", open));
    check("no_allocation", &mut || {
        conformance::no_allocation("wasi", open)
    });
    let mut results = Vec::new();
    say("BEGIN differential");
    for (s, outcome) in conformance::differential("wasi", open) {
        results.push((format!("differential/{s}"), outcome));
    }
    say("BEGIN notices");
    for r in conformance::notices::check_all_notices("wasi", open) {
        results.push((r.name, r.outcome));
    }
    say("BEGIN pollable");
    for r in conformance::pollable::check_all_pollable_loop("wasi", open) {
        results.push((r.name, r.outcome));
    }
    for (name, outcome) in &results {
        if show(name, outcome) {
            failed += 1;
        }
    }
    say(&format!("DONE {failed} failed"));
    assert_eq!(failed, 0, "{failed} checks failed on wasi");
}
