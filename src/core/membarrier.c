/*
 * membarrier.c -- registration for, and issue of, membarrier's expedited
 * barriers (membarrier.h).
 */
#include "membarrier.h"

#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

static const struct {
    int cmd, reg;
} cmds[XC__MB_KINDS] = {
    [XC__MB_GLOBAL] = {MEMBARRIER_CMD_GLOBAL_EXPEDITED, MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED},
    [XC__MB_PRIVATE] = {MEMBARRIER_CMD_PRIVATE_EXPEDITED, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED},
};

int xc__membarrier_register(xc__mb_kind_t kind)
{
    static int done[XC__MB_KINDS] = {-1, -1}; /* per process; registration is idempotent */
    int d = __atomic_load_n(&done[kind], __ATOMIC_ACQUIRE);
    if (d >= 0) return d;
    long q = syscall(SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
    int ok = q > 0 && (q & cmds[kind].cmd) && syscall(SYS_membarrier, cmds[kind].reg, 0, 0) == 0;
    __atomic_store_n(&done[kind], ok, __ATOMIC_RELEASE);
    return ok;
}

int xc__membarrier(xc__mb_kind_t kind)
{
    return (int)syscall(SYS_membarrier, cmds[kind].cmd, 0, 0);
}
