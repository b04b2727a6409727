/*
 * profile_io.c -- the profile file: JSON written by `xcoll-perf
 * --calibrate` (xc_profile_calibrate) and read when XCOLL_PROFILE names it.
 * docs/cost-model.md documents the format.  Units in the file are
 * microseconds (alpha) and picoseconds per byte (beta, memcpy, gamma), so
 * the numbers read naturally; in memory everything is seconds.
 *
 * Reading is strict about what the model needs (every number present,
 * finite, >= 0; a "shm" link needs "shm_sync"; "host" needs every dtype x
 * reduction class) and ignores members it does not know, so later versions
 * may add some.  Every failure is XC_ERR_INVALID naming the file and the
 * problem.
 */
#include "json.h"
#include "model.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FORMAT "xcoll-profile"
#define VERSION 1
#define US 1e-6
#define PS 1e-12

static const char *k_links[XC__LINK_COUNT] = {"shm", "tcp_local", "tcp_net"};
static const char *k_gops[XC__GOP_COUNT] = {"sum", "prod", "minmax"};

/* ------------------------------------------------------------ writing */

static const char *k_xfers[XC__XFER_COUNT] = {"oneway", "exchange", "oneway_fresh",
                                               "exchange_fresh"};

static void write_link(FILE *f, const char *name, const xc__link_params_t *l, int last)
{
    fprintf(f, "    \"%s\": {\n      \"big_from\": %.0f,\n", name, l->big_from);
    if (l->round_delta != 0) fprintf(f, "      \"round_us\": %.4f,\n", l->round_delta / US);
    for (int x = 0; x < XC__XFER_COUNT; x++) {
        const xc__line_t *ln = &l->line[x];
        fprintf(f,
                "      \"%s\": {\"alpha_us\": %.4f, \"beta_ps\": %.3f, \"big_alpha_us\": %.4f, "
                "\"big_beta_ps\": %.3f, \"mem_alpha_us\": %.4f, \"mem_beta_ps\": %.3f",
                k_xfers[x], ln->alpha / US, ln->beta / PS, ln->big_alpha / US, ln->big_beta / PS,
                ln->mem_alpha / US, ln->mem_beta / PS);
        if (ln->big_from > 0) fprintf(f, ", \"big_from\": %.0f", ln->big_from);
        if (l->npts[x] > 0) {
            fprintf(f, ",\n        \"points\": [");
            for (int i = 0; i < l->npts[x]; i++)
                fprintf(f, "%s[%.0f, %.4f]", i ? ", " : "", l->pts[x][i][0], l->pts[x][i][1] / US);
            fprintf(f, "]");
        }
        fprintf(f, "}%s\n", x + 1 < XC__XFER_COUNT ? "," : "");
    }
    fprintf(f, "    }%s\n", last ? "" : ",");
}

/* A JSON string literal of s (quotes, backslashes and controls escaped). */
static void put_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

