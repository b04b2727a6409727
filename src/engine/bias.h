/*
 * bias.h -- the communicator's lock (comm->mu), and the bias that lets one
 * thread run express calls without taking it (docs/engine.md "The lock and
 * the express owner's bias").
 *
 * A locked instruction waits for every store before it; on the express
 * path one of those stores went to a line the peer holds, and the lock's
 * acquire and release each waited for that line to come back (a cross-die
 * round trip, ~0.2 us in the far state), which capped a loop of small
 * broadcasts at one round trip per call.  The thread that keeps making
 * express calls is therefore given the lock's bias: it announces itself
 * with a plain store (bias_busy) and checks the owner word again; every
 * other thread takes the mutex through xc__comm_lock, which revokes the
 * bias -- clears the owner word, makes the owner's CPU pass a full
 * barrier (membarrier), and waits until the owner is out of its call.
 * Revocation costs ~15 us (an inter-processor interrupt in this VM) and
 * happens when another thread takes the lock while the bias is held: a
 * heartbeat tick, a wait from another thread.  The owner earns the bias
 * back after bias_need locked express calls.
 */
#ifndef XC_BIAS_H
#define XC_BIAS_H

#include "../core/comm.h"

#include <pthread.h>
#include <stdint.h>

/* xc__comm_lock (comm.h) takes comm->mu and revokes another thread's bias;
 * nothing takes comm->mu otherwise (no condition variable waits on it). */

static inline uintptr_t xc__bias_self(void) { return (uintptr_t)pthread_self(); }

/* 1: the calling thread owns the bias and is inside an express call until
 * xc__bias_leave -- as if it held comm->mu.  0: take the lock. */
static inline int xc__bias_enter(xc_comm_t *comm)
{
    uintptr_t me = xc__bias_self();
    if (__atomic_load_n(&comm->bias_owner, __ATOMIC_RELAXED) != me) return 0;
    __atomic_store_n(&comm->bias_busy, 1, __ATOMIC_RELAXED);
    /* No fence: the revoker's membarrier orders this store before the
     * load below on this CPU (see bias.c). */
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    if (__atomic_load_n(&comm->bias_owner, __ATOMIC_RELAXED) != me) {
        __atomic_store_n(&comm->bias_busy, 0, __ATOMIC_RELEASE);
        return 0;
    }
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    comm->bias_calls++;
    return 1;
}

/* Is a bias held?  Asked by a thread inside an express call or holding
 * the lock, so the holder is the caller (xc__comm_lock revoked anyone
 * else's).  A revoker may clear the word during the owner's call: the
 * answer is then 0, the cautious one (an 8-entry window, no asking
 * ahead). */
static inline int xc__bias_held(const xc_comm_t *comm)
{
    return __atomic_load_n(&comm->bias_owner, __ATOMIC_RELAXED) != 0;
}

static inline void xc__bias_leave(xc_comm_t *comm)
{
    __atomic_store_n(&comm->bias_busy, 0, __ATOMIC_RELEASE);
}

/* After an express call made under the lock: the caller may earn the
 * bias. */
XC__HIDDEN void xc__bias_earn(xc_comm_t *comm);

/* Once per shared-memory communicator at creation: can this process hold
 * biases at all (membarrier's private expedited barrier registered, not a
 * ThreadSanitizer build, XCOLL_EXPRESS_BIAS)? */
XC__HIDDEN void xc__bias_init(xc_comm_t *comm);

#endif
