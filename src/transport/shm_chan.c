/*
 * shm_chan.c -- shared-memory channels: the transport of frames between
 * ranks of one node (point-to-point messages, schedule-based collectives,
 * rendezvous acknowledgements).
 *
 * Every ordered pair of ranks on one node has a single-producer single-
 * consumer ring of flagged lines in the node's segment (shm.h,
 * shm_setup.c): each 64-byte line carries up to 56 bytes of the byte
 * stream (stream.c's frames, the same as on a socket) and, in its last 8
 * bytes, a tag -- the line's number in the stream (from 1) and how many of
 * its bytes count.  The sender writes the bytes, then the tag (x86 keeps
 * stores in order); the receiver polls the tag of the line it expects, so
 * a small frame (a 48-byte header and up to 8 bytes) arrives in the very
 * line that signals it: one cache-line hand-off, where a byte ring with a
 * `head` counter costs two (the counter, then the data) and the sender's
 * fence waits for the counter's line.  A line is written once per lap,
 * never appended to: a put starts a new line.  A plain point-to-point
 * frame of up to 48 bytes (the express path's sends) goes in one short
 * line that carries its tag, type and length instead of the header, which
 * the receiver rebuilds (TAG_SHORT below).
 *
 * Flow control: the receiver publishes `tail` (lines consumed, its own
 * cache line) a quarter of the ring at a time, and the sender reads it
 * only when the room it last saw is too small -- once the receiver has
 * drained, the sender sees at least three quarters free.  A sender out of
 * room (it may sleep on its bell) has filled the ring up to the last
 * publication, so the receiver has a whole ring to read and publishes
 * (waking it) within a quarter of it: input is always drained.  A frame
 * larger than the free room goes in pieces as room appears.
 *
 * Costs: a message of n bytes is copied twice (in and out) in 56-byte
 * pieces, 64/56 of n in the ring; large point-to-point payloads do not
 * travel here at all: from XCOLL_SHM_P2P_CMA_MIN_KB the frame carries their
 * address and the receiver reads them in one copy (match.c's rendezvous).
 *
 * Channels have no descriptor: the engine services them on its turns
 * (xc__comm_advance, xc__comm_poll), so progress needs no system call.
 * Peers on other nodes have no channel (chans[p] == NULL): their frames
 * take the socket.  A dead peer is noticed on its socket (end of file),
 * which stays open beside the channel and carries error and goodbye
 * frames.
 */
#include "../core/comm.h"
#include "shm.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define LINE 64
#define LINE_BYTES 56 /* payload bytes of a line; its tag follows */
#define BATCH 64      /* lines written before their tags (4 KiB) */
#define PREFETCH 16   /* lines of a batch the reader fetches ahead */
/* A put of this many bytes or more goes in bulk: a descriptor line (tag
 * TAG_BULK, payload the byte count) published after the raw bytes that
 * fill the lines behind it -- one copy at memcpy speed each side, where
 * 56-byte pieces cost ~20 cycles a line more (a send/receive of 8 KiB:
 * 3.1-3.7 us against 2.3 for the byte ring).  Below, lines.  The
 * threshold was 1 KiB until the fiftieth session; on the AMD EPYC VM then
 * (2 ranks, send/receive, interleaved runs, us) bulk led from frames of
 * ~150 bytes: payloads of 96 B 0.32-0.35 against 0.36-0.37 in lines, 384 B
 * 0.38-0.41 / 0.49-0.50, 512 B 0.41-0.44 / 0.56-0.59, 768 B 0.43-0.49 /
 * 0.61-0.66; a 64-byte payload (a 112-byte frame: two lines, or a
 * descriptor and two) the same either way. */
