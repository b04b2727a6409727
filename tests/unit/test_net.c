/*
 * test_net.c -- choosing the address to advertise (XCOLL_SOCKET_IFNAME
 * semantics) and the address printer.
 */
#include "transport/net.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>

#include "expect.h"

static int is_loop4(const struct sockaddr_storage *a)
{
    return a->ss_family == AF_INET &&
           (ntohl(((const struct sockaddr_in *)a)->sin_addr.s_addr) >> 24) == 127;
}

int main(void)
{
    struct sockaddr_storage a;
    char s[XC__ADDRSTR_LEN];

    /* "lo" selects the loopback interface (127.0.0.1 here). */
    EXPECT(xc__pick_local_addr("lo", NULL, &a) == XC_OK, "lo: %s", xc_last_error());
    xc__addr_str(&a, s, sizeof s);
    EXPECT(is_loop4(&a) || a.ss_family == AF_INET6, "lo gave %s", s);

    /* Exact match of an interface that does not exist: a clear error. */
    EXPECT(xc__pick_local_addr("=nosuchif0", NULL, &a) == XC_ERR_INVALID, "=nosuchif0 accepted");
    EXPECT(strstr(xc_last_error(), "nosuchif0") != NULL, "message: %s", xc_last_error());

    /* "^lo": anything but loopback -- or a clear error on a machine without. */
    xc_result_t rc = xc__pick_local_addr("^lo", NULL, &a);
    if (rc == XC_OK) {
        xc__addr_str(&a, s, sizeof s);
        EXPECT(!is_loop4(&a), "^lo gave loopback %s", s);
        EXPECT(!(a.ss_family == AF_INET6 &&
                 IN6_IS_ADDR_LINKLOCAL(&((struct sockaddr_in6 *)&a)->sin6_addr)),
               "link-local chosen: %s", s);
    } else {
        EXPECT(rc == XC_ERR_INVALID, "^lo: %s", xc_err_name(rc));
    }

    /* No selector: the hint (the route to the store) wins, port cleared. */
    struct sockaddr_in hint = {.sin_family = AF_INET, .sin_port = htons(4242)};
    inet_pton(AF_INET, "127.0.0.5", &hint.sin_addr);
    struct sockaddr_storage hs;
    memset(&hs, 0, sizeof hs);
    memcpy(&hs, &hint, sizeof hint);
    EXPECT(xc__pick_local_addr(NULL, &hs, &a) == XC_OK, "hint");
    xc__addr_str(&a, s, sizeof s);
    EXPECT(!strcmp(s, "127.0.0.5:0"), "hint gave %s", s);

    /* No selector, no hint: some usable address. */
    EXPECT(xc__pick_local_addr("", NULL, &a) == XC_OK, "default: %s", xc_last_error());

    /* Listening on the chosen address gives a real port. */
    int fd;
    struct sockaddr_storage bound;
    EXPECT(xc__listen(&hs, &fd, &bound) == XC_OK, "listen: %s", xc_last_error());
    EXPECT(ntohs(((struct sockaddr_in *)&bound)->sin_port) != 0, "no port bound");

    printf("%s\n", failures ? "FAILED" : "all passed");
    return failures ? 1 : 0;
}
