/*
 * ckpt.h -- internals of checkpoint/restart (xcoll.h, "checkpoint"):
 *
 *   crc32c.c      the shards' checksum
 *   ckpt_file.c   one rank's shard: write atomically, verify, read
 *   ckpt.c        the collective part: save (sync and async), commit
 *                 marker, find the newest complete checkpoint, load
 *
 * On disk (docs/checkpoint.md):
 *   DIR/step-<20 digits>/rank-<r>-of-<n>.xck   one shard per rank
 *   DIR/step-<20 digits>/COMMIT                written last, by rank 0,
 *                                              once every shard is durable
 * A shard is a header, a table of named parts, the parts' bytes and a
 * footer; every piece carries a CRC-32C.  Every file is written under a
 * temporary name, fsynced, renamed, and its directory fsynced, so a crash
 * leaves either the old state or the new, never a torn file under a
 * final name.
 */
#ifndef XC_FT_CKPT_H
#define XC_FT_CKPT_H

#include "../core/common.h"

#include <pthread.h>

#define XC__CKPT_NAME 48   /* bytes of a part's name, NUL included */
#define XC__CKPT_MAGIC "XCKPT\0\0\1"
#define XC__CKPT_END "XCKEND\0\1"

XC__HIDDEN uint32_t xc__crc32c(uint32_t crc, const void *data, size_t n);

/* The shard's header as stored (little-endian x86-64 layout, 64 bytes). */
typedef struct xc__ckpt_hdr {
    char magic[8];
    uint32_t version, rank, nranks, nparts;
    uint64_t step, payload;   /* payload: bytes of all parts */
    uint32_t table_crc;
    uint32_t pad[3];
    uint32_t rsv;
    uint32_t hdr_crc;         /* over the bytes before it */
} xc__ckpt_hdr_t;

typedef struct xc__ckpt_ent {
    char name[XC__CKPT_NAME];
    uint64_t bytes;
    uint32_t crc, pad;
} xc__ckpt_ent_t;

typedef struct xc__ckpt_foot {
    char magic[8];
    uint32_t hdr_crc;         /* the header's, again: the file is whole */
    uint32_t foot_crc;
} xc__ckpt_foot_t;

/* snprintf that says whether it fitted (paths: a truncated path must
 * never name another file). */
XC__HIDDEN int xc__ckpt_fmt(char *out, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Paths (into buffers of PATH_MAX; the directory is checked to leave room). */
XC__HIDDEN void xc__ckpt_step_dir(char *out, size_t cap, const char *dir, uint64_t step);
XC__HIDDEN void xc__ckpt_shard_path(char *out, size_t cap, const char *dir, uint64_t step,
                                    int rank, int nranks);

/* Write this rank's shard of `parts` durably; *hdr_crc receives its
 * header's checksum (recorded in the commit marker). */
XC__HIDDEN xc_result_t xc__ckpt_write_shard(const char *dir, uint64_t step, int rank, int nranks,
                                            const xc_ckpt_part_t *parts, int nparts,
                                            uint32_t *hdr_crc);

/* Check this rank's shard against `parts` (names and sizes) and every
 * checksum, and its header checksum against `want_crc` (from the commit
 * marker); read the parts' bytes into parts[i].data only when `fill`.
 * Nothing is written into the parts unless the whole shard verifies. */
XC__HIDDEN xc_result_t xc__ckpt_read_shard(const char *dir, uint64_t step, int rank, int nranks,
                                           xc_ckpt_part_t *parts, int nparts, uint32_t want_crc,
                                           int fill);

/* fsync a directory (after a rename or unlink in it). */
XC__HIDDEN xc_result_t xc__ckpt_fsync_dir(const char *dir);

/* Write `len` bytes to DIR/NAME atomically (temporary, fsync, rename,
 * fsync of the directory). */
XC__HIDDEN xc_result_t xc__ckpt_write_atomic(const char *dir, const char *name,
                                             const void *data, size_t len);

#endif