xc_result_t xc__profile_write(const xc__profile_t *p, const char *path)
{
    FILE *f = fopen(path, "we");
    if (!f) return xc__err(XC_ERR_SYSTEM, "cannot write profile \"%s\": %s", path, strerror(errno));
    fprintf(f, "{\n  \"format\": \"%s\",\n  \"version\": %d,\n  \"source\": ", FORMAT, VERSION);
    put_string(f, p->source);
    fprintf(f, ",\n");
    fprintf(f, "  \"units\": \"alpha in microseconds; beta, memcpy and gamma in picoseconds "
               "per byte\",\n");
    fprintf(f, "  \"links\": {\n");
    int last = -1;
    for (int i = 0; i < XC__LINK_COUNT; i++)
        if (p->have & (1u << i)) last = i;
    for (int i = 0; i < XC__LINK_COUNT; i++)
        if (p->have & (1u << i)) write_link(f, k_links[i], &p->link[i], i == last);
    fprintf(f, "  },\n");
    if (p->have & XC__HAVE_SHM)
        fprintf(f,
                "  \"shm_sync\": {\"alpha_us\": %.4f, \"per_rank_us\": %.4f, "
                "\"stage_us\": %.4f, \"stage_copy_us\": %.4f, \"lines_us\": %.4f, "
                "\"rooted_us\": %.4f, \"take_ps\": %.3f, \"take_big_ps\": %.3f, "
                "\"take_big_bytes\": %.0f, \"take_pipe_ps\": %.3f, \"pair_chunk_ps\": %.3f, "
                "\"pair_chunk_us\": %.4f, \"pair_direct_us\": %.4f, "
                "\"pair_direct_ps\": %.3f, \"cma_max_kb\": %.0f, \"ag_cma_min_kb\": %.0f, "
                "\"a2a_cma_min_kb\": %.0f, \"bcast_cma_min_kb\": %.0f},\n",
                p->sync_alpha / US, p->sync_per_rank / US, p->shm_stage / US,
                p->shm_stage_copy / US, p->shm_lines / US, p->shm_rooted / US, p->shm_take / PS,
                p->shm_take_big / PS, p->shm_take_big_bytes, p->shm_take_pipe / PS,
                p->pair_chunk / PS, p->pair_chunk0 / US, p->pair_direct0 / US, p->pair_direct / PS, p->shm_cma_max / 1024,
                p->shm_ag_cma_min / 1024, p->shm_a2a_cma_min / 1024, p->shm_bcast_cma_min / 1024);
    fprintf(f, "  \"schedule\": {\"call_us\": %.4f},\n", p->sched_call / US);
    if (p->cold_alpha > 0 || p->cold_beta > 0)
        fprintf(f, "  \"cold_call\": {\"alpha_us\": %.3f, \"beta_ps\": %.3f},\n",
                p->cold_alpha / US, p->cold_beta / PS);
    if (p->cold_xcmem)
        fprintf(f, "  \"cold_call_xc_mem\": {\"alpha_us\": %.3f, \"beta_ps\": %.3f},\n",
                p->cold_huge_alpha / US, p->cold_huge_beta / PS);
    fprintf(f, "  \"host\": {\n    \"cache_bytes\": %.0f,\n", p->cache_bytes);
    fprintf(f, "    \"fault_ps\": %.3f,\n", p->fault / PS);
    fprintf(f, "    \"memcpy_ps\": {\"cache\": %.3f, \"mem\": %.3f, \"ladder\": [", p->copy_cache / PS,
            p->copy_mem / PS);
    for (int i = 0; i < p->nladder; i++)
        fprintf(f, "%s[%.0f, %.3f]", i ? ", " : "", p->ladder[i][0], p->ladder[i][1] / PS);
    fprintf(f, "]},\n");
    fprintf(f, "    \"gamma_ps\": {\n");
    for (int d = 0; d < XC_DTYPE_COUNT; d++) {
        fprintf(f, "      \"%s\": {", xc_dtype_name((xc_dtype_t)d));
        for (int g = 0; g < XC__GOP_COUNT; g++)
            fprintf(f, "\"%s\": [%.3f, %.3f]%s", k_gops[g], p->gamma[d][g][0] / PS,
                    p->gamma[d][g][1] / PS, g + 1 < XC__GOP_COUNT ? ", " : "");
        fprintf(f, "}%s\n", d + 1 < XC_DTYPE_COUNT ? "," : "");
    }
    fprintf(f, "    },\n    \"codec_ps\": {");
    for (int c = XC_COMPRESS_FP16; c < XC_COMPRESS_COUNT; c++)
        fprintf(f, "\"%s\": [%.3f, %.3f]%s", xc_compress_name((xc_compress_t)c),
                p->codec[c][0] / PS, p->codec[c][1] / PS, c + 1 < XC_COMPRESS_COUNT ? ", " : "");
    fprintf(f, "}\n  }\n}\n");
    int bad = ferror(f);
    if (fclose(f) != 0 || bad)
        return xc__err(XC_ERR_SYSTEM, "cannot write profile \"%s\": %s", path, strerror(errno));
    return XC_OK;
}

/* ------------------------------------------------------------ reading */

typedef struct reader {
    const char *name;
    xc_result_t rc;
} reader_t;

static xc_result_t bad(reader_t *r, const char *where, const char *what)
{
    if (r->rc == XC_OK)
        r->rc = xc__err(XC_ERR_INVALID, "profile \"%s\": %s: %s", r->name, where, what);
    return r->rc;
}

/* A number >= 0 at obj.key, scaled. */
/* obj.key as a finite number (>= 0 unless `any_sign`) times `scale`. */
static double number(reader_t *r, const xc__json_t *obj, const char *path, const char *key,
                     double scale, int any_sign)
{
    char where[160];
    snprintf(where, sizeof where, "%s%s%s", path, *path ? "." : "", key);
    const xc__json_t *v = xc__json_get(obj, key);
    if (!v) {
        bad(r, where, "missing");
        return 0;
    }
    if (v->type != XC__J_NUM || !isfinite(v->num) || (!any_sign && v->num < 0)) {
        char what[96];
        snprintf(what, sizeof what, "expected a number%s (line %d, column %d)",
                 any_sign ? "" : " >= 0", v->line, v->col);
        bad(r, where, what);
        return 0;
    }
    return v->num * scale;
}

