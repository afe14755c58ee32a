/* Connection churn on libev (../churn.sh): an ev_io on the listener that
 * accepts until EAGAIN (accept4, non-blocking and close-on-exec), a
 * malloc'd ev_io per connection; on readable it reads the request, writes
 * the reply, stops the watcher, closes and frees.
 *
 *     churn_libev PORT WARMUP COUNT
 */
#define _GNU_SOURCE
#include "churn_common.h"

#include <errno.h>
#include <ev.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

static void on_readable(struct ev_loop *loop, ev_io *w, int revents)
{
    (void)revents;
    char buf[CHURN_READ_BUF];
    ssize_t n = read(w->fd, buf, sizeof buf);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    if (n > 0 && write(w->fd, CHURN_REPLY, CHURN_REPLY_LEN) < 0) {
        /* the peer is gone: close anyway */
    }
    ev_io_stop(loop, w);
    close(w->fd);
    free(w);
    churn_closed();
}

static void on_accept(struct ev_loop *loop, ev_io *w, int revents)
{
    (void)revents;
    for (;;) {
        int fd = accept4(w->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EAGAIN)
                return;
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            perror("accept4");
            return;
        }
        ev_io *c = malloc(sizeof *c);
        ev_io_init(c, on_readable, fd, EV_READ);
        ev_io_start(loop, c);
    }
}

int main(int argc, char **argv)
{
    int lfd = churn_setup(argc, argv, "libev");
    struct ev_loop *loop = ev_loop_new(EVBACKEND_EPOLL);
    if (!loop) {
        fprintf(stderr, "libev: no epoll\n");
        return 1;
    }
    ev_io lw;
    ev_io_init(&lw, on_accept, lfd, EV_READ);
    ev_io_start(loop, &lw);
    ev_run(loop, 0);
    return 0;
}
