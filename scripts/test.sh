#!/usr/bin/env bash
# The test suite (no GPU needed: CUDA kernels are compiled with NVRTC, CUDA runtime tests skip).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup-env.sh" "opencl,dev"
# PoCL keeps a kernel cache of its own; ours must be what makes a second run fast.
export POCL_KERNEL_CACHE=0
python -m pytest -q "$@"