#define BULK_MIN 128
#define TAG_BULK 63
/* A plain point-to-point frame (xc__p2p_is_plain: the express path's
 * sends) of up to SHORT_MAX bytes goes in one short line: its tag (4
 * bytes), type (1), byte count (1), two zero bytes, then the payload --
 * the 48-byte header it stands for is rebuilt by the receiver.  In full,
 * a header and more than 8 bytes take two lines, and two lines cost a
 * 2-rank send/receive 0.06-0.07 us more than one (0.23 -> 0.30 us) in the
 * VM's slower placement. */
#define TAG_SHORT 62
#define SHORT_HEAD 8
#define SHORT_MAX (LINE_BYTES - SHORT_HEAD)
#define BULK_PREFETCH 64

/* Copy `n` bytes between `buf` and the ring at byte position `pos`. */
static void ring_copy(char *ring, size_t size, uint64_t pos, void *buf, size_t n, int in)
{
    size_t at = (size_t)(pos & (size_t)(size - 1)), first = size - at < n ? size - at : n;
    if (in) {
        xc__copy(ring + at, buf, first);
        xc__copy(ring, (char *)buf + first, n - first);
    } else {
        xc__copy(buf, ring + at, first);
        xc__copy((char *)buf + first, ring, n - first);
    }
}

static inline uint64_t *line_tag(char *line) { return (uint64_t *)(line + LINE_BYTES); }

/* Line `no` (0, 1, ...) of a ring of `nlines` (a power of two). */
static inline char *line_at(char *ring, size_t nlines, uint64_t no)
{
    return ring + (size_t)(no & (nlines - 1)) * LINE;
}

/* The tag of line `no` holding `nb` bytes, `after` more lines of its batch
 * behind it (at most 63): never 0 (the ring's fill). */
static inline uint64_t tag_of(uint64_t no, size_t after, size_t nb)
{
    return (no + 1) << 12 | after << 6 | nb;
}
static inline uint64_t tag_no(uint64_t tag) { return tag >> 12; }
static inline size_t tag_after(uint64_t tag) { return (size_t)(tag >> 6) & 63; }
static inline size_t tag_bytes(uint64_t tag) { return (size_t)tag & 63; }

/* The frame short line `line` stands for: its header into *h, its length
 * (header and payload) returned; 0 if the line is malformed. */
static size_t short_frame(const xc_comm_t *comm, const char *line, xc__hdr_t *h)
{
    int32_t tag;
    memcpy(&tag, line, sizeof tag);
    xc_dtype_t dt = (xc_dtype_t)(uint8_t)line[4];
    size_t len = (uint8_t)line[5], es = xc__dtype_size(dt);
    if (!es || len > SHORT_MAX || len % es || line[6] || line[7]) return 0;
    xc__p2p_plain_hdr(comm, h, dt, len / es, tag);
    return sizeof *h + len;
}

/* Publish `tail` a quarter of the ring at a time (after lines read). */
static void chan_publish(xc_comm_t *comm, xc__conn_t *c)
{
    if (c->ctail - c->ctail_pub >= c->cbytes / LINE / 4) {
        c->ctail_pub = c->ctail;
        xc__shm_publish_to(comm->node_shm, &c->crx->tail, c->ctail, comm->local_of[c->peer]);
    }
}

