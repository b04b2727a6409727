/*
 * flight_prog.c -- a job for the flight-recorder test (flight.sh): every
 * rank runs 9 all-reduces and says so, then rank `late` sleeps `sleep_ms`
 * before the 10th, and every rank prints the result of the 10th.
 *
 *   flight_prog LATE SLEEP_MS
 */
#include <xcoll.h>

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: flight_prog LATE SLEEP_MS\n");
        return 2;
    }
    int late = atoi(argv[1]), ms = atoi(argv[2]);
    xc_comm_t *c;
    if (xc_comm_init_env(&c, NULL) != XC_OK) {
        fprintf(stderr, "init: %s\n", xc_last_error());
        return 1;
    }
    float x[1000] = {0};
    for (int i = 0; i < 9; i++)
        if (xc_allreduce(x, x, 1000, XC_FLOAT32, XC_SUM, c) != XC_OK) return 1;
    printf("rank %d: 9 done\n", xc_comm_rank(c)); /* flight.sh waits for these */
    fflush(stdout);
    if (xc_comm_rank(c) == late) {
        struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L}, rem;
        while (nanosleep(&ts, &rem) != 0) ts = rem; /* SIGUSR1 must not end the stall */
    }
    xc_result_t rc = xc_allreduce(x, x, 1000, XC_FLOAT32, XC_SUM, c);
    printf("rank %d: %s\n", xc_comm_rank(c), xc_err_name(rc));
    xc_comm_destroy(c);
    return 0;
}
