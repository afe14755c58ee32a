//! The figures of docs/benchmarks.md, drawn from the measured CSVs with
//! plotters' SVG backend: the peer harness's wall-time sweep (every run,
//! `round,impl,backend,P,A,W,timers,setup_us_per_fd,run_us_per_event`),
//! its callgrind counts (`impl,backend,P,A,timers,instr_per_event`, one
//! file per P concatenated by benches/figures.sh) and benches/timers_1m.sh's
//! raw rounds (`round,impl,phase,n,ops,value,unit`).
//!
//! Bad or missing input is an `Err` with a message that names the file;
//! nothing here panics on data. The output depends only on the inputs
//! (rows are grouped in sorted maps, no clock or randomness), so the same
//! CSVs give the same SVG bytes.

use plotters::coord::ranged1d::{AsRangedCoord, KeyPointHint, NoDefaultFormatting, ValueFormatter};
use plotters::coord::Shift;
use plotters::element::DashedPathElement;
use plotters::prelude::*;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;
use std::path::{Path, PathBuf};

/// A bar chart's x axis: `n` slots centred on 0, 1, ..., n - 1, a tick at
/// each (plotters' own f64 axis picks its ticks itself; its key-point
/// combinator has no formatter for f64).
struct Slots(usize);

impl Ranged for Slots {
    type FormatOption = NoDefaultFormatting;
    type ValueType = f64;
    fn map(&self, v: &f64, limit: (i32, i32)) -> i32 {
        let r = self.range();
        let f = (v - r.start) / (r.end - r.start);
        limit.0 + (f * (limit.1 - limit.0) as f64).round() as i32
    }
    fn key_points<H: KeyPointHint>(&self, _hint: H) -> Vec<f64> {
        (0..self.0).map(|i| i as f64).collect()
    }
    fn range(&self) -> Range<f64> {
        -0.6..self.0 as f64 - 0.4
    }
}

impl ValueFormatter<f64> for Slots {
    fn format(v: &f64) -> String {
        format!("{v}")
    }
}

/// Where the inputs are and where the figures go.
pub struct Inputs {
    /// The harness's wall-time CSV (raw: one line per run; a medians file
    /// works too, its spread then drawn as nothing).
    pub time: PathBuf,
    /// The harness's instruction counts, every P in one file.
    pub instr: PathBuf,
    /// benches/timers_1m.sh's raw rounds.
    pub timers: PathBuf,
    /// The sidecar with the machine, date and load (optional: drawn as the
    /// figures' footer when present).
    pub machine: Option<PathBuf>,
    /// The directory the SVG files are written to.
    pub out: PathBuf,
}

/// A CSV file: its header and its rows, every field a string.
pub struct Table {
    path: PathBuf,
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

/// How to make each input again, for the error messages.
const REMEASURE: &str = "run benches/figures.sh to measure (QUICK=1 for a short sweep)";

impl Table {
    /// Reads a simple CSV (no quoting: none of the inputs quotes) whose
    /// header has every column of `required`. `what` names the input and
    /// its option in the messages.
    pub fn read(path: &Path, what: &str, required: &[&str]) -> Result<Table, String> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            format!(
                "{what}: cannot read {} ({e}); {REMEASURE}, or pass its path",
                path.display()
            )
        })?;
        Table::parse(path, what, &text, required)
    }

    /// Parses CSV text (`path` only names it in the messages).
    pub fn parse(path: &Path, what: &str, text: &str, required: &[&str]) -> Result<Table, String> {
        let mut lines = text
            .lines()
            .filter(|l| !l.trim().is_empty() && !l.starts_with('#'));
        let header: Vec<String> = lines
            .next()
            .ok_or_else(|| format!("{what}: {} is empty; {REMEASURE}", path.display()))?
            .split(',')
            .map(|s| s.trim().to_string())
            .collect();
        for col in required {
            if !header.iter().any(|h| h == col) {
                return Err(format!(
                    "{what}: {} has no column `{col}` (header: {})",
                    path.display(),
                    header.join(",")
                ));
            }
        }
        let mut rows = Vec::new();
        for (i, l) in lines.enumerate() {
            let row: Vec<String> = l.split(',').map(|s| s.trim().to_string()).collect();
            if row.len() != header.len() {
                return Err(format!(
                    "{what}: {} row {} has {} fields, the header {}: {l}",
                    path.display(),
                    i + 2,
                    row.len(),
                    header.len()
                ));
            }
            rows.push(row);
        }
        Ok(Table {
            path: path.to_path_buf(),
            header,
            rows,
        })
    }

    fn col(&self, name: &str) -> usize {
        // `read` checked the required columns.
        self.header.iter().position(|h| h == name).unwrap_or(0)
    }

    fn num(&self, row: &[String], name: &str) -> Result<f64, String> {
        let v = &row[self.col(name)];
        v.parse::<f64>()
            .ok()
            .filter(|x| x.is_finite())
            .ok_or_else(|| {
                format!(
                    "{}: `{name}` is not a number: {v:?} (row {})",
                    self.path.display(),
                    row.join(",")
                )
            })
    }
}

