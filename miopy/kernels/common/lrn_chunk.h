/* Cross-channel LRN over tensors packed with the channels innermost (NHWC; every tensor of the
   call with the same packed strides), windows of at most LRNC_REACH channels each side of the
   centre (n <= 9 for an odd n).

   The elements form one flat run; a work-group of LRNC_GROUP work items takes LRNC_GROUP * VEC *
   LRNC_U consecutive elements, each work item LRNC_U 16-byte vectors of every tensor (vectors
   tid, tid + LRNC_GROUP, ...: coalesced), all loaded before the first is used (H200, fp16 NHWC
   64x96x55x55 backward: 119.7 us with 2, 177.0 with 1; forward is fastest with 1: see
   LrnChannelsChunk.VECTORS). The window terms
   (x^2 forward, dy y / scale backward) go to local memory as float4, with LRNC_REACH more on each
   side of the work-group's run; each work item reads back its vector and LRNC_REACH neighbours
   each side as float4 (no bank conflicts) and sums the window of each element, masked to the
   channels of its own pixel. Every tensor is read once and written once, coalesced. */
#include "common/vec.h"

#define LRNC_GROUP 256
#define LRNC_REACH 4 /* one float4 */
#ifndef LRNC_U
#define LRNC_U 1 /* vectors a work item */
#endif
#define LRNC_V (LRNC_GROUP * LRNC_U) /* vectors a work-group */
#define LRNC_E (LRNC_V * VEC)
#define LRNC_Q (VEC / 4) /* float4 per work item */

#ifdef __OPENCL_VERSION__
#define LRNC_POW(s, e) exp2((e) * log2(s))
#define LRNC_NUM_GROUPS0 ((long)get_num_groups(0))
#define LRNC_F4(a, b, c, d) ((float4)((a), (b), (c), (d)))
#define LRNC_LPTR __local
#else
#define LRNC_LPTR
#define LRNC_POW(s, e) exp2f((e) * log2f(s))
#define LRNC_NUM_GROUPS0 ((long long)gridDim.x)
#define LRNC_F4(a, b, c, d) make_float4((a), (b), (c), (d))
#endif

DEVICE_FN void lrnc_load(const GLOBAL data_t* p, i64 off, int va, float* v)
{
    if(va)
        load_vec(p, off, v);
    else
        for(int j = 0; j < VEC; ++j)
            v[j] = LOAD(p, off + j);
}

DEVICE_FN void lrnc_store(GLOBAL data_t* p, i64 off, int va, const float* v)
{
    if(va)
        store_vec(p, off, v);
    else
        for(int j = 0; j < VEC; ++j)
            STORE(p, off + j, v[j]);
}

/* the window terms t[u][] of this work item's vectors to local memory (vector u * LRNC_GROUP +
   tid of the work-group's run, with LRNC_REACH terms more each side: left and right) */
DEVICE_FN void lrnc_put(LRNC_LPTR float4* sh, int tid, float (*t)[VEC], float4 left, float4 right)
{
    BARRIER();
    UNROLL
    for(int u = 0; u < LRNC_U; ++u)
        for(int q = 0; q < LRNC_Q; ++q)
            sh[1 + (u * LRNC_GROUP + tid) * LRNC_Q + q] =
                LRNC_F4(t[u][4 * q], t[u][4 * q + 1], t[u][4 * q + 2], t[u][4 * q + 3]);
    if(tid == 0)
        sh[0] = left;
    if(tid == 1)
        sh[1 + LRNC_V * LRNC_Q] = right;
    BARRIER();
}

/* w[] = the terms of vector u of this work item with LRNC_REACH neighbours each side
   (w[LRNC_REACH + j] is element j's) */
DEVICE_FN void lrnc_get(LRNC_LPTR float4* sh, int tid, int u, float* w)
{
    UNROLL
    for(int q = 0; q < LRNC_Q + 2; ++q)
    {
        const float4 f = sh[(u * LRNC_GROUP + tid) * LRNC_Q + q];
        w[4 * q] = f.x;
        w[4 * q + 1] = f.y;
        w[4 * q + 2] = f.z;
        w[4 * q + 3] = f.w;
    }
}

/* sum over the window [c - below, c + above] of element j (channel cj), inside [0, C) */
#define LRNC_WINDOW_SUM(acc, w, j, cj, below, above, C)                                            \
    UNROLL                                                                                         \
    for(int t_ = -LRNC_REACH; t_ <= LRNC_REACH; ++t_)                                              \
        if(t_ >= -(below) && t_ <= (above) && (cj) + t_ >= 0 && (cj) + t_ < (C))                   \
            (acc) += (w)[LRNC_REACH + (j) + t_];

