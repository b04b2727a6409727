/*
 * free_port.h -- a loopback TCP port for a test to hand to a server it
 * starts later (the fault harness's store, the launcher tests' --addr).
 *
 * Binding port 0 and closing the socket is racy under `ctest -j`: the
 * kernel hands the same ephemeral range to every outgoing connection and
 * every other bind(0), so between our close and the server's bind another
 * test may take the port (CI saw "Address already in use" this way).  So
 * the port is drawn at random from *below* the ephemeral range
 * (/proc/sys/net/ipv4/ip_local_port_range), where the kernel never
 * assigns ports on its own, and kept only if a plain bind (no
 * SO_REUSEADDR, so a TIME_WAIT or listening socket refuses it) succeeds.
 * Where no such range exists, bind(0) is the fallback.
 */
#ifndef XT_FREE_PORT_H
#define XT_FREE_PORT_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* 1 if `port` (0: any) binds on 127.0.0.1; *got receives the bound port */
static inline int xt_port_binds(int port, int *got)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return 0;
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons((unsigned short)port);
    socklen_t len = sizeof a;
    int ok = bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
             getsockname(fd, (struct sockaddr *)&a, &len) == 0;
    if (ok) *got = ntohs(a.sin_port);
    close(fd);
    return ok;
}

/* a port that bound a moment ago, or -1 */
static inline int xt_pick_port(void)
{
    int lo = 32768, hi = 60999, got = -1;
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
    if (f) {
        if (fscanf(f, "%d %d", &lo, &hi) != 2) lo = 32768;
        fclose(f);
    }
    int first = lo - 16384 < 1024 ? 1024 : lo - 16384;   /* [first, lo) */
    if (lo - first >= 1024) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        unsigned s = (unsigned)getpid() * 2654435761u ^ (unsigned)ts.tv_nsec;
        for (int i = 0; i < 64; ++i) {
            s = s * 1103515245u + 12345u;
            if (xt_port_binds(first + (int)((s >> 8) % (unsigned)(lo - first)), &got))
                return got;
        }
    }
    return xt_port_binds(0, &got) ? got : -1;
}

#endif
