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
