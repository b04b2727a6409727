/*
 * net.h -- socket helpers shared by the TCP transport and the bootstrap:
 * listening, connecting with a deadline, socket options, choosing the local
 * address to advertise, and printing addresses.
 */
#ifndef XC_NET_H
#define XC_NET_H

#include "../core/common.h"

#include <netinet/in.h>
#include <sys/socket.h>

#define XC__ADDRSTR_LEN 80

/* Printable "a.b.c.d:port" / "[v6]:port". */
XC__HIDDEN void xc__addr_str(const struct sockaddr_storage *sa, char *buf,
                             size_t cap);
XC__HIDDEN socklen_t xc__addr_len(const struct sockaddr_storage *sa);

/*
 * Pick the local address to advertise to peers.  `ifname` selects an
 * interface as NCCL_SOCKET_IFNAME does ("eth0" prefix match, "^lo" exclude,
 * "=eth0" exact; comma-separated list).  Without a selector: the address of
 * `hint` (the local end of the connection to the rendezvous store) if given,
 * else the first non-loopback IPv4 of an interface that is up, else the
 * first global IPv6, else loopback.  Link-local IPv6 is never chosen.
 */
XC__HIDDEN xc_result_t xc__pick_local_addr(const char *ifname,
                                           const struct sockaddr_storage *hint,
                                           struct sockaddr_storage *out);

/* Is `sa` a loopback address (127.0.0.0/8, ::1)? */
XC__HIDDEN int xc__addr_is_loopback(const struct sockaddr_storage *sa);

/* A non-blocking, close-on-exec listening socket on `addr` with an
 * ephemeral port; *bound receives the address with its port. */
XC__HIDDEN xc_result_t xc__listen(const struct sockaddr_storage *addr, int *fd,
                                  struct sockaddr_storage *bound);

/* Connect to `addr`, retrying refused connections until `deadline_ns`.
 * Returns a blocking, close-on-exec socket with xc__set_sockopts(buf_kb). */
XC__HIDDEN xc_result_t xc__connect(const struct sockaddr_storage *addr,
                                   uint64_t deadline_ns, int buf_kb, int *fd);

/* Accept one connection before `deadline_ns` (poll on the listener). */
XC__HIDDEN xc_result_t xc__accept(int lfd, uint64_t deadline_ns, int buf_kb, int *fd);

/* Wait until fd is ready for `events` or the deadline passes: XC_OK,
 * XC_ERR_TIMEOUT or XC_ERR_SYSTEM (errno set).  Sets no error detail. */
XC__HIDDEN xc_result_t xc__wait_fd(int fd, short events, uint64_t deadline_ns);

/* Write (`out`) or read exactly `len` bytes on a blocking-or-not socket
 * before the deadline (poll between partial transfers; MSG_NOSIGNAL):
 * XC_OK, XC_ERR_TIMEOUT, XC_ERR_PEER_LOST (the connection closed -- errno
 * 0 -- or broke: reset, unreachable...) or XC_ERR_SYSTEM (errno set).
 * Sets no error detail: callers that name the cause themselves. */
XC__HIDDEN xc_result_t xc__move_all(int fd, void *buf, size_t len, uint64_t deadline_ns,
                                    int out);
/* The same, with the error detail set ("send: deadline passed", ...). */
XC__HIDDEN xc_result_t xc__send_all(int fd, const void *buf, size_t len,
                                    uint64_t deadline_ns);
XC__HIDDEN xc_result_t xc__recv_all(int fd, void *buf, size_t len,
                                    uint64_t deadline_ns);

XC__HIDDEN void xc__set_nonblock(int fd);
/* TCP_NODELAY, and send/receive buffers of `buf_kb` KiB each (0: leave
 * them to the kernel's autotuning; XCOLL_SOCKET_BUF_KB, docs/tcp.md). */
XC__HIDDEN void xc__set_sockopts(int fd, int buf_kb);

#endif
