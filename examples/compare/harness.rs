//! The comparison's method, shared by the workloads and the demo: interleaved
//! rounds over the backends, medians with min..max, the machine and its
//! load, the table, the warnings, the CSV and the SVG.

#![allow(dead_code)] // the demo uses a part

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use evloop::Builder;

/// What one workload reports: one table (and one panel of the SVG) per
/// metric.
pub struct Metric {
    /// What is measured, e.g. "plain" or "1000 idle fds".
    pub name: String,
    /// The unit, e.g. "ns/event".
    pub unit: &'static str,
    /// Requests per second: more is better; times: less is.
    pub higher_is_better: bool,
}

impl Metric {
    /// A time or a cost: less is better.
    pub fn lower(name: impl Into<String>, unit: &'static str) -> Metric {
        Metric {
            name: name.into(),
            unit,
            higher_is_better: false,
        }
    }

    /// A rate: more is better.
    pub fn higher(name: impl Into<String>, unit: &'static str) -> Metric {
        Metric {
            name: name.into(),
            unit,
            higher_is_better: true,
        }
    }
}

/// A named workload run on one backend at a time.
pub trait Workload {
    /// Its name on the command line.
    fn name(&self) -> &'static str;
    /// One line: what it runs, at which size.
    fn describe(&self) -> String;
    /// What [`Workload::run`] returns, in order.
    fn metrics(&self) -> Vec<Metric>;
    /// Whether it also runs on the simulator ("sim": no syscalls; shown
    /// for reference, never the best).
    fn on_sim(&self) -> bool {
        false
    }
    /// One round on `backend` (a name `builder` can build, or "sim"): a
    /// value per metric, or why it cannot run there.
    fn run(&mut self, builder: &Builder, backend: &str) -> Vec<Result<f64, String>>;
}

/// The values of one metric on one backend, in round order, or why there
/// are none.
#[derive(Default, Clone)]
pub struct Series {
    pub values: Vec<f64>,
    pub refused: Option<String>,
}

impl Series {
    /// (min, median, max), or `None` without values.
    pub fn stats(&self) -> Option<(f64, f64, f64)> {
        if self.values.is_empty() {
            return None;
        }
        let mut v = self.values.clone();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Some((v[0], median, v[n - 1]))
    }
}

/// The load average (1, 5, 15 minutes), where the platform has one.
pub fn load_average() -> Option<[f64; 3]> {
    #[cfg(target_os = "linux")]
    {
        let text = std::fs::read_to_string("/proc/loadavg").ok()?;
        let mut it = text.split_whitespace().map(|f| f.parse::<f64>().ok());
        Some([it.next()??, it.next()??, it.next()??])
    }
    #[cfg(all(unix, not(target_os = "linux")))]
    {
        // `sysctl -n vm.loadavg` prints "{ 0.10 0.20 0.30 }" on the BSDs and
        // macOS.
        let out = std::process::Command::new("sysctl")
            .args(["-n", "vm.loadavg"])
            .output()
            .ok()?;
        let text = String::from_utf8_lossy(&out.stdout);
        let mut it = text
            .split_whitespace()
            .filter_map(|f| f.parse::<f64>().ok());
        Some([it.next()?, it.next()?, it.next()?])
    }
    #[cfg(not(unix))]
    {
        None
    }
}

/// CPU time spent on the whole machine and by this process (its waited-for
/// children included: wrk), in the kernel's ticks; Linux only.
#[derive(Clone, Copy)]
pub struct CpuSample {
    /// Every CPU's ticks, busy or idle.
    total: u64,
    /// Every CPU's busy ticks (not idle, waiting for I/O or in interrupts).
    busy: u64,
    /// This process's.
    own: u64,
}

impl CpuSample {
    pub fn now() -> Option<CpuSample> {
        let stat = std::fs::read_to_string("/proc/stat").ok()?;
        let cpu: Vec<u64> = stat
            .lines()
            .next()?
            .split_whitespace()
            .skip(1)
            .filter_map(|f| f.parse().ok())
            .collect();
        // user, nice, system, idle, iowait, irq, softirq, steal (guest
        // time is in user already).
        let total: u64 = cpu.iter().take(8).sum();
        // Interrupt time is left out: the kernel does not charge it to the
        // process whose traffic caused it (loopback TCP's softirqs), so it
        // would count as other processes' work.
        let busy = total - cpu.get(3)? - cpu.get(4)? - cpu.get(5)? - cpu.get(6)?;
        let me = std::fs::read_to_string("/proc/self/stat").ok()?;
        // After the command's name (in parentheses, maybe with spaces): the
        // state is the first field, utime the 12th, then stime, cutime,
        // cstime.
        let own = me
            .rsplit_once(')')?
            .1
            .split_whitespace()
            .skip(11)
            .take(4)
            .filter_map(|f| f.parse::<u64>().ok())
            .sum();
        Some(CpuSample { total, busy, own })
    }

