/*
 * store.h -- rendezvous key-value stores.  Every store, built-in or the
 * caller's, is presented to the bootstrap as a public xc_store_t (set/get
 * callbacks), so there is one code path for all of them.
 *
 * TCP store: a small server (a thread in rank 0, or in xcoll-run) and a
 * client.  Wire protocol in docs/rendezvous.md: the client opens with a
 * magic hello; requests are SET, GET (the server parks a GET until the key
 * exists) and ADD (atomic counter).  A connection that does not open with the
 * magic is dropped: a stranger on the port cannot corrupt the store.
 *
 * File store: one file per key in a directory on a shared filesystem,
 * written to a temporary name and renamed (atomic); get polls.
 */
#ifndef XC_STORE_H
#define XC_STORE_H

#include "auth.h"
#include "common.h"

#include <sys/socket.h>

/* Open a TCP store client connected to host:port, retrying the connection
 * until `timeout_ms` passes (the server may start later than the client).
 * With `auth` holding a token, every connection (and reconnection) first
 * proves it (auth.h); a server that holds another token or none is
 * XC_ERR_PROTOCOL "authentication failed", at once, not retried.  NULL or
 * no token: unauthenticated.
 * On success *out is a usable xc_store_t and, if local != NULL, *local is
 * the local address of the connection (the interface that reaches the
 * store, used as the default address to advertise). */
XC__HIDDEN xc_result_t xc__tcp_store_open(const char *host, int port,
                                          int timeout_ms, const xc__auth_conf_t *auth,
                                          xc_store_t *out,
                                          struct sockaddr_storage *local);
/* Close a store opened by xc__tcp_store_open (NULL ctx is a no-op). */
XC__HIDDEN void xc__tcp_store_close(xc_store_t *store);
/* Atomically add `delta` to the integer stored at `key` (missing = 0) and
 * return the new value in *out.  TCP stores only. */
XC__HIDDEN xc_result_t xc__tcp_store_add(xc_store_t *store, const char *key,
                                         int64_t delta, int64_t *out);

/* A running TCP store server. */
typedef struct xc__store_server xc__store_server_t;
/* Start a server listening on host:port (port 0 = ephemeral; host NULL or
 * "" = all interfaces).  *port_out receives the bound port.  The server runs
 * on its own thread until xc__store_server_stop.  With `auth` holding a
 * token, only clients that prove it are served (NULL: unauthenticated). */
XC__HIDDEN xc_result_t xc__store_server_start(const char *host, int port,
                                              const xc__auth_conf_t *auth,
                                              xc__store_server_t **out,
                                              int *port_out);
/* Stop the thread, close every connection, free memory.  NULL is a no-op. */
XC__HIDDEN void xc__store_server_stop(xc__store_server_t *srv);
/* Let go of a server (its communicator is destroyed): it serves on while
 * clients are connected and frees itself when none is left.  The next
 * xc__store_server_start on its port takes it back if the listen host and
 * token are the same (else stops it and binds anew). */
XC__HIDDEN void xc__store_server_release(xc__store_server_t *srv);
/* Does a live server of this process (a communicator's, not released)
 * listen on `port`? */
XC__HIDDEN int xc__store_server_hosted(int port);

/* Open a file store rooted at directory `dir` (created if missing). */
XC__HIDDEN xc_result_t xc__file_store_open(const char *dir, xc_store_t *out);
XC__HIDDEN void xc__file_store_close(xc_store_t *store);

/* Split "host:port" (IPv6 as "[addr]:port") into parts.  XC_ERR_INVALID with
 * a message naming `what` if malformed. */
XC__HIDDEN xc_result_t xc__parse_hostport(const char *s, const char *what,
                                          char *host, size_t hostcap,
                                          int *port);

/* Is `host` a loopback spelling: 127.0.0.0/8, ::1 or "localhost"?  Such
 * a rendezvous address means a job on this machine; any other name may
 * resolve to a loopback alias on the store's machine (Debian maps the
 * hostname to 127.0.1.1) yet to a routable address on the others. */
XC__HIDDEN int xc__host_is_loopback(const char *host);
/* Is `host` a numeric IPv4 or IPv6 address (not a name)? */
XC__HIDDEN int xc__host_is_numeric(const char *host);

#endif /* XC_STORE_H */
