#!/usr/bin/env bash
# Creates/updates .venv with miopy and what it needs, including an OpenCL runtime for the CPU.
# Sourced by run-main.sh and test.sh; usage: source scripts/setup-env.sh [extras]
# The install is skipped when pyproject.toml and the extras are unchanged since the last one
# (miopy is installed editable, so code changes need no reinstall).
set -euo pipefail
extras="${1:-opencl}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
stamp=".venv/.miopy-install-stamp"
hash="$(sha256sum pyproject.toml | cut -d' ' -f1)"
old_hash="" old_extras=""
if [ -f "$stamp" ]; then read -r old_hash old_extras <"$stamp" || true; fi
need=0
[ -x .venv/bin/python ] && [ "$old_hash" = "$hash" ] || { need=1; old_extras=""; }
for e in ${extras//,/ }; do
    case ",$old_extras," in *",$e,"*) ;; *) need=1 ;; esac
done
if [ "$need" = 1 ]; then
    extras="$(echo "${old_extras:+$old_extras,}$extras" | tr ',' '\n' | sort -u | paste -sd, -)"
    python3 -m venv .venv
    .venv/bin/python -m pip install -q --upgrade pip >/dev/null
    .venv/bin/python -m pip install -q -e ".[${extras}]" 2>&1 | { grep -v -E "^WARNING: Location|^ *$" || true; }
    echo "$hash $extras" >"$stamp"
fi
case ",$extras," in *",dev,"*)
    # The torch tests need PyTorch. This exact version resolves to the CPU-only wheel that the
    # machine image keeps in pip's find-links folder (~190 MB); a looser pin would pull PyPI's
    # CUDA build with several GB of dependencies.
    if ! .venv/bin/python -c 'import torch' 2>/dev/null; then
        .venv/bin/python -m pip install -q "torch==2.13.0" \
            2>&1 | { grep -v -E "^WARNING: Location|^ *$" || true; } ||
            echo "PyTorch (CPU) did not install: the torch tests will be skipped" >&2
    fi
    # JAX (CPU, ~90 MB download, about a minute once) for tests/frameworks/test_jax.py; miopy
    # itself never needs it, so a failed install only skips those tests.
    if ! .venv/bin/python -c 'import jax' 2>/dev/null; then
        .venv/bin/python -m pip install -q "jax==0.10.2" \
            2>&1 | { grep -v -E "^WARNING: Location|^ *$" || true; } ||
            echo "JAX did not install: the JAX tests will be skipped" >&2
    fi ;;
esac
if ! .venv/bin/python -c 'import pyopencl as cl, sys; sys.exit(0 if any(p.get_devices() for p in cl.get_platforms()) else 1)' 2>/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "No OpenCL platform visible: installing pocl-opencl-icd (the CPU OpenCL runtime)"
        apt-get update -qq >/dev/null
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pocl-opencl-icd ocl-icd-libopencl1 >/dev/null
    else
        echo "No OpenCL platform visible: install an OpenCL ICD, e.g. 'sudo apt-get install pocl-opencl-icd'" >&2
        exit 1
    fi
fi
export PATH="$root/.venv/bin:$PATH"