    /// The cores other processes kept busy from `self` to `later`.
    pub fn others(self, later: CpuSample, cores: usize) -> Option<f64> {
        let total = later.total.checked_sub(self.total)?;
        if total == 0 {
            return None;
        }
        let busy = later.busy.saturating_sub(self.busy);
        let own = later.own.saturating_sub(self.own);
        Some(busy.saturating_sub(own) as f64 / total as f64 * cores as f64)
    }
}

/// The machine, as the report prints it.
pub struct Machine {
    pub cores: usize,
    pub cpu: String,
    pub os: String,
}

impl Machine {
    pub fn here() -> Machine {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let cpu = cpu_model().unwrap_or_else(|| "unknown CPU".into());
        let os = match std::fs::read_to_string("/proc/sys/kernel/osrelease") {
            Ok(r) => format!("{} {}", std::env::consts::OS, r.trim()),
            Err(_) => std::env::consts::OS.to_string(),
        };
        Machine { cores, cpu, os }
    }

    pub fn line(&self) -> String {
        format!("{} cores ({}), {}", self.cores, self.cpu, self.os)
    }
}

fn cpu_model() -> Option<String> {
    if let Ok(info) = std::fs::read_to_string("/proc/cpuinfo") {
        let line = info.lines().find(|l| l.starts_with("model name"))?;
        return Some(line.split_once(':')?.1.trim().to_string());
    }
    let out = std::process::Command::new("sysctl")
        .args(["-n", "machdep.cpu.brand_string"])
        .output()
        .ok()?;
    let s = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (!s.is_empty()).then_some(s)
}

/// How the rounds run and what is written.
pub struct Plan {
    pub rounds: usize,
    /// Where the SVG goes (a file for one workload, else a directory).
    pub svg: Option<PathBuf>,
    pub csv: bool,
    /// Only these backends (empty: every one).
    pub only: Vec<String>,
}

/// One workload's results: per metric, per backend.
pub struct Report {
    pub workload: &'static str,
    pub description: String,
    pub metrics: Vec<Metric>,
    pub backends: Vec<String>,
    /// `series[metric][backend]`.
    pub series: Vec<Vec<Series>>,
    pub load_before: Option<[f64; 3]>,
    pub load_after: Option<[f64; 3]>,
    /// The cores other processes kept busy during the run (Linux).
    pub others: Option<f64>,
    pub rounds: usize,
}

/// Runs `w` on every backend of `builder` (and on the simulator where the
/// workload has it) for `plan.rounds` rounds: round-robin over the
/// backends, the order rotated by one each round, so that a slow minute
/// of the machine falls on every backend alike.
pub fn measure(w: &mut dyn Workload, builder: &Builder, plan: &Plan) -> Report {
    let mut backends: Vec<String> = builder
        .available()
        .into_iter()
        .map(str::to_string)
        .collect();
    if w.on_sim() {
        backends.push("sim".into());
    }
    if !plan.only.is_empty() {
        backends.retain(|b| plan.only.contains(b));
    }
    let metrics = w.metrics();
    let mut series = vec![vec![Series::default(); backends.len()]; metrics.len()];
    let load_before = load_average();
    let cpu_before = CpuSample::now();
    for round in 0..plan.rounds {
        for k in 0..backends.len() {
            let b = (k + round) % backends.len();
            // A backend that refused every metric once is not asked again.
            if series.iter().all(|m| m[b].refused.is_some()) {
                continue;
            }
            let results = w.run(builder, &backends[b]);
            for (m, r) in results.into_iter().enumerate() {
                let s = &mut series[m][b];
                match r {
                    Ok(v) if s.refused.is_none() => s.values.push(v),
                    Ok(_) => {}
                    Err(why) => {
                        s.refused.get_or_insert(why);
                    }
                }
            }
        }
    }
    Report {
        workload: w.name(),
        description: w.describe(),
        metrics,
        backends,
        series,
        load_before,
        load_after: load_average(),
        others: cpu_before
            .zip(CpuSample::now())
            .and_then(|(a, b)| a.others(b, Machine::here().cores)),
        rounds: plan.rounds,
    }
}

