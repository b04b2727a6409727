/*
 * promote.h -- huge pages for the buffers that peers copy single copy
 * (promote.c).
 */
#ifndef XC_PROMOTE_H
#define XC_PROMOTE_H

#include "common.h"

#include <stddef.h>

/* A transparent huge page (x86-64): xc_mem_alloc's alignment and unit,
 * promotion's unit. */
#define XC__HUGE_PAGE ((size_t)2 << 20)

/* The owner of [buf, buf + len) is about to publish it for its peers'
 * process_vm_readv / process_vm_writev.  The `after`-th time the same
 * range is published (0: never), the 2 MiB pages it covers are collapsed
 * into transparent huge pages (MADV_COLLAPSE), once: those inside it, and
 * one it shares with other memory when 64 KiB of the range is in it and
 * the page is (nearly) all resident.  Ranges under 64 KiB: never.  Never
 * fails: a refusal leaves the pages as they were. */
XC__HIDDEN void xc__promote(const void *buf, size_t len, int after);

/* Whether [buf, buf + len) was promoted: a collapse of the pages it
 * covers, most of it, succeeded (the range as xc__promote saw it, still
 * in its table).  No system call: the table's word, which goes stale if
 * the memory is freed and mapped anew at the same address (then a peer's
 * single copy reads ordinary pages: slower, never wrong). */
XC__HIDDEN int xc__promoted(const void *buf, size_t len);

/* How many collapses the kernel has refused for want of a huge page or
 * with pages busy (ENOMEM, EAGAIN) in this process: the machine's
 * refusals, which tests tell apart from promotion's own choices. */
XC__HIDDEN unsigned long xc__promote_refusals(void);

#endif