/// Min, median and max of some samples.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Spread {
    /// The smallest sample.
    pub min: f64,
    /// The median (the mean of the middle two for an even count).
    pub med: f64,
    /// The largest sample.
    pub max: f64,
    /// How many samples.
    pub n: usize,
}

impl Spread {
    /// The spread of `v` (None if empty).
    pub fn of(v: &[f64]) -> Option<Spread> {
        let mut v = v.to_vec();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let med = match n {
            0 => return None,
            _ if n % 2 == 1 => v[n / 2],
            _ => (v[n / 2 - 1] + v[n / 2]) / 2.0,
        };
        Some(Spread {
            min: v[0],
            med,
            max: v[n - 1],
            n,
        })
    }
}

/// One peer configuration of the harness: (impl, backend, A, timers).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Series {
    /// The library (`evloop`, `libev`, ..., `baseline`).
    pub imp: String,
    /// Its backend as the harness names it (`epoll`, `epoll-oneshot`, `none`...).
    pub backend: String,
    /// Active chains.
    pub a: u64,
    /// Timers on.
    pub timers: bool,
}

/// Per series, per P: the spread over the samples (rounds).
pub type Sweep = BTreeMap<Series, BTreeMap<u64, Spread>>;

/// Groups `table`'s `metric` (times `scale`) by series and P.
pub fn sweep(table: &Table, metric: &str, scale: f64) -> Result<Sweep, String> {
    let mut samples: BTreeMap<Series, BTreeMap<u64, Vec<f64>>> = BTreeMap::new();
    for row in &table.rows {
        let value = &row[table.col(metric)];
        if value == "failed" {
            // instr.sh writes this where a peer did not run; the others are drawn.
            eprintln!(
                "figures: {}: skipped a failed run: {}",
                table.path.display(),
                row.join(",")
            );
            continue;
        }
        let s = Series {
            imp: row[table.col("impl")].clone(),
            backend: row[table.col("backend")].clone(),
            a: table.num(row, "A")? as u64,
            timers: table.num(row, "timers")? != 0.0,
        };
        let p = table.num(row, "P")?;
        if p < 1.0 {
            // The x axis is logarithmic.
            return Err(format!(
                "{}: P must be at least 1 (row {})",
                table.path.display(),
                row.join(",")
            ));
        }
        let p = p as u64;
        let v = table.num(row, metric)? * scale;
        samples.entry(s).or_default().entry(p).or_default().push(v);
    }
    if samples.is_empty() {
        return Err(format!(
            "{}: no measurements in it; {REMEASURE}",
            table.path.display()
        ));
    }
    Ok(samples
        .into_iter()
        .map(|(s, per_p)| {
            let per_p = per_p
                .into_iter()
                .filter_map(|(p, v)| Some((p, Spread::of(&v)?)))
                .collect();
            (s, per_p)
        })
        .collect())
}

/// The panel a backend is drawn in (`epoll-oneshot` goes with epoll, as a
/// mode of it) and the series' label there.
fn panel_of(s: &Series) -> (String, String) {
    let (base, mode) = match s.backend.split_once('-') {
        Some((b, m)) => (b, Some(m)),
        None => (s.backend.as_str(), None),
    };
    let base = if base == "iouring" { "io_uring" } else { base };
    let label = match mode {
        Some(m) => format!("{} ({m})", s.imp),
        None => s.imp.clone(),
    };
    (base.to_string(), label)
}

/// The order of the panels and of the series: the project first.
fn backend_rank(b: &str) -> (usize, String) {
    let known = ["epoll", "poll", "select", "io_uring"];
    (
        known.iter().position(|k| *k == b).unwrap_or(known.len()),
        b.to_string(),
    )
}

fn impl_rank(label: &str) -> (usize, String) {
    let known = [
        "evloop", "libev", "libevent", "libuv", "mio", "polling", "tokio", "baseline",
    ];
    let imp = label.split(' ').next().unwrap_or(label);
    (
        known
            .iter()
            .position(|k| *k == imp)
            .unwrap_or(known.len() - 1),
        label.to_string(),
    )
}