static ssize_t chan_put(xc_comm_t *comm, xc__conn_t *c, struct iovec *iov, int n)
{
    size_t nlines = c->cbytes / LINE, want = 0;
    for (int i = 0; i < n; i++) want += iov[i].iov_len;
    size_t room = nlines - (size_t)(c->chead - c->ctx_tail);
    if (room * LINE_BYTES < want) {
        c->ctx_tail = xc__shm_load(&c->ctx->tail);
        room = nlines - (size_t)(c->chead - c->ctx_tail);
    }
    if (want && want <= LINE_BYTES && room) {
        /* A whole small frame (a header and up to 8 bytes): one line, its
         * pieces side by side, then its tag -- what the batch loop below
         * does for it, without the loop (a send/receive of 8 bytes: ~240
         * of its ~2 600 instructions were that loop's). */
        char *line = line_at(c->ctxd, nlines, c->chead);
        size_t nb = 0;
        for (int i = 0; i < n; i++) {
            memcpy(line + nb, iov[i].iov_base, iov[i].iov_len);
            nb += iov[i].iov_len;
        }
        __atomic_store_n(line_tag(line), tag_of(c->chead, 0, nb), __ATOMIC_RELEASE);
        c->chead++;
        xc__shm_ring_rank(comm->node_shm, comm->local_of[c->peer]);
        return (ssize_t)nb;
    }
    if (want >= BULK_MIN) {
        if (room < 2) return 0;
        size_t bytes = want < (room - 1) * LINE ? want : (room - 1) * LINE, done = 0;
        uint64_t pos = (c->chead + 1) * LINE; /* the raw bytes follow the descriptor */
        for (int i = 0; i < n && done < bytes; i++) {
            size_t k = iov[i].iov_len < bytes - done ? iov[i].iov_len : bytes - done;
            ring_copy(c->ctxd, c->cbytes, pos + done, iov[i].iov_base, k, 1);
            done += k;
        }
        char *line = line_at(c->ctxd, nlines, c->chead);
        memcpy(line, &bytes, sizeof bytes);
        __atomic_store_n(line_tag(line), tag_of(c->chead, 0, TAG_BULK), __ATOMIC_RELEASE);
        c->chead += 1 + (bytes + LINE - 1) / LINE;
        xc__shm_ring_rank(comm->node_shm, comm->local_of[c->peer]);
        return (ssize_t)bytes;
    }
    size_t total = 0, ioff = 0;
    uint64_t no = c->chead, end = c->chead + room;
    int i = 0;
    while (i < n && iov[i].iov_len == 0) i++;
    while (no < end && i < n) {
        /* A batch: the bytes of up to BATCH lines, then their tags from the
         * last to the first, so the reader, polling the first, finds the
         * whole batch there and copies it at streaming speed (chasing the
         * writer line by line costs a hand-off per line: 8 KiB took 3x as
         * long). */
        uint8_t nbs[BATCH];
        size_t k0 = 0;
        for (; k0 < BATCH && no + k0 < end && i < n; k0++) {
            char *line = line_at(c->ctxd, nlines, no + k0);
            size_t nb = 0;
            while (nb < LINE_BYTES && i < n) {
                const char *src = (const char *)iov[i].iov_base + ioff;
                size_t k = iov[i].iov_len - ioff;
                if (nb == 0 && k >= LINE_BYTES) {
                    memcpy(line, src, LINE_BYTES); /* inlined: a whole line */
                    k = LINE_BYTES;
                } else {
                    if (k > LINE_BYTES - nb) k = LINE_BYTES - nb;
                    memcpy(line + nb, src, k);
                }
                nb += k;
                ioff += k;
                if (ioff == iov[i].iov_len) {
                    ioff = 0;
                    while (++i < n && iov[i].iov_len == 0) {}
                }
            }
            nbs[k0] = (uint8_t)nb;
            total += nb;
        }
        for (size_t k = k0; k-- > 0;)
            __atomic_store_n(line_tag(line_at(c->ctxd, nlines, no + k)), tag_of(no + k, k0 - 1 - k, nbs[k]),
                             __ATOMIC_RELEASE);
        no += k0;
    }
    if (!total) return 0;
    c->chead = no;
    xc__shm_ring_rank(comm->node_shm, comm->local_of[c->peer]);
    return (ssize_t)total;
}

