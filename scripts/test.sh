#!/usr/bin/env bash
# The test suite (no GPU needed: CUDA kernels are compiled with NVRTC, CUDA runtime tests skip).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup-env.sh" "opencl,dev"
# Two or more pytest workers (pytest-xdist; MIOPY_TEST_JOBS overrides): on a fresh 2-core machine
# PoCL compiles every kernel once, and one worker leaves a core idle while it does (measured on
# 2 cores with a cold PoCL cache: 16 min of CPU, 8.6 min of wall time with two workers).
# Tests marked slow (the registry's full cross product of samples and solvers) are left out; run
# them with `bash scripts/test.sh -m slow`. worksteal: an idle worker takes queued tests from the
# busy one, so the run does not end on one worker's long queue.
python -m pytest -q -n "${MIOPY_TEST_JOBS:-auto}" --dist worksteal -m "not slow" "$@"
