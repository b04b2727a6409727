/*
 * error.c -- result-code names and descriptions (from the X-macro in
 * xcoll.h) and the thread-local detail of the last failing call.
 */
#include "common.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char tls_errmsg[XC__ERRMSG_LEN];

const char *xc_strerror(xc_result_t rc)
{
    switch (rc) {
#define XC__CASE(name, val, desc)                                              \
    case XC_##name: return desc;
        XC_RESULT_MAP(XC__CASE)
#undef XC__CASE
    }
    return "unknown result code";
}

const char *xc_err_name(xc_result_t rc)
{
    switch (rc) {
#define XC__CASE(name, val, desc)                                              \
    case XC_##name: return "XC_" #name;
        XC_RESULT_MAP(XC__CASE)
#undef XC__CASE
    }
    return "XC_UNKNOWN";
}

const char *xc_last_error(void) { return tls_errmsg; }

const char *xc__tls_error(void) { return tls_errmsg; }

xc_result_t xc__verr(xc_result_t rc, const char *fmt, va_list ap)
{
    /* Format aside first: callers often wrap the previous detail, passing
     * tls_errmsg itself as an argument. */
    char buf[XC__ERRMSG_LEN];
    vsnprintf(buf, sizeof buf, fmt, ap);
    memcpy(tls_errmsg, buf, sizeof buf);
    XC_INFO("%s: %s", xc_err_name(rc), tls_errmsg);
    return rc;
}

xc_result_t xc__err(xc_result_t rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    xc__verr(rc, fmt, ap);
    va_end(ap);
    return rc;
}

xc_result_t xc__err_errno(const char *what)
{
    int e = errno;
    return xc__err(XC_ERR_SYSTEM, "%s: %s", what, strerror(e));
}
