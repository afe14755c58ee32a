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
#   benches/peers/churn.sh                   # 15 rounds of 10000 connections
#   QUICK=1 benches/peers/churn.sh           # 1 round of 2000 (a smoke test)
#   ROUNDS=9 COUNT=50000 ONLY='libev|evloop' benches/peers/churn.sh
#   INSTR=1 benches/peers/churn.sh           # exact: instructions, syscalls
#
# INSTR=1 measures instead, per connection and per peer, the server's
# user-space instructions (callgrind) and its syscalls (strace -c -f),
# each as the difference of a run of 2500 connections and one of 500, so
# that the setup cancels (needs valgrind and strace). Instructions are
# exact; so are the syscalls but epoll_wait, whose count depends on how
# many events each wait finds.
#
# Knobs: ROUNDS (15), COUNT (10000), WARMUP (1000), CONC (8), PORT (7411),
# ONLY (a regex on the peer names), EXTRA_PEERS (more servers, taking
# the same arguments and printing the same line: "name|binary", several
# separated by ';': an evloop built from another commit, say), QUICK,
# PEERS_RESULTS (the CSV's directory, default target/peers-results),
# CARGO_TARGET_DIR (the build goes to its peers/, as for run.sh). With two
# or more CPUs the server runs on CPU 0 and the client on CPU 1
# (taskset). Needs what run.sh needs (benches/peers/common.sh builds
# every peer; the Debian packages are installed when missing, as root).
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
# shellcheck source=benches/peers/common.sh
. benches/peers/common.sh
rounds=${ROUNDS:-15}
count=${COUNT:-10000}
warmup=${WARMUP:-1000}
conc=${CONC:-8}
port=${PORT:-7411}
only=${ONLY:-.}
if [ -n "${QUICK:-}" ]; then
    rounds=1 count=${COUNT:-2000} warmup=${WARMUP:-200}
fi
# The harness's build (every peer of benches/peers, these included).
peers_paths
peers_install_packages libev-dev libevent-dev libuv1-dev ${INSTR:+valgrind strace}
peers_build
results=$PEERS_RESULTS
cbin=$PEERS_BUILD/build
rbin=$PEERS_BUILD/rust/target/release

peers=()
for p in libev libuv mio tokio evloop-io evloop-net; do
    [[ $p =~ $only ]] && peers+=("$p")
done
declare -A extra=()
IFS=';' read -ra extras <<< "${EXTRA_PEERS:-}"
for e in "${extras[@]}"; do
    [ -n "$e" ] && extra[${e%%|*}]=${e#*|} && peers+=("${e%%|*}")
done
binary() {
    case $1 in
        libev | libuv) echo "$cbin/churn_$1" ;;
        *) [ -n "${extra[$1]:-}" ] && echo "${extra[$1]}" || echo "$rbin/churn_${1//-/_}" ;;
    esac
}
server_cpu=() client_cpu=()
if [ "$(nproc)" -ge 2 ] && command -v taskset > /dev/null; then
    server_cpu=(taskset -c 0) client_cpu=(taskset -c 1)
fi

