/* Connection churn: argument parsing, the listener, the meter (see
 * churn_common.h). */
#define _GNU_SOURCE
#include "churn_common.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>

static const char *name;
static unsigned long closed, warmup, end;
static long long cpu0_u, cpu0_s, wall0;

static long long tv_us(struct timeval t) { return t.tv_sec * 1000000LL + t.tv_usec; }

static long long now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000LL + ts.tv_nsec / 1000;
}

static void snapshot(long long *u, long long *s)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    *u = tv_us(ru.ru_utime);
    *s = tv_us(ru.ru_stime);
}

int churn_setup(int argc, char **argv, const char *impl)
{
    if (argc != 4) {
        fprintf(stderr, "usage: %s PORT WARMUP COUNT\n", argv[0]);
        exit(2);
    }
    name = impl;
    int port = atoi(argv[1]);
    warmup = strtoul(argv[2], NULL, 10);
    end = warmup + strtoul(argv[3], NULL, 10);
    if (warmup == 0) {
        snapshot(&cpu0_u, &cpu0_s);
        wall0 = now_us();
    }
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port) };
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
        bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(fd, CHURN_BACKLOG) < 0) {
        perror("listener");
        exit(1);
    }
    return fd;
}

void churn_closed(void)
{
    if (++closed == warmup) {
        snapshot(&cpu0_u, &cpu0_s);
        wall0 = now_us();
    } else if (closed == end) {
        long long u, s, wall = now_us() - wall0;
        snapshot(&u, &s);
        u -= cpu0_u;
        s -= cpu0_s;
        printf("%s,%lu,%lld,%lld,%lld,%lld\n", name, end - warmup, u + s, u, s, wall);
        fflush(stdout);
        exit(0);
    }
}
