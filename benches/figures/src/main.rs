//! Draws the figures of docs/benchmarks.md (docs/figures/*.svg) from the
//! measured CSVs in docs/figures/data/; benches/figures.sh measures them
//! and then runs this:
//!
//! ```text
//! cargo run --release --manifest-path benches/figures/Cargo.toml -- \
//!     [--time CSV] [--instr CSV] [--timers CSV] [--machine FILE] [--out DIR] [--check]
//! ```
//!
//! Each path defaults to its file in docs/figures/data/ (the machine file
//! is left out if it is not there), `--out` to docs/figures. A missing or
//! malformed CSV stops it with a message naming the file, before anything
//! is drawn.
//!
//! A crate of its own (benches/figures/Cargo.toml: plotters stays out of
//! evloop's dependencies). With `--check` (as CI runs it) it draws the
//! CSVs into a temporary directory and removes it: a check that they
//! still draw, which leaves docs/ alone.

mod draw;

use std::path::PathBuf;

fn usage() -> ! {
    eprintln!(
        "usage: figures [--time CSV] [--instr CSV] [--timers CSV] [--machine FILE] [--out DIR] [--check]"
    );
    std::process::exit(2);
}

fn main() {
    // evloop's root: this crate is benches/figures/.
    let root = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
    let data = root.join("docs/figures/data");
    let mut inputs = draw::Inputs {
        time: data.join("peers_time.raw.csv"),
        instr: data.join("peers_instr.csv"),
        timers: data.join("timers_1m.csv"),
        machine: Some(data.join("machine.txt")),
        out: root.join("docs/figures"),
    };
    let (mut check_only, mut machine_given) = (false, false);
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || PathBuf::from(args.next().unwrap_or_else(|| usage()));
        match a.as_str() {
            // Draw into a temporary directory, removed after.
            "--check" => check_only = true,
            "--time" => inputs.time = value(),
            "--instr" => inputs.instr = value(),
            "--timers" => inputs.timers = value(),
            "--machine" => {
                inputs.machine = Some(value());
                machine_given = true;
            }
            "--out" => inputs.out = value(),
            _ => usage(),
        }
    }
    if !machine_given && inputs.machine.as_ref().is_some_and(|m| !m.exists()) {
        inputs.machine = None;
    }
    if check_only {
        inputs.out =
            std::env::temp_dir().join(format!("evloop-figures-check-{}", std::process::id()));
    }
    if let Some(m) = &inputs.machine {
        if let Ok(text) = std::fs::read_to_string(m) {
            println!("measured on ({}):", m.display());
            for l in text.lines() {
                println!("  {l}");
            }
        }
    }
    let result = draw::run(&inputs);
    if check_only {
        let _ = std::fs::remove_dir_all(&inputs.out);
    }
    match result {
        Ok(written) if check_only => {
            println!("figures: the CSVs draw ({} figures; nothing written: run it without --check to draw them)", written.len());
        }
        Ok(written) => {
            for p in written {
                println!("figures: wrote {}", p.display());
            }
        }
        Err(e) => {
            eprintln!("figures: error: {e}");
            std::process::exit(1);
        }
    }
}
