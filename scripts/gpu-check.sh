#!/usr/bin/env bash
# The GPU check: run from the repo root on a machine with an NVIDIA GPU and python3 holding cupy,
# cuda-bindings, torch, numpy, pytest (pyopencl only if its wheels are carried in .whl/).
# Runs the GPU tests, the backend tests and a few miopy-driver lines; a failing step is reported
# and the rest still run; a summary ends the output, which goes to $OUT/gpu-check.log too when
# $OUT is set. Budget: GPU_CHECK_BUDGET seconds in all (default 540).
# GPU_CHECK_STEPS (a grep -E pattern) runs only the steps whose names match, e.g. "bench|host".
# GPU_CHECK_BENCH: arguments of benchmarks/conv.py (default: fp16 NHWC, every layer and direction).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PYTHONUNBUFFERED=1
if [ -n "${OUT:-}" ] && [ -z "${GPU_CHECK_TEED:-}" ]; then
    mkdir -p "$OUT"
    # Run again with the output through tee: the pipeline waits for tee, so the log is whole.
    GPU_CHECK_TEED=1 bash "${BASH_SOURCE[0]}" "$@" 2>&1 | tee "$OUT/gpu-check.log"
    exit "${PIPESTATUS[0]}"
fi

if compgen -G ".whl/*.whl" >/dev/null; then
    echo "== installing the carried wheels: $(ls .whl | tr '\n' ' ')"
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl \
        && export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
# NVIDIA's OpenCL, for pyopencl where it was carried: the image may have no ICD file for it.
icd_dir="$(mktemp -d)"
echo "libnvidia-opencl.so.1" >"$icd_dir/nvidia.icd"
export OCL_ICD_VENDORS="$icd_dir"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
unset MIOPY_BACKEND
# Caches and DBs of this run live in a temporary folder, so every run starts cold.
state="$(mktemp -d)"
export MIOPY_CUSTOM_CACHE_DIR="$state/cache" MIOPY_USER_DB_PATH="$state/db"

budget="${GPU_CHECK_BUDGET:-540}"
names=()
results=()

step() {  # step NAME TIMEOUT_S COMMAND...
    local name="$1" limit="$2"
    shift 2
    if [ -n "${GPU_CHECK_STEPS:-}" ] && ! grep -qE "$GPU_CHECK_STEPS" <<<"$name"; then
        return
    fi
    local left=$((budget - SECONDS))
    if [ "$left" -lt 15 ]; then
        names+=("$name"); results+=("SKIPPED (budget spent)")
        echo "== $name: skipped, the ${budget}s budget is spent"
        return
    fi
    [ "$limit" -gt "$left" ] && limit="$left"
    echo
    local shown="$*"
    [ "${#shown}" -gt 160 ] && shown="${shown:0:160}..."
    echo "== $name  (limit ${limit}s): $shown"
    local start=$SECONDS rc
    timeout --kill-after=10 "$limit" "$@"
    rc=$?
    local took=$((SECONDS - start))
    names+=("$name")
    case "$rc" in
        0) results+=("ok (${took}s)") ;;
        5) results+=("ok, no tests collected (${took}s)") ;;
        124 | 137) results+=("FAILED: timed out after ${took}s") ;;
        *) results+=("FAILED: exit $rc (${took}s)") ;;
    esac
}

step "environment" 60 bash -c '
    nvidia-smi -L || true
    python3 - <<EOF
import importlib, sys
print("python", sys.version.split()[0])
for name in ("numpy", "cupy", "cuda.bindings", "torch", "pyopencl", "pytest"):
    try:
        mod = importlib.import_module(name)
        print(f"{name:14s}", getattr(mod, "__version__", "?"))
    except Exception as exc:
        print(f"{name:14s} missing ({type(exc).__name__}: {exc})")
from miopy import backends
from miopy.backends import cuda
for b in backends.NAMES:
    print(f"backend {b:8s}", backends.unavailable_reason(b) or "available")
print("nvrtc", cuda.nvrtc_version(), "headers", cuda.cuda_include_dir())
if backends.unavailable_reason("cuda") is None:
    print(backends.create("cuda").info)
EOF'

step "pytest -m gpu tests" 240 python3 -m pytest -q -m gpu --durations=8 tests \
    --ignore=tests/frameworks/test_frameworks_cuda.py
# miopy.functional / miopy.torch on CUDA tensors and CuPy arrays (~170 small cases, side streams,
# training): a step of its own so that its compiles do not eat the other GPU tests' minutes.
step "pytest frameworks on CUDA" 240 python3 -m pytest -q -m gpu --durations=8 \
    tests/frameworks/test_frameworks_cuda.py
# NVIDIA's OpenCL miscompiles once NVRTC is loaded in the process (the backend refuses then), so
# the OpenCL tests run in a pytest process of their own, without the CUDA test modules.
step "pytest tests/backend on NVIDIA OpenCL" 150 python3 -m pytest -q -m "not gpu" tests/backend \
    --ignore=tests/backend/test_cuda_compile.py --ignore=tests/backend/test_cuda_runtime.py