mkdir -p "$results"
if [ -n "${INSTR:-}" ]; then
    csv=$results/churn-instr-$(date -u +%Y%m%dT%H%M%SZ).csv
    echo "impl,instructions,syscalls,per_syscall" > "$csv"
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    under() { # TOOL... -- SERVER COUNT: the server under a tool, and the client
        local tool=()
        while [ "$1" != -- ]; do tool+=("$1") && shift; done
        "${tool[@]}" "$2" "$port" 0 "$3" > /dev/null 2> "$tmp/err" &
        local server=$!
        "$rbin/churn_client" "$port" "$3" "$conc" > /dev/null
        wait "$server"
    }
    w=12
    for p in "${peers[@]}"; do [ ${#p} -ge $w ] && w=$((${#p} + 1)); done
    printf '%-*s %10s %8s  %s\n' $w peer instr/conn sys/conn "syscalls per connection"
    for p in "${peers[@]}"; do
        b=$(binary "$p")
        for n in 500 2500; do
            under valgrind --tool=callgrind --callgrind-out-file="$tmp/cg.$n" -- "$b" "$n"
            under strace -c -f -o "$tmp/st.$n" -- "$b" "$n"
        done
        ir() { awk '/^(summary|totals):/ { print $2; exit }' "$tmp/cg.$1"; }
        instr=$((($(ir 2500) - $(ir 500)) / 2000))
        calls=$(python3 - "$tmp/st.500" "$tmp/st.2500" << 'PY'
import sys
def calls(path):
    out = {}
    for line in open(path):
        f = line.split()
        if len(f) >= 5 and f[0][0].isdigit() and f[-1] != "total":
            out[f[-1]] = int(f[3])
    return out
a, b = calls(sys.argv[1]), calls(sys.argv[2])
per = {k: (b.get(k, 0) - a.get(k, 0)) / 2000 for k in set(a) | set(b)}
per = {k: v for k, v in per.items() if v >= 0.05}
print(f"{sum(per.values()):.2f}", " ".join(f"{k}={v:.2f}" for k, v in sorted(per.items(), key=lambda kv: -kv[1])))
PY
)
        printf '%-*s %10s %8s  %s\n' $w "$p" "$instr" "${calls%% *}" "${calls#* }"
        echo "$p,$instr,${calls%% *},${calls#* }" >> "$csv"
    done
    echo "CSV: $csv"
    exit 0
fi
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
        echo "$r,$p,$(cut -d, -f2- "$out")" >> "$csv" # the name churn.sh knows it by
    done
    printf '.'
done
echo
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
python3 - "$csv" "$load_before" "$load_after" << 'EOF'
import csv, math, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
per, rounds = {}, {}
for r in rows:
    v = int(r["cpu_us"]) / int(r["conns"])
    per.setdefault(r["impl"], []).append((v, int(r["wall_us"]) / int(r["conns"])))
    rounds.setdefault(r["round"], {})[r["impl"]] = v
med = {k: statistics.median(c for c, _ in v) for k, v in per.items()}
best = min(med.values())
# Paired: each value over its round's geometric mean (a round's peers run
# within seconds of each other, so the machine's drift between rounds
# cancels), the median of that over the rounds, over the best such median.
norm = {}
for rd in rounds.values():
    g = math.exp(statistics.fmean(math.log(v) for v in rd.values()))
    for k, v in rd.items():
        norm.setdefault(k, []).append(v / g)
pmed = {k: statistics.median(v) for k, v in norm.items()}
pbest = min(pmed.values())
print("CPU µs per connection (server, user + system): min / median / max over the rounds;")
print("wall µs per connection (median); ratio: median / the best median; paired: the")
print("median over the rounds of each value / its round's mean, over the best one")
w = max(len(k) for k in per) + 1
print(f"{'peer':<{w}} {'min':>7} {'median':>7} {'max':>7} {'wall':>7} {'ratio':>6} {'paired':>6}")
for k in sorted(pmed, key=pmed.get):
    cpu = [c for c, _ in per[k]]
    wall = statistics.median(w for _, w in per[k])
    print(f"{k:<{w}} {min(cpu):7.2f} {med[k]:7.2f} {max(cpu):7.2f} {wall:7.2f} "
          f"{med[k] / best:6.3f} {pmed[k] / pbest:6.3f}")
spread = max(max(c for c, _ in v) / min(c for c, _ in v) - 1 for v in per.values())
pspread = max(max(v) / min(v) - 1 for v in norm.values())
print(f"load average before {sys.argv[2]}, after {sys.argv[3]}")
if len(rounds) < 3:
    print("note: fewer than 3 rounds: a smoke test, not a ranking")
else:
    print(f"spread: a peer's max is up to {spread:.0%} above its min ({pspread:.0%} paired); "
          "differences of medians smaller than that are not a ranking")
EOF
echo "CSV: $csv"
