/*
 * trace.h -- the engine's side of tracing (trace.c): whether recording is
 * on, a lane per communicator, and one span per completed operation.
 */
#ifndef XC_TRACE_H
#define XC_TRACE_H

#include "../core/common.h"

/* 1 once recording is on (read with a plain load on hot paths: it only
 * ever goes 0 -> 1, at the first communicator's creation). */
XC__HIDDEN extern int xc__trace_on;
/* Decide from the environment (once per process). */
XC__HIDDEN void xc__trace_init(void);
/* A lane for a new communicator of rank `rank` (the first one names the
 * process in the trace); 0 when recording is off. */
XC__HIDDEN int xc__trace_comm_lane(int rank);
/* A communication span from t0 to now on `lane`. */
XC__HIDDEN void xc__trace_comm_span(int lane, uint64_t t0, const char *name);

#endif
