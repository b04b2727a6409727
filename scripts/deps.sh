#!/bin/sh
# Install what a fresh Debian 12 machine lacks to build and test xcoll.
# The library needs only a C compiler and CMake; Open MPI, MPICH and
# iproute2 are for the launcher and two-host tests.  Idempotent and quiet
# when everything is present.
set -eu
need=""
command -v cc >/dev/null 2>&1 || need="$need build-essential"
command -v cmake >/dev/null 2>&1 || need="$need cmake"
command -v mpirun.openmpi >/dev/null 2>&1 || need="$need openmpi-bin libopenmpi-dev"
command -v mpiexec.mpich >/dev/null 2>&1 || need="$need mpich"
command -v ip >/dev/null 2>&1 || need="$need iproute2"
command -v pkg-config >/dev/null 2>&1 || need="$need pkg-config"
[ -z "$need" ] && exit 0
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
echo "installing:$need"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $need >/dev/null
