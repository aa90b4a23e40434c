/* idx_t: the element type of a pooling index tensor, by POOL_INDEX_TYPE (0 u8, 1 u16, 2 u32,
   3 u64), for every pooling program (pool.h and the CPU scatter's pool_scatter_cpu.h). */
#ifndef MIOPY_POOL_INDEX_H
#define MIOPY_POOL_INDEX_H
#include "common/miopy_types.h"

#ifndef POOL_INDEX_TYPE
#define POOL_INDEX_TYPE 0
#endif

#if POOL_INDEX_TYPE == 0
typedef unsigned char idx_t;
#elif POOL_INDEX_TYPE == 1
typedef u16 idx_t;
#elif POOL_INDEX_TYPE == 2
typedef u32 idx_t;
#else
typedef u64 idx_t;
#endif
#endif
