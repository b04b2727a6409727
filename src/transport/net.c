/*
 * net.c -- socket helpers.  Every descriptor is close-on-exec (a rank that
 * forks data-loader workers must not leak its connections into them) and
 * every send uses MSG_NOSIGNAL (a dead peer must never SIGPIPE a survivor).
 */
#include "net.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

void xc__addr_str(const struct sockaddr_storage *sa, char *buf, size_t cap)
{
    char host[INET6_ADDRSTRLEN] = "?";
    int port = 0;
    if (sa->ss_family == AF_INET) {
        const struct sockaddr_in *s4 = (const struct sockaddr_in *)sa;
        inet_ntop(AF_INET, &s4->sin_addr, host, sizeof host);
        port = ntohs(s4->sin_port);
        snprintf(buf, cap, "%s:%d", host, port);
    } else if (sa->ss_family == AF_INET6) {
        const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)sa;
        inet_ntop(AF_INET6, &s6->sin6_addr, host, sizeof host);
        port = ntohs(s6->sin6_port);
        snprintf(buf, cap, "[%s]:%d", host, port);
    } else {
        snprintf(buf, cap, "<family %d>", (int)sa->ss_family);
    }
}

socklen_t xc__addr_len(const struct sockaddr_storage *sa)
{
    return sa->ss_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                     : sizeof(struct sockaddr_in);
}

void xc__set_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

void xc__set_sockopts(int fd, int buf_kb)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (buf_kb <= 0) return; /* the kernel sizes the buffers (autotuning) */
    /* Fixed buffers (this turns the kernel's autotuning off for the
     * socket); the kernel caps them at net.core.[rw]mem_max. */
    int sz = buf_kb > (1 << 20) ? 1 << 30 : buf_kb * 1024;
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof sz);
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof sz);
}

/* Does interface `name` pass the selector (see net.h)? */
static int if_selected(const char *sel, const char *name)
{
    if (!sel || !*sel) return 1;
    int exclude = 0, exact = 0;
    if (*sel == '^') exclude = 1, sel++;
    if (*sel == '=') exact = 1, sel++;
    int match = 0;
    const char *p = sel;
    while (*p) {
        const char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        if (n > 0 && (exact ? (strlen(name) == n && !strncmp(name, p, n))
                            : !strncmp(name, p, n)))
            match = 1;
        p += n;
        if (*p == ',') p++;
    }
    return exclude ? !match : match;
}

static int is_loopback(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
    if (sa->sa_family == AF_INET6)
        return IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)sa)->sin6_addr);
    return 0;
}

int xc__addr_is_loopback(const struct sockaddr_storage *sa)
{
    return is_loopback((const struct sockaddr *)sa);
}

static int is_linklocal6(const struct sockaddr *sa)
{
    return sa->sa_family == AF_INET6 &&
           IN6_IS_ADDR_LINKLOCAL(&((const struct sockaddr_in6 *)sa)->sin6_addr);
}

xc_result_t xc__pick_local_addr(const char *ifname,
                                const struct sockaddr_storage *hint,
                                struct sockaddr_storage *out)
{
    memset(out, 0, sizeof *out);
    if ((!ifname || !*ifname) && hint && hint->ss_family != 0) {
        *out = *hint;
        ((struct sockaddr_in *)out)->sin_port = 0; /* same offset for v6 */
        return XC_OK;
    }
    struct ifaddrs *ifs = NULL;
    if (getifaddrs(&ifs) != 0) return xc__err_errno("getifaddrs");
    /* Preference order: selected non-loopback v4, global v6, loopback. */
    const struct sockaddr *best = NULL;
    int best_score = 0;
    for (struct ifaddrs *i = ifs; i; i = i->ifa_next) {
        if (!i->ifa_addr || !(i->ifa_flags & IFF_UP)) continue;
        int fam = i->ifa_addr->sa_family;
        if (fam != AF_INET && fam != AF_INET6) continue;
        if (is_linklocal6(i->ifa_addr)) continue;
        if (!if_selected(ifname, i->ifa_name)) continue;
        int score = is_loopback(i->ifa_addr) ? 1 : (fam == AF_INET ? 3 : 2);
        if (score > best_score) best = i->ifa_addr, best_score = score;
    }
    if (best)
        memcpy(out, best, best->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                                      : sizeof(struct sockaddr_in));
    freeifaddrs(ifs);
    if (!best)
        return xc__err(XC_ERR_INVALID,
                       "no usable network interface matches XCOLL_SOCKET_IFNAME=\"%s\"",
                       ifname ? ifname : "");
    return XC_OK;
}

