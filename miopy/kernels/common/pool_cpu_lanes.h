/* Helpers of the backward pooling kernels for CPU OpenCL devices (pool_scatter_cpu.h,
   pool_tile_cpu.h): which outputs cover a position, the average's divisor, and 8 lanes of dy or of
   the index from a contiguous run (0 / -1 past its end). Needs POOL_MODE and POOL_INDEX_TYPE
   (common/pool_index.h) defined first. */
#ifndef MIOPY_POOL_CPU_LANES_H
#define MIOPY_POOL_CPU_LANES_H
#include "common/cpu_vec.h"
#include "common/pool_index.h"

/* first output whose window [o s - p, o s - p + K) covers position t */
DEVICE_FN int psc_first_out(int t, int p, int s, int K)
{
    const int lo = t + p - K + 1;
    return lo <= 0 ? 0 : (lo + s - 1) / s;
}

/* the output range [o0, o1) whose windows cover positions [t0, t1) (t1 > t0) */
#define PSC_COVER(o0, o1, t0, t1, p, s, K, O)          \
    const int o0 = psc_first_out((t0), (p), (s), (K)); \
    const int o1 = min(((t1) - 1 + (p)) / (s) + 1, (O));

/* the window's divisor (average) */
DEVICE_FN float psc_count(int z0, int y0, int x0, int kd, int kh, int kw, int Di, int Hi, int Wi)
{
#if POOL_MODE == 1
    const int n = (min(z0 + kd, Di) - max(z0, 0)) * (min(y0 + kh, Hi) - max(y0, 0)) * (min(x0 + kw, Wi) - max(x0, 0));
    return (float)(n > 0 ? n : 1);
#else
    return (float)(kd * kh * kw);
#endif
}

/* lanes c0 .. c0 + 7 of a channels-contiguous run (0 past C) */
__attribute__((always_inline)) DEVICE_FN float8 psc_lanes(const GLOBAL data_t* p, i64 base, int c0, int C)
{
    if(c0 + 8 <= C)
        return load_f8_loop(p, base + c0);
#define PSC_LANE(k) (c0 + (k) < C ? LOAD(p, base + c0 + (k)) : 0.0f)
    return (float8)(PSC_LANE(0), PSC_LANE(1), PSC_LANE(2), PSC_LANE(3), PSC_LANE(4), PSC_LANE(5), PSC_LANE(6),
                    PSC_LANE(7));
#undef PSC_LANE
}

/* the index of lanes c0 .. c0 + 7, step ic apart (-1 past C); contiguous u8 / u16 lanes shifted
   out of whole words in vector operations */
__attribute__((always_inline)) DEVICE_FN int8 psc_index_lanes(const GLOBAL idx_t* ip, i64 base, int c0, int C, i64 step)
{
    const GLOBAL idx_t* q = ip + base + c0;
#if POOL_INDEX_TYPE == 0
    if(step == 1 && c0 + 8 <= C)
    {
        const uint w0 = (uint)q[0] | ((uint)q[1] << 8) | ((uint)q[2] << 16) | ((uint)q[3] << 24);
        const uint w1 = (uint)q[4] | ((uint)q[5] << 8) | ((uint)q[6] << 16) | ((uint)q[7] << 24);
        const uint8 words = (uint8)(w0, w0, w0, w0, w1, w1, w1, w1);
        return as_int8((words >> (uint8)(0, 8, 16, 24, 0, 8, 16, 24)) & 0xffu);
    }
#elif POOL_INDEX_TYPE == 1
    if(step == 1 && c0 + 8 <= C)
    {
        const uint w0 = (uint)q[0] | ((uint)q[1] << 16), w1 = (uint)q[2] | ((uint)q[3] << 16);
        const uint w2 = (uint)q[4] | ((uint)q[5] << 16), w3 = (uint)q[6] | ((uint)q[7] << 16);
        const uint8 words = (uint8)(w0, w0, w1, w1, w2, w2, w3, w3);
        return as_int8((words >> (uint8)(0, 16, 0, 16, 0, 16, 0, 16)) & 0xffffu);
    }
#endif
#define PSC_LANE(k) (c0 + (k) < C ? (int)ip[base + (c0 + (k)) * step] : -1)
    return (int8)(PSC_LANE(0), PSC_LANE(1), PSC_LANE(2), PSC_LANE(3), PSC_LANE(4), PSC_LANE(5), PSC_LANE(6),
                  PSC_LANE(7));
#undef PSC_LANE
}

#endif
