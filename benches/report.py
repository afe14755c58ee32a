#!/usr/bin/env python3
"""Prints the wall-time tables of docs/backends.md (markdown) from the
results criterion saved for the benches idle_fds, chain and scale (its
table only if it ran) of the bench crate: `cargo bench --manifest-path
benches/criterion/Cargo.toml --bench idle_fds`, and so on.

Usage: python3 benches/report.py   (after the benches ran)

Results are read from $CRITERION_HOME, else $CARGO_TARGET_DIR/criterion,
else benches/criterion/target/criterion (criterion's own rule, for the
bench crate). The estimate shown is the one
criterion prints as the middle of `time: [low estimate high]` (the slope of
the linear fit when it sampled linearly, else the mean), with half the
width of its 95% confidence interval in percent. A dash is a size the bench
skipped (it prints why).
"""

import json
import os
import sys

BACKENDS = ["epoll", "kqueue", "poll", "select", "sim"]


def home():
    if os.environ.get("CRITERION_HOME"):
        return os.environ["CRITERION_HOME"]
    return os.path.join(os.environ.get("CARGO_TARGET_DIR") or "benches/criterion/target", "criterion")


def estimate(*path):
    """(nanoseconds, low, high, elements per iteration or None), or None if
    absent; low and high bound criterion's 95% confidence interval."""
    d = os.path.join(home(), *path, "new")
    try:
        with open(os.path.join(d, "estimates.json")) as f:
            est = json.load(f)
        with open(os.path.join(d, "benchmark.json")) as f:
            bench = json.load(f)
    except FileNotFoundError:
        return None
    typical = est.get("slope") or est["mean"]
    elements = (bench.get("throughput") or {}).get("Elements")
    ci = typical["confidence_interval"]
    return typical["point_estimate"], ci["lower_bound"], ci["upper_bound"], elements


def fmt_time(ns):
    if ns >= 1e9:
        return f"{ns / 1e9:.2f} s"
    if ns >= 1e6:
        return f"{ns / 1e6:.2f} ms"
    if ns >= 1e3:
        return f"{ns / 1e3:.1f} µs"
    return f"{ns:.0f} ns"


def spread(e):
    """Half the width of the confidence interval, in % of the estimate."""
    return f"{(e[2] - e[1]) / 2 / e[0] * 100:.0f}%"


def row(cells):
    return "| " + " | ".join(cells) + " |"


def idle_table():
    sizes = [100, 500, 1_000, 10_000, 100_000]
    print("One iteration, 100 active fds (100 events dispatched), by idle fds:\n")
    print(row(["backend"] + [f"{n:,} idle" for n in sizes]))
    print(row(["---"] + ["---:"] * len(sizes)))
    for b in BACKENDS:
        cells = []
        for n in sizes:
            e = estimate("idle_fds", b, str(n))
            cells.append(f"{fmt_time(e[0])} ±{spread(e)}" if e else "—")
        if any(c != "—" for c in cells):
            print(row([f"`{b}`"] + cells))
    print()


def chain_table():
    cols = [
        ("200x20", "plain"),
        ("200x20", "timers"),
        ("1000x100", "plain"),
        ("1000x100", "timers"),
    ]
    heads = {
        ("200x20", "plain"): "200 pairs / 20 chains",
        ("200x20", "timers"): "200 / 20 + timer",
        ("1000x100", "plain"): "1,000 pairs / 100 chains",
        ("1000x100", "timers"): "1,000 / 100 + timer",
    }
    print("bench.c chains, wall time per event (ns):\n")
    print(row(["backend"] + [heads[c] for c in cols]))
    print(row(["---"] + ["---:"] * len(cols)))
    for b in BACKENDS + ["mio", "bare", "fdio"]:
        cells = []
        for shape, mode in cols:
            e = estimate(f"chain_{shape}_{mode}", b)
            cells.append(f"{e[0] / e[3]:.0f} ±{spread(e)}" if e and e[3] else "—")
        if any(c != "—" for c in cells):
            print(row([f"`{b}`"] + cells))
    print()


def scale_table():
    """benches/scale.rs: total time per row at both sizes, and their ratio
    (about 10 for linear cost, about 100 for quadratic)."""
    rows = [("idle", [10_000, 100_000]), ("prepare", [10_000, 100_000]),
            ("check", [10_000, 100_000]), ("timer", [10_000, 100_000]),
            ("io_sim", [10_000, 100_000]), ("io_epoll", [1_000, 10_000]),
            ("io_poll", [1_000, 10_000]), ("io_sim_one_fd", [10_000, 100_000])]
    lines = []
    for name, (small, large) in rows:
        for order in ["fifo", "lifo"]:
            lines.append((f"{name}/{order}", small, large))
    lines.append(("sim_socket", 10_000, 100_000))
    # criterion stores "idle/fifo" as "idle_fifo"
    found = [(r, estimate("scale", r.replace("/", "_"), str(s)),
              estimate("scale", r.replace("/", "_"), str(l)), s, l)
             for r, s, l in lines]
    if not any(a or b for _, a, b, _, _ in found):
        return
    print("Start N watchers then stop them all (total time), small vs large N:\n")
    print(row(["row", "N small", "time", "N large", "time", "ratio"]))
    print(row(["---", "---:", "---:", "---:", "---:", "---:"]))
    for r, a, b, s, l in found:
        cells = [f"`{r}`", f"{s:,}", f"{fmt_time(a[0])} ±{spread(a)}" if a else "—",
                 f"{l:,}", f"{fmt_time(b[0])} ±{spread(b)}" if b else "—",
                 f"{b[0] / a[0]:.1f}x" if a and b else "—"]
        print(row(cells))
    print()


if __name__ == "__main__":
    if not os.path.isdir(home()):
        sys.exit(f"no criterion results in {home()}: run the benches first")
    idle_table()
    chain_table()
    scale_table()