step "pytest tests/backend/test_cuda_compile.py" 90 python3 -m pytest -q tests/backend/test_cuda_compile.py

drv() {  # drv ARGS...: one miopy-driver line on the CUDA backend
    step "driver $*" 90 env MIOPY_BACKEND=cuda python3 -m miopy.driver "$@"
}
drv conv -n 32 -c 64 -H 56 -W 56 -k 64 -y 3 -x 3 -p 1 -q 1 -t 1
drv conv -n 32 -c 64 -H 56 -W 56 -k 64 -y 3 -x 3 -p 1 -q 1 -t 1 -V 0 -i 3  # again: kernel cache warm
drv convfp16 -n 16 -c 64 -H 28 -W 28 -k 64 -y 3 -x 3 -p 1 -q 1 -u 2 -v 2 -t 1 -i 3
drv convbfp16 -n 8 -c 32 -H 14 -W 14 -k 64 -y 1 -x 1 -t 1 -i 3 -I NHWC -O NHWC -f NHWC
drv conv -n 4 -c 32 -H 28 -W 28 -k 32 -y 3 -x 3 -p 1 -q 1 -g 32 -t 1 -i 3
drv conv --spatial_dim 3 -n 2 -c 16 --in_d 8 -H 16 -W 16 -k 16 --fil_d 3 -y 3 -x 3 --pad_d 1 -p 1 -q 1 -t 1 -i 3
drv conv -m trans -n 4 -c 32 -H 14 -W 14 -k 16 -y 4 -x 4 -p 1 -q 1 -u 2 -v 2 -t 1 -i 3
# Activation and pooling (ResNet-50's stem shapes, batch 32); benchmarks/activ_pool.py times them all.
drv activfp16 -n 32 -c 64 -H 112 -W 112 -L NHWC -t 1 -i 5
drv activ -n 32 -c 64 -H 56 -W 56 -m 9 -A 0.5 -t 1 -i 5
drv poolfp16 -W 32x64x112x112,NHWC -v 2 -u 2 -p 1 -q 1 -t 1 -i 5
drv pool -W 32x64x112x112 -v 2 -u 2 -p 1 -q 1 -t 1 -i 5
drv poolfp16 -W 32x2048x7x7,NHWC -y 7 -x 7 -m avg -t 1 -i 5
# Solution choice: immediate mode, a named solver, then tuning (-s 1) followed by find.
drv conv -n 16 -c 64 -H 28 -W 28 -k 64 -y 3 -x 3 -p 1 -q 1 -t 1 -i 3 -S 0
drv conv -n 16 -c 64 -H 28 -W 28 -k 64 -y 3 -x 3 -p 1 -q 1 -t 1 -i 3 -S GemmFwdRest -F 1
step "driver -s 1 (tune, NORMAL find)" 150 env MIOPY_BACKEND=cuda MIOPY_FIND_MODE=NORMAL MIOPY_LOG_LEVEL=5 \
    python3 -m miopy.driver conv -n 16 -c 64 -H 28 -W 28 -k 64 -y 3 -x 3 -p 1 -q 1 -t 1 -i 5 -s 1 -F 1
if python3 -c 'import pyopencl' 2>/dev/null; then
    step "driver on NVIDIA OpenCL" 90 env MIOPY_BACKEND=opencl MIOPY_FIND_MODE=NORMAL python3 -m miopy.driver \
        conv -n 8 -c 32 -H 28 -W 28 -k 32 -y 3 -x 3 -p 1 -q 1 -t 1 -i 3
fi
# Find on ResNet-50 layers (batch 32), every applicable solver timed, cuDNN beside it.
step "find report fp32" 120 env MIOPY_FIND_MODE=NORMAL python3 scripts/find_report.py --backend cuda --dtype fp32
step "find report fp16" 120 env MIOPY_FIND_MODE=NORMAL python3 scripts/find_report.py --backend cuda --dtype fp16
# Host time per call, and the side-by-side benchmark against cuDNN (README: "Benchmarks").
step "host time per call (benchmarks/host_overhead.py)" 90 python3 benchmarks/host_overhead.py --calls 1000
# shellcheck disable=SC2086
step "bench conv vs cuDNN (benchmarks/conv.py)" 400 python3 benchmarks/conv.py \
    ${GPU_CHECK_BENCH:---dtypes fp16} ${OUT:+--json "$OUT/bench-conv.json"}

echo
echo "== summary (${SECONDS}s)"
failed=0
for i in "${!names[@]}"; do
    printf '%-100s %s\n' "${names[$i]}" "${results[$i]}"
    case "${results[$i]}" in FAILED*) failed=1 ;; esac
done
rm -rf "$icd_dir" "$state"
exit "$failed"