xc_result_t xc__listen(const struct sockaddr_storage *addr, int *fdp,
                       struct sockaddr_storage *bound)
{
    int fd = socket(addr->ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return xc__err_errno("socket");
    struct sockaddr_storage a = *addr;
    ((struct sockaddr_in *)&a)->sin_port = 0;
    if (bind(fd, (struct sockaddr *)&a, xc__addr_len(&a)) != 0 ||
        listen(fd, SOMAXCONN) != 0) {
        char s[XC__ADDRSTR_LEN];
        xc__addr_str(&a, s, sizeof s);
        int e = errno;
        close(fd);
        return xc__err(XC_ERR_SYSTEM, "bind/listen on %s: %s", s, strerror(e));
    }
    socklen_t len = sizeof *bound;
    getsockname(fd, (struct sockaddr *)bound, &len);
    *fdp = fd;
    return XC_OK;
}

xc_result_t xc__wait_fd(int fd, short events, uint64_t deadline_ns)
{
    for (;;) {
        struct pollfd p = {fd, events, 0};
        int n = poll(&p, 1, xc__poll_ms_left(deadline_ns));
        if (n > 0) return XC_OK; /* ready, or an error the next call reports */
        if (n == 0) return XC_ERR_TIMEOUT;
        if (errno != EINTR) return XC_ERR_SYSTEM;
    }
}

/* Old local spelling: 1 ready, 0 timeout, -1 poll failed (errno set). */
static int wait_fd(int fd, short events, uint64_t deadline_ns)
{
    xc_result_t rc = xc__wait_fd(fd, events, deadline_ns);
    return rc == XC_OK ? 1 : rc == XC_ERR_TIMEOUT ? 0 : -1;
}

xc_result_t xc__connect(const struct sockaddr_storage *addr, uint64_t deadline_ns,
                        int buf_kb, int *fdp)
{
    char s[XC__ADDRSTR_LEN];
    xc__addr_str(addr, s, sizeof s);
    int delay_ms = 5;
    int last_errno = 0;
    for (;;) {
        int fd = socket(addr->ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0) return xc__err_errno("socket");
        int rc = connect(fd, (const struct sockaddr *)addr, xc__addr_len(addr));
        if (rc != 0 && errno == EINPROGRESS) {
            int w = wait_fd(fd, POLLOUT, deadline_ns);
            if (w > 0) {
                int err = 0;
                socklen_t el = sizeof err;
                getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el);
                if (err == 0) rc = 0;
                else errno = err;
            } else if (w == 0) {
                errno = ETIMEDOUT;
            }
        }
        if (rc == 0) {
            int fl = fcntl(fd, F_GETFL);
            fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
            /* After connect(), as before the option existed: set earlier,
             * SO_RCVBUF would also clamp the window scale of the SYN, a
             * change of behaviour at the default (docs/tcp.md). */
            xc__set_sockopts(fd, buf_kb);
            *fdp = fd;
            return XC_OK;
        }
        last_errno = errno;
        close(fd);
        if (xc__now_ns() >= deadline_ns) break;
        if (last_errno != ECONNREFUSED && last_errno != ETIMEDOUT &&
            last_errno != EHOSTUNREACH && last_errno != ENETUNREACH &&
            last_errno != ECONNRESET && last_errno != EAGAIN)
            return xc__err(XC_ERR_SYSTEM, "connect to %s: %s", s, strerror(last_errno));
        int left = xc__poll_ms_left(deadline_ns);
        int d = left >= 0 && left < delay_ms ? left : delay_ms;
        poll(NULL, 0, d);
        if (delay_ms < 200) delay_ms *= 2;
    }
    return xc__err(XC_ERR_TIMEOUT, "connect to %s: %s (gave up at the deadline)", s,
                   strerror(last_errno));
}

xc_result_t xc__accept(int lfd, uint64_t deadline_ns, int buf_kb, int *fdp)
{
    for (;;) {
        int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd >= 0) {
            xc__set_sockopts(fd, buf_kb);
            *fdp = fd;
            return XC_OK;
        }
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) return xc__err_errno("accept");
        int w = wait_fd(lfd, POLLIN, deadline_ns);
        if (w == 0) return xc__err(XC_ERR_TIMEOUT, "accept: no connection before the deadline");
        if (w < 0) return xc__err_errno("poll");
    }
}

/* Did the connection break (the peer gone, reset, unreachable)? */
static int conn_lost(int e)
{
    return e == EPIPE || e == ECONNRESET || e == ECONNABORTED || e == ENOTCONN ||
           e == ETIMEDOUT || e == EHOSTUNREACH || e == ENETUNREACH || e == EHOSTDOWN ||
           e == ENETDOWN || e == ECONNREFUSED;
}

xc_result_t xc__move_all(int fd, void *buf, size_t len, uint64_t deadline_ns, int out)
{
    char *p = buf;
    while (len > 0) {
        ssize_t n = out ? send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT)
                        : recv(fd, p, len, MSG_DONTWAIT);
        if (n > 0) {
            p += n;
            len -= (size_t)n;
            continue;
        }
        if (n == 0) {
            errno = 0; /* an orderly close */
            return XC_ERR_PEER_LOST;
        }
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            XC_CHECK(xc__wait_fd(fd, out ? POLLOUT : POLLIN, deadline_ns));
            continue;
        }
        return conn_lost(errno) ? XC_ERR_PEER_LOST : XC_ERR_SYSTEM;
    }
    return XC_OK;
}

/* xc__move_all with the error's message ("send" or "recv" and the cause). */
static xc_result_t move_all_said(int fd, void *buf, size_t len, uint64_t deadline_ns, int out)
{
    const char *what = out ? "send" : "recv";
    xc_result_t rc = xc__move_all(fd, buf, len, deadline_ns, out);
    if (rc == XC_OK) return XC_OK;
    if (rc == XC_ERR_TIMEOUT) return xc__err(rc, "%s: deadline passed", what);
    if (rc == XC_ERR_PEER_LOST && errno == 0)
        return xc__err(rc, "%s: connection closed by the peer", what);
    return xc__err(rc, "%s: %s", what, strerror(errno));
}

xc_result_t xc__send_all(int fd, const void *buf, size_t len, uint64_t deadline_ns)
{
    return move_all_said(fd, (void *)(uintptr_t)buf, len, deadline_ns, 1);
}

xc_result_t xc__recv_all(int fd, void *buf, size_t len, uint64_t deadline_ns)
{
    return move_all_said(fd, buf, len, deadline_ns, 0);
}
