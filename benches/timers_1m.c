/*
 * Timers at a million, on libev: the libev side of benches/timers_1m.rs
 * (same phases, same pseudo-random sequence, same CSV). See
 * benches/timers_1m.sh, which builds and runs both, and docs/benchmarks.md.
 *
 * Build: cc -O2 -o timers_1m_libev benches/timers_1m.c -lev
 * Usage: timers_1m_libev [N [OPS [PHASES]]]
 *   N       armed timers (default 1000000)
 *   OPS     operations per phase (default N)
 *   PHASES  comma-separated phases to run after `arm` (default: all):
 *           restart,again,stop_start,mixed,expire,rearm,stop_all
 *           (rearm follows expire only, and stop_all runs only if every
 *           timer is armed by then; a phase left out is skipped, its
 *           random numbers are drawn all the same)
 *
 * Output (CSV, the same as timers_1m.rs's), one line per phase run, then:
 *   impl,phase,n,ops,value,unit
 *   libev,arm,1000000,1000000,42.3,ns/op
 *   ...
 *   libev,plan_checksum,1000000,1000000,<64-bit number>,fnv1a
 *   libev,mem_peak,1000000,1000000,64.1,B/timer  (peak RSS of the arm
 *                                                 phase minus RSS before)
 *   libev,watcher_size,1000000,1000000,48.00,B   (sizeof(ev_timer))
 *   libev,mem_rss,1000000,1000000,64.1,B/timer   (RSS after it, likewise)
 *
 * The plan: splitmix64 seeded with 12 (the issue), drawn up front in this
 * order: N arm timeouts; per restart op an index then a timeout; per again
 * op an index; per stop_start op an index then a timeout; per mixed op a
 * kind (0-3), an index and a timeout; a timeout per timer left parked; N
 * rearm timeouts; a Fisher-Yates shuffle for stop_all. An index is the
 * draw modulo N, a timeout 1000 s plus the draw modulo 1000 s, in ns.
 *
 * Every timeout is 1000 s plus a random part below 1000 s, so nothing
 * fires until the `expire` phase moves the clock on (see clock_gettime
 * below). The loop's cached time is refreshed (ev_now_update) every 1024
 * operations, as an application's loop would between iterations, so that
 * `again` moves timers a little later each time, as in real use.
 *
 * The operations, with libev's fastest correct way for each:
 *   arm:        ev_timer_init(w, cb, d, d); ev_timer_start
 *   restart:    w->repeat = d; ev_timer_again   (one adjustheap in place;
 *               stop + set + start costs a removal and an insertion)
 *   again:      ev_timer_again
 *   stop_start: ev_timer_stop; ev_timer_set(w, d, d); ev_timer_start
 *   mixed:      a random mix of restart, again, stop_start and "park"
 *               (stop a timer; once 1024 are parked, the oldest parked one
 *               is set and started again in the same operation)
 *   expire:     every timer made one-shot (w->repeat = 0, untimed), the
 *               clock moved 10^6 s on, one ev_run(EVRUN_NOWAIT): each
 *               timer expires and its (empty) callback is invoked; ns per
 *               timer
 *   rearm:      ev_timer_set(w, d, 0); ev_timer_start on every (stopped)
 *               timer, in index order
 *   stop_all:   ev_timer_stop on every timer, in a random order
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <ev.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- the shared workload (identical in timers_1m.rs) ---- */

static uint64_t rng_state = 12; /* issue 12 */

static uint64_t next_u64(void) {
    /* splitmix64 */
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

#define SECOND_NS 1000000000ULL
#define PARKED_MAX 1024
#define REFRESH_MASK 1023
#define NONE UINT32_MAX

static uint32_t n_timers;

/* A timeout: 1000 s plus up to 1000 s, drawn in nanoseconds, converted
 * to what the API takes (ev_tstamp; evloop's are Durations), so that the
 * timed loops convert nothing. */
static double timeout(void) {
    return (double)(1000 * SECOND_NS + next_u64() % (1000 * SECOND_NS)) / 1e9;
}
static uint32_t index_of(void) { return (uint32_t)(next_u64() % n_timers); }

struct ops {
    uint32_t *idx;
    double *d;
};

static struct ops alloc_ops(size_t ops) {
    struct ops o = {calloc(ops, sizeof(uint32_t)), calloc(ops, sizeof(double))};
    if (!o.idx || !o.d) abort();
    return o;
}

/* ---- the clock: shifted by `clock_offset` for the expire phase ---- */

static int (*real_clock_gettime)(clockid_t, struct timespec *);
static uint64_t clock_offset_ns;

static void init_clock(void) {
    real_clock_gettime = (int (*)(clockid_t, struct timespec *))dlsym(RTLD_NEXT, "clock_gettime");
    if (!real_clock_gettime) {
        fprintf(stderr, "dlsym(clock_gettime): %s\n", dlerror());
        exit(1);
    }
}

/* Interposes on libc's: libev reads its monotonic clock through it, so
 * that moving `clock_offset_ns` on makes every timer due. */
int clock_gettime(clockid_t clk, struct timespec *ts) {
    if (!real_clock_gettime) init_clock();
    int r = real_clock_gettime(clk, ts);
    if (r == 0 && clk == CLOCK_MONOTONIC && clock_offset_ns) {
        uint64_t ns = (uint64_t)ts->tv_nsec + clock_offset_ns % SECOND_NS;
        ts->tv_sec += (time_t)(clock_offset_ns / SECOND_NS + ns / SECOND_NS);
        ts->tv_nsec = (long)(ns % SECOND_NS);
    }
    return r;
}

/* The benchmark's own stopwatch: the real clock. */
static uint64_t mono_ns(void) {
    struct timespec ts;
    real_clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * SECOND_NS + (uint64_t)ts.tv_nsec;
}

/* VmRSS or VmHWM from /proc/self/status, in bytes. */
static long long status_kb(const char *key) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long long kb = -1;
    size_t len = strlen(key);
    if (!f) return -1;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, key, len) == 0 && line[len] == ':') {
            kb = atoll(line + len + 1);
            break;
        }
    fclose(f);
    return kb * 1024;
}

