/* Connection churn on libuv (../churn.sh): uv_listen on the listener, a
 * malloc'd uv_tcp_t per connection (uv_accept, uv_read_start with one
 * static buffer); on the request it writes the reply (uv_try_write: the
 * 32 bytes go out at once, no write request), then uv_close, whose
 * callback frees the handle.
 *
 *     churn_libuv PORT WARMUP COUNT
 */
#include "churn_common.h"

#include <stdio.h>
#include <stdlib.h>
#include <uv.h>

static char buf[CHURN_READ_BUF];

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *b)
{
    (void)h;
    (void)hint;
    *b = uv_buf_init(buf, sizeof buf);
}

static void on_close(uv_handle_t *h)
{
    free(h);
    churn_closed();
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b)
{
    (void)b;
    if (n == 0)
        return; /* EAGAIN */
    if (n > 0) {
        uv_buf_t reply = uv_buf_init(CHURN_REPLY, CHURN_REPLY_LEN);
        uv_try_write(s, &reply, 1);
    }
    uv_close((uv_handle_t *)s, on_close);
}

static void on_connection(uv_stream_t *server, int status)
{
    if (status < 0) {
        fprintf(stderr, "libuv: %s\n", uv_strerror(status));
        return;
    }
    uv_tcp_t *c = malloc(sizeof *c);
    uv_tcp_init(server->loop, c);
    if (uv_accept(server, (uv_stream_t *)c) < 0) {
        uv_close((uv_handle_t *)c, on_close);
        return;
    }
    uv_read_start((uv_stream_t *)c, on_alloc, on_read);
}

int main(int argc, char **argv)
{
    int lfd = churn_setup(argc, argv, "libuv");
    uv_loop_t *loop = uv_default_loop();
    uv_tcp_t server;
    uv_tcp_init(loop, &server);
    if (uv_tcp_open(&server, lfd) < 0 ||
        uv_listen((uv_stream_t *)&server, CHURN_BACKLOG, on_connection) < 0) {
        fprintf(stderr, "libuv: listen failed\n");
        return 1;
    }
    uv_run(loop, UV_RUN_DEFAULT);
    return 0;
}
