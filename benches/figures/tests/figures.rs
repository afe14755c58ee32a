//! The figure tool of docs/benchmarks.md (src/draw.rs, shared with the
//! `figures` binary): drawn from tiny fixed CSVs in a temporary
//! directory, every series, panel and axis it should show is in the SVG
//! text; the same CSVs give the same bytes; a missing or malformed CSV is
//! an error that names the file, and nothing is drawn.

#[path = "../src/draw.rs"]
mod draw;

use std::path::{Path, PathBuf};

/// A fresh, empty directory of this test's own.
fn scratch(name: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("evloop-figures-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

const TIME: &str = "\
round,impl,backend,P,A,W,timers,setup_us_per_fd,run_us_per_event
1,baseline,none,100,100,5000,0,0.0000,1.30
2,baseline,none,100,100,5000,0,0.0000,1.40
1,baseline,none,1000,100,5000,0,0.0000,1.50
2,baseline,none,1000,100,5000,0,0.0000,1.60
1,evloop,epoll,100,100,5000,0,1.8,1.60
2,evloop,epoll,100,100,5000,0,1.9,1.70
1,evloop,epoll,1000,100,5000,0,2.0,1.80
2,evloop,epoll,1000,100,5000,0,2.1,1.90
1,evloop,epoll,100,100,5000,1,1.8,1.65
2,evloop,epoll,1000,100,5000,1,2.0,1.85
1,libev,epoll,100,100,5000,0,1.0,1.62
1,libev,epoll,1000,100,5000,0,1.1,1.82
1,libev,epoll,100,100,5000,1,1.0,1.66
1,evloop,poll,100,100,5000,0,1.4,1.45
1,evloop,poll,1000,100,5000,0,1.5,40.0
1,polling,epoll-oneshot,100,100,5000,0,0.9,2.00
1,evloop,select,100,100,5000,0,1.1,1.48
";

const INSTR: &str = "\
impl,backend,P,A,timers,instr_per_event
baseline,none,100,100,0,64
evloop,epoll,100,100,0,141
evloop,epoll,100,100,1,232
libev,epoll,100,100,0,158
libev,epoll,100,100,1,257
evloop,poll,100,100,0,234
libev,iouring,100,100,0,289
mio,epoll,100,100,1,failed
baseline,none,1000,100,0,64
evloop,epoll,1000,100,0,141
evloop,epoll,1000,100,1,232
libev,epoll,1000,100,0,158
";

/// Two rounds of benches/timers_1m.sh, evloop exactly twice libev's time.
fn timers_csv() -> String {
    let mut s = String::from("round,impl,phase,n,ops,value,unit\n");
    let phases = [
        ("arm", 30.0),
        ("restart", 70.0),
        ("again", 60.0),
        ("stop_start", 130.0),
        ("mixed", 100.0),
        ("expire", 380.0),
        ("rearm", 10.0),
        ("stop_all", 65.0),
    ];
    for round in 1..=2 {
        for (imp, k) in [("libev", 1.0), ("evloop", 2.0)] {
            for (phase, ns) in phases {
                let v = ns * k + round as f64 - 1.5;
                s += &format!("{round},{imp},{phase},1000,1000,{v},ns/op\n");
            }
            s += &format!("{round},{imp},plan_checksum,1000,1000,123456789012345678901,fnv1a\n");
            let mem = if imp == "libev" { 64.1 } else { 120.1 };
            s += &format!("{round},{imp},mem_peak,1000,1000,{mem},B/timer\n");
        }
        s += &format!("{round},libev,watcher_size,1000,1000,48.00,B\n");
        s += &format!("{round},evloop,handle_size,1000,1000,16,B\n");
    }
    s += "0,evloop,mem_idle_peak,1000,1000,72.1,B/watcher\n";
    s
}

/// Writes the fixtures into `dir`; the inputs that read them, drawing
/// into `dir/out`.
fn fixtures(dir: &Path) -> draw::Inputs {
    let write = |name: &str, text: &str| {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    draw::Inputs {
        time: write("time.raw.csv", TIME),
        instr: write("instr.csv", INSTR),
        timers: write("timers_1m.csv", &timers_csv()),
        machine: Some(write(
            "machine.txt",
            "date: 2026-01-01 00:00 UTC\ncommit: abc1234\nload before the wall-time sweep: 1.00 0.50 0.25\n",
        )),
        out: dir.join("out"),
    }
}

fn svg(out: &Path, name: &str) -> String {
    std::fs::read_to_string(out.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// Whether `t` is drawn as a whole text element (plotters writes its
/// content on a line of its own).
fn has_text(svg: &str, t: &str) -> bool {
    svg.contains(&format!(">\n{t}\n</text>")) || svg.contains(&format!(">{t}</text>"))
}

/// Fails, naming the figure, if one of `texts` is not drawn in it.
fn assert_texts(figure: &str, svg: &str, texts: &[&str]) {
    for t in texts {
        assert!(has_text(svg, t), "{figure}: no text {t:?} drawn");
    }
}

#[test]
fn every_series_panel_and_axis_is_drawn() {
    let dir = scratch("all");
    let inputs = fixtures(&dir);
    let written = draw::run(&inputs).unwrap();
    let names: Vec<String> = written
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names,
        [
            "peers_time_a100.svg",
            "peers_setup.svg",
            "peers_instr_a100.svg",
            "timers_1m.svg"
        ]
    );

    let time = svg(&inputs.out, "peers_time_a100.svg");
    assert_texts(
        "time",
        &time,
        &[
            "evloop",
            "libev",
            "polling (oneshot)",
            "baseline (no loop: the syscalls alone)",
            "epoll, timers off",
            "epoll, timers on (a fresh timeout per event)",
            "poll, timers off",
            "select, timers off",
            "socket pairs P (log scale)",
            "ns per event",
            "1k",
            "date: 2026-01-01 00:00 UTC · commit: abc1234 · load before the wall-time sweep: 1.00 0.50 0.25",
        ],
    );
    // poll runs from 1.45 to 40 µs: more than a decade, so a log axis.
    assert_texts("time", &time, &["ns per event (log scale)"]);
    // Where a panel has no measurement (poll with timers) it says so.
    assert_texts("time", &time, &["not measured"]);
    // The spread: one band (a filled polygon) per series with two rounds
    // or more is there, drawn before its line.
    assert!(time.contains("<polygon"), "time: no min-max band drawn");

    let setup = svg(&inputs.out, "peers_setup.svg");
    assert_texts("setup", &setup, &["µs per fd", "evloop", "libev"]);
    assert!(
        !has_text(&setup, "baseline (no loop: the syscalls alone)"),
        "setup: the baseline has no setup to draw"
    );

    let instr = svg(&inputs.out, "peers_instr_a100.svg");
    assert_texts(
        "instr",
        &instr,
        &[
            "instructions per event",
            "io_uring, timers off",
            "evloop",
            "libev",
            "baseline (no loop: the syscalls alone)",
        ],
    );
    // mio's only row failed: it is left out, not drawn as zero.
    assert!(!has_text(&instr, "mio"), "instr: a failed run drawn");

    let timers = svg(&inputs.out, "timers_1m.svg");
    assert_texts(
        "timers",
        &timers,
        &[
            "arm",
            "restart",
            "again",
            "stop_start",
            "mixed",
            "rearm",
            "stop_all",
            "expire",
            "libev",
            "evloop",
            "ns per operation",
            "ns per timer",
            "bytes per timer (peak RSS while arming)",
            "ev_timer 48",
            "handle 16",
            "entry 56.1",
            "heap 48.0",
            "64.1 B",
            "120.1 B",
        ],
    );
    // The ratio of the medians: exactly 2 by construction (arm: 29.5 and
    // 30.5 against 59.5 and 60.5).
    assert_texts("timers", &timers, &["2.00x"]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_same_csvs_draw_the_same_bytes() {
    let (a, b) = (scratch("same-a"), scratch("same-b"));
    let (ia, ib) = (fixtures(&a), fixtures(&b));
    draw::run(&ia).unwrap();
    draw::run(&ib).unwrap();
    for name in [
        "peers_time_a100.svg",
        "peers_setup.svg",
        "peers_instr_a100.svg",
        "timers_1m.svg",
    ] {
        assert!(
            svg(&ia.out, name) == svg(&ib.out, name),
            "{name} differs between two draws"
        );
    }
    let _ = std::fs::remove_dir_all(&a);
    let _ = std::fs::remove_dir_all(&b);
}

#[test]
fn a_missing_csv_is_an_error_that_names_it_and_nothing_is_drawn() {
    let dir = scratch("missing");
    for which in ["time", "instr", "timers"] {
        let mut inputs = fixtures(&dir);
        let gone = dir.join(format!("no-{which}.csv"));
        match which {
            "time" => inputs.time = gone.clone(),
            "instr" => inputs.instr = gone.clone(),
            _ => inputs.timers = gone.clone(),
        }
        let e = draw::run(&inputs).expect_err("a missing CSV must fail");
        assert!(e.contains(&gone.display().to_string()), "{which}: {e}");
        assert!(e.contains(&format!("--{which}")), "{which}: {e}");
        assert!(e.contains("benches/figures.sh"), "{which}: {e}");
        assert!(!inputs.out.exists(), "{which}: drew something anyway");
    }
    let mut inputs = fixtures(&dir);
    inputs.machine = Some(dir.join("no-machine.txt"));
    let e = draw::run(&inputs).expect_err("a missing machine file fails");
    assert!(e.contains("no-machine.txt"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn malformed_csvs_are_errors_not_panics() {
    let dir = scratch("malformed");
    let cases: [(&str, &str, &str); 6] = [
        ("time", "round,impl,backend,P,A\n1,evloop,epoll,100,100\n", "no column `timers`"),
        (
            "time",
            "impl,backend,P,A,timers,setup_us_per_fd,run_us_per_event\nevloop,epoll,100,100,0,1.0\n",
            "has 6 fields",
        ),
        (
            "instr",
            "impl,backend,P,A,timers,instr_per_event\nevloop,epoll,lots,100,0,141\n",
            "`P` is not a number",
        ),
        ("instr", "", "is empty"),
        (
            "instr",
            "impl,backend,P,A,timers,instr_per_event\nevloop,epoll,0,100,0,141\n",
            "P must be at least 1",
        ),
        (
            "timers",
            "round,impl,phase,n,ops,value,unit\n1,libev,arm,10,10,30,ns/op\n",
            "no `restart` rounds for libev",
        ),
    ];
    for (which, text, want) in cases {
        let mut inputs = fixtures(&dir);
        let bad = dir.join(format!("bad-{which}.csv"));
        std::fs::write(&bad, text).unwrap();
        match which {
            "time" => inputs.time = bad,
            "instr" => inputs.instr = bad,
            _ => inputs.timers = bad,
        }
        let e = draw::run(&inputs).expect_err("a malformed CSV must fail");
        assert!(e.contains(want), "{which}: expected {want:?} in {e:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn spread_is_min_median_max() {
    let s = draw::Spread::of(&[3.0, 1.0, 4.0, 2.0]).unwrap();
    assert_eq!((s.min, s.med, s.max, s.n), (1.0, 2.5, 4.0, 4));
    let s = draw::Spread::of(&[5.0]).unwrap();
    assert_eq!((s.min, s.med, s.max), (5.0, 5.0, 5.0));
    assert!(draw::Spread::of(&[]).is_none());
}
