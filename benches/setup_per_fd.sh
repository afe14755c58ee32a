#!/usr/bin/env bash
# Setup per fd (issue 23, target 2): what creating and starting one io
# watcher costs, evloop against libev, on the peer harness's own binaries
# as they are (bench.c's workload; benches/peers, docs/benchmarks.md).
#
# Each binary runs twice with few events (-a 1 -w 1: one chain, one
# forwarded write) and P socket pairs, P = P2 then P1; the difference
# divided by P2 - P1 cancels everything but what is paid per pair:
#
#   - user-space instructions per fd, counted by callgrind (exact);
#   - syscalls per fd, counted by `strace -f -c`.
#
# What is paid per pair besides setup: creating the socket pair (one
# `socketpair` each, in every peer; the Rust harness also closes both
# ends at exit: two `close`), the loop's teardown (each watcher freed or
# stopped), and for poll and select the few iterations' scans of the
# set. The pairs' own instructions (libc's `socketpair` and `close`, the
# harness's `bench_make_pairs` / `Pairs::new`) are shown apart and left
# out of the "setup" column, so that the peers are compared on the loop
# alone; the syscalls are listed whole. Timers off (-t would add a timer
# per watcher).
#
# Usage, from the project root:
#   benches/setup_per_fd.sh              # epoll and poll at P=2000/1000, select at P=400/200
#   DETAIL=1 benches/setup_per_fd.sh     # also evloop epoll's instructions per fd by function
# Knobs: P1, P2 (1000, 2000), SELECT_P1, SELECT_P2 (200, 400: select
# stops at FD_SETSIZE), ONLY (a regex on the peer label). Builds the
# peers as the harness does (benches/peers/common.sh: into
# ${CARGO_TARGET_DIR:-target}/peers; needs root the first time, for its
# Debian packages, valgrind and strace).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd -P)
P1=${P1:-1000} P2=${P2:-2000} SELECT_P1=${SELECT_P1:-200} SELECT_P2=${SELECT_P2:-400}
cd "$root"
# shellcheck source=benches/peers/common.sh
. benches/peers/common.sh
peers_prepare libev-dev libevent-dev libuv1-dev valgrind strace
cd "$PEERS_BUILD"

PEERS=(
  "libev epoll|build/bench_libev -b epoll"
  "evloop epoll|rust/target/release/bench_evloop -b epoll"
  "libev poll|build/bench_libev -b poll"
  "evloop poll|rust/target/release/bench_evloop -b poll"
  "libev select|build/bench_libev -b select"
  "evloop select|rust/target/release/bench_evloop -b select"
)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The per-fd difference of two callgrind profiles, by function (self
# cost): "total <n>", "pairs <n>" (the pairs' own functions), then with
# DETAIL the functions, most expensive first.
per_fd() {
    python3 - "$@" <<'EOF'
import re, subprocess, sys
lo, hi, n, detail = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4] == "1"
def load(f):
    out = subprocess.run(["callgrind_annotate", "--inclusive=no", "--threshold=100", "--auto=no", f],
                         capture_output=True, text=True, check=True).stdout
    d, total = {}, 0
    for line in out.splitlines():
        m = re.match(r"\s*([\d,]+)\s+(?:\([^)]*\)\s+)?(\S.*)$", line)
        if not m:
            continue
        v = int(m.group(1).replace(",", ""))
        if "PROGRAM TOTALS" in line:
            total = v
        elif ":" in m.group(2):
            name = m.group(2).split(" [")[0].split(":", 1)[1]
            d[name] = d.get(name, 0) + v
    return total, d
(ta, a), (tb, b) = load(lo), load(hi)
diff = {k: (b.get(k, 0) - a.get(k, 0)) / n for k in set(a) | set(b)}
pairs = sum(v for k, v in diff.items() if re.search(r"^(socketpair|close|bench_make_pairs|peers_bench::Pairs::new)$", k))
print(f"total {(tb - ta) / n:.1f}")
print(f"pairs {pairs:.1f}")
if detail:
    for k, v in sorted(diff.items(), key=lambda kv: -kv[1]):
        if abs(v) >= 1:
            print(f"  {v:8.1f}  {k}")
EOF
}

# The syscalls of one run, "name count" per line.
syscalls() {
    strace -f -c -o "$tmp/strace" "$@" >/dev/null 2>&1
    awk '/^ *[0-9.]+ +[0-9.]+ / && $NF != "total" { print $NF, $4 }' "$tmp/strace" | sort
}

echo "== load before: $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) cores; $(git -C "$root" describe --always --dirty)"
printf '%-14s %7s %7s %7s  %s\n' peer instr pairs setup "syscalls per fd (P=$P2 - P=$P1; select P=$SELECT_P2 - P=$SELECT_P1)"
for entry in "${PEERS[@]}"; do
    label=${entry%%|*} cmd=${entry#*|}
    [[ -n ${ONLY:-} && ! $label =~ $ONLY ]] && continue
    lo=$P1 hi=$P2
    [[ $label == *select ]] && lo=$SELECT_P1 hi=$SELECT_P2
    # shellcheck disable=SC2086
    for p in "$lo" "$hi"; do
        valgrind --tool=callgrind --callgrind-out-file="$tmp/cg.$p" $cmd -n "$p" -a 1 -w 1 -r 1 \
            >/dev/null 2>"$tmp/vg.$p" || { echo "$label: failed at P=$p" >&2; cat "$tmp/vg.$p" >&2; exit 1; }
        syscalls $cmd -n "$p" -a 1 -w 1 -r 1 >"$tmp/sc.$p"
    done
    out=$(per_fd "$tmp/cg.$lo" "$tmp/cg.$hi" $((hi - lo)) "${DETAIL:-0}")
    total=$(awk '$1 == "total" { print $2 }' <<<"$out")
    pairs=$(awk '$1 == "pairs" { print $2 }' <<<"$out")
    sc=$(join -a1 -a2 -e0 -o 0,1.2,2.2 "$tmp/sc.$lo" "$tmp/sc.$hi" |
        awk -v n=$((hi - lo)) '{ d = ($3 - $2) / n } d >= 0.01 || d <= -0.01 { printf "%s%s %.2f", sep, $1, d; sep = ", " }')
    printf '%-14s %7.0f %7.0f %7.0f  %s\n' "$label" "$total" "$pairs" "$(awk -v t="$total" -v p="$pairs" 'BEGIN { print t - p }')" "$sc"
    [[ ${DETAIL:-0} == 1 && $label == "evloop epoll" ]] && grep '^  ' <<<"$out" | head -40
done
echo "== load after: $(cut -d' ' -f1-3 /proc/loadavg)"
