#!/usr/bin/env bash
# First-call figures on a CUDA GPU (issue 11): the first result of a fresh process with an empty
# user cache, without and with a kernel package, for one convolution and for a ResNet-50
# forward+backward iteration's 121 problems at batch 32 (benchmarks/first_call.py, each case in
# FIRST_CALL_REPEAT fresh processes, default 3), plus checks of the packages and the wheel.
#
#   bash scripts/first_call_gpu.sh [KDB]          # from the repo root; logs in $OUT when set
#
# Two packages: one built here for the live device (`miopy kernels build --backend cuda`: cuBLASLt
# loads here, so its immediate-mode choices are all decided and it lists every cuBLAS and
# cuBLASLt call for the warm-up), and KDB (default dist/kdb/sm_9084.kdb, git-ignored: carry
# `dist`), built on a CPU machine, NVRTC needing no GPU:
#   python -m miopy kernels build resnet50 --batch 32 --arch sm_90 --cu 132 -o dist/kdb
# The carried one is checked against the GPU (arch, SM count, miopy version, compiler
# fingerprint: NVRTC's major.minor and the CUDA headers' version) and against the workload
# (`miopy kernels check`: no kernel missing), then measured too. The H200 image has NVRTC 13.0
# with 13.0 headers (fingerprint 'nvrtc 13.0|headers 13000|sm_90', seen 2026-11-22); a CPU
# machine with another NVRTC builds a matching package with 13.0 wheels put first:
#   pip install --no-deps --target /tmp/nv130 "nvidia-cuda-nvrtc==13.0.*" "nvidia-cuda-runtime==13.0.*"
#   LD_LIBRARY_PATH=/tmp/nv130/nvidia/cu13/lib LD_PRELOAD=/tmp/nv130/nvidia/cu13/lib/libnvrtc.so.13 \
#     PYTHONPATH=/tmp/nv130:$PWD python -m miopy kernels build resnet50 --batch 32 --arch sm_90 \
#     --cu 132 -o dist/kdb
# FIRST_CALL_BUDGET: seconds for the whole script (default 300); FIRST_CALL_FIND=1 adds find mode;
# FIRST_CALL_TESTS=1 first runs tests/backend/test_cuda_fastpath.py (cuBLASLt solvers, prepared calls);
# FIRST_CALL_PIN=1 first rewrites the shipped DB's index-named cuBLASLt records by attribute values
# (scripts/pin_lt_records.py; the result, pinned.db, goes to $OUT); FIRST_CALL_VARIANTS: the
# variants of the immediate-mode run (default none,kdb,kdb-no-stream-warm-up,kdb-no-choices).
# After the benchmark, benchmarks/library_first_calls.py times the package's library calls.
# A cProfile of one more first iteration with the package goes to first_iteration_profile.txt.
# Every benchmark process has a time cap; a stopped one reports how far it got.
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
unset MIOPY_LIBRARY_WARM_UP
state="$(mktemp -d)"
export MIOPY_CUSTOM_CACHE_DIR="$state/cache" MIOPY_USER_DB_PATH="$state/db" MIOPY_KDB_PATH="$state/kdb"
carried="${1:-dist/kdb/sm_9084.kdb}"
budget="${FIRST_CALL_BUDGET:-300}"
repeat="${FIRST_CALL_REPEAT:-3}"
json_dir="${OUT:-$state}"
left() { echo $((budget - SECONDS)); }

echo "== environment"
nvidia-smi -L 2>/dev/null || true
python3 -m miopy info 2>&1 | sed -n '1,12p'

tests=skipped
if [ "${FIRST_CALL_TESTS:-0}" = 1 ]; then
    echo
    echo "== GPU tests: tests/backend/test_cuda_fastpath.py"
    timeout 120 python3 -m pytest tests/backend/test_cuda_fastpath.py -q -x -p no:cacheprovider 2>&1 | tail -6
    tests=${PIPESTATUS[0]}
fi

if [ "${FIRST_CALL_PIN:-0}" = 1 ]; then
    echo
    echo "== the shipped DB's cuBLASLt index records, named by attribute values"
    timeout 60 python3 scripts/pin_lt_records.py miopy/data/sm_9084.db
    [ -n "${OUT:-}" ] && cp miopy/data/sm_9084.db "$OUT/pinned.db"
