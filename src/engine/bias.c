/*
 * bias.c -- the communicator's lock and the express owner's bias (bias.h,
 * docs/engine.md "The lock and the express owner's bias").
 *
 * The handshake is Dekker's with an asymmetric barrier, as the shared-
 * memory sleepers' (transport/shm.c): the owner stores bias_busy = 1 and
 * then loads bias_owner, with no fence between them; the revoker stores
 * bias_owner = 0, runs membarrier(PRIVATE_EXPEDITED) -- every running
 * thread of this process passes a full barrier -- and then loads
 * bias_busy.  If the owner's load came after its CPU's barrier it sees the
 * owner word cleared and takes the lock; if it came before, the barrier
 * drained its store, and the revoker sees it busy and waits for the
 * release store of xc__bias_leave.  A thread that is not running has been
 * switched out, which is a full barrier of its own.
 */
#include "bias.h"
#include "../core/membarrier.h"

#include <sched.h>
#include <time.h>

/* Locked express calls that earn a bias; doubled by a bias revoked before
 * it saved that many, reset by one that outlived it (so a thread that
 * takes the lock every few calls costs the owner one revocation per
 * BIAS_NEED_MAX calls at most). */
#define BIAS_NEED_MIN 256u
#define BIAS_NEED_MAX 65536u

void xc__bias_init(xc_comm_t *comm)
{
    comm->bias_need = BIAS_NEED_MIN;
#if defined(__SANITIZE_THREAD__)
    comm->bias_ok = 0; /* ThreadSanitizer does not see membarrier: it would
                        * report the owner's calls as races */
#else
    comm->bias_ok = comm->cfg.express_bias && xc__membarrier_register(XC__MB_PRIVATE);
#endif
}

/* Called with comm->mu held: clear another thread's bias and wait until it
 * is out of its call. */
static void revoke(xc_comm_t *comm)
{
    uintptr_t owner = comm->bias_owner; /* written under mu only */
    if (!owner || owner == xc__bias_self()) return;
    __atomic_store_n(&comm->bias_owner, 0, __ATOMIC_RELAXED);
    if (xc__membarrier(XC__MB_PRIVATE) != 0) {
        /* Registered, so this should not happen; a store buffer drains in
         * far less than a millisecond. */
        XC_WARN("membarrier failed revoking the express bias: waiting 1 ms instead");
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    for (unsigned spins = 0; __atomic_load_n(&comm->bias_busy, __ATOMIC_ACQUIRE); spins++) {
        if (spins < 64) __builtin_ia32_pause();
        else sched_yield(); /* the owner may share this core */
    }
    comm->bias_need = comm->bias_calls >= comm->bias_need ? BIAS_NEED_MIN
                      : comm->bias_need < BIAS_NEED_MAX   ? comm->bias_need * 2
                                                          : BIAS_NEED_MAX;
    comm->bias_earned = 0;
    comm->stats.express_bias_revokes++;
}

void xc__comm_lock(xc_comm_t *comm)
{
    pthread_mutex_lock(&comm->mu);
    revoke(comm);
}

void xc__bias_earn(xc_comm_t *comm)
{
    if (!comm->bias_ok || comm->bias_owner) return;
    if (++comm->bias_earned < comm->bias_need) return;
    comm->bias_calls = 0;
    comm->stats.express_bias_grants++;
    __atomic_store_n(&comm->bias_owner, xc__bias_self(), __ATOMIC_RELAXED);
}
