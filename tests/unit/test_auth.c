/*
 * test_auth.c -- the job token and its handshake (src/core/auth.c): parsing
 * and loading the token from the environment or a file (malformed, group-
 * readable, both given, XCOLL_REQUIRE_TOKEN), the handshake's messages
 * (same key, wrong key, replay, reflection, tampering, another kind or
 * context), and the TCP store with a token: a client with the token works,
 * one with another token or none is refused at once with a clear error,
 * and the server goes on serving.  Standalone: exit 0 = pass, 1 = fail.
 */
#include "core/auth.h"
#include "core/store.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#define EXPECT_RETURN /* a failed check ends its test function */
#include "expect.h"

#define HEX_A "00112233445566778899aabbccddeeff00112233445566778899AABBCCDDEEFF"
#define HEX_B "ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100"

static void clear_env(void)
{
    unsetenv("XCOLL_TOKEN");
    unsetenv("XCOLL_TOKEN_FILE");
    unsetenv("XCOLL_REQUIRE_TOKEN");
    unsetenv("XCOLL_HANDSHAKE_MS");
}

static int write_file(const char *path, const char *text, mode_t mode)
{
    unlink(path);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return -1;
    ssize_t w = write(fd, text, strlen(text));
    fchmod(fd, mode);
    close(fd);
    return w == (ssize_t)strlen(text) ? 0 : -1;
}

static int test_parse(void)
{
    uint8_t t[XC__TOKEN_LEN];
    EXPECT_TRUE(xc__auth_parse_hex(HEX_A, t) == 0);
    EXPECT_TRUE(t[0] == 0x00 && t[1] == 0x11 && t[31] == 0xff);
    EXPECT_TRUE(xc__auth_parse_hex("  " HEX_A "\n", t) == 0);
    EXPECT_TRUE(xc__auth_parse_hex(HEX_A "0", t) != 0);
    EXPECT_TRUE(xc__auth_parse_hex("abc", t) != 0);
    EXPECT_TRUE(xc__auth_parse_hex("", t) != 0);
    char bad[] = HEX_A;
    bad[10] = 'g';
    EXPECT_TRUE(xc__auth_parse_hex(bad, t) != 0);
    return 0;
}

static int test_env(const char *dir)
{
    xc__auth_conf_t c;
    char path[512];
    clear_env();
    EXPECT_RC(xc__auth_conf_env(&c), XC_OK);
    EXPECT_TRUE(!c.has_token && c.handshake_ms == XC__AUTH_DEFAULT_MS);

    setenv("XCOLL_TOKEN", HEX_A, 1);
    setenv("XCOLL_HANDSHAKE_MS", "1234", 1);
    EXPECT_RC(xc__auth_conf_env(&c), XC_OK);
    EXPECT_TRUE(c.has_token && c.handshake_ms == 1234 && c.token[31] == 0xff);

    setenv("XCOLL_TOKEN", "deadbeef", 1);
    EXPECT_RC(xc__auth_conf_env(&c), XC_ERR_INVALID);
    EXPECT_CONTAINS(xc_last_error(), "XCOLL_TOKEN");
    EXPECT_TRUE(!strstr(xc_last_error(), "deadbeef")); /* never echo a token */

    snprintf(path, sizeof path, "%s/token-ok", dir);
    EXPECT_TRUE(write_file(path, HEX_B "\n", 0600) == 0);
    setenv("XCOLL_TOKEN_FILE", path, 1);
    EXPECT_RC(xc__auth_conf_env(&c), XC_ERR_INVALID); /* both set */
    EXPECT_CONTAINS(xc_last_error(), "XCOLL_TOKEN_FILE");
    unsetenv("XCOLL_TOKEN");
    EXPECT_RC(xc__auth_conf_env(&c), XC_OK);
    EXPECT_TRUE(c.has_token && c.token[0] == 0xff && c.token[31] == 0x00);

    chmod(path, 0640);
    EXPECT_RC(xc__auth_conf_env(&c), XC_ERR_INVALID);
    EXPECT_CONTAINS(xc_last_error(), "XCOLL_TOKEN_FILE");
    EXPECT_CONTAINS(xc_last_error(), "0600");
    unlink(path);
    EXPECT_RC(xc__auth_conf_env(&c), XC_ERR_INVALID); /* missing */
    EXPECT_CONTAINS(xc_last_error(), "XCOLL_TOKEN_FILE");
    EXPECT_TRUE(write_file(path, "not a token\n", 0600) == 0);
    EXPECT_RC(xc__auth_conf_env(&c), XC_ERR_INVALID);
    EXPECT_CONTAINS(xc_last_error(), "64 hex");
    unlink(path);

    /* XCOLL_REQUIRE_TOKEN=1 without a token, directly and through the
     * public entry point (which fails before any network activity). */
    clear_env();
    setenv("XCOLL_REQUIRE_TOKEN", "1", 1);
    EXPECT_RC(xc__auth_conf_env(&c), XC_ERR_INVALID);
    EXPECT_CONTAINS(xc_last_error(), "XCOLL_TOKEN");
    setenv("XCOLL_RANK", "0", 1);
    setenv("XCOLL_SIZE", "1", 1);
    setenv("XCOLL_ADDR", "127.0.0.1:1", 1);
    xc_comm_t *comm = NULL;
    EXPECT_RC(xc_comm_init_env(&comm, NULL), XC_ERR_INVALID);
    EXPECT_CONTAINS(xc_last_error(), "XCOLL_TOKEN");
    EXPECT_TRUE(comm == NULL);
    setenv("XCOLL_TOKEN", HEX_A, 1);
    EXPECT_RC(xc__auth_conf_env(&c), XC_OK);
    clear_env();
    return 0;
}