fi

echo
echo "== a package built here for the live device (16 jobs)"
start=$SECONDS
if ! timeout 150 python3 -m miopy kernels build resnet50 --batch 32 --backend cuda --jobs 16 \
    -o "$state/built" --json >"$state/built.json"; then
    echo "FAILED: no package built here; stopping"
    exit 1
fi
use="$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["path"])' "$state/built.json")"
python3 -m miopy kernels show "$use"
echo "built in $((SECONDS - start)) s"

echo
echo "== the carried package: $carried"
carried_ok=no
if [ -f "$carried" ] && python3 -m miopy kernels show "$carried" &&
    python3 -m miopy kernels install "$carried" --dest "$state/checked"; then
    python3 -m miopy kernels check "$carried" resnet50 --batch 32 --backend cuda --json \
        >"$state/check.json"
    check=$?
    python3 -c 'import json, sys; c = json.load(open(sys.argv[1])); print("needed", c["needed"], "missing", len(c["missing"]), *c["missing"])' "$state/check.json"
    [ "$check" = 0 ] && carried_ok=yes
fi
echo "carried package matches this GPU and holds every kernel of the workload: $carried_ok"

echo
echo "== the library warm-up of the package built here, in one process"
MIOPY_LIBRARY_WARM_UP=1 MIOPY_KDB_PATH="$(dirname "$use")" python3 -c '
import time
import miopy
t = time.perf_counter()
h = miopy.Handle("cuda")
made = time.perf_counter() - t
calls = h.package_choices.library_calls()
h.backend._warm_thread.join()
print(f"handle made in {made:.3f} s; {h.backend.library_warmed} of {len(calls)} library calls run "
      f"ahead, done {time.perf_counter() - t:.3f} s after the handle was asked for")
'

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
echo "== first call, immediate mode, the package built here: one convolution, then the ResNet-50 iteration"
cap=60
timeout --kill-after=10 $(($(left) - 60)) python3 benchmarks/first_call.py --backend cuda \
    --workload resnet50-iter --batch 32 --kdb "$use" --modes immediate --cases conv,iter \
    --variants "${FIRST_CALL_VARIANTS:-none,kdb,kdb-no-stream-warm-up,kdb-no-choices}" --repeat "$repeat" --time-cap "$cap" \
    --json "$json_dir/first_call_immediate.json" --profile "$json_dir/first_iteration_profile.txt"
immediate=$?

echo
echo "== the first cuBLAS and cuBLASLt calls of a fresh process (the package's library calls)"
MIOPY_KDB_PATH="$(dirname "$use")" timeout 60 python3 benchmarks/library_first_calls.py

echo
echo "== first call, immediate mode, the carried package (built on a CPU machine)"
if [ "$carried_ok" = yes ] && [ "$(left)" -gt 40 ]; then
    timeout --kill-after=10 $(($(left) - 15)) python3 benchmarks/first_call.py --backend cuda \
        --workload resnet50-iter --batch 32 --kdb "$carried" --modes immediate --cases iter \
        --variants kdb --repeat "$repeat" --time-cap "$cap" --json "$json_dir/first_call_carried.json"
    carried_run=$?
else
    echo "skipped: carried package $carried_ok, $(left) s left"
    carried_run=skipped
fi

find=skipped
if [ "${FIRST_CALL_FIND:-0}" = 1 ] && [ "$(left)" -gt 40 ]; then
    echo
    echo "== first call, find mode (every applicable solver timed): the ResNet-50 iteration"
    timeout --kill-after=10 $(($(left) - 5)) python3 benchmarks/first_call.py --backend cuda \
        --workload resnet50-iter --batch 32 --kdb "$use" --modes find --cases iter \
        --variants none,kdb --time-cap "$cap" --json "$json_dir/first_call_find.json"
    find=$?
fi

echo
echo "== summary: tests $tests; carried package $carried_ok ($carried_run); wheel $wheel;" \
    "immediate exit $immediate; find $find; ${SECONDS} s of ${budget}"
[ "$immediate" = 0 ] && [ "$wheel" = ok ]