static double num(reader_t *r, const xc__json_t *obj, const char *path, const char *key,
                  double scale)
{
    return number(r, obj, path, key, scale, 0);
}

static double snum(reader_t *r, const xc__json_t *obj, const char *path, const char *key,
                   double scale)
{
    return number(r, obj, path, key, scale, 1);
}

static const xc__json_t *object(reader_t *r, const xc__json_t *obj, const char *path,
                                const char *key, int required)
{
    const xc__json_t *v = xc__json_get(obj, key);
    char where[160];
    snprintf(where, sizeof where, "%s%s%s", path, *path ? "." : "", key);
    if (!v) {
        if (required) bad(r, where, "missing");
        return NULL;
    }
    if (v->type != XC__J_OBJ) {
        bad(r, where, "expected an object");
        return NULL;
    }
    return v;
}

/* a = [x, y], two numbers >= 0 in picoseconds per byte, into out[2]. */
static int pair(reader_t *r, const xc__json_t *a, const char *where, const char *form,
                double *out)
{
    if (!a) {
        bad(r, where, "missing");
        return 0;
    }
    const xc__json_t *c0 = a->type == XC__J_ARR ? a->child : NULL;
    const xc__json_t *c1 = c0 ? c0->next : NULL;
    if (!c1 || c1->next || c0->type != XC__J_NUM || c1->type != XC__J_NUM ||
        !isfinite(c0->num) || !isfinite(c1->num) || c0->num < 0 || c1->num < 0) {
        char what[64];
        snprintf(what, sizeof what, "expected %s: two numbers >= 0", form);
        bad(r, where, what);
        return 0;
    }
    out[0] = c0->num * PS;
    out[1] = c1->num * PS;
    return 1;
}

static void read_gamma(reader_t *r, const xc__json_t *g, xc__profile_t *p)
{
    for (int d = 0; d < XC_DTYPE_COUNT && r->rc == XC_OK; d++) {
        char path[64];
        snprintf(path, sizeof path, "host.gamma_ps");
        const xc__json_t *o = object(r, g, path, xc_dtype_name((xc_dtype_t)d), 1);
        for (int k = 0; o && k < XC__GOP_COUNT && r->rc == XC_OK; k++) {
            char where[96];
            snprintf(where, sizeof where, "host.gamma_ps.%s.%s", xc_dtype_name((xc_dtype_t)d),
                     k_gops[k]);
            if (!pair(r, xc__json_get(o, k_gops[k]), where, "[cache, mem]", p->gamma[d][k]))
                return;
        }
    }
}

/* Optional host.codec_ps: {"fp16": [encode, decode], ...}; a profile
 * without it (older) gets twice fp32 sum's gamma for both; one written
 * before INT4 existed gets INT8's costs for it (the same passes). */
static void read_codecs(reader_t *r, const xc__json_t *c, xc__profile_t *p)
{
    for (int f = XC_COMPRESS_FP16; f < XC_COMPRESS_COUNT && r->rc == XC_OK; f++) {
        if (!c) {
            double g = 2 * p->gamma[XC_FLOAT32][XC__GOP_SUM][0];
            p->codec[f][0] = p->codec[f][1] = g;
            continue;
        }
        if (f == XC_COMPRESS_INT4 && !xc__json_get(c, xc_compress_name((xc_compress_t)f))) {
            p->codec[f][0] = p->codec[XC_COMPRESS_INT8][0];
            p->codec[f][1] = p->codec[XC_COMPRESS_INT8][1];
            continue;
        }
        char where[64];
        snprintf(where, sizeof where, "host.codec_ps.%s", xc_compress_name((xc_compress_t)f));
        if (!pair(r, xc__json_get(c, xc_compress_name((xc_compress_t)f)), where,
                  "[encode, decode]", p->codec[f]))
            return;
    }
}

/* An array of [bytes, value] pairs, bytes > 0 ascending, value >= 0 (in
 * units of `scale`), at most `max` of them, into out[*n]. */
static void read_pairs(reader_t *r, const xc__json_t *a, const char *where, const char *unit,
                       double (*out)[2], int max, int *n, double scale)
{
    char what[96];
    *n = 0;
    if (!a || r->rc != XC_OK) return;
    snprintf(what, sizeof what, "expected an array of [bytes, %s] pairs, bytes > 0 ascending", unit);
    if (a->type != XC__J_ARR) {
        bad(r, where, what);
        return;
    }
    for (const xc__json_t *e = a->child; e; e = e->next) {
        const xc__json_t *b = e->type == XC__J_ARR ? e->child : NULL, *v = b ? b->next : NULL;
        if (!v || v->next || b->type != XC__J_NUM || v->type != XC__J_NUM || !isfinite(b->num) ||
            !isfinite(v->num) || b->num <= 0 || v->num < 0 || (*n && b->num <= out[*n - 1][0])) {
            bad(r, where, what);
            return;
        }
        if (*n == max) {
            snprintf(what, sizeof what, "more than %d entries", max);
            bad(r, where, what);
            return;
        }
        out[*n][0] = b->num;
        out[*n][1] = v->num * scale;
        (*n)++;
    }
}

