/*
 * mem_share.h -- blocks of xc_mem_alloc_shared that node peers map and
 * copy with memcpy instead of process_vm_readv / _writev (mem_share.c).
 */
#ifndef XC_MEM_SHARE_H
#define XC_MEM_SHARE_H

#include "common.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Blocks a process lists for its peers (more: single copy). */
#define XC__SHARE_MAX 60

/* Owner side.  This process's table of shared blocks, made on first use:
 * the descriptor number peers fetch it by and a nonce that names it
 * (published in the node segment, shm_setup.c).  0 on success, -1 when
 * it cannot be made (peers then single-copy as before). */
XC__HIDDEN int xc__share_table(int *fd, uint64_t *nonce);
/* List [base, base + len), mapped from memfd `fd`, in the table (0), or
 * not (-1: no table, or full); take it out again. */
XC__HIDDEN int xc__share_add(void *base, size_t len, int fd);
XC__HIDDEN void xc__share_remove(void *base);

/* Reader side.  Copy `len` bytes between `local` and address `remote` of
 * process `pid`, whose table is descriptor `tab_fd` there with `nonce`:
 * by memcpy through a mapping of the peer's block when [remote, remote +
 * len) lies in one of its shared blocks (`write`: into the peer), and
 * return 1; 0 when it does not (or the peer's table or block cannot be
 * mapped): the caller copies single copy. */
XC__HIDDEN int xc__share_copy(pid_t pid, int tab_fd, uint64_t nonce, void *local, uintptr_t remote,
                              size_t len, int write);

/* One single-copy transfer of `len` bytes between `local` and address
 * `remote` of process `pid`: through a mapping (xc__share_copy) where the
 * peer's memory is shared, else process_vm_readv / _writev.  0, or an
 * errno (EIO for a short transfer that made no progress). */
XC__HIDDEN int xc__peer_xfer(pid_t pid, int tab_fd, uint64_t nonce, void *local, uintptr_t remote,
                             size_t len, int write);

#endif
