//! The kernel-only scenarios on WASI: none runs there
//! ([`Scenario::not_applicable`](super::Scenario::not_applicable) gives
//! each reason, and [`Scenario::check`](super::Scenario::check) skips them
//! before they get here).

use super::fixture::{Fixture, OsFixture};
use super::record::Record;
use super::Scenario;

/// The reason, as a panic (never reached through the kit).
fn not_here(f: &OsFixture, s: Scenario) -> Record {
    panic!(
        "{}: {s}: {}",
        f.backend(),
        s.not_applicable().unwrap_or("not written for WASI")
    )
}

/// Not applicable on WASI (see [`Scenario::not_applicable`]).
pub fn fd_reuse(f: &OsFixture) -> Record {
    not_here(f, Scenario::FdReuse)
}

/// Not applicable on WASI (see [`Scenario::not_applicable`]).
pub fn closed_fd_reuse(f: &OsFixture) -> Record {
    not_here(f, Scenario::ClosedFdReuse)
}

/// Not applicable on WASI (see [`Scenario::not_applicable`]).
pub fn regular_file(f: &OsFixture) -> Record {
    not_here(f, Scenario::RegularFile)
}