xc_result_t xc__profile_parse(const char *text, size_t len, const char *name, xc__profile_t *p)
{
    char err[160];
    xc__json_t *root = xc__json_parse(text, len, err, sizeof err);
    if (!root) return xc__err(XC_ERR_INVALID, "profile \"%s\": %s", name, err);
    reader_t r = {name, XC_OK};
    memset(p, 0, sizeof *p);
    const xc__json_t *fmt = xc__json_get(root, "format"), *ver = xc__json_get(root, "version");
    if (root->type != XC__J_OBJ) bad(&r, "top level", "expected an object");
    else if (!fmt || fmt->type != XC__J_STR || strcmp(fmt->str, FORMAT))
        bad(&r, "format", "missing or not \"" FORMAT "\"");
    else if (!ver || ver->type != XC__J_NUM || ver->num != VERSION)
        bad(&r, "version", "missing or not 1 (this library reads version 1)");
    const xc__json_t *links = r.rc == XC_OK ? object(&r, root, "", "links", 1) : NULL;
    for (int i = 0; links && i < XC__LINK_COUNT && r.rc == XC_OK; i++) {
        char path[32];
        snprintf(path, sizeof path, "links.%s", k_links[i]);
        const xc__json_t *l = object(&r, links, "links", k_links[i], 0);
        if (!l) continue;
        xc__link_params_t *lp = &p->link[i];
        lp->big_from = num(&r, l, path, "big_from", 1);
        /* Optional (files before it: none), signed. */
        if (xc__json_get(l, "round_us")) lp->round_delta = snum(&r, l, path, "round_us", US);
        for (int x = 0; x < XC__XFER_COUNT && r.rc == XC_OK; x++) {
            char xpath[48];
            snprintf(xpath, sizeof xpath, "%s.%s", path, k_xfers[x]);
            const xc__json_t *o = object(&r, l, path, k_xfers[x], 1);
            if (!o) break;
            xc__line_t *ln = &lp->line[x];
            ln->alpha = num(&r, o, xpath, "alpha_us", US);
            ln->beta = num(&r, o, xpath, "beta_ps", PS);
            ln->big_alpha = num(&r, o, xpath, "big_alpha_us", US);
            ln->big_beta = num(&r, o, xpath, "big_beta_ps", PS);
            ln->mem_alpha = num(&r, o, xpath, "mem_alpha_us", US);
            ln->mem_beta = num(&r, o, xpath, "mem_beta_ps", PS);
            /* Optional: without it, the link's. */
            if (xc__json_get(o, "big_from")) ln->big_from = num(&r, o, xpath, "big_from", 1);
            /* Optional: without them, the line. */
            char ppath[64];
            snprintf(ppath, sizeof ppath, "%s.points", xpath);
            read_pairs(&r, xc__json_get(o, "points"), ppath, "us", lp->pts[x], XC__LINK_PTS,
                       &lp->npts[x], US);
        }
        p->have |= 1u << i;
    }
    if (r.rc == XC_OK && (p->have & XC__HAVE_SHM)) {
        const xc__json_t *s = object(&r, root, "", "shm_sync", 1);
        if (s) {
            p->sync_alpha = num(&r, s, "shm_sync", "alpha_us", US);
            p->sync_per_rank = num(&r, s, "shm_sync", "per_rank_us", US);
            /* Optional: files written before it was measured price none. */
            if (xc__json_get(s, "stage_us")) p->shm_stage = num(&r, s, "shm_sync", "stage_us", US);
            p->shm_stage_copy = xc__json_get(s, "stage_copy_us")
                                    ? num(&r, s, "shm_sync", "stage_copy_us", US)
                                    : p->shm_stage; /* files before it: one term for all */
            if (xc__json_get(s, "lines_us")) p->shm_lines = num(&r, s, "shm_sync", "lines_us", US);
            if (xc__json_get(s, "rooted_us"))
                p->shm_rooted = num(&r, s, "shm_sync", "rooted_us", US);
            if (xc__json_get(s, "take_ps")) p->shm_take = num(&r, s, "shm_sync", "take_ps", PS);
            if (xc__json_get(s, "take_big_ps")) {
                p->shm_take_big = num(&r, s, "shm_sync", "take_big_ps", PS);
                p->shm_take_big_bytes = num(&r, s, "shm_sync", "take_big_bytes", 1);
            }
            if (xc__json_get(s, "take_pipe_ps"))
                p->shm_take_pipe = num(&r, s, "shm_sync", "take_pipe_ps", PS);
            if (xc__json_get(s, "pair_chunk_ps"))
                p->pair_chunk = snum(&r, s, "shm_sync", "pair_chunk_ps", PS);
            if (xc__json_get(s, "pair_chunk_us"))
                p->pair_chunk0 = snum(&r, s, "shm_sync", "pair_chunk_us", US);
            if (xc__json_get(s, "pair_direct_us"))
                p->pair_direct0 = snum(&r, s, "shm_sync", "pair_direct_us", US);
            if (xc__json_get(s, "pair_direct_ps"))
                p->pair_direct = snum(&r, s, "shm_sync", "pair_direct_ps", PS);
            if (xc__json_get(s, "cma_max_kb"))
                p->shm_cma_max = num(&r, s, "shm_sync", "cma_max_kb", 1024);
            if (xc__json_get(s, "ag_cma_min_kb"))
                p->shm_ag_cma_min = num(&r, s, "shm_sync", "ag_cma_min_kb", 1024);
            if (xc__json_get(s, "a2a_cma_min_kb"))
                p->shm_a2a_cma_min = num(&r, s, "shm_sync", "a2a_cma_min_kb", 1024);
            if (xc__json_get(s, "bcast_cma_min_kb"))
                p->shm_bcast_cma_min = num(&r, s, "shm_sync", "bcast_cma_min_kb", 1024);
        }
    }
    const xc__json_t *sch = r.rc == XC_OK ? object(&r, root, "", "schedule", 0) : NULL;
    if (sch) p->sched_call = num(&r, sch, "schedule", "call_us", US);
    const xc__json_t *cold = r.rc == XC_OK ? object(&r, root, "", "cold_call", 0) : NULL;
    if (cold) {
        p->cold_alpha = num(&r, cold, "cold_call", "alpha_us", US);
        p->cold_beta = num(&r, cold, "cold_call", "beta_ps", PS);
    }
    const xc__json_t *coldx = r.rc == XC_OK ? object(&r, root, "", "cold_call_xc_mem", 0) : NULL;
    if (coldx) {
        p->cold_huge_alpha = num(&r, coldx, "cold_call_xc_mem", "alpha_us", US);
        p->cold_huge_beta = num(&r, coldx, "cold_call_xc_mem", "beta_ps", PS);
        p->cold_xcmem = 1;
    }
    const xc__json_t *host = r.rc == XC_OK ? object(&r, root, "", "host", 1) : NULL;
    if (host) {
        p->cache_bytes = num(&r, host, "host", "cache_bytes", 1);
        if (xc__json_get(host, "fault_ps")) p->fault = num(&r, host, "host", "fault_ps", PS);
        const xc__json_t *m = object(&r, host, "host", "memcpy_ps", 1);
        if (m) {
            p->copy_cache = num(&r, m, "host.memcpy_ps", "cache", PS);
            p->copy_mem = num(&r, m, "host.memcpy_ps", "mem", PS);
            read_pairs(&r, xc__json_get(m, "ladder"), "host.memcpy_ps.ladder", "ps", p->ladder,
                       XC__LADDER_MAX, &p->nladder, PS);
        }
        const xc__json_t *g = r.rc == XC_OK ? object(&r, host, "host", "gamma_ps", 1) : NULL;
        if (g) read_gamma(&r, g, p);
        const xc__json_t *cd = xc__json_get(host, "codec_ps");
        if (cd && cd->type != XC__J_OBJ) bad(&r, "host.codec_ps", "expected an object");
        else if (r.rc == XC_OK) read_codecs(&r, cd, p);
        p->have |= XC__HAVE_HOST;
    }
    snprintf(p->source, sizeof p->source, "%s", name);
    xc__json_free(root);
    return r.rc;
}

xc_result_t xc__profile_read(const char *path, xc__profile_t *p)
{
    char err[160];
    size_t n = 0;
    char *buf = xc__read_file(path, 1u << 24, &n, err, sizeof err);
    if (!buf) return xc__err(XC_ERR_INVALID, "profile \"%s\": %s", path, err);
    xc_result_t rc = xc__profile_parse(buf, n, path, p);
    free(buf);
    return rc;
}

void xc__profile_free(xc__profile_t *p)
{
    free(p); /* a communicator's selector state lives in the same block */
}
