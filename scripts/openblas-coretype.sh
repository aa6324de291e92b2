#!/bin/sh
# openblas-coretype.sh - prints the OpenBLAS core type whose kernels this CPU runs best: SkylakeX
# where it has AVX-512, Haswell where it has AVX2, nothing otherwise. The peers' scripts set
# OPENBLAS_CORETYPE from it: Debian's OpenBLAS may fall back to SSE3 kernels on a CPU it does not
# know, and forcing SkylakeX on a CPU without AVX-512 kills the process with SIGILL.
if grep -qw avx512f /proc/cpuinfo; then echo SkylakeX
elif grep -qw avx2 /proc/cpuinfo; then echo Haswell
fi
