#!/bin/sh
# Install what a fresh Debian 12 machine lacks to build and test xcoll.
# The library needs only a C compiler and CMake; Open MPI, MPICH and
# iproute2 are for the launcher and two-host tests; Debian's python3 with
# numpy and torch for the Python binding's tests and PyTorch's backend
# suite (tests/python).  XCOLL_DEPS_TORCH_DEV=1 also installs libtorch-dev
# and ninja, which only bench/torch_overhead.py --cpp needs (it builds a
# C++ ProcessGroup prototype to compare with).  Idempotent and quiet when
# everything is present.
set -eu
need=""
command -v cc >/dev/null 2>&1 || need="$need build-essential"
command -v cmake >/dev/null 2>&1 || need="$need cmake"
command -v mpirun.openmpi >/dev/null 2>&1 || need="$need openmpi-bin libopenmpi-dev"
command -v mpiexec.mpich >/dev/null 2>&1 || need="$need mpich"
command -v ip >/dev/null 2>&1 || need="$need iproute2"
command -v pkg-config >/dev/null 2>&1 || need="$need pkg-config"
# libcrypto (OpenSSL): HMAC-SHA256 of the job token handshake (src/core/auth.c).
[ -f /usr/include/openssl/hmac.h ] || need="$need libssl-dev"
# clang (libFuzzer): the fuzz harnesses of the wire parsers (tests/fuzz).
command -v clang >/dev/null 2>&1 || need="$need clang"
# pgrep/pkill: the fault tests find the ranks a launcher started.
command -v pgrep >/dev/null 2>&1 || need="$need procps"
# Debian's own interpreter: the python3 first on PATH may not see apt's
# python3-* packages.
py=/usr/bin/python3
[ -x $py ] || need="$need python3"
[ -x $py ] && $py -c "import numpy" >/dev/null 2>&1 || need="$need python3-numpy"
[ -x $py ] && $py -c "import torch.distributed" >/dev/null 2>&1 || need="$need python3-torch"
if [ "${XCOLL_DEPS_TORCH_DEV:-0}" = 1 ]; then
    [ -f /usr/include/torch/csrc/distributed/c10d/ProcessGroup.hpp ] || need="$need libtorch-dev"
    command -v ninja >/dev/null 2>&1 || need="$need ninja-build"
fi
[ -z "$need" ] && exit 0
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
echo "installing:$need"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $need >/dev/null