/// A series' colour and line width: evloop thick and red, the reference
/// (the syscall floor) grey; the others in fixed colours by library.
fn style_of(label: &str) -> (RGBColor, u32) {
    let imp = label.split(' ').next().unwrap_or(label);
    let mode = label.contains('(');
    let c = match (imp, mode) {
        ("evloop", _) => RGBColor(214, 39, 40),
        ("libev", _) => RGBColor(31, 119, 180),
        ("libevent", _) => RGBColor(44, 160, 44),
        ("libuv", _) => RGBColor(255, 127, 14),
        ("mio", _) => RGBColor(148, 103, 189),
        ("polling", false) => RGBColor(140, 86, 75),
        ("polling", true) => RGBColor(227, 119, 194),
        ("tokio", _) => RGBColor(23, 190, 207),
        ("baseline", _) => RGBColor(110, 110, 110),
        _ => {
            // Another library (EXTRA_PEERS): a colour fixed by its name.
            let palette = [
                RGBColor(23, 190, 207),
                RGBColor(188, 189, 34),
                RGBColor(57, 59, 121),
                RGBColor(132, 60, 57),
            ];
            let h = label.bytes().fold(0usize, |h, b| h * 31 + b as usize);
            palette[h % palette.len()]
        }
    };
    (c, if imp == "evloop" { 3 } else { 2 })
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// "100", "1k", "10k", "2.5k": the fd counts on a log axis.
fn fds_label(v: f64) -> String {
    if v >= 1000.0 {
        let k = v / 1000.0;
        if (k - k.round()).abs() < 1e-9 {
            format!("{}k", k.round())
        } else {
            format!("{k:.1}k")
        }
    } else {
        format!("{}", v.round())
    }
}

/// The figures' footer: the machine and the load, from the sidecar.
fn footer(machine: Option<&Path>) -> Result<Vec<String>, String> {
    let Some(path) = machine else {
        return Ok(Vec::new());
    };
    let text = std::fs::read_to_string(path).map_err(|e| {
        format!(
            "machine: cannot read {} ({e}); {REMEASURE}, or leave --machine out",
            path.display()
        )
    })?;
    Ok(text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(String::from)
        .collect())
}

const PANEL_W: u32 = 560;
const PANEL_H: u32 = 440;
const HEADER_H: u32 = 44;
const LINE_H: u32 = 21;
const LEGEND_W: u32 = 250;

/// A y tick's label; on a log axis only 1, 2 and 5 times a power of ten
/// are written (plotters ticks every digit, too many to read).
fn y_label(v: f64, log: bool) -> String {
    if log {
        let lead = v / 10f64.powf(v.log10().floor());
        if ![1.0, 2.0, 5.0].iter().any(|d| (lead - d).abs() < 1e-6) {
            return String::new();
        }
    }
    if v.abs() < 10.0 && v.fract().abs() > 1e-9 {
        format!("{v:.1}")
    } else {
        format!("{v:.0}")
    }
}

/// The footer's lines: the sidecar's lines joined with " · ", wrapped to
/// the figure's width (about 7 pixels per character at 15 px: plotters
/// writes it 12 px high).
fn wrap_footer(lines: &[String], width: u32) -> Vec<String> {
    let max = (width as usize / 7).max(40);
    let mut out: Vec<String> = Vec::new();
    let mut cur = String::new();
    for l in lines {
        if !cur.is_empty() && cur.chars().count() + 3 + l.chars().count() > max {
            out.push(std::mem::take(&mut cur));
        }
        if !cur.is_empty() {
            cur.push_str(" · ");
        }
        cur.push_str(l);
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

fn footer_height(lines: &[String]) -> u32 {
    if lines.is_empty() {
        0
    } else {
        LINE_H * lines.len() as u32 + 8
    }
}

fn draw_footer(area: &DrawingArea<SVGBackend<'_>, Shift>, lines: &[String]) -> Result<(), String> {
    let style = ("sans-serif", 15).into_font().color(&RGBColor(90, 90, 90));
    for (i, l) in lines.iter().enumerate() {
        area.draw_text(l, &style, (10, 4 + (i as u32 * LINE_H) as i32))
            .map_err(err)?;
    }
    Ok(())
}

/// What a peer figure shows.
pub struct PeerFigure<'a> {
    /// The file name (in `Inputs::out`).
    pub file: &'a str,
    /// The figure's title.
    pub title: String,
    /// The y axis' description, with its unit.
    pub y_desc: &'a str,
    /// The active chains drawn (the figure's A).
    pub a: u64,
    /// Whether the samples have a spread worth drawing (wall time: yes;
    /// callgrind counts are exact).
    pub spread: bool,
    /// Whether the baseline (the syscalls alone) is drawn: it has no setup.
    pub baseline: bool,
}

/// A series' points: P -> spread.
type Points = BTreeMap<u64, Spread>;

/// A backend's panels: timers off/on -> (rank, label) -> points.
type Panel = BTreeMap<bool, BTreeMap<(usize, String), Points>>;

/// The label of the syscall floor.
const BASELINE: &str = "baseline (no loop: the syscalls alone)";

/// The legend shared by every panel (a library has one colour
/// throughout): a row of entries under the title.
fn draw_legend(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    labels: &[String],
    per_row: usize,
) -> Result<(), String> {
    for (i, label) in labels.iter().enumerate() {
        let (color, width) = style_of(label);
        let x = 20 + (i % per_row) as i32 * LEGEND_W as i32;
        let y = 10 + (i / per_row) as i32 * LINE_H as i32;
        let style = color.stroke_width(width);
        if label == BASELINE {
            area.draw(&DashedPathElement::new(
                vec![(x, y), (x + 26, y)],
                5,
                3,
                style,
            ))
            .map_err(err)?;
        } else {
            area.draw(&PathElement::new(vec![(x, y), (x + 26, y)], style))
                .map_err(err)?;
            area.draw(&Circle::new((x + 13, y), 3, color.filled()))
                .map_err(err)?;
        }
        area.draw_text(
            label,
            &("sans-serif", 16).into_font().color(&BLACK),
            (x + 32, y - 7),
        )
        .map_err(err)?;
    }
    Ok(())
}

/// One panel: its series' medians against P (log), with their spread.
#[allow(clippy::too_many_arguments)]
fn draw_panel<Y>(
    cell: &DrawingArea<SVGBackend<'_>, Shift>,
    caption: &str,
    x: Range<f64>,
    y: Y,
    log_y: bool,
    y_desc: &str,
    drawn: &[(String, Points)],
    spread: bool,
) -> Result<(), String>
where
    Y: AsRangedCoord<Value = f64>,
    Y::CoordDescType: ValueFormatter<f64>,
{
    let mut chart = ChartBuilder::on(cell)
        .caption(caption, ("sans-serif", 20))
        .margin(10)
        .x_label_area_size(50)
        .y_label_area_size(78)
        .build_cartesian_2d(x.clone().log_scale(), y)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("socket pairs P (log scale)")
        .y_desc(y_desc)
        .x_label_formatter(&|v| fds_label(*v))
        .y_label_formatter(&|v| y_label(*v, log_y))
        .label_style(("sans-serif", 15))
        .axis_desc_style(("sans-serif", 16))
        .light_line_style(WHITE)
        .bold_line_style(RGBColor(215, 215, 215))
        .draw()
        .map_err(err)?;
    if drawn.iter().all(|(l, _)| l == BASELINE) {
        let (lo, hi) = (x.start, x.end);
        let ys = chart.y_range();
        chart
            .draw_series(std::iter::once(Text::new(
                "not measured",
                ((lo * hi).sqrt(), (ys.start + ys.end) / 2.0),
                ("sans-serif", 17).into_font(),
            )))
            .map_err(err)?;
    }
    for (label, pts) in drawn {
        let (color, width) = style_of(label);
        let line: Vec<(f64, f64)> = pts.iter().map(|(p, s)| (*p as f64, s.med)).collect();
        if spread {
            let mut band: Vec<(f64, f64)> = pts.iter().map(|(p, s)| (*p as f64, s.max)).collect();
            band.extend(pts.iter().rev().map(|(p, s)| (*p as f64, s.min)));
            chart
                .draw_series(std::iter::once(Polygon::new(
                    band,
                    color.mix(0.12).filled(),
                )))
                .map_err(err)?;
            chart
                .draw_series(pts.iter().map(|(p, s)| {
                    ErrorBar::new_vertical(*p as f64, s.min, s.med, s.max, color.stroke_width(1), 6)
                }))
                .map_err(err)?;
        }
        let style = color.stroke_width(width);
        if label == BASELINE {
            chart
                .draw_series(DashedLineSeries::new(line, 6, 4, style))
                .map_err(err)?;
        } else {
            chart
                .draw_series(LineSeries::new(line, style).point_size(3))
                .map_err(err)?;
        }
    }
    Ok(())
}

/// One figure of a sweep: a panel per backend (columns) and timers off/on
/// (rows); in each, every peer's median against P on a log axis, its
/// min..max band and whiskers over the rounds (when `spread`), and the
/// baseline (the syscall floor) dashed; one legend for all. A panel whose
/// values span more than a decade gets a log y axis. Returns the written
/// path.
pub fn peer_figure(
    sweep: &Sweep,
    fig: &PeerFigure<'_>,
    out: &Path,
    machine: &[String],
) -> Result<PathBuf, String> {
    // panel (backend) -> timers -> label -> points
    let mut panels: BTreeMap<(usize, String), Panel> = BTreeMap::new();
    let mut baseline: Option<&Points> = None;
    let (mut pmin, mut pmax) = (u64::MAX, 0);
    for (s, pts) in sweep.iter().filter(|(s, _)| s.a == fig.a) {
        for p in pts.keys() {
            pmin = pmin.min(*p);
            pmax = pmax.max(*p);
        }
        if s.imp == "baseline" {
            if fig.baseline {
                baseline = Some(pts);
            }
            continue;
        }
        let (b, label) = panel_of(s);
        panels
            .entry(backend_rank(&b))
            .or_default()
            .entry(s.timers)
            .or_default()
            .insert(impl_rank(&label), pts.clone());
    }
    if panels.is_empty() {
        return Err(format!("{}: no peer measured at A = {}", fig.file, fig.a));
    }
    let rows: BTreeSet<bool> = panels.values().flat_map(|t| t.keys().copied()).collect();
    let (ncols, nrows) = (panels.len() as u32, rows.len() as u32);
    let width = ncols * PANEL_W;
    let mut labels: Vec<(usize, String)> = panels
        .values()
        .flat_map(|t| t.values().flat_map(|s| s.keys().cloned()))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    if baseline.is_some() {
        labels.push((usize::MAX, BASELINE.to_string()));
    }
    let labels: Vec<String> = labels.into_iter().map(|(_, l)| l).collect();
    let per_row = (width as usize / LEGEND_W as usize).max(1);
    let legend_h = LINE_H * labels.len().div_ceil(per_row) as u32 + 8;
    let foot = wrap_footer(machine, width);
    let foot_h = footer_height(&foot);
    let size = (width, HEADER_H + legend_h + nrows * PANEL_H + foot_h);
    let path = out.join(fig.file);
    {
        let root = SVGBackend::new(&path, size).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let (top, bottom) = root.split_vertically(size.1 - foot_h);
        draw_footer(&bottom, &foot)?;
        let (head, body) = top.split_vertically(HEADER_H + legend_h);
        let legend = head.titled(&fig.title, ("sans-serif", 24)).map_err(err)?;
        draw_legend(&legend, &labels, per_row)?;
        let cells = body.split_evenly((nrows as usize, ncols as usize));
        let x = pmin as f64 / 1.6..pmax as f64 * 1.6;
        for (r, timers) in rows.iter().enumerate() {
            for (c, ((_, backend), by_timers)) in panels.iter().enumerate() {
                let cell = &cells[r * ncols as usize + c];
                let caption = format!(
                    "{backend}, timers {}",
                    if *timers {
                        "on (a fresh timeout per event)"
                    } else {
                        "off"
                    }
                );
                let mut drawn: Vec<(String, Points)> = by_timers
                    .get(timers)
                    .into_iter()
                    .flat_map(|s| s.iter().map(|((_, l), p)| (l.clone(), p.clone())))
                    .collect();
                if let Some(b) = baseline {
                    drawn.push((BASELINE.to_string(), b.clone()));
                }
                let values = || drawn.iter().flat_map(|(_, p)| p.values());
                let ymax = values().map(|s| s.max).fold(0.0f64, f64::max);
                let ymin = values().map(|s| s.min).fold(f64::INFINITY, f64::min);
                let ymax = if ymax > 0.0 { ymax } else { 1.0 };
                if ymin > 0.0 && ymax / ymin > 20.0 {
                    let desc = format!("{} (log scale)", fig.y_desc);
                    let (lo, hi) = (ymin / 1.25, ymax * 1.25);
                    // Ticks at 1, 2 and 5 times each power of ten.
                    let mut ticks = Vec::new();
                    let mut decade = 10f64.powf(lo.log10().floor());
                    while decade <= hi {
                        ticks.extend([1.0, 2.0, 5.0].map(|d| d * decade));
                        decade *= 10.0;
                    }
                    ticks.retain(|t| (lo..=hi).contains(t));
                    let y = (lo..hi).log_scale().with_key_points(ticks);
                    draw_panel(
                        cell,
                        &caption,
                        x.clone(),
                        y,
                        true,
                        &desc,
                        &drawn,
                        fig.spread,
                    )?;
                } else {
                    let y = 0f64..ymax * 1.08;
                    draw_panel(
                        cell,
                        &caption,
                        x.clone(),
                        y,
                        false,
                        fig.y_desc,
                        &drawn,
                        fig.spread,
                    )?;
                }
            }
        }
        root.present()
            .map_err(|e| format!("{}: cannot write it ({e})", path.display()))?;
    }
    Ok(path)
}

/// A label centred just above the point it is drawn at.
fn above(style: TextStyle<'_>) -> TextStyle<'_> {
    use plotters::style::text_anchor::{HPos, Pos, VPos};
    style.pos(Pos::new(HPos::Center, VPos::Bottom))
}

/// The 1M-timer phases timed per operation, in the script's order
/// (expire, per timer, is drawn on its own scale).
const PHASES: [&str; 7] = [
    "arm",
    "restart",
    "again",
    "stop_start",
    "mixed",
    "rearm",
    "stop_all",
];

/// benches/timers_1m.sh's rounds: (phase, impl) -> the values over rounds.
pub type TimerRounds = BTreeMap<(String, String), Vec<f64>>;

/// Reads the 1M-timer rounds, checking that both programs are there.
pub fn timer_rounds(table: &Table) -> Result<TimerRounds, String> {
    let mut v: TimerRounds = BTreeMap::new();
    for row in &table.rows {
        let phase = row[table.col("phase")].clone();
        if phase == "plan_checksum" {
            continue; // a 64-bit hash, compared by the script
        }
        let imp = row[table.col("impl")].clone();
        v.entry((phase, imp))
            .or_default()
            .push(table.num(row, "value")?);
    }
    for imp in ["libev", "evloop"] {
        for phase in PHASES.iter().chain(&["expire", "mem_peak"]) {
            if !v.contains_key(&(phase.to_string(), imp.to_string())) {
                return Err(format!(
                    "{}: no `{phase}` rounds for {imp}; {REMEASURE} (or benches/timers_1m.sh with CSV=<path>)",
                    table.path.display()
                ));
            }
        }
    }
    Ok(v)
}

fn spread_of(v: &TimerRounds, phase: &str, imp: &str) -> Option<Spread> {
    Spread::of(v.get(&(phase.to_string(), imp.to_string()))?)
}

/// The 1M-timer figure: per phase, libev's and evloop's median ns per
/// operation as bars with min..max whiskers over the rounds and the ratio
/// of the medians above; expire (ns per timer) on a scale of its own; and
/// the memory per armed timer, split as the script splits it.
pub fn timers_figure(
    v: &TimerRounds,
    file: &str,
    out: &Path,
    machine: &[String],
) -> Result<PathBuf, String> {
    let libev = RGBColor(31, 119, 180);
    let evloop = RGBColor(214, 39, 40);
    let impls = [("libev", libev), ("evloop", evloop)];
    let rounds = spread_of(v, "arm", "evloop").map_or(0, |s| s.n);
    let foot = wrap_footer(machine, 1500);
    let foot_h = footer_height(&foot);
    let size = (1500u32, HEADER_H + 470 + foot_h);
    let path = out.join(file);
    {
        let root = SVGBackend::new(&path, size).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let (top, bottom) = root.split_vertically(size.1 - foot_h);
        draw_footer(&bottom, &foot)?;
        let title = format!(
            "A million timers, evloop against libev (benches/timers_1m.sh): median bars, min-max whiskers over {rounds} rounds"
        );
        let body = top.titled(&title, ("sans-serif", 24)).map_err(err)?;
        let (ops, rest) = body.split_horizontally(800);
        let (exp, mem) = rest.split_horizontally(300);

        // The phases per operation, and expire alone.
        for (panel, (area, phases, caption, y_desc)) in [
            (
                &ops,
                &PHASES[..],
                "time per operation, N = 1M armed (above: evloop / libev, medians)",
                "ns per operation",
            ),
            (
                &exp,
                &["expire"][..],
                "every timer fires once",
                "ns per timer",
            ),
        ]
        .into_iter()
        .enumerate()
        {
            let mut ymax = 0.0f64;
            for p in phases {
                for (imp, _) in impls {
                    if let Some(s) = spread_of(v, p, imp) {
                        ymax = ymax.max(s.max);
                    }
                }
            }
            let ymax = ymax * 1.18;
            let n = phases.len();
            let mut chart = ChartBuilder::on(area)
                .caption(caption, ("sans-serif", 20))
                .margin(12)
                .x_label_area_size(44)
                .y_label_area_size(74)
                .build_cartesian_2d(Slots(n), 0f64..ymax)
                .map_err(err)?;
            let names: Vec<String> = phases.iter().map(|p| p.to_string()).collect();
            chart
                .configure_mesh()
                .disable_x_mesh()
                .x_labels(n)
                .x_label_formatter(&|x| {
                    names
                        .get(x.round().max(0.0) as usize)
                        .cloned()
                        .unwrap_or_default()
                })
                .y_desc(y_desc)
                .y_label_formatter(&|v| format!("{v:.0}"))
                .label_style(("sans-serif", 16))
                .axis_desc_style(("sans-serif", 16))
                .light_line_style(WHITE)
                .bold_line_style(RGBColor(215, 215, 215))
                .draw()
                .map_err(err)?;
            for (k, (imp, color)) in impls.iter().enumerate() {
                let off = if k == 0 { -0.2 } else { 0.2 };
                let bars: Vec<(f64, Spread)> = phases
                    .iter()
                    .enumerate()
                    .filter_map(|(i, p)| Some((i as f64 + off, spread_of(v, p, imp)?)))
                    .collect();
                chart
                    .draw_series(bars.iter().map(|(x, s)| {
                        Rectangle::new(
                            [(x - 0.18, 0.0), (x + 0.18, s.med)],
                            color.mix(0.8).filled(),
                        )
                    }))
                    .map_err(err)?
                    .label(imp.to_string())
                    .legend(move |(x, y)| {
                        Rectangle::new([(x, y - 5), (x + 14, y + 5)], color.mix(0.8).filled())
                    });
                chart
                    .draw_series(bars.iter().map(|(x, s)| {
                        ErrorBar::new_vertical(*x, s.min, s.med, s.max, BLACK.stroke_width(1), 10)
                    }))
                    .map_err(err)?;
            }
            // The ratio of the medians above each pair.
            for (i, p) in phases.iter().enumerate() {
                if let (Some(a), Some(b)) = (spread_of(v, p, "libev"), spread_of(v, p, "evloop")) {
                    let top = a.max.max(b.max);
                    chart
                        .draw_series(std::iter::once(Text::new(
                            format!("{:.2}x", b.med / a.med),
                            (i as f64, top + ymax * 0.015),
                            above(("sans-serif", 16).into_font().color(&evloop)),
                        )))
                        .map_err(err)?;
                }
            }
            if panel == 0 {
                chart
                    .configure_series_labels()
                    .position(SeriesLabelPosition::UpperLeft)
                    .background_style(WHITE.mix(0.85))
                    .border_style(RGBColor(200, 200, 200))
                    .label_font(("sans-serif", 16))
                    .draw()
                    .map_err(err)?;
            }
        }

        // Memory: the peak RSS of the arm phase per timer, stacked as the
        // script splits it (medians), the whisker over the totals' rounds.
        let med = |p: &str, i: &str| spread_of(v, p, i).map(|s| s.med);
        let lib_total = spread_of(v, "mem_peak", "libev");
        let ev_total = spread_of(v, "mem_peak", "evloop");
        // (impl, colour, total over rounds, parts: (label, bytes))
        type Stack<'a> = (&'a str, RGBColor, Option<Spread>, Vec<(String, f64)>);
        let mut stacks: Vec<Stack<'_>> = Vec::new();
        if let Some(t) = lib_total {
            let parts = match med("watcher_size", "libev") {
                Some(w) => vec![
                    (format!("ev_timer {w:.0}"), w),
                    (format!("heap {:.1}", t.med - w), t.med - w),
                ],
                None => vec![(format!("total {:.1}", t.med), t.med)],
            };
            stacks.push(("libev", libev, Some(t), parts));
        }
        if let Some(t) = ev_total {
            let parts = match (med("handle_size", "evloop"), med("mem_idle_peak", "evloop")) {
                (Some(h), Some(idle)) => {
                    let entry = idle - h;
                    vec![
                        (format!("handle {h:.0}"), h),
                        (format!("entry {entry:.1}"), entry),
                        (format!("heap {:.1}", t.med - h - entry), t.med - h - entry),
                    ]
                }
                _ => vec![(format!("total {:.1}", t.med), t.med)],
            };
            stacks.push(("evloop", evloop, Some(t), parts));
        }
        let ymax = stacks
            .iter()
            .filter_map(|(_, _, t, _)| t.map(|t| t.max))
            .fold(0.0f64, f64::max)
            * 1.18;
        let names: Vec<String> = stacks.iter().map(|(n, _, _, _)| n.to_string()).collect();
        let n = stacks.len().max(1);
        let mut chart = ChartBuilder::on(&mem)
            .caption("memory per armed timer", ("sans-serif", 20))
            .margin(12)
            .x_label_area_size(44)
            .y_label_area_size(74)
            .build_cartesian_2d(Slots(n), 0f64..ymax.max(1.0))
            .map_err(err)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(n)
            .x_label_formatter(&|x| {
                names
                    .get(x.round().max(0.0) as usize)
                    .cloned()
                    .unwrap_or_default()
            })
            .y_desc("bytes per timer (peak RSS while arming)")
            .y_label_formatter(&|v| format!("{v:.0}"))
            .label_style(("sans-serif", 16))
            .axis_desc_style(("sans-serif", 16))
            .light_line_style(WHITE)
            .bold_line_style(RGBColor(215, 215, 215))
            .draw()
            .map_err(err)?;
        for (i, (_, color, total, parts)) in stacks.iter().enumerate() {
            let x = i as f64;
            let mut y = 0.0;
            for (k, (label, h)) in parts.iter().enumerate() {
                let shade = color.mix(0.9 - 0.25 * k as f64);
                chart
                    .draw_series(std::iter::once(Rectangle::new(
                        [(x - 0.3, y), (x + 0.3, y + h)],
                        shade.filled(),
                    )))
                    .map_err(err)?;
                chart
                    .draw_series(std::iter::once(Rectangle::new(
                        [(x - 0.3, y), (x + 0.3, y + h)],
                        WHITE.stroke_width(1),
                    )))
                    .map_err(err)?;
                chart
                    .draw_series(std::iter::once(Text::new(
                        label.clone(),
                        (x - 0.26, y + h / 2.0 + ymax * 0.02),
                        ("sans-serif", 15).into_font().color(&BLACK),
                    )))
                    .map_err(err)?;
                y += h;
            }
            if let Some(t) = total {
                chart
                    .draw_series(std::iter::once(ErrorBar::new_vertical(
                        x,
                        t.min,
                        t.med,
                        t.max,
                        BLACK.stroke_width(1),
                        10,
                    )))
                    .map_err(err)?;
                chart
                    .draw_series(std::iter::once(Text::new(
                        format!("{:.1} B", t.med),
                        (x, t.max + ymax * 0.015),
                        above(("sans-serif", 16).into_font().color(color)),
                    )))
                    .map_err(err)?;
            }
        }
        root.present()
            .map_err(|e| format!("{}: cannot write it ({e})", path.display()))?;
    }
    Ok(path)
}

/// Reads every input and draws every figure into `inputs.out`; returns the
/// paths written. The inputs are all read before anything is drawn, so a
/// missing CSV leaves the old figures as they were.
pub fn run(inputs: &Inputs) -> Result<Vec<PathBuf>, String> {
    let time = Table::read(
        &inputs.time,
        "wall time (--time)",
        &[
            "impl",
            "backend",
            "P",
            "A",
            "timers",
            "setup_us_per_fd",
            "run_us_per_event",
        ],
    )?;
    let instr = Table::read(
        &inputs.instr,
        "instructions (--instr)",
        &["impl", "backend", "P", "A", "timers", "instr_per_event"],
    )?;
    let timers = Table::read(
        &inputs.timers,
        "1M timers (--timers)",
        &["impl", "phase", "value"],
    )?;
    let foot = footer(inputs.machine.as_deref())?;
    let run_ns = sweep(&time, "run_us_per_event", 1000.0)?;
    let setup_us = sweep(&time, "setup_us_per_fd", 1.0)?;
    let instr = sweep(&instr, "instr_per_event", 1.0)?;
    let rounds = timer_rounds(&timers)?;
    std::fs::create_dir_all(&inputs.out)
        .map_err(|e| format!("cannot create {} ({e})", inputs.out.display()))?;

    let rounds_of = |s: &Sweep| {
        let n: BTreeSet<usize> = s.values().flat_map(|p| p.values().map(|x| x.n)).collect();
        match (n.first(), n.last()) {
            (Some(a), Some(b)) if a == b => format!("{a}"),
            (Some(a), Some(b)) => format!("{a}-{b}"),
            _ => "0".into(),
        }
    };
    let mut written = Vec::new();
    let chains: BTreeSet<u64> = run_ns.keys().map(|s| s.a).collect();
    for &a in &chains {
        let file = format!("peers_time_a{a}.svg");
        let fig = PeerFigure {
            file: &file,
            title: format!(
                "bench.c, wall time per event, A = {a} chains: median, min-max band and whiskers over {} rounds",
                rounds_of(&run_ns)
            ),
            y_desc: "ns per event",
            a,
            spread: true,
            baseline: true,
        };
        written.push(peer_figure(&run_ns, &fig, &inputs.out, &foot)?);
    }
    if let Some(&a) = chains.first() {
        let fig = PeerFigure {
            file: "peers_setup.svg",
            title: format!(
                "bench.c, setup per fd (watcher + timer + first iteration), A = {a}: median, min-max over {} rounds",
                rounds_of(&setup_us)
            ),
            y_desc: "µs per fd",
            a,
            spread: true,
            baseline: false,
        };
        written.push(peer_figure(&setup_us, &fig, &inputs.out, &foot)?);
    }
    let instr_chains: BTreeSet<u64> = instr.keys().map(|s| s.a).collect();
    for &a in &instr_chains {
        let file = format!("peers_instr_a{a}.svg");
        let fig = PeerFigure {
            file: &file,
            title: format!(
                "bench.c, user-space instructions per event (callgrind, exact), A = {a} chains"
            ),
            y_desc: "instructions per event",
            a,
            spread: false,
            baseline: true,
        };
        written.push(peer_figure(&instr, &fig, &inputs.out, &foot)?);
    }
    written.push(timers_figure(&rounds, "timers_1m.svg", &inputs.out, &foot)?);
    Ok(written)
}