static ssize_t chan_get(xc_comm_t *comm, xc__conn_t *c, struct iovec *iov, int n)
{
    (void)n;
    size_t nlines = c->cbytes / LINE, want = iov->iov_len, got = 0;
    char *dst = iov->iov_base;
    while (got < want) {
        char *line = line_at(c->crxd, nlines, c->ctail);
        uint64_t tag = __atomic_load_n(line_tag(line), __ATOMIC_ACQUIRE);
        if (tag_no(tag) != c->ctail + 1) break;
        size_t nb = tag_bytes(tag);
        /* The rest of the line's batch was written before its first tag:
         * fetch it at once, so a frame of several lines waits for one
         * hand-off, not one per line (a 32-byte message is two lines). */
        uint64_t last = c->ctail + tag_after(tag);
        if (tag_after(tag) && last > c->crx_pref) {
            uint64_t from = c->crx_pref > c->ctail ? c->crx_pref + 1 : c->ctail + 1;
            for (uint64_t i = from; i <= last && i <= c->ctail + PREFETCH; i++)
                __builtin_prefetch(line_at(c->crxd, nlines, i), 0, 3);
            c->crx_pref = last < c->ctail + PREFETCH ? last : c->ctail + PREFETCH;
        }
        if (nb == TAG_SHORT) {
            /* Its frame rebuilt, then served from the copy (a header read
             * and a payload read are two calls). */
            union {
                xc__hdr_t h;
                char b[sizeof(xc__hdr_t) + SHORT_MAX];
            } img;
            size_t flen = short_frame(comm, line, &img.h);
            if (!flen || c->crx_off >= flen) {
                nb = (uint8_t)line[5];
                goto corrupt;
            }
            memcpy(img.b + sizeof img.h, line + SHORT_HEAD, flen - sizeof img.h);
            size_t k = flen - c->crx_off;
            if (k > want - got) k = want - got;
            memcpy(dst + got, img.b + c->crx_off, k);
            got += k;
            c->crx_off += k;
            if (c->crx_off == flen) {
                c->ctail++;
                c->crx_off = 0;
            }
            continue;
        }
        if (nb == TAG_BULK) {
            uint64_t bytes;
            memcpy(&bytes, line, sizeof bytes);
            if (bytes == 0 || bytes > (nlines - 1) * LINE || c->crx_off >= bytes) {
                nb = (size_t)bytes;
                goto corrupt;
            }
            if (c->crx_off == 0) {
                uint64_t raw = (bytes + LINE - 1) / LINE;
                for (uint64_t i = 1; i <= raw && i <= BULK_PREFETCH; i++)
                    __builtin_prefetch(line_at(c->crxd, nlines, c->ctail + i), 0, 3);
            }
            size_t k = (size_t)bytes - c->crx_off;
            if (k > want - got) k = want - got;
            ring_copy(c->crxd, c->cbytes, (c->ctail + 1) * LINE + c->crx_off, dst + got, k, 0);
            got += k;
            c->crx_off += k;
            if (c->crx_off == bytes) {
                /* The raw lines' tag words hold the message's bytes: clear
                 * them, or at the next lap a stale word equal to the tag
                 * then expected (a user's int64 can be) would pass for a
                 * line the sender has not written.  Before `tail` covers
                 * them, so the sender cannot be writing them yet. */
                uint64_t raw = (bytes + LINE - 1) / LINE;
                for (uint64_t i = 1; i <= raw; i++)
                    __atomic_store_n(line_tag(line_at(c->crxd, nlines, c->ctail + i)), 0,
                                     __ATOMIC_RELAXED);
                c->ctail += 1 + raw;
                c->crx_off = 0;
            }
            continue;
        }
        if (nb == 0 || nb > LINE_BYTES || c->crx_off >= nb) {
        corrupt:
            xc__comm_poison(comm, XC_ERR_PROTOCOL, 0,
                            "rank %d's shared-memory channel holds a corrupt line "
                            "(line %llu claims %zu bytes)",
                            c->peer, (unsigned long long)c->ctail, nb);
            c->state = XC__CONN_CLOSED;
            return -1;
        }
        size_t k = nb - c->crx_off;
        if (k > want - got) k = want - got;
        if (k == LINE_BYTES) memcpy(dst + got, line, LINE_BYTES); /* inlined */
        else memcpy(dst + got, line + c->crx_off, k);
        got += k;
        c->crx_off += k;
        if (c->crx_off == nb) {
            c->ctail++;
            c->crx_off = 0;
        }
    }
    if (!got) return 0;
    chan_publish(comm, c);
    return (ssize_t)got;
}

