"""Reads and writes the DBs under a file-size limit (run by test_db_unwritable.py in a process of
its own, since the limit would also stop pytest's own capture files); prints what it saw as JSON."""

import json
import resource
import sys

from miopy.db.find_db import FindDb, FindRecord
from miopy.db.kernel_cache import KernelCache, KernelKey
from miopy.db.perf_db import PerfDb

KEY = KernelKey("conv.cl", "k", "-DN=1", "h", "fp")


def main(limit: int) -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
    cache, perf = KernelCache("gfx_full", "opencl"), PerfDb("gfx_full", "opencl")
    find = FindDb("gfx_full", "opencl")
    seen = {
        "kernel": (cache.get(KEY) or b"").decode(),
        "perf": perf.load("p", "Solver"),
        "find": [r.solver for r in find.load("p") or []],
    }
    big = "x" * (1 << 20)  # past the limit, whatever the WAL has room for
    for i in range(3):
        cache.put(KernelKey("conv.cl", f"new{i}", "", "h", "fp"), big.encode())
        perf.store(f"new{i}", "Solver", {"pad": big})
        find.store(f"new{i}", [FindRecord("Solver", 1.0, 0, big)])
    seen["after_writes"] = [(cache.get(KEY) or b"").decode(), perf.load("p", "Solver")]
    print(json.dumps(seen))


if __name__ == "__main__":
    main(int(sys.argv[1]))