/* Resets VmHWM to the current RSS (Linux >= 4.0). */
static void reset_peak(void) {
    int fd = open("/proc/self/clear_refs", O_WRONLY);
    if (fd >= 0) {
        if (write(fd, "5", 1) != 1) perror("clear_refs");
        close(fd);
    }
}

static const char *phases = "all";

static int wanted(const char *phase) {
    if (strcmp(phases, "all") == 0) return 1;
    size_t len = strlen(phase);
    for (const char *p = phases; (p = strstr(p, phase)); p += len)
        if ((p == phases || p[-1] == ',') && (p[len] == 0 || p[len] == ','))
            return 1;
    return 0;
}

static void report(const char *phase, size_t ops, double value, const char *unit) {
    printf("libev,%s,%u,%zu,%.2f,%s\n", phase, n_timers, ops, value, unit);
}

/* ---- libev ---- */

static uint64_t fired;

static void on_timer(struct ev_loop *loop, ev_timer *w, int revents) {
    (void)loop;
    (void)w;
    (void)revents;
    fired++;
}

static ev_timer *w;

/* libev has no count of active watchers: count the active timers. */
static uint32_t active_timers(void) {
    uint32_t active = 0;
    for (uint32_t i = 0; i < n_timers; i++) active += ev_is_active(&w[i]) ? 1 : 0;
    return active;
}

static void check_active(uint32_t expected, const char *after) {
    uint32_t active = active_timers();
    if (active != expected) {
        fprintf(stderr, "after %s: %u active timers, expected %u\n", after, active, expected);
        exit(1);
    }
}

/* One function per phase, never inlined, so that a profile (callgrind's
 * --toggle-collect='phase_*') can count each phase's instructions alone. */

#define PHASE static __attribute__((noinline)) void

PHASE phase_arm(struct ev_loop *loop, const double *arm_d) {
    for (uint32_t i = 0; i < n_timers; i++) {
        if ((i & REFRESH_MASK) == 0) ev_now_update(loop);
        double d = arm_d[i];
        ev_timer_init(&w[i], on_timer, d, d);
        ev_timer_start(loop, &w[i]);
    }
}

PHASE phase_restart(struct ev_loop *loop, struct ops o, size_t ops) {
    for (size_t k = 0; k < ops; k++) {
        if ((k & REFRESH_MASK) == 0) ev_now_update(loop);
        ev_timer *t = &w[o.idx[k]];
        t->repeat = o.d[k];
        ev_timer_again(loop, t);
    }
}

PHASE phase_again(struct ev_loop *loop, const uint32_t *idx, size_t ops) {
    for (size_t k = 0; k < ops; k++) {
        if ((k & REFRESH_MASK) == 0) ev_now_update(loop);
        ev_timer_again(loop, &w[idx[k]]);
    }
}

PHASE phase_stop_start(struct ev_loop *loop, struct ops o, size_t ops) {
    for (size_t k = 0; k < ops; k++) {
        if ((k & REFRESH_MASK) == 0) ev_now_update(loop);
        ev_timer *t = &w[o.idx[k]];
        double d = o.d[k];
        ev_timer_stop(loop, t);
        ev_timer_set(t, d, d);
        ev_timer_start(loop, t);
    }
}

