/*
 * hostport.c -- parsing of "host:port" rendezvous addresses.
 *
 * Accepted forms: "name:port", "1.2.3.4:port" and "[v6addr]:port".  A bare
 * IPv6 address with colons and no brackets is rejected as ambiguous (is
 * "::1:80" the address ::1 port 80 or the address ::1:80?).  The port is
 * 1..65535 in plain decimal: no sign, no spaces, no port 0 (an ephemeral port
 * cannot be a meeting point).  The host is never empty.  Nothing is written
 * to `host`/`port` on failure except possibly a truncated host.
 */
#include "store.h"
#include "../transport/net.h"

#include <arpa/inet.h>
#include <string.h>

/* Parse the decimal port at `p`; -1 if it is not 1..65535. */
static int parse_port(const char *p)
{
    if (*p == '\0') return -1;
    long v = 0;
    for (; *p; ++p) {
        if (*p < '0' || *p > '9') return -1;
        v = v * 10 + (*p - '0');
        if (v > 65535) return -1;
    }
    return v >= 1 ? (int)v : -1;
}

xc_result_t xc__parse_hostport(const char *s, const char *what, char *host,
                               size_t hostcap, int *port)
{
    if (!what) what = "address";
    if (!s || !*s)
        return xc__err(XC_ERR_INVALID, "%s: empty address, expected host:port",
                       what);
    if (!host || hostcap == 0 || !port)
        return xc__err(XC_ERR_INVALID, "%s: no room for the parsed host", what);

    const char *h; /* host start */
    size_t hlen;
    const char *colon; /* the ':' before the port */
    if (s[0] == '[') {
        const char *close = strchr(s, ']');
        if (!close)
            return xc__err(XC_ERR_INVALID,
                           "%s: bad address '%s': missing ']' after IPv6 host",
                           what, s);
        h = s + 1;
        hlen = (size_t)(close - h);
        if (close[1] != ':')
            return xc__err(XC_ERR_INVALID,
                           "%s: bad address '%s': expected ':port' after ']'",
                           what, s);
        colon = close + 1;
    } else {
        colon = strrchr(s, ':');
        if (!colon)
            return xc__err(XC_ERR_INVALID,
                           "%s: bad address '%s': missing ':port'", what, s);
        h = s;
        hlen = (size_t)(colon - s);
        if (memchr(h, ':', hlen))
            return xc__err(XC_ERR_INVALID,
                           "%s: bad address '%s': write an IPv6 host in "
                           "brackets, as [addr]:port",
                           what, s);
    }
    if (hlen == 0)
        return xc__err(XC_ERR_INVALID, "%s: bad address '%s': empty host", what,
                       s);
    if (memchr(h, '[', hlen) || memchr(h, ']', hlen))
        return xc__err(XC_ERR_INVALID,
                       "%s: bad address '%s': stray bracket in host", what, s);
    int p = parse_port(colon + 1);
    if (p < 0)
        return xc__err(XC_ERR_INVALID,
                       "%s: bad address '%s': port '%s' is not a number in "
                       "1..65535",
                       what, s, colon + 1);
    if (hlen >= hostcap)
        return xc__err(XC_ERR_INVALID,
                       "%s: bad address '%s': host longer than %zu characters",
                       what, s, hostcap - 1);
    memcpy(host, h, hlen);
    host[hlen] = '\0';
    *port = p;
    return XC_OK;
}

/* `host` as a numeric IPv4 or IPv6 address in *ss; 0 if it is a name. */
static int numeric(const char *host, struct sockaddr_storage *ss)
{
    memset(ss, 0, sizeof *ss);
    struct sockaddr_in *s4 = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;
    if (inet_pton(AF_INET, host, &s4->sin_addr) == 1) return s4->sin_family = AF_INET, 1;
    if (inet_pton(AF_INET6, host, &s6->sin6_addr) == 1) return s6->sin6_family = AF_INET6, 1;
    return 0;
}

int xc__host_is_loopback(const char *host)
{
    struct sockaddr_storage ss;
    return !strcmp(host, "localhost") || (numeric(host, &ss) && xc__addr_is_loopback(&ss));
}

int xc__host_is_numeric(const char *host)
{
    struct sockaddr_storage ss;
    return numeric(host, &ss);
}
