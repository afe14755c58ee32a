#!/bin/bash
# Connection churn (docs/benchmarks.md, "Connection churn"): per
# connection, accept -> register -> read a request -> reply -> close, on
# libev and libuv (C), mio, tokio (current thread), evloop's raw io
# watchers (evloop-io) and evloop::net (evloop-net), every one a single
# thread on epoll, TCP over loopback. One load client (churn_client,
# CONC connections in flight, each checking its reply) drives each server
# in turn, in ROUNDS rounds, the peer order rotated every round
# (interleaved). What is measured is the server's own CPU time (getrusage,
# user + system: the kernel's TCP work included) over COUNT connections
# after WARMUP, in µs per connection; also its wall time.
#
#   benches/peers/churn.sh                   # 7 rounds of 20000 connections
#   QUICK=1 benches/peers/churn.sh           # 1 round of 2000 (a smoke test)
#   ROUNDS=9 COUNT=50000 ONLY='libev|evloop' benches/peers/churn.sh
#
# Knobs: ROUNDS (7), COUNT (20000), WARMUP (2000), CONC (8), PORT (7411),
# ONLY (a regex on the peer names), QUICK, PEERS_RESULTS (the CSV's
# directory, default target/peers-results in the repository),
# CARGO_TARGET_DIR (the Rust peers' target dir, default
# benches/peers/rust/target; the C peers go to its churn-c/). With two or
# more CPUs the server runs on CPU 0 and the client on CPU 1 (taskset).
# Needs cc, make, Debian's libev-dev and libuv1-dev (installed when
# missing, as root), and cargo.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
rounds=${ROUNDS:-7}
count=${COUNT:-20000}
warmup=${WARMUP:-2000}
conc=${CONC:-8}
port=${PORT:-7411}
only=${ONLY:-.}
if [ -n "${QUICK:-}" ]; then
    rounds=1 count=${COUNT:-2000} warmup=${WARMUP:-200}
fi
results=${PEERS_RESULTS:-$root/target/peers-results}
target=${CARGO_TARGET_DIR:-$here/rust/target}
cbin=$target/churn-c

missing=()
for pkg in libev-dev libuv1-dev; do
    dpkg -s "$pkg" > /dev/null 2>&1 || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" != 0 ]; then
        echo "churn.sh: missing ${missing[*]}: run  sudo apt-get install -y ${missing[*]}" >&2
        exit 1
    fi
    echo "installing ${missing[*]}"
    apt-get update -qq && apt-get install -y -qq "${missing[@]}"
fi
make -s -C "$here/c" churn BINDIR="$cbin"
(cd "$here/rust" && CARGO_TARGET_DIR=$target cargo build --release --quiet \
    --bin churn_client --bin churn_mio --bin churn_tokio --bin churn_evloop_io --bin churn_evloop_net)
rbin=$target/release

peers=()
for p in libev libuv mio tokio evloop-io evloop-net; do
    [[ $p =~ $only ]] && peers+=("$p")
done
binary() {
    case $1 in
        libev | libuv) echo "$cbin/churn_$1" ;;
        *) echo "$rbin/churn_${1//-/_}" ;;
    esac
}
server_cpu=() client_cpu=()
if [ "$(nproc)" -ge 2 ] && command -v taskset > /dev/null; then
    server_cpu=(taskset -c 0) client_cpu=(taskset -c 1)
fi

mkdir -p "$results"
csv=$results/churn-$(date -u +%Y%m%dT%H%M%SZ).csv
echo "round,impl,conns,cpu_us,user_us,sys_us,wall_us" > "$csv"
echo "evloop $(git -C "$root" describe --always --dirty 2>/dev/null || echo '?'), $(nproc) CPUs, $(uname -r)"
echo "$rounds rounds x ${#peers[@]} peers, $count connections after $warmup, $conc in flight"
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
echo "load average before: $load_before"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
n=${#peers[@]}
for ((r = 0; r < rounds; r++)); do
    for ((i = 0; i < n; i++)); do
        p=${peers[$(((i + r) % n))]}
        "${server_cpu[@]}" timeout 120 "$(binary "$p")" "$port" "$warmup" "$count" > "$out" &
        server=$!
        if ! "${client_cpu[@]}" timeout 120 "$rbin/churn_client" "$port" $((warmup + count)) "$conc" > /dev/null; then
            kill "$server" 2> /dev/null || true
            echo "churn.sh: $p: the client failed" >&2
            exit 1
        fi
        wait "$server"
        echo "$r,$(cat "$out")" >> "$csv"
    done
    printf '.'
done
echo
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
python3 - "$csv" "$load_before" "$load_after" << 'EOF'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
per = {}
for r in rows:
    n = int(r["conns"])
    per.setdefault(r["impl"], []).append((int(r["cpu_us"]) / n, int(r["wall_us"]) / n))
med = {k: statistics.median(c for c, _ in v) for k, v in per.items()}
best = min(med.values())
print("CPU µs per connection (server, user + system), min / median / max over the rounds;")
print("wall µs per connection, median; ratio: median / the best median")
print(f"{'peer':<12} {'min':>7} {'median':>7} {'max':>7} {'wall':>7} {'ratio':>6}")
for k in sorted(med, key=med.get):
    cpu = [c for c, _ in per[k]]
    wall = statistics.median(w for _, w in per[k])
    print(f"{k:<12} {min(cpu):7.2f} {med[k]:7.2f} {max(cpu):7.2f} {wall:7.2f} {med[k] / best:6.3f}")
spreads = [max(c for c, _ in v) / min(c for c, _ in v) - 1 for v in per.values()]
print(f"load average before {sys.argv[2]}, after {sys.argv[3]}")
if len(rows) // max(len(per), 1) < 3:
    print("note: fewer than 3 rounds: a smoke test, not a ranking")
elif max(spreads) > 0.1:
    print(f"note: a peer's max is {max(spreads):.0%} above its min: differences of medians "
          "smaller than the spread are not a ranking")
EOF
echo "CSV: $csv"