/* One handshake between a client keyed `kc` and a server keyed `ks`. */
static int handshake(const char *kc, const char *ks, int *client_ok, int *server_ok)
{
    xc__auth_conf_t cc = {.has_token = 1}, cs = {.has_token = 1};
    xc__auth_parse_hex(kc, cc.token);
    xc__auth_parse_hex(ks, cs.token);
    xc__auth_ctx_t ctx = {.kind = XC__AUTH_MESH, .id = 42, .client = 3, .server = 1};
    xc__auth_t a, b;
    uint8_t m1[XC__AUTH_MSG1_LEN], m2[XC__AUTH_MSG2_LEN], m3[XC__AUTH_MSG3_LEN];
    const char *why = "";
    EXPECT_RC(xc__auth_client_hello(&a, &cc, &ctx, m1), XC_OK);
    EXPECT_RC(xc__auth_server_reply(&b, &cs, XC__AUTH_MESH, m1, m2, &why), XC_OK);
    EXPECT_TRUE(b.ctx.id == 42 && b.ctx.client == 3 && b.ctx.server == 1);
    *client_ok = xc__auth_client_finish(&a, m2, m3, &why) == XC_OK;
    if (!*client_ok) EXPECT_CONTAINS(why, "wrong token");
    *server_ok = *client_ok && xc__auth_server_verify(&b, m3, &why) == XC_OK;
    return 0;
}

static int test_messages(void)
{
    int c_ok = 0, s_ok = 0;
    EXPECT_TRUE(handshake(HEX_A, HEX_A, &c_ok, &s_ok) == 0);
    EXPECT_TRUE(c_ok && s_ok);
    EXPECT_TRUE(handshake(HEX_A, HEX_B, &c_ok, &s_ok) == 0);
    EXPECT_TRUE(!c_ok && !s_ok);

    xc__auth_conf_t ka = {.has_token = 1}, kb = {.has_token = 1};
    xc__auth_parse_hex(HEX_A, ka.token);
    xc__auth_parse_hex(HEX_B, kb.token);
    xc__auth_ctx_t ctx = {.kind = XC__AUTH_STORE, .id = 0, .client = -1, .server = -1};
    xc__auth_t cl, sv, sv2;
    uint8_t m1[XC__AUTH_MSG1_LEN], m2[XC__AUTH_MSG2_LEN], m3[XC__AUTH_MSG3_LEN];
    uint8_t n2[XC__AUTH_MSG2_LEN], x[XC__AUTH_MSG3_LEN];
    const char *why = "";

    /* A legitimate exchange, recorded. */
    EXPECT_RC(xc__auth_client_hello(&cl, &ka, &ctx, m1), XC_OK);
    EXPECT_RC(xc__auth_server_reply(&sv, &ka, XC__AUTH_STORE, m1, m2, &why), XC_OK);
    EXPECT_RC(xc__auth_client_finish(&cl, m2, m3, &why), XC_OK);
    EXPECT_RC(xc__auth_server_verify(&sv, m3, &why), XC_OK);

    /* Replay: the recorded messages 1 and 3 against a fresh server nonce. */
    EXPECT_RC(xc__auth_server_reply(&sv2, &ka, XC__AUTH_STORE, m1, n2, &why), XC_OK);
    EXPECT_TRUE(memcmp(n2 + XC__AUTH_HDR_LEN, m2 + XC__AUTH_HDR_LEN, XC__AUTH_NONCE_LEN) != 0);
    EXPECT_RC(xc__auth_server_verify(&sv2, m3, &why), XC_ERR_PROTOCOL);
    EXPECT_CONTAINS(why, "wrong token");

    /* Reflection: the server's own proof sent back as the client's. */
    memcpy(x, m3, XC__AUTH_HDR_LEN);
    memcpy(x + XC__AUTH_HDR_LEN, n2 + XC__AUTH_HDR_LEN + XC__AUTH_NONCE_LEN, XC__AUTH_MAC_LEN);
    EXPECT_RC(xc__auth_server_verify(&sv2, x, &why), XC_ERR_PROTOCOL);

    /* Tampering with any byte of any message fails somewhere. */
    for (size_t i = 0; i < sizeof m1; i++) {
        uint8_t t1[XC__AUTH_MSG1_LEN];
        memcpy(t1, m1, sizeof t1);
        t1[i] ^= 0x01;
        xc__auth_t s3;
        /* a changed context or nonce gives a different proof */
        if (xc__auth_server_reply(&s3, &ka, XC__AUTH_STORE, t1, n2, &why) != XC_OK) continue;
        EXPECT_RC(xc__auth_server_verify(&s3, m3, &why), XC_ERR_PROTOCOL);
    }
    for (size_t i = 0; i < sizeof m2; i++) {
        uint8_t t2[XC__AUTH_MSG2_LEN];
        xc__auth_t c2;
        memcpy(t2, m2, sizeof t2);
        t2[i] ^= 0x80;
        EXPECT_RC(xc__auth_client_hello(&c2, &ka, &ctx, m1), XC_OK);
        EXPECT_RC(xc__auth_client_finish(&c2, t2, x, &why), XC_ERR_PROTOCOL);
    }
    for (size_t i = 0; i < sizeof m3; i++) {
        uint8_t t3[XC__AUTH_MSG3_LEN];
        memcpy(t3, m3, sizeof t3);
        t3[i] ^= 0x04;
        EXPECT_RC(xc__auth_server_verify(&sv, t3, &why), XC_ERR_PROTOCOL);
    }
    /* Another kind: a store handshake offered to a mesh listener. */
    EXPECT_RC(xc__auth_server_reply(&sv2, &ka, XC__AUTH_MESH, m1, n2, &why), XC_ERR_PROTOCOL);
    EXPECT_CONTAINS(why, "bad frame");
    /* A wrong key on the server's side of a store handshake. */
    EXPECT_RC(xc__auth_client_hello(&cl, &ka, &ctx, m1), XC_OK);
    EXPECT_RC(xc__auth_server_reply(&sv, &kb, XC__AUTH_STORE, m1, m2, &why), XC_OK);
    EXPECT_RC(xc__auth_client_finish(&cl, m2, m3, &why), XC_ERR_PROTOCOL);
    return 0;
}

