// miopy-compile-test: -DRED_TEAM=256
// miopy-compile-test: -DRED_TEAM=128 -DRED_VEC=4 -DMIOPY_DTYPE=0
// miopy-compile-test: -DRED_TEAM=64 -DRED_VEC=8 -DMIOPY_DTYPE=1 -DRW_TEAM=8 -DRW_OP=7
// miopy-compile-test: -DRED_TEAM=4 -DMIOPY_DTYPE=1
// miopy-compile-test: -DRED_TEAM=64 -DRED_VEC=8 -DMIOPY_DTYPE=1 -DRED_VALUES_OP=4
/* includes are pasted once, where first met: the types, then vec.h (reduce.h takes it inside an
   #if, and vec.h, skipped for fp64, brings the types) */
#include "common/miopy_types.h"
#if MIOPY_DTYPE != 3
#include "common/vec.h"
#endif
#include "common/reduce.h"
#if MIOPY_DTYPE != 3
#include "common/reduce_warp.h"
#endif
