/*
 * Connection churn (../churn.sh): what the C churn servers share with each
 * other and with the Rust ones (../rust/src/churn.rs, whose constants and
 * output line these are).
 *
 * Per connection a server accepts (until EAGAIN), registers the socket for
 * reading, reads the request with one read when it is readable, writes the
 * reply with one write and closes.  It measures its own CPU time
 * (getrusage, user + system) and wall time from the close of the WARMUP-th
 * connection to that of the (WARMUP + COUNT)-th, prints one CSV line
 * (impl,conns,cpu_us,user_us,sys_us,wall_us) and exits.
 */
#ifndef PEERS_CHURN_COMMON_H
#define PEERS_CHURN_COMMON_H

#define CHURN_REQUEST "GET /churn HTTP/1.0 ...........\n"
#define CHURN_REPLY   "HTTP/1.0 200 OK churn .........\n"
#define CHURN_REPLY_LEN 32
#define CHURN_READ_BUF 512
#define CHURN_BACKLOG 1024

/* argv: PORT WARMUP COUNT.  Returns the listening socket: 127.0.0.1:PORT,
 * SO_REUSEADDR, non-blocking, close-on-exec (as evloop::net's
 * ListenOptions). */
int churn_setup(int argc, char **argv, const char *impl);

/* One connection closed (call after its close). */
void churn_closed(void);

#endif