KERNEL void lrn_fwd_chunk(const GLOBAL data_t* RESTRICT x, GLOBAL data_t* RESTRICT y, GLOBAL data_t* RESTRICT scale,
                          i64 total, int C, int size, float alpha, float beta, float k, int save)
{
    LOCAL float4 sh[LRNC_V * LRNC_Q + 2];
    const int tid = LOCAL_ID0;
    const int below = (size - 1) / 2, above = size - 1 - below;
    const float aon = alpha / (float)size;
    const int va = ALIGNED16(x) && ALIGNED16(y) && (!save || ALIGNED16(scale));
    for(i64 start = (i64)GROUP_ID0 * LRNC_E; start < total; start += LRNC_NUM_GROUPS0 * LRNC_E)
    {
        float v[LRNC_U][VEC], t[LRNC_U][VEC];
        UNROLL
        for(int u = 0; u < LRNC_U; ++u)
        {
            const i64 e0 = start + (i64)(u * LRNC_GROUP + tid) * VEC;
            if(e0 < total)
                lrnc_load(x, e0, va, v[u]);
            else
                for(int j = 0; j < VEC; ++j)
                    v[u][j] = 0.0f;
        }
        float h[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        if(tid < 2)
        {
            const i64 h0 = tid == 0 ? start - LRNC_REACH : start + LRNC_E;
            for(int j = 0; j < 4; ++j)
            {
                const i64 i = h0 + j;
                const float a = i >= 0 && i < total ? LOAD(x, i) : 0.0f;
                h[j] = a * a;
            }
        }
        UNROLL
        for(int u = 0; u < LRNC_U; ++u)
            for(int j = 0; j < VEC; ++j)
                t[u][j] = v[u][j] * v[u][j];
        const float4 hv = LRNC_F4(h[0], h[1], h[2], h[3]);
        lrnc_put(sh, tid, t, hv, hv);
        UNROLL
        for(int u = 0; u < LRNC_U; ++u)
        {
            const i64 e0 = start + (i64)(u * LRNC_GROUP + tid) * VEC;
            if(e0 >= total)
                continue;
            float w[VEC + 2 * LRNC_REACH];
            lrnc_get(sh, tid, u, w);
            int cj = (int)(e0 % C);
            float out[VEC], sc[VEC];
            UNROLL
            for(int j = 0; j < VEC; ++j)
            {
                float acc = 0.0f;
                LRNC_WINDOW_SUM(acc, w, j, cj, below, above, C)
                sc[j] = k + aon * acc;
                out[j] = v[u][j] * LRNC_POW(sc[j], -beta);
                cj = cj + 1 == C ? 0 : cj + 1;
            }
            lrnc_store(y, e0, va, out);
            if(save)
                lrnc_store(scale, e0, va, sc);
        }
    }
}

KERNEL void lrn_bwd_chunk(const GLOBAL data_t* RESTRICT x, const GLOBAL data_t* RESTRICT y,
                          const GLOBAL data_t* RESTRICT dy, const GLOBAL data_t* RESTRICT scale,
                          GLOBAL data_t* RESTRICT dx, i64 total, int C, int size, float alpha, float beta)
{
    LOCAL float4 sh[LRNC_V * LRNC_Q + 2];
    const int tid = LOCAL_ID0;
    /* dx_c sums dy y / scale over the channels whose forward window holds c */
    const int above = (size - 1) / 2, below = size - 1 - above;
    const float ratio = 2.0f * alpha * beta / (float)size;
    const int va = ALIGNED16(x) && ALIGNED16(y) && ALIGNED16(dy) && ALIGNED16(scale) && ALIGNED16(dx);
    for(i64 start = (i64)GROUP_ID0 * LRNC_E; start < total; start += LRNC_NUM_GROUPS0 * LRNC_E)
    {
        float g[LRNC_U][VEC], s[LRNC_U][VEC], t[LRNC_U][VEC], xv[LRNC_U][VEC];
        UNROLL
        for(int u = 0; u < LRNC_U; ++u)
        {
            const i64 e0 = start + (i64)(u * LRNC_GROUP + tid) * VEC;
            if(e0 < total)
            {
                lrnc_load(dy, e0, va, g[u]);
                lrnc_load(y, e0, va, t[u]);
                lrnc_load(scale, e0, va, s[u]);
                lrnc_load(x, e0, va, xv[u]);
            }
            else
                for(int j = 0; j < VEC; ++j)
                    g[u][j] = s[u][j] = 1.0f, t[u][j] = xv[u][j] = 0.0f;
        }
        float h[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        if(tid < 2)
        {
            const i64 h0 = tid == 0 ? start - LRNC_REACH : start + LRNC_E;
            for(int j = 0; j < 4; ++j)
            {
                const i64 i = h0 + j;
                h[j] = i >= 0 && i < total ? LOAD(dy, i) * LOAD(y, i) / LOAD(scale, i) : 0.0f;
            }
        }
        UNROLL
        for(int u = 0; u < LRNC_U; ++u)
            for(int j = 0; j < VEC; ++j)
                t[u][j] = g[u][j] * t[u][j] / s[u][j]; /* t held y until here */
        const float4 hv = LRNC_F4(h[0], h[1], h[2], h[3]);
        lrnc_put(sh, tid, t, hv, hv);
        UNROLL
        for(int u = 0; u < LRNC_U; ++u)
        {
            const i64 e0 = start + (i64)(u * LRNC_GROUP + tid) * VEC;
            if(e0 >= total)
                continue;
            float w[VEC + 2 * LRNC_REACH];
            lrnc_get(sh, tid, u, w);
            float out[VEC];
            int cj = (int)(e0 % C);
            UNROLL
            for(int j = 0; j < VEC; ++j)
            {
                float acc = 0.0f;
                LRNC_WINDOW_SUM(acc, w, j, cj, below, above, C)
                out[j] = g[u][j] * LRNC_POW(s[u][j], -beta) - ratio * xv[u][j] * acc;
                cj = cj + 1 == C ? 0 : cj + 1;
            }
            lrnc_store(dx, e0, va, out);
        }
    }
}
