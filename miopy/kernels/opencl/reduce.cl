/* vec.h first: includes are pasted once, where first met (reduce.h takes it inside an #if) */
#if MIOPY_DTYPE != 3
#include "common/vec.h"
#endif
#include "common/reduce.h"
#if MIOPY_DTYPE != 3
#include "common/reduce_warp.h"
#endif