int xc__chan_put_frame(xc_comm_t *comm, xc__conn_t *c, const xc__hdr_t *h, const void *buf)
{
    size_t want = sizeof *h + h->len, nlines = c->cbytes / LINE;
    int short_line = h->len <= SHORT_MAX && xc__p2p_is_plain(comm, h);
    /* The lines it takes: one (a short line, or a header and up to 8
     * bytes), or a descriptor and the raw lines (bulk), or 56-byte pieces. */
    size_t need = short_line || want <= LINE_BYTES ? 1
                  : want >= BULK_MIN               ? 1 + (want + LINE - 1) / LINE
                                                   : (want + LINE_BYTES - 1) / LINE_BYTES;
    if (nlines - (size_t)(c->chead - c->ctx_tail) < need) {
        c->ctx_tail = xc__shm_load(&c->ctx->tail);
        if (nlines - (size_t)(c->chead - c->ctx_tail) < need) return 0;
    }
    if (short_line) {
        char *line = line_at(c->ctxd, nlines, c->chead);
        int32_t tag = h->tag;
        memcpy(line, &tag, sizeof tag);
        line[4] = (char)h->dtype;
        line[5] = (char)h->len;
        line[6] = line[7] = 0;
        memcpy(line + SHORT_HEAD, buf, (size_t)h->len);
        __atomic_store_n(line_tag(line), tag_of(c->chead, 0, TAG_SHORT), __ATOMIC_RELEASE);
        c->chead++;
        xc__shm_ring_rank(comm->node_shm, comm->local_of[c->peer]);
        return 1;
    }
    struct iovec iov[2] = {{(void *)h, sizeof *h}, {(void *)buf, (size_t)h->len}};
    return chan_put(comm, c, iov, h->len ? 2 : 1) == (ssize_t)want;
}

/* The header of the frame at the head of `c`'s incoming ring into *h, if
 * `c` is between frames and the frame is there whole: 1; nothing there
 * yet: 0; else -1 (a part, or lines chan_get will call corrupt).  Reads
 * in place, consumes nothing. */
static int chan_peek_frame(const xc_comm_t *comm, const xc__conn_t *c, xc__hdr_t *h)
{
    size_t nlines = c->cbytes / LINE, have;
    char *line = line_at(c->crxd, nlines, c->ctail);
    uint64_t tag = __atomic_load_n(line_tag(line), __ATOMIC_ACQUIRE);
    if (tag_no(tag) != c->ctail + 1) return 0;
    if (c->crx_off || c->reading || c->rx_dropped || !xc__stream_idle(c)) return -1;
    size_t nb = tag_bytes(tag);
    if (nb == TAG_SHORT) return short_frame(comm, line, h) ? 1 : -1;
    if (nb == TAG_BULK) {
        uint64_t bytes;
        memcpy(&bytes, line, sizeof bytes);
        if (bytes < sizeof *h || bytes > (nlines - 1) * LINE) return -1;
        ring_copy(c->crxd, c->cbytes, (c->ctail + 1) * LINE, h, sizeof *h, 0);
        have = (size_t)bytes;
    } else {
        /* A frame under BULK_MIN is one batch: its first line holds the
         * header, the batch's other lines were written before that tag. */
        if (nb < sizeof *h || nb > LINE_BYTES) return -1;
        memcpy(h, line, sizeof *h);
        have = nb;
        for (size_t k = 1; k <= tag_after(tag); k++) {
            uint64_t t = __atomic_load_n(line_tag(line_at(c->crxd, nlines, c->ctail + k)),
                                         __ATOMIC_RELAXED);
            if (tag_no(t) != c->ctail + k + 1 || tag_bytes(t) == 0 || tag_bytes(t) > LINE_BYTES)
                return -1;
            have += tag_bytes(t);
        }
    }
    return h->len <= have - sizeof *h ? 1 : -1;
}