/// `1234567.8` as "1,234,568", small values with decimals.
pub fn num(v: f64) -> String {
    if v.abs() < 10.0 {
        return format!("{v:.2}");
    }
    if v.abs() < 100.0 {
        return format!("{v:.1}");
    }
    let digits = format!("{:.0}", v.abs());
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if v < 0.0 {
        format!("-{out}")
    } else {
        out
    }
}

fn load_text(l: Option<[f64; 3]>) -> String {
    match l {
        Some([a, b, c]) => format!("{a:.2} {b:.2} {c:.2}"),
        None => "n/a".into(),
    }
}

impl Report {
    /// The best median among the kernel backends (the simulator is shown
    /// for reference only).
    fn best(&self, m: usize) -> Option<f64> {
        let better = |a: f64, b: f64| {
            if self.metrics[m].higher_is_better {
                a.max(b)
            } else {
                a.min(b)
            }
        };
        self.series[m]
            .iter()
            .zip(&self.backends)
            .filter(|(_, b)| *b != "sim")
            .filter_map(|(s, _)| s.stats().map(|(_, med, _)| med))
            .reduce(better)
    }

    /// How many times worse than the best `median` is (1.00: the best).
    fn ratio(&self, m: usize, median: f64) -> Option<f64> {
        let best = self.best(m)?;
        Some(if self.metrics[m].higher_is_better {
            best / median
        } else {
            median / best
        })
    }

    /// Why a ranking of metric `m` means little: neighbours (by median)
    /// whose min..max ranges overlap, and rounds that disagree by more
    /// than half the median.
    pub fn warnings(&self, m: usize) -> Vec<String> {
        let metric = &self.metrics[m];
        let mut ranked: Vec<(&str, (f64, f64, f64))> = self
            .backends
            .iter()
            .zip(&self.series[m])
            .filter(|(b, _)| *b != "sim")
            .filter_map(|(b, s)| Some((b.as_str(), s.stats()?)))
            .collect();
        ranked.sort_by(|a, b| {
            let o = a.1 .1.total_cmp(&b.1 .1);
            if metric.higher_is_better {
                o.reverse()
            } else {
                o
            }
        });
        let mut out = vec![];
        if self.rounds < 3 {
            out.push(format!(
                "{} round(s) only: no spread to judge the ranking by (--rounds 5 or more)",
                self.rounds
            ));
        }
        let overlaps: Vec<String> = ranked
            .windows(2)
            .filter_map(|p| {
                let ((a, (amin, _, amax)), (b, (bmin, _, bmax))) = (p[0], p[1]);
                (amin <= bmax && bmin <= amax).then(|| format!("{a} and {b}"))
            })
            .collect();
        if !overlaps.is_empty() {
            out.push(format!(
                "min..max ranges overlap: {}: their order here may be noise",
                overlaps.join(", ")
            ));
        }
        let wide: Vec<String> = ranked
            .iter()
            .filter(|(_, (min, med, max))| max - min > 0.5 * med)
            .map(|(b, (min, _, max))| format!("{b} ({}..{})", num(*min), num(*max)))
            .collect();
        if !wide.is_empty() {
            out.push(format!(
                "rounds differ by more than half the median on {}: the machine was busy or \
                 the runs too short",
                wide.join(", ")
            ));
        }
        out
    }

    /// Warnings about the machine: other processes busy during the run
    /// (where the platform says), a load average above the cores before
    /// it. (The load average after it counts the run's own threads.)
    pub fn load_warnings(&self, machine: &Machine) -> Vec<String> {
        let cores = machine.cores as f64;
        let mut out = vec![];
        if let Some(o) = self.others {
            if o > 0.5 * cores {
                out.push(format!(
                    "other processes kept {o:.1} of the {} cores busy during the run: the \
                     backends shared the CPUs with them; rankings from this run are unreliable",
                    machine.cores
                ));
            } else if o > 0.25 {
                out.push(format!(
                    "other processes kept {o:.1} of the {} cores busy during the run: expect noise",
                    machine.cores
                ));
            }
        }
        if let Some([one, ..]) = self.load_before {
            if one > cores {
                out.push(format!(
                    "load average {one:.2} before the run, above the {} cores: the machine \
                     was busy",
                    machine.cores
                ));
            }
        }
        out
    }