static int test_store(void)
{
    xc__auth_conf_t ka = {.has_token = 1, .handshake_ms = 2000};
    xc__auth_conf_t kb = ka, none = {.handshake_ms = 2000};
    xc__auth_parse_hex(HEX_A, ka.token);
    xc__auth_parse_hex(HEX_B, kb.token);
    xc__store_server_t *srv = NULL;
    int port = 0;
    EXPECT_RC(xc__store_server_start("127.0.0.1", 0, &ka, &srv, &port), XC_OK);
    xc_store_t st;
    char buf[16];
    size_t len = 0;

    /* Another token: refused at once, not after the 5 s timeout. */
    uint64_t t0 = xc__now_ns();
    EXPECT_RC(xc__tcp_store_open("127.0.0.1", port, 5000, &kb, &st, NULL), XC_ERR_PROTOCOL);
    EXPECT_CONTAINS(xc_last_error(), "authentication failed");
    EXPECT_TRUE(xc__now_ns() - t0 < 2000000000ull);
    /* No token: the server says it wants one. */
    EXPECT_RC(xc__tcp_store_open("127.0.0.1", port, 5000, &none, &st, NULL), XC_ERR_PROTOCOL);
    EXPECT_CONTAINS(xc_last_error(), "requires the job token");
    /* The right token: served, as before the strangers. */
    EXPECT_RC(xc__tcp_store_open("127.0.0.1", port, 5000, &ka, &st, NULL), XC_OK);
    EXPECT_RC(st.set(st.ctx, "k", "v1", 2), XC_OK);
    EXPECT_RC(st.get(st.ctx, "k", buf, sizeof buf, &len, 1000), XC_OK);
    EXPECT_TRUE(len == 2 && !memcmp(buf, "v1", 2));
    xc__tcp_store_close(&st);
    xc__store_server_stop(srv);

    /* A client with a token, a server without: refused, clearly. */
    EXPECT_RC(xc__store_server_start("127.0.0.1", 0, &none, &srv, &port), XC_OK);
    EXPECT_RC(xc__tcp_store_open("127.0.0.1", port, 5000, &ka, &st, NULL), XC_ERR_PROTOCOL);
    EXPECT_CONTAINS(xc_last_error(), "authentication failed");
    EXPECT_RC(xc__tcp_store_open("127.0.0.1", port, 5000, NULL, &st, NULL), XC_OK);
    xc__tcp_store_close(&st);
    xc__store_server_stop(srv);
    return 0;
}

int main(void)
{
    char dir[] = "/tmp/xcoll-test-auth-XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_parse();
    test_env(dir);
    test_messages();
    test_store();
    rmdir(dir);
    printf("%s\n", failures ? "FAILED" : "passed");
    return failures ? 1 : 0;
}