int xc__chan_take_p2p(xc_comm_t *comm, int peer, xc__rx_t *rx)
{
    xc__conn_t *c = comm->chans[peer];
    xc__hdr_t h;
    int r = chan_peek_frame(comm, c, &h);
    if (r <= 0) return r;
    if (xc__frame_check(&h, (uint32_t)comm->uid) || !xc__match_p2p_direct(comm, peer, rx, &h))
        return -1;
    char *line = line_at(c->crxd, c->cbytes / LINE, c->ctail);
    if (tag_bytes(__atomic_load_n(line_tag(line), __ATOMIC_RELAXED)) == TAG_SHORT) {
        memcpy(rx->buf, line + SHORT_HEAD, (size_t)h.len);
        c->ctail++;
        chan_publish(comm, c);
        comm->stats.bytes_recv[XC_TRANSPORT_SHM] += h.len;
        rx->done = 1;
        return 1;
    }
    struct iovec hv = {&h, sizeof h}, pv = {rx->buf, (size_t)h.len};
    if (chan_get(comm, c, &hv, 1) != (ssize_t)sizeof h ||
        (h.len && chan_get(comm, c, &pv, 1) != (ssize_t)h.len)) {
        /* Peeked whole, so only a poisoned channel gets here. */
        if (xc__comm_status(comm) == XC_OK)
            xc__comm_poison(comm, XC_ERR_INTERNAL, 0,
                            "rank %d's shared-memory channel lost a frame it held whole", peer);
        c->state = XC__CONN_CLOSED;
        return -1;
    }
    comm->stats.bytes_recv[XC_TRANSPORT_SHM] += h.len;
    rx->done = 1;
    return 1;
}

/* Has the next line of `c`'s incoming ring arrived? */
static int chan_ready(const xc__conn_t *c)
{
    char *line = line_at(c->crxd, c->cbytes / LINE, c->ctail);
    return tag_no(__atomic_load_n(line_tag(line), __ATOMIC_RELAXED)) == c->ctail + 1;
}

/* Frames left queued (the ring is full) make a backlog the engine keeps
 * servicing even with no operation pending (an ACK, for instance): then
 * the progress thread is woken for it.  With an operation pending, its
 * submission already decided who drives it (xc__op_submit wakes the
 * thread unless the caller is about to wait). */
static void chan_write(xc_comm_t *comm, xc__conn_t *c)
{
    xc__stream_write(comm, c, chan_put);
    if (c->sq_head && !comm->chan_backlog) {
        comm->chan_backlog = 1;
        if (comm->has_thread && comm->waiters == 0 && comm->npending == 0) xc__comm_kick(comm);
    }
}

static void chan_on_ready(xc_comm_t *comm, xc__conn_t *c, short revents)
{
    (void)revents;
    xc__stream_read(comm, c, chan_get);
    chan_write(comm, c);
}

static short chan_poll_events(const xc__conn_t *c)
{
    (void)c;
    return 0; /* nothing to poll: serviced on every engine turn */
}

const xc__transport_t xc__chan_transport = {
    .name = "shm",
    .kind = XC_TRANSPORT_SHM,
    .post_send = xc__stream_post,
    .write = chan_write,
    .on_ready = chan_on_ready,
    .poll_events = chan_poll_events,
};

