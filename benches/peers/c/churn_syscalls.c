/* What the syscalls evloop's churn servers make beyond libev's cost here
 * (docs/benchmarks.md, "Connection churn"): fstat on a socket,
 * epoll_ctl ADD + DEL, a socket registered and closed with and without
 * a DEL before its close, and a syscall that fails at once (the entry
 * and exit alone).
 * ns per call, the mean of N (default 10^6) on a socketpair.
 *
 *     churn_syscalls [N]
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static double now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 1000000;
    int sv[2];
    int ep = epoll_create1(0);
    if (n <= 0 || ep < 0 || socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0) {
        perror("setup");
        return 1;
    }
    struct stat st;
    struct epoll_event e = { .events = EPOLLIN };
    double t0 = now_ns();
    for (long i = 0; i < n; i++)
        fstat(sv[0], &st);
    double t1 = now_ns();
    for (long i = 0; i < n; i++) {
        epoll_ctl(ep, EPOLL_CTL_ADD, sv[0], &e);
        epoll_ctl(ep, EPOLL_CTL_DEL, sv[0], &e);
    }
    double t2 = now_ns();
    /* A new socket each time, registered, then closed: with DEL first (what
     * evloop, tokio and libuv do) and without (libev, mio: the close of
     * the last descriptor drops the registration). */
    for (long i = 0; i < n; i++) {
        int d = socket(AF_UNIX, SOCK_STREAM, 0);
        epoll_ctl(ep, EPOLL_CTL_ADD, d, &e);
        epoll_ctl(ep, EPOLL_CTL_DEL, d, &e);
        close(d);
    }
    double t2b = now_ns();
    for (long i = 0; i < n; i++) {
        int d = socket(AF_UNIX, SOCK_STREAM, 0);
        epoll_ctl(ep, EPOLL_CTL_ADD, d, &e);
        close(d);
    }
    double t3 = now_ns();
    for (long i = 0; i < n; i++)
        shutdown(-1, SHUT_WR);
    double t4 = now_ns();
    printf("fstat %.0f ns; epoll_ctl ADD+DEL %.0f ns; socket+ADD+DEL+close %.0f ns, "
           "socket+ADD+close %.0f ns (the DEL: %.0f ns); a failing syscall %.0f ns\n",
           (t1 - t0) / n, (t2 - t1) / n, (t2b - t2) / n, (t3 - t2b) / n,
           ((t2b - t2) - (t3 - t2b)) / n, (t4 - t3) / n);
    return 0;
}
