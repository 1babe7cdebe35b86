# Sourced by quickstart.sh and run-tests.sh (not run on its own).
# OpenBLAS 0.3.21 (Debian 12) does not recognise some newer Xeons (seen here: a Sapphire
# Rapids VM reporting "Intel(R) Xeon(R) Processor") and falls back to its Prescott (SSE3)
# kernels: slow, and with a different summation order per matrix height, so the same row can
# round differently in a longer batch. Name the core from the CPU's own flags unless the user
# chose one.
if [ -z "${OPENBLAS_CORETYPE:-}" ]; then
  if grep -qw avx512f /proc/cpuinfo; then export OPENBLAS_CORETYPE=SkylakeX
  elif grep -qw avx2 /proc/cpuinfo; then export OPENBLAS_CORETYPE=Haswell
  fi
fi