xc_result_t xc__chan_open_all(xc_comm_t *comm)
{
    xc__shm_t *s = comm->node_shm;
    if (!s || !s->chan_bytes) return XC_OK;
    int me = comm->local_rank;
    xc__conn_t **chans = calloc((size_t)comm->size, sizeof *chans);
    if (!chans) return xc__err(XC_ERR_NOMEM, "out of memory (shared-memory channels)");
    for (int p = 0; p < comm->size; p++) {
        if (p == comm->rank || comm->node_of[p] != comm->node) continue;
        xc__conn_t *c = calloc(1, sizeof *c);
        if (!c) {
            for (int q = 0; q < p; q++) free(chans[q]);
            free(chans);
            return xc__err(XC_ERR_NOMEM, "out of memory (shared-memory channels)");
        }
        c->tp = &xc__chan_transport;
        c->fd = -1;
        c->peer = p;
        if (comm->conns[p]) memcpy(c->addr, comm->conns[p]->addr, sizeof c->addr);
        int lp = comm->local_of[p];
        c->ctx = xc__shm_chan_ctl(s, me, lp);
        c->ctxd = xc__shm_chan_data(s, me, lp);
        c->crx = xc__shm_chan_ctl(s, lp, me);
        c->crxd = xc__shm_chan_data(s, lp, me);
        c->cbytes = s->chan_bytes;
        chans[p] = c;
    }
    comm->chans = chans;
    return XC_OK;
}

void xc__chan_service(xc_comm_t *comm)
{
    int backlog = 0;
    for (int p = 0; p < comm->size; p++) {
        xc__conn_t *c = comm->chans[p];
        if (!c || c->state == XC__CONN_CLOSED) continue;
        if (chan_ready(c)) xc__stream_read(comm, c, chan_get);
        if (c->sq_head) chan_write(comm, c);
        backlog |= c->sq_head != NULL && c->state != XC__CONN_CLOSED;
    }
    comm->chan_backlog = backlog;
}

void xc__chan_drain(xc_comm_t *comm, int peer)
{
    xc__conn_t *c = comm->chans ? comm->chans[peer] : NULL;
    if (c && c->state != XC__CONN_CLOSED) xc__stream_read(comm, c, chan_get);
}

/* A ring's pages are mapped on first touch, lazily (pages of pairs that
 * never talk are never touched: shm.c).  The first lap of a ring then
 * costs a fault per 4 KiB on each side -- ~5 us a page on the AMD EPYC
 * VM, where a 2-rank exchange of 4 KiB took 5.4-6.3 us for its first 15
 * laps' worth and 0.5-0.7 after.  MADV_POPULATE_WRITE (Linux 5.14) maps
 * them without a store; elsewhere a load per page maps them just as well
 * (a shared mapping's read fault maps the page writable, contents kept). */
void xc__chan_prefault(xc_comm_t *comm, int peer)
{
    xc__conn_t *c = comm->chans && peer >= 0 && peer < comm->size ? comm->chans[peer] : NULL;
    if (!c) return;
    char *ring[2] = {c->ctxd, c->crxd};
    for (int i = 0; i < 2; i++) {
#ifdef MADV_POPULATE_WRITE
        if (madvise(ring[i], c->cbytes, MADV_POPULATE_WRITE) == 0) continue;
#endif
        for (size_t off = 0; off < c->cbytes; off += 4096) (void)*(volatile char *)(ring[i] + off);
    }
}

void xc__chan_flush(xc_comm_t *comm, uint64_t deadline_ns)
{
    if (!comm->chans) return;
    for (;;) {
        int pending = 0;
        xc__chan_service(comm);
        for (int p = 0; p < comm->size; p++)
            pending |= comm->chans[p] && comm->chans[p]->sq_head &&
                       comm->chans[p]->state != XC__CONN_CLOSED;
        if (!pending || xc__now_ns() >= deadline_ns) return;
        sched_yield();
    }
}

void xc__chan_free_all(xc_comm_t *comm)
{
    if (!comm->chans) return;
    for (int p = 0; p < comm->size; p++) xc__conn_free(comm->chans[p]);
    free(comm->chans);
    comm->chans = NULL;
}