    /// The tables, as printed.
    pub fn text(&self, machine: &Machine) -> String {
        let mut t = String::new();
        let _ = writeln!(t, "{}: {}", self.workload, self.description);
        let others = match self.others {
            Some(o) => format!("; other processes' CPU during the run: {o:.2} cores"),
            None => String::new(),
        };
        let _ = writeln!(
            t,
            "  {} round(s), interleaved (round-robin over the backends, order rotated per round); \
             load average {} before, {} after{others}",
            self.rounds,
            load_text(self.load_before),
            load_text(self.load_after)
        );
        for w in self.load_warnings(machine) {
            let _ = writeln!(t, "  ! {w}");
        }
        for (m, metric) in self.metrics.iter().enumerate() {
            let better = if metric.higher_is_better {
                "higher is better"
            } else {
                "lower is better"
            };
            let _ = writeln!(t, "\n  {} ({}, {better})", metric.name, metric.unit);
            let _ = writeln!(
                t,
                "    {:<10} {:>12} {:>25} {:>9}",
                "backend", "median", "min..max", "vs best"
            );
            for (b, s) in self.backends.iter().zip(&self.series[m]) {
                match (s.stats(), &s.refused) {
                    (Some((min, med, max)), _) => {
                        let ratio = match self.ratio(m, med) {
                            Some(r) if b == "sim" => format!("({r:.2}x)"),
                            Some(r) => format!("{r:.2}x"),
                            None => "-".into(),
                        };
                        let _ = writeln!(
                            t,
                            "    {b:<10} {:>12} {:>25} {ratio:>9}",
                            num(med),
                            format!("{}..{}", num(min), num(max)),
                        );
                        if let Some(why) = &s.refused {
                            let _ = writeln!(
                                t,
                                "    ! {b}: {} round(s) only, then it failed: {why}",
                                s.values.len()
                            );
                        }
                    }
                    (None, Some(why)) => {
                        let _ = writeln!(t, "    {b:<10} refused: {why}");
                    }
                    (None, None) => {
                        let _ = writeln!(t, "    {b:<10} no value");
                    }
                }
            }
            for w in self.warnings(m) {
                let _ = writeln!(t, "    ! {w}");
            }
        }
        if self.backends.iter().any(|b| b == "sim") {
            let _ = writeln!(
                t,
                "\n  (sim: the loop on the simulator, in-memory sockets and no syscalls; for \
                 reference, not ranked)"
            );
        }
        t
    }

    /// Every round's value: `workload,metric,unit,backend,round,value`.
    pub fn csv(&self) -> String {
        let mut t = String::from("workload,metric,unit,backend,round,value\n");
        for (m, metric) in self.metrics.iter().enumerate() {
            for (b, s) in self.backends.iter().zip(&self.series[m]) {
                for (r, v) in s.values.iter().enumerate() {
                    let _ = writeln!(
                        t,
                        "{},{},{},{b},{},{v}",
                        self.workload,
                        metric.name.replace(',', ";"),
                        metric.unit,
                        r + 1
                    );
                }
            }
        }
        t
    }
}

/// Where the SVG of `workload` goes: `svg` itself if it names a `.svg`
/// file, else `<svg>/<workload>.svg`.
pub fn svg_path(svg: &Path, workload: &str) -> PathBuf {
    if svg.extension().is_some_and(|e| e == "svg") {
        svg.to_path_buf()
    } else {
        svg.join(format!("{workload}.svg"))
    }
}

/// `target/compare` beside the running example (`target/<profile>/examples/compare`).
pub fn default_out_dir() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.parent()?.parent()?.join("compare")))
        .unwrap_or_else(|| PathBuf::from("target/compare"))
}

/// Prints the report, writes its SVG (and CSV), and says where.
pub fn publish(report: &Report, machine: &Machine, plan: &Plan) {
    print!("{}", report.text(machine));
    if let Some(svg) = &plan.svg {
        let path = svg_path(svg, report.workload);
        let written = path
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| std::fs::write(&path, crate::svg::draw(report, machine)));
        match written {
            Ok(()) => println!("  figure: {}", path.display()),
            Err(e) => println!("  figure: could not write {}: {e}", path.display()),
        }
        if plan.csv {
            let csv = path.with_extension("csv");
            match std::fs::write(&csv, report.csv()) {
                Ok(()) => println!("  every round: {}", csv.display()),
                Err(e) => println!("  every round: could not write {}: {e}", csv.display()),
            }
        }
    } else if plan.csv {
        print!("{}", report.csv());
    }
    println!();
}
