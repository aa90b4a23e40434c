/* Sum and maximum over teams of TR_TEAM consecutive work items (a power of two, at most 32 on
   CUDA: one warp or part of one, finished with shuffles and no barrier). OpenCL (PoCL runs these
   GPU-shaped kernels in the tests) goes through local memory: every work item of the work-group
   must call, with red a local array of one float per work item. */
#ifndef MIOPY_TEAM_REDUCE_H
#define MIOPY_TEAM_REDUCE_H
#include "common/miopy_types.h"

#ifdef __OPENCL_VERSION__
#define TR_LPTR __local
#else
#define TR_LPTR
#endif

/* op 0: sum, 1: max */
#define TR_DEFINE(name, TEAM)                                                                      \
    DEVICE_FN float name(float v, int op, TR_LPTR float* red, int tid)                             \
    {                                                                                              \
        TR_BODY(TEAM)                                                                              \
    }

#ifdef __OPENCL_VERSION__
#define TR_BODY(TEAM)                                                                              \
    const int lane_ = tid % (TEAM);                                                                \
    BARRIER();                                                                                     \
    red[tid] = v;                                                                                  \
    BARRIER();                                                                                     \
    for(int s_ = (TEAM) / 2; s_ > 0; s_ >>= 1)                                                     \
    {                                                                                              \
        if(lane_ < s_)                                                                             \
        {                                                                                          \
            const float w_ = red[tid + s_];                                                        \
            red[tid] = op ? fmax(red[tid], w_) : red[tid] + w_;                                    \
        }                                                                                          \
        BARRIER();                                                                                 \
    }                                                                                              \
    return red[tid - lane_];
#else
#define TR_BODY(TEAM)                                                                              \
    (void)red;                                                                                     \
    (void)tid;                                                                                     \
    _Pragma("unroll") for(int o_ = (TEAM) / 2; o_ > 0; o_ >>= 1)                                   \
    {                                                                                              \
        const float w_ = __shfl_xor_sync(0xffffffffu, v, o_);                                      \
        v = op ? fmaxf(v, w_) : v + w_;                                                            \
    }                                                                                              \
    return v;
#endif

#endif
