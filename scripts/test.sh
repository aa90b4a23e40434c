#!/usr/bin/env bash
# The test suite (no GPU needed: CUDA kernels are compiled with NVRTC, CUDA runtime tests skip).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup-env.sh" "opencl,dev"
python -m pytest -q "$@"
