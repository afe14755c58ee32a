//! The conformance kit on the `wasi` backend, inside a `wasm32-wasip1`
//! guest: the simulator's scenarios, then `evloop::conformance::run` (every
//! scenario, those that do not apply skipped with their reason; the
//! differential, fork, notice, pollable and no-allocation checks), as a
//! backend author's test would call it.
//!
//! Not run by itself: `tests/wasi_kit.rs` (Linux) starts it under
//! wasmtime with a preopened listener and is the relay its fixture needs
//! (backends/conformance/fixture_wasi.rs). It reads the outcomes from the
//! `RESULT name: ...` lines printed here, straight to stdout (not
//! captured). wasm32-wasip1 aborts at a panic, so a failing check ends the
//! guest in it: the last `BEGIN name` (the simulator's) or `running  name`
//! (`run`'s) line names it.
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
    let mut failed = 0;
    for &s in Scenario::ALL {
        let name = format!("sim/{s}");
        say(&format!("BEGIN {name}"));
        if show(&name, &s.check_sim()) {
            failed += 1;
        }
    }
    let open = evloop::backends::factory("wasi").expect("the wasi backend is offered");
    let started = std::time::Instant::now();
    // Panics (here: aborts) if a check fails.
    let report = conformance::run("wasi", open);
    say(&format!("TOOK run: {:?}", started.elapsed()));
    for r in &report.results {
        if show(&r.name, &r.outcome) {
            failed += 1;
        }
    }
    say(&format!("DONE {failed} failed"));
    assert_eq!(failed, 0, "{failed} checks failed on wasi");
}
