"""One of many processes writing to the same user DBs at once (run by test_db_concurrency.py)."""

import sys

from miopy.db.find_db import FindDb, FindRecord
from miopy.db.kernel_cache import KernelCache, KernelKey
from miopy.db.perf_db import PerfDb


def main(worker: int, count: int) -> None:
    cache, perf, find = (
        KernelCache("gfx_mp", "opencl"),
        PerfDb("gfx_mp", "opencl"),
        FindDb("gfx_mp", "opencl"),
    )
    for i in range(count):
        name = f"w{worker}_k{i}"
        cache.put(KernelKey("conv.cl", name, "-DN=1", "h", "fp"), name.encode() * 50)
        perf.store(f"problem-{worker}-{i}", "Solver", {"worker": worker, "i": i})
        if i % 5 == 0:
            find.store(f"problem-{worker}-{i}", [FindRecord("Solver", 0.1, 0, "algo", {"i": i})] * 3)
        assert cache.get(KernelKey("conv.cl", name, "-DN=1", "h", "fp")) == name.encode() * 50


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