PHASE phase_mixed(struct ev_loop *loop, const uint8_t *kind, struct ops o, const uint32_t *other,
                  size_t ops) {
    for (size_t k = 0; k < ops; k++) {
        if ((k & REFRESH_MASK) == 0) ev_now_update(loop);
        ev_timer *t = &w[o.idx[k]];
        double d = o.d[k];
        switch (kind[k]) {
        case 0:
            t->repeat = d;
            ev_timer_again(loop, t);
            break;
        case 1:
            ev_timer_again(loop, t);
            break;
        case 2:
            ev_timer_stop(loop, t);
            ev_timer_set(t, d, d);
            ev_timer_start(loop, t);
            break;
        default:
            ev_timer_stop(loop, t);
            if (other[k] != NONE) {
                ev_timer *p = &w[other[k]];
                ev_timer_set(p, d, d);
                ev_timer_start(loop, p);
            }
        }
    }
}

PHASE phase_expire(struct ev_loop *loop) { ev_run(loop, EVRUN_NOWAIT); }

PHASE phase_rearm(struct ev_loop *loop, const double *rearm_d) {
    for (uint32_t i = 0; i < n_timers; i++) {
        if ((i & REFRESH_MASK) == 0) ev_now_update(loop);
        ev_timer_set(&w[i], rearm_d[i], 0.);
        ev_timer_start(loop, &w[i]);
    }
}

PHASE phase_stop_all(struct ev_loop *loop, const uint32_t *perm) {
    for (uint32_t i = 0; i < n_timers; i++) ev_timer_stop(loop, &w[perm[i]]);
}

