"""What the first cuBLAS and cuBLASLt calls of a fresh process cost (CUDA only): the floor under a
first iteration that no kernel package removes. For each library call a package lists
(``kdb_library``: the cuBLAS and cuBLASLt calls of its chosen solutions), in a fresh process:

- ``check``: making the cuBLASLt product and rebuilding its recorded algorithm
  (cublasLtMatmulAlgoCheck), what the first iteration does now;
- ``heuristics``: asking cuBLASLt's heuristics for the same product, what it did before (asked
  after the rest, on a new product object, so that it does not load anything for the calls);
- ``first`` and ``second``: the call run once, synchronized, then again: the difference is what
  CUDA spends loading the library's kernel at its first use (CUDA_MODULE_LOADING=LAZY).

    MIOPY_KDB_PATH=<folder of the package> python3 benchmarks/library_first_calls.py
"""

from __future__ import annotations

import json
import sys
import time


def main() -> int:
    try:  # torch (when there) before cupy: see the other benchmarks
        import torch  # noqa: F401
    except ImportError:
        pass
    import ctypes

    from miopy.backends import cuda_libs as libs
    from miopy.backends import cuda_warm
    from miopy.handle import Handle

    t = time.perf_counter()
    h = Handle("cuda")
    h.backend._blas_thread.join()
    if getattr(h.backend, "_precheck_thread", None) is not None:  # the package's recorded checks
        h.backend._precheck_thread.join()
    set_up = time.perf_counter() - t
    calls = [c for c in map(cuda_warm.parse, h.package_choices.library_calls()) if c is not None]
    calls = list(dict.fromkeys(calls))
    if not calls:
        print("no library calls in the package (none found, or none listed)")
        return 1
    cp = h.backend._cp
    size = max(c.nbytes() for c in calls if c.nbytes() <= cuda_warm.WARM_MAX_BYTES)
    memory = cp.cuda.alloc(size + libs.LT_WORKSPACE + 512)
    base = (int(memory.ptr) + 255) // 256 * 256
    scratch = base + (size + 255) // 256 * 256  # cuBLASLt's workspace, after the operands
    stream = cp.cuda.Stream(non_blocking=True)
    owner = type("S", (), {"_sptr": stream.ptr})()
    blas = ctypes.c_void_p()
    lib = libs.cublas()
    libs.check(lib.create(ctypes.byref(blas)), "cublasCreate")
    libs.check(lib.set_stream(blas, stream.ptr), "cublasSetStream")
    rows = []
    for call in calls:
        if call.nbytes() > cuda_warm.WARM_MAX_BYTES:
            continue
        row = {"kind": "lt" if isinstance(call, cuda_warm._LtCall) else "gemm"}
        t = time.perf_counter()
        if row["kind"] == "lt":
            gemm = libs.LtGemm(*call.key)
            algo = gemm.resolve(call.algo) if isinstance(call.algo, tuple) else call.algo
            row["check_s"] = time.perf_counter() - t
            if algo is None:
                continue

            def run(gemm=gemm, algo=algo):
                gemm.prepare(algo, base, base, base, scratch, owner)()
        else:

            def run(call=call):
                cuda_warm._run_gemm(lib, blas, call, base)

        for name in ("first_s", "second_s"):
            t = time.perf_counter()
            run()
            stream.synchronize()
            row[name] = time.perf_counter() - t
        rows.append((row, call))
    for row, call in rows:
        if row["kind"] == "lt":
            t = time.perf_counter()
            libs.LtGemm(*call.key).algos()
            row["heuristics_s"] = time.perf_counter() - t
    rows = [row for row, _ in rows]
    summary = {"handle_and_blas_set_up_s": round(set_up, 4), "calls": len(rows)}
    for kind in ("lt", "gemm"):
        mine = [r for r in rows if r["kind"] == kind]
        for field in ("check_s", "heuristics_s", "first_s", "second_s"):
            values = [r[field] for r in mine if field in r]
            if values:
                summary[f"{kind}_{field}"] = round(sum(values), 4)
        summary[f"{kind}_calls"] = len(mine)
    print(json.dumps(summary, indent=1))
    rounded = [{k: round(v, 5) if isinstance(v, float) else v for k, v in r.items()} for r in rows]
    print("per call (s): " + json.dumps(rounded))
    lib.destroy(blas)
    return 0


if __name__ == "__main__":
    sys.exit(main())
