#!/bin/sh
# launchers.sh KIND PROG CTL XRUN -- run PROG (tests/launch/env_init: it
# creates a communicator with xc_comm_init_env, runs an allreduce, checks it
# and prints "rank r/size ok") as 3 ranks started the way KIND starts them:
#   xcoll-run  xcoll-run -n 3 (the launcher hosts the store)
#   openmpi    mpirun.openmpi ... -x XCOLL_ADDR (rank 0 hosts the store;
#              rank and size from OMPI_COMM_WORLD_*)
#   mpich      mpiexec.mpich -n 3 with XCOLL_ADDR exported (PMI_RANK/PMI_SIZE)
#   torchrun   3 processes with RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
#              MASTER_PORT (rank 0 hosts the store in-process)
#   slurm      3 processes with SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID and
#              XCOLL_ADDR
# A launcher that is not installed makes the test skip (exit 77).
# CTL is launch_ctl (used to pick a free port).
KIND=$1 PROG=$2 CTL=$3 XRUN=$4
. "$(dirname "$0")/lib.sh"
N=3

# The variables of every launcher that xc_comm_init_env reads, so that the
# environment this test runs in (a CI job under Slurm, say) cannot win over
# the launcher under test.
unset XCOLL_RANK XCOLL_SIZE XCOLL_LOCAL_RANK XCOLL_LOCAL_SIZE XCOLL_ADDR \
      XCOLL_STORE_EXTERNAL RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE \
      MASTER_ADDR MASTER_PORT SLURM_PROCID SLURM_NTASKS SLURM_LOCALID \
      SLURM_NNODES SLURM_JOB_ID SLURM_STEP_ID OMPI_COMM_WORLD_RANK \
      OMPI_COMM_WORLD_SIZE OMPI_COMM_WORLD_LOCAL_RANK PMI_RANK PMI_SIZE \
      PMI_FD PMI_PORT
export XCOLL_TIMEOUT_MS=${XCOLL_TIMEOUT_MS:-30000}

skip() { echo "SKIP: $*"; exit 77; }
need() { command -v "$1" >/dev/null 2>&1 || skip "$1 is not installed"; }

port=$("$CTL" port) || { echo "FAIL: no free port" >&2; exit 1; }

case $KIND in
xcoll-run)
    "$XRUN" -n $N --no-prefix --timeout 60 "$PROG" >"$TMP/out" 2>"$TMP/err"
    rc=$?
    ;;
openmpi)
    need mpirun.openmpi
    timeout 60 mpirun.openmpi --allow-run-as-root --oversubscribe -n $N \
        -x XCOLL_ADDR=127.0.0.1:$port -x XCOLL_TIMEOUT_MS \
        "$PROG" >"$TMP/out" 2>"$TMP/err"
    rc=$?
    ;;
mpich)
    need mpiexec.mpich
    XCOLL_ADDR=127.0.0.1:$port timeout 60 mpiexec.mpich -n $N \
        "$PROG" >"$TMP/out" 2>"$TMP/err"
    rc=$?
    ;;
torchrun | slurm)
    pids=""
    r=0
    while [ $r -lt $N ]; do
        if [ "$KIND" = torchrun ]; then
            RANK=$r WORLD_SIZE=$N LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 \
                MASTER_PORT=$port timeout 60 "$PROG" >"$TMP/out.$r" 2>"$TMP/err.$r" &
        else
            SLURM_PROCID=$r SLURM_NTASKS=$N SLURM_LOCALID=$r \
                XCOLL_ADDR=127.0.0.1:$port timeout 60 "$PROG" >"$TMP/out.$r" 2>"$TMP/err.$r" &
        fi
        pids="$pids $!"
        r=$((r + 1))
    done
    rc=0
    for p in $pids; do wait "$p" || rc=$?; done
    cat "$TMP"/out.* >"$TMP/out"
    cat "$TMP"/err.* >"$TMP/err"
    ;;
*)
    echo "usage: launchers.sh xcoll-run|openmpi|mpich|torchrun|slurm PROG CTL XRUN" >&2
    exit 2
    ;;
esac

expect_eq "$KIND: exit code" 0 $rc
r=0
while [ $r -lt $N ]; do
    expect_count "$KIND: rank $r reports success" 1 "^rank $r/$N ok\$" "$TMP/out"
    r=$((r + 1))
done
[ "$FAILS" -eq 0 ] || { echo "stderr of the ranks:" >&2; show "$TMP/err"; }
finish