int main(int argc, char **argv) {
    init_clock();
    n_timers = argc > 1 ? (uint32_t)strtoul(argv[1], NULL, 10) : 1000000;
    size_t ops = argc > 2 ? strtoul(argv[2], NULL, 10) : n_timers;
    if (argc > 3) phases = argv[3];
    if (n_timers < 2) {
        fprintf(stderr, "N must be at least 2\n");
        return 2;
    }
    uint32_t n = n_timers;

    /* Every random number, drawn up front in a fixed order. */
    double *arm_d = calloc(n, sizeof(double));
    for (uint32_t i = 0; i < n; i++) arm_d[i] = timeout();
    struct ops restart = alloc_ops(ops), again = alloc_ops(ops), stop_start = alloc_ops(ops);
    for (size_t k = 0; k < ops; k++) {
        restart.idx[k] = index_of();
        restart.d[k] = timeout();
    }
    for (size_t k = 0; k < ops; k++) again.idx[k] = index_of();
    for (size_t k = 0; k < ops; k++) {
        stop_start.idx[k] = index_of();
        stop_start.d[k] = timeout();
    }
    struct ops mixed = alloc_ops(ops);
    uint32_t *mixed_other = calloc(ops, sizeof(uint32_t));
    uint8_t *mixed_kind = calloc(ops, 1);
    uint8_t *parked = calloc(n, 1);
    uint32_t fifo[PARKED_MAX + 1];
    size_t head = 0, count = 0;
    for (size_t k = 0; k < ops; k++) {
        uint8_t kind = (uint8_t)(next_u64() % 4);
        uint32_t i = index_of();
        double d = timeout();
        while (parked[i]) i = i + 1 == n ? 0 : i + 1;
        uint32_t other = NONE;
        if (kind == 3) {
            parked[i] = 1;
            fifo[(head + count) % (PARKED_MAX + 1)] = i;
            count++;
            if (count > PARKED_MAX) {
                other = fifo[head];
                head = (head + 1) % (PARKED_MAX + 1);
                count--;
                parked[other] = 0;
            }
        }
        mixed_kind[k] = kind;
        mixed.idx[k] = i;
        mixed.d[k] = d;
        mixed_other[k] = other;
    }
    /* The timers still parked after the mix are started again (untimed). */
    size_t unpark_n = count;
    uint32_t *unpark_idx = calloc(PARKED_MAX + 1, sizeof(uint32_t));
    double *unpark_d = calloc(PARKED_MAX + 1, sizeof(double));
    for (size_t k = 0; k < unpark_n; k++) {
        unpark_idx[k] = fifo[(head + k) % (PARKED_MAX + 1)];
        unpark_d[k] = timeout();
    }
    double *rearm_d = calloc(n, sizeof(double));
    for (uint32_t i = 0; i < n; i++) rearm_d[i] = timeout();
    uint32_t *perm = calloc(n, sizeof(uint32_t));
    for (uint32_t i = 0; i < n; i++) perm[i] = i;
    for (uint32_t i = n - 1; i > 0; i--) {
        uint32_t j = (uint32_t)(next_u64() % ((uint64_t)i + 1));
        uint32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    /* A checksum of the plan (every index drawn, then the generator's
     * final state), which the script compares with evloop's: the same
     * sequence on both sides. */
    uint64_t sum = 0xcbf29ce484222325ULL;
#define MIX(v) (sum = (sum ^ (uint64_t)(v)) * 0x100000001b3ULL)
    for (size_t k = 0; k < ops; k++) MIX(restart.idx[k]);
    for (size_t k = 0; k < ops; k++) MIX(again.idx[k]);
    for (size_t k = 0; k < ops; k++) MIX(stop_start.idx[k]);
    for (size_t k = 0; k < ops; k++) {
        MIX(mixed_kind[k]);
        MIX(mixed.idx[k]);
        MIX(mixed_other[k]);
    }
    for (size_t k = 0; k < unpark_n; k++) MIX(unpark_idx[k]);
    for (uint32_t i = 0; i < n; i++) MIX(perm[i]);
    MIX(rng_state);
#undef MIX

    struct ev_loop *loop = ev_loop_new(EVFLAG_NOENV | EVBACKEND_EPOLL);
    if (!loop) {
        fprintf(stderr, "ev_loop_new failed\n");
        return 1;
    }
    /* The user's storage for the watchers (an ev_timer each): allocated
     * here, touched (resident) only as the timers are armed, so it counts
     * in the memory per timer, as evloop's handles do. */
    w = malloc((size_t)n * sizeof(ev_timer));
    printf("impl,phase,n,ops,value,unit\n");

    /* (a) arm */
    reset_peak();
    long long rss0 = status_kb("VmRSS");
    uint64_t t0 = mono_ns();
    phase_arm(loop, arm_d);
    uint64_t t1 = mono_ns();
    long long hwm = status_kb("VmHWM"), rss1 = status_kb("VmRSS");
    report("arm", n, (double)(t1 - t0) / n, "ns/op");
    check_active(n, "arm");

    /* (b) restart with a new timeout */
    if (wanted("restart")) {
        t0 = mono_ns();
        phase_restart(loop, restart, ops);
        t1 = mono_ns();
        report("restart", ops, (double)(t1 - t0) / ops, "ns/op");
        check_active(n, "restart");
    }

    /* (c) again with the same period */
    if (wanted("again")) {
        t0 = mono_ns();
        phase_again(loop, again.idx, ops);
        t1 = mono_ns();
        report("again", ops, (double)(t1 - t0) / ops, "ns/op");
        check_active(n, "again");
    }

    /* (d) stop, then start with a new timeout */
    if (wanted("stop_start")) {
        t0 = mono_ns();
        phase_stop_start(loop, stop_start, ops);
        t1 = mono_ns();
        report("stop_start", ops, (double)(t1 - t0) / ops, "ns/op");
        check_active(n, "stop_start");
    }

    /* (e) mixed */
    if (wanted("mixed")) {
        t0 = mono_ns();
        phase_mixed(loop, mixed_kind, mixed, mixed_other, ops);
        t1 = mono_ns();
        report("mixed", ops, (double)(t1 - t0) / ops, "ns/op");
        for (size_t k = 0; k < unpark_n; k++) {
            ev_timer *o = &w[unpark_idx[k]];
            double d = unpark_d[k];
            ev_timer_set(o, d, d);
            ev_timer_start(loop, o);
        }
        check_active(n, "mixed");
    }

    /* (f) expire: every timer fires once */
    if (wanted("expire")) {
        for (uint32_t i = 0; i < n; i++) w[i].repeat = 0.;
        clock_offset_ns += 1000000 * SECOND_NS;
        fired = 0;
        t0 = mono_ns();
        phase_expire(loop);
        t1 = mono_ns();
        report("expire", n, (double)(t1 - t0) / n, "ns/op");
        if (fired != n) {
            fprintf(stderr, "expire: %llu of %u timers fired\n", (unsigned long long)fired, n);
            return 1;
        }
        check_active(0, "expire");

        /* (g) rearm: set and start every (stopped) timer */
        if (wanted("rearm")) {
            ev_now_update(loop);
            t0 = mono_ns();
            phase_rearm(loop, rearm_d);
            t1 = mono_ns();
            report("rearm", n, (double)(t1 - t0) / n, "ns/op");
            check_active(n, "rearm");
        }
    }

    /* (h) stop every armed timer, in a random order */
    if (wanted("stop_all") && active_timers() == n) {
        t0 = mono_ns();
        phase_stop_all(loop, perm);
        t1 = mono_ns();
        report("stop_all", n, (double)(t1 - t0) / n, "ns/op");
        check_active(0, "stop_all");
    }

    /* Memory of the arm phase: the peak and the resident set after it,
     * minus the resident set before (the user's ev_timer array included). */
    printf("libev,plan_checksum,%u,%zu,%llu,fnv1a\n", n, ops, (unsigned long long)sum);
    report("mem_peak", n, (double)(hwm - rss0) / n, "B/timer");
    report("watcher_size", n, (double)sizeof(ev_timer), "B");
    report("mem_rss", n, (double)(rss1 - rss0) / n, "B/timer");
    ev_loop_destroy(loop);
    return 0;
}
