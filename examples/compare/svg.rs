//! The report as an SVG, written by hand (no plotting crate): per metric a
//! panel, per backend a bar to its median with a min..max whisker.

#![allow(dead_code)]

use std::fmt::Write as _;

use crate::harness::{num, Machine, Report};

const WIDTH: f64 = 900.0;
/// Left of the bars (the backend names are before).
const X0: f64 = 110.0;
/// Right of the bars (the numbers are after).
const X1: f64 = 640.0;
const ROW: f64 = 22.0;

/// `text` in lines of at most `width` characters, broken at spaces.
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = vec![String::new()];
    for word in text.split(' ') {
        let last = lines.last_mut().unwrap();
        if !last.is_empty() && last.chars().count() + 1 + word.chars().count() > width {
            lines.push(word.to_string());
        } else {
            if !last.is_empty() {
                last.push(' ');
            }
            last.push_str(word);
        }
    }
    lines
}

/// Lines of small text from `y` on, wrapped to the figure's width; the
/// `y` after them.
fn small(body: &mut String, mut y: f64, text: &str, fill: &str) -> f64 {
    for line in wrap(text, 140) {
        y += 14.0;
        let _ = writeln!(
            body,
            r#"<text x="10" y="{y}" font-size="11" fill="{fill}">{}</text>"#,
            esc(&line)
        );
    }
    y
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The whole figure.
pub fn draw(r: &Report, machine: &Machine) -> String {
    let mut body = String::new();
    let mut y = 20.0;
    let _ = writeln!(
        body,
        r#"<text x="10" y="{y}" font-size="15" font-weight="bold">evloop backends: {}</text>"#,
        esc(r.workload)
    );
    y += 4.0;
    y = small(&mut body, y, &r.description, "black");
    let load = |l: Option<[f64; 3]>| l.map_or("n/a".into(), |l| format!("{:.2}", l[0]));
    let others = r.others.map_or(String::new(), |o| {
        format!("; other processes' CPU during the run {o:.2} cores")
    });
    let machine_line = format!(
        "{}; {} rounds, interleaved; load average {} before, {} after{others}; bar: median, \
         whisker: min..max",
        machine.line(),
        r.rounds,
        load(r.load_before),
        load(r.load_after)
    );
    y = small(&mut body, y, &machine_line, "#555");
    for w in r.load_warnings(machine) {
        y = small(&mut body, y, &format!("! {w}"), "#a00");
    }
    for (m, metric) in r.metrics.iter().enumerate() {
        y += 22.0;
        let better = if metric.higher_is_better {
            "higher is better"
        } else {
            "lower is better"
        };
        let _ = writeln!(
            body,
            r#"<text x="10" y="{y}" font-size="13" font-weight="bold">{} ({}, {better})</text>"#,
            esc(&metric.name),
            esc(metric.unit)
        );
        y += 8.0;
        let top = r.series[m]
            .iter()
            .filter_map(|s| s.stats().map(|(_, _, max)| max))
            .fold(0.0, f64::max);
        let scale = if top > 0.0 {
            (X1 - X0) / (top * 1.05)
        } else {
            0.0
        };
        for (b, s) in r.backends.iter().zip(&r.series[m]) {
            let mid = y + ROW / 2.0;
            let _ = writeln!(
                body,
                r#"<text x="{}" y="{}" font-size="12" text-anchor="end">{}</text>"#,
                X0 - 8.0,
                mid + 4.0,
                esc(b)
            );
            match s.stats() {
                Some((min, med, max)) => {
                    let fill = if b == "sim" { "#bbb" } else { "#4a7ebb" };
                    let _ = writeln!(
                        body,
                        r#"<rect x="{X0}" y="{}" width="{:.1}" height="{}" fill="{fill}"/>"#,
                        y + 4.0,
                        med * scale,
                        ROW - 8.0
                    );
                    let (xa, xb) = (X0 + min * scale, X0 + max * scale);
                    let _ = writeln!(
                        body,
                        r#"<path d="M{xa:.1} {mid}H{xb:.1}M{xa:.1} {}V{}M{xb:.1} {}V{}" stroke="black" fill="none"/>"#,
                        mid - 5.0,
                        mid + 5.0,
                        mid - 5.0,
                        mid + 5.0
                    );
                    let _ = writeln!(
                        body,
                        r#"<text x="{}" y="{}" font-size="11">{} ({}..{})</text>"#,
                        X1 + 8.0,
                        mid + 4.0,
                        num(med),
                        num(min),
                        num(max)
                    );
                }
                None => {
                    let why = s.refused.as_deref().unwrap_or("no value");
                    let short: String = why.chars().take(70).collect();
                    let _ = writeln!(
                        body,
                        r##"<text x="{X0}" y="{}" font-size="11" fill="#a00">refused: {}</text>"##,
                        mid + 4.0,
                        esc(&short)
                    );
                }
            }
            y += ROW;
        }
        for w in r.warnings(m) {
            y = small(&mut body, y, &format!("! {w}"), "#a00");
        }
    }
    let height = y + 16.0;
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{height}\" \
         font-family=\"sans-serif\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n{body}</svg>\n"
    )
}
