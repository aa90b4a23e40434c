/* Cross-channel LRN, forward and backward, for CUDA: one work item per pixel walks the channels
   as lrn.h's lrn_*_cross_ring do (the window's terms in a register ring, LRN_SIZE compiled in,
   every element read once, each output summing its window afresh in channel order), but in
   chunks of LRNR_U channels whose loads are all issued before any of them is used: the ring
   kernels kept one load in flight a work item and waited on it every channel (H200, fp32 NCHW
   64x96x55x55: 48 % of the copy rate forward, 35 % backward). The power is exp2(e log2 s) as
   lrn_chunk.h's (s >= k > 0), not powf. Any strides: consecutive work items take consecutive
   pixels, so NCHW loads and stores coalesce. Needs lrn.h (LRN_SHAPE, LRN_STRIDES, lrn_pixel). */
#ifdef LRN_SIZE
#ifndef LRNR_U
#define LRNR_U 8 /* channels whose loads are in flight at once */
#endif
#define LRNR_POW(s, e) exp2f((e) * log2f(s))

KERNEL void lrn_fwd_ring_chunk(const data_t* RESTRICT x, data_t* RESTRICT y, data_t* RESTRICT scale, LRN_SHAPE,
                               LRN_STRIDES(xs), LRN_STRIDES(ys), float alpha, float beta, float k, int save)
{
    const i64 pixels = (i64)N * H * W;
    const float aon = alpha / (float)LRN_SIZE;
    for(i64 p = GLOBAL_ID0; p < pixels; p += GLOBAL_SIZE0)
    {
        int n, h, w;
        lrn_pixel(p, H, W, &n, &h, &w);
        const i64 xb = LRN_AT(xs, n, 0, h, w), yb = LRN_AT(ys, n, 0, h, w);
        /* r[i]: x of channel c - LRN_PAD + i (0 outside [0, C)) */
        float r[LRN_SIZE];
        UNROLL
        for(int i = 0; i < LRN_SIZE; ++i)
        {
            const int j = i - LRN_PAD;
            r[i] = (j >= 0 && j < C) ? LOAD(x, xb + j * xsc) : 0.0f;
        }
        for(int c0 = 0; c0 < C; c0 += LRNR_U)
        {
            /* the channels entering the window over this chunk: c + LRN_SIZE - LRN_PAD */
            float in[LRNR_U];
            UNROLL
            for(int u = 0; u < LRNR_U; ++u)
            {
                const int e = c0 + u + LRN_SIZE - LRN_PAD;
                in[u] = e < C ? LOAD(x, xb + e * xsc) : 0.0f;
            }
            UNROLL
            for(int u = 0; u < LRNR_U; ++u)
            {
                if(c0 + u < C)
                {
                    float acc = 0.0f;
                    UNROLL
                    for(int i = 0; i < LRN_SIZE; ++i)
                        acc += r[i] * r[i];
                    const float s = k + aon * acc;
                    const i64 o = yb + (i64)(c0 + u) * ysc;
                    STORE(y, o, r[LRN_PAD] * LRNR_POW(s, -beta));
                    if(save)
                        STORE(scale, o, s);
                }
                UNROLL
                for(int i = 0; i + 1 < LRN_SIZE; ++i)
                    r[i] = r[i + 1];
                r[LRN_SIZE - 1] = in[u];
            }
        }
    }
}

KERNEL void lrn_bwd_ring_chunk(const data_t* RESTRICT x, const data_t* RESTRICT y, const data_t* RESTRICT dy,
                               const data_t* RESTRICT scale, data_t* RESTRICT dx, LRN_SHAPE, LRN_STRIDES(xs),
                               LRN_STRIDES(ys), LRN_STRIDES(gs), LRN_STRIDES(ss), LRN_STRIDES(os), float alpha,
                               float beta)
{
    const i64 pixels = (i64)N * H * W;
    const float ratio = 2.0f * alpha * beta / (float)LRN_SIZE;
    /* the window of channel c in backward: [c - lo, c + LRN_PAD] */
    const int lo = LRN_SIZE - 1 - LRN_PAD;
    for(i64 p = GLOBAL_ID0; p < pixels; p += GLOBAL_SIZE0)
    {
        int n, h, w;
        lrn_pixel(p, H, W, &n, &h, &w);
        const i64 xb = LRN_AT(xs, n, 0, h, w), yb = LRN_AT(ys, n, 0, h, w), gb = LRN_AT(gs, n, 0, h, w);
        const i64 sb = LRN_AT(ss, n, 0, h, w), ob = LRN_AT(os, n, 0, h, w);
        /* channel c - lo + i: t[i] = dy y / scale, g[i] = dy, s[i] = scale (channel c at i = lo) */
        float t[LRN_SIZE], g[LRN_SIZE], s[LRN_SIZE];
        UNROLL
        for(int i = 0; i < LRN_SIZE; ++i)
        {
            const int j = i - lo;
            const int in = j >= 0 && j < C;
            g[i] = in ? LOAD(dy, gb + j * gsc) : 0.0f;
            s[i] = in ? LOAD(scale, sb + j * ssc) : 1.0f;
            t[i] = in ? g[i] * LOAD(y, yb + j * ysc) / s[i] : 0.0f;
        }
        for(int c0 = 0; c0 < C; c0 += LRNR_U)
        {
            /* this chunk's x, and dy, y, scale of the channels entering the window
               (c + 1 + LRN_PAD) */
            float xv[LRNR_U], eg[LRNR_U], ey[LRNR_U], es[LRNR_U];
            UNROLL
            for(int u = 0; u < LRNR_U; ++u)
            {
                const int c = c0 + u, e = c + 1 + LRN_PAD;
                xv[u] = c < C ? LOAD(x, xb + c * xsc) : 0.0f;
                eg[u] = e < C ? LOAD(dy, gb + e * gsc) : 0.0f;
                ey[u] = e < C ? LOAD(y, yb + e * ysc) : 0.0f;
                es[u] = e < C ? LOAD(scale, sb + e * ssc) : 1.0f;
            }
            UNROLL
            for(int u = 0; u < LRNR_U; ++u)
            {
                if(c0 + u < C)
                {
                    float acc = 0.0f;
                    UNROLL
                    for(int i = 0; i < LRN_SIZE; ++i)
                        acc += t[i];
                    const float gc = g[lo] * LRNR_POW(s[lo], -beta);
                    STORE(dx, ob + (i64)(c0 + u) * osc, gc - ratio * xv[u] * acc);
                }
                UNROLL
                for(int i = 0; i + 1 < LRN_SIZE; ++i)
                {
                    t[i] = t[i + 1];
                    g[i] = g[i + 1];
                    s[i] = s[i + 1];
                }
                g[LRN_SIZE - 1] = eg[u];
                s[LRN_SIZE - 1] = es[u];
                t[LRN_SIZE - 1] = eg[u] * ey[u] / es[u];
            }
        }
    }
}
#endif
