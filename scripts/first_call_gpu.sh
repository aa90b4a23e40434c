#!/usr/bin/env bash
# First-call figures on a CUDA GPU (issue 11): the first result of a fresh process with an empty
# user cache, without and with a kernel package, for one convolution and for a ResNet-50
# forward+backward iteration's 121 problems at batch 32 (benchmarks/first_call.py), plus a check
# that the package's wheel, pip-installed into a folder on the path, is found.
#
#   bash scripts/first_call_gpu.sh [KDB]          # from the repo root; log in $OUT when set
#
# KDB (default dist/kdb/sm_9084.kdb, git-ignored: carry `dist`) is a package built on a CPU
# machine, NVRTC needing no GPU:
#   python -m miopy kernels build resnet50 --batch 32 --arch sm_90 --cu 132 -o dist/kdb
# It is checked against the GPU here (arch, SM count, miopy version, compiler fingerprint: NVRTC's
# major.minor and the CUDA headers' version). The H200 image has NVRTC 13.0 with 13.0 headers
# (fingerprint 'nvrtc 13.0|headers 13000|sm_90', seen 2026-11-22); a CPU machine with another
# NVRTC builds a matching package with 13.0 wheels put first:
#   pip install --no-deps --target /tmp/nv130 "nvidia-cuda-nvrtc==13.0.*" "nvidia-cuda-runtime==13.0.*"
#   LD_LIBRARY_PATH=/tmp/nv130/nvidia/cu13/lib LD_PRELOAD=/tmp/nv130/nvidia/cu13/lib/libnvrtc.so.13 \
#     PYTHONPATH=/tmp/nv130:$PWD python -m miopy kernels build resnet50 --batch 32 --arch sm_90 \
#     --cu 132 -o dist/kdb
# When it does not match, it is rebuilt here for the live device and the log says so; the
# figures are then for that package. A package built from other kernel sources than the
# checkout's matches but serves nothing: the figures then show kernels compiled with it.
# FIRST_CALL_BUDGET: seconds for the whole script (default 230); FIRST_CALL_FIND=0 skips find mode;
# each case also has a time cap,
# and a case stopped by it reports how far it got (problems done, kernels compiled).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PYTHONUNBUFFERED=1
if [ -n "${OUT:-}" ] && [ -z "${FIRST_CALL_TEED:-}" ]; then
    mkdir -p "$OUT"
    FIRST_CALL_TEED=1 bash "${BASH_SOURCE[0]}" "$@" 2>&1 | tee "$OUT/first_call_gpu.log"
    exit "${PIPESTATUS[0]}"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
unset MIOPY_BACKEND MIOPY_DISABLE_CACHE MIOPY_FIND_MODE MIOPY_FIND_ENFORCE MIOPY_SYSTEM_DB_PATH
state="$(mktemp -d)"
export MIOPY_CUSTOM_CACHE_DIR="$state/cache" MIOPY_USER_DB_PATH="$state/db" MIOPY_KDB_PATH="$state/kdb"
kdb="${1:-dist/kdb/sm_9084.kdb}"
budget="${FIRST_CALL_BUDGET:-230}"
json_dir="${OUT:-$state}"
left() { echo $((budget - SECONDS)); }

echo "== environment"
nvidia-smi -L 2>/dev/null || true
python3 -m miopy info 2>&1 | sed -n '1,12p'

echo
echo "== the package: $kdb"
origin="carried (built on a CPU machine)"
if [ -f "$kdb" ] && python3 -m miopy kernels show "$kdb" &&
    python3 -m miopy kernels install "$kdb" --dest "$state/checked" &&
    python3 -m miopy kernels check "$kdb" resnet50 --batch 32 --backend cuda | tail -1; then
    use="$kdb"
    echo "it matches this GPU and holds every kernel of the workload"
else
    echo "no usable carried package (above: missing, for another device or compiler, or built from"
    echo "other kernel sources); building one here for the live device (16 jobs)"
    start=$SECONDS
    if ! timeout 120 python3 -m miopy kernels build resnet50 --batch 32 --backend cuda --jobs 16 \
        -o "$state/rebuilt" --json >"$state/rebuilt.json"; then
        echo "FAILED: no package; stopping"
        exit 1
    fi
    use="$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["path"])' "$state/rebuilt.json")"
    origin="rebuilt on this GPU machine in $((SECONDS - start)) s (the carried one was missing or did not match)"
fi
echo "package used: $use, $origin"

echo
echo "== the package as a wheel: pip install --target, then found on the path"
if python3 -m miopy kernels package "$use" --out "$state/wheel" &&
    python3 -m pip install -q --no-index --no-deps --no-compile --target "$state/site" "$state"/wheel/*.whl &&
    PYTHONPATH="$PYTHONPATH:$state/site" MIOPY_KDB_PATH="$state/empty" python3 -c '
import miopy
paths = miopy.Handle("cuda").kernel_cache.package_paths()
print("package read from:", *paths)
raise SystemExit(0 if paths and "miopy_kernels" in str(paths[0]) else 1)'; then
    wheel="ok"
else
    wheel="FAILED"
fi
echo "wheel: $wheel"

echo
echo "== first call, immediate mode: one convolution, then the ResNet-50 iteration (batch 32)"
cap=$(($(left) / 5))
[ "$cap" -gt 90 ] && cap=90
timeout --kill-after=10 $(($(left) - 45)) python3 benchmarks/first_call.py --backend cuda \
    --workload resnet50-iter --batch 32 --kdb "$use" --modes immediate --cases conv,iter \
    --time-cap "$cap" --json "$json_dir/first_call_immediate.json"
immediate=$?

echo
echo "== first call, find mode (every applicable solver timed): the ResNet-50 iteration"
cap=$((($(left) - 10) / 2))
if [ "${FIRST_CALL_FIND:-1}" = 0 ]; then
    echo "skipped (FIRST_CALL_FIND=0)"
    find=skipped
elif [ "$cap" -lt 10 ]; then
    echo "skipped: $(left) s of the ${budget} s budget left"
    find=skipped
else
    timeout --kill-after=10 $(($(left) - 5)) python3 benchmarks/first_call.py --backend cuda \
        --workload resnet50-iter --batch 32 --kdb "$use" --modes find --cases iter \
        --time-cap "$cap" --json "$json_dir/first_call_find.json"
    find=$?
fi

echo
echo "== summary: package $origin; wheel $wheel; immediate exit $immediate; find exit $find;" \
    "${SECONDS} s of ${budget}"
[ "$immediate" = 0 ] && [ "$wheel" = ok ]
