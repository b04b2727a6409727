/*
 * membarrier.h -- the asymmetric barriers of membarrier(2): a thread on the
 * rare side of a Dekker handshake makes every running thread of this
 * process (private) or of every registered process (global) pass a full
 * barrier, so that the common side needs no fence (transport/shm.c's
 * sleepers, engine/bias.c's revocations).
 */
#ifndef XC_MEMBARRIER_H
#define XC_MEMBARRIER_H

#include "common.h"

typedef enum { XC__MB_GLOBAL, XC__MB_PRIVATE, XC__MB_KINDS } xc__mb_kind_t;

/* Register this process for `kind` (once; later calls return the first
 * answer).  1: xc__membarrier(kind) may be used. */
XC__HIDDEN int xc__membarrier_register(xc__mb_kind_t kind);
/* The barrier of `kind` (registered); 0 on success. */
XC__HIDDEN int xc__membarrier(xc__mb_kind_t kind);

#endif
