/* Backward pooling for CPU OpenCL devices (PoCL) when the windows do not overlap (kd <= sd,
   kh <= sh, kw <= sw: 2x2/2 and the like): every dx element lies in at most one window, so it is
   that output's dy (average: divided by the window's count; max: where the index names it, else
   0) or 0, computed straight from dy with no accumulation and no zeroing pass: about the work of
   a copy with a multiply.
   *_rows_cpu: dx, dy and the index W-contiguous (NCHW, NCDHW): a work item per (n, c, d, band of
   PTL_RH dx rows). Stride 2 with 2 columns and no column padding: 8 outputs are read as one
   vector and spread over 16 dx columns by a shuffle; other shapes gather each dx column's output
   through a per-item column table from a staged dy row.
   *_channels_cpu: channels contiguous (NHWC, NDHWC): a work item per (n, d, h) dx row, 8 channels
   a vector, each dx position's output found by counting (no division per position).

   Same arguments as kernels/common/pool.h (POOL_SHAPE_ARGS). POOL_MODE 0 max (POOL_INDEX_IMAGE,
   POOL_INDEX_TYPE as there), 1 average excluding the padding, 2 including it. */
#ifndef MIOPY_POOL_TILE_CPU_H
#define MIOPY_POOL_TILE_CPU_H
#include "common/miopy_types.h"

#ifndef POOL_MODE
#define POOL_MODE 0
#endif
#ifndef POOL_INDEX_IMAGE
#define POOL_INDEX_IMAGE 0
#endif
#ifndef POOL_INDEX_TYPE
#define POOL_INDEX_TYPE 0
#endif
#define PTL_RH 8      /* dx rows of a rows work item */
#define PTL_ROW 1024 /* the most dx columns and outputs of a row (the solver checks) */

#if defined(__OPENCL_VERSION__) && MIOPY_DTYPE != 3
#include "common/pool_cpu_lanes.h"

#define PTL_SHAPE_ARGS                                                                                \
    int N, int C, int Di, int Hi, int Wi, int Do, int Ho, int Wo, int kd, int kh, int kw, int sd, int sh, \
        int sw, int pd, int ph, int pw, i64 xn, i64 xc, i64 xd, i64 xh, i64 xw, i64 yn, i64 yc, i64 yd,  \
        i64 yh, i64 yw, i64 in_, i64 ic, i64 id_, i64 ih_, i64 iw_

/* the output whose window holds position t along one axis (-1: none: past the last output or in
   a gap between windows), *f its place in that window */
DEVICE_FN int ptl_source(int t, int p, int s, int K, int O, int* f)
{
    const int q = t + p, o = q / s;
    *f = q - o * s;
    return o < O && *f < K ? o : -1;
}

/* the rows and depths of window (od, oh) inside the image: the average's divisor before its
   columns (1 for POOL_MODE 2, which divides by the whole window) */
DEVICE_FN int ptl_area(int od, int oh, int sd, int sh, int pd, int ph, int kd, int kh, int Di, int Hi)
{
#if POOL_MODE == 1
    const int z0 = od * sd - pd, y0 = oh * sh - ph;
    return (min(z0 + kd, Di) - max(z0, 0)) * (min(y0 + kh, Hi) - max(y0, 0));
#else
    return 1;
#endif
}

/* lanes w0 .. w0 + 7 of a dx row of `len` (the last block may be partial) */
__attribute__((always_inline)) DEVICE_FN void ptl_store_row8(GLOBAL data_t* p, i64 base, int w0, int len, float8 v)
{
    if(w0 + 8 <= len)
    {
        store_f8(p, base + w0, v);
        return;
    }
#define PTL_LANE(k, e)      \
    if(w0 + (k) < len)      \
        STORE(p, base + w0 + (k), v.e);
    PTL_LANE(0, s0) PTL_LANE(1, s1) PTL_LANE(2, s2) PTL_LANE(3, s3)
    PTL_LANE(4, s4) PTL_LANE(5, s5) PTL_LANE(6, s6)
#undef PTL_LANE
}

KERNEL void pool_bwd_tiles_rows_cpu(GLOBAL data_t* RESTRICT dxp, const GLOBAL data_t* RESTRICT dyp,
                                    const GLOBAL idx_t* RESTRICT ip, PTL_SHAPE_ARGS)
{
    const int bands = (Hi + PTL_RH - 1) / PTL_RH;
    const i64 t = GLOBAL_ID0;
    if(t >= (i64)N * C * Di * bands)
        return;
    const int h0 = (int)(t % bands) * PTL_RH, h1 = min(h0 + PTL_RH, Hi);
    const i64 r1 = t / bands;
    const int di = (int)(r1 % Di);
    const i64 nc = r1 / Di, n = nc / C, c = nc - n * C;
    int fz;
    const int od = ptl_source(di, pd, sd, kd, Do, &fz);
    const bool pairs = sw == 2 && kw == 2 && pw == 0; /* 8 outputs spread over 16 columns */
    int src[PTL_ROW], fxt[PTL_ROW];
    float grow[PTL_ROW + 8];
#if POOL_MODE == 0
    int qrow[PTL_ROW + 8];
#endif
    if(!pairs)
        for(int w = 0; w < Wi; ++w)
        {
            int fx;
            src[w] = ptl_source(w, pw, sw, kw, Wo, &fx);
            fxt[w] = fx;
        }
    for(int h = h0; h < h1; ++h)
    {
        int fy;
        const int oh = od >= 0 ? ptl_source(h, ph, sh, kh, Ho, &fy) : -1;
        const i64 xrow = n * xn + c * xc + di * xd + h * xh;
        if(oh < 0)
        {
            for(int w0 = 0; w0 < Wi; w0 += 8)
                ptl_store_row8(dxp, xrow, w0, Wi, (float8)(0.0f));
            continue;
        }
        const i64 yrow = n * yn + c * yc + od * yd + oh * yh;
#if POOL_MODE == 0
        const i64 irow = n * in_ + c * ic + od * id_ + oh * ih_;
#if POOL_INDEX_IMAGE
        const int want0 = (di * Hi + h) * Wi; /* + w */
#else
        const int want0 = (fz * kh + fy) * kw; /* + fx */
#endif
#else
        const float area = (float)ptl_area(od, oh, sd, sh, pd, ph, kd, kh, Di, Hi);
#endif
        if(pairs)
        {
#if POOL_MODE == 1
            const float half_area = 0.5f / area; /* a multiply: vdivps took a third of the time */
#endif
            for(int o0 = 0; o0 * 2 < Wi; o0 += 8)
            {
                float8 g = psc_lanes(dyp, yrow, o0, Wo);
#if POOL_MODE == 1
                /* over the window's columns inside the row: 2, or 1 for a last window past Wi */
                const float8 x0 = (float8)((float)(2 * o0)) + (float8)(0.0f, 2.0f, 4.0f, 6.0f, 8.0f, 10.0f, 12.0f, 14.0f);
                g = g * select((float8)(half_area), (float8)(2.0f * half_area), x0 + 2.0f > (float8)((float)Wi));
#elif POOL_MODE == 2
                g = g * (1.0f / (float)(kd * kh * kw));
#endif
                float16 v = (float16)(g.s0, g.s0, g.s1, g.s1, g.s2, g.s2, g.s3, g.s3, g.s4, g.s4, g.s5, g.s5,
                                      g.s6, g.s6, g.s7, g.s7);
#if POOL_MODE == 0
                const int8 got = psc_index_lanes(ip, irow, o0, Wo, iw_);
                const int16 q2 = (int16)(got.s0, got.s0, got.s1, got.s1, got.s2, got.s2, got.s3, got.s3, got.s4,
                                         got.s4, got.s5, got.s5, got.s6, got.s6, got.s7, got.s7);
                const int16 col = (int16)(2 * o0) + (int16)(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
#if POOL_INDEX_IMAGE
                const int16 want = (int16)(want0) + col;
#else
                const int16 want = (int16)(want0) + (col & 1);
#endif
                v = select((float16)(0.0f), v, q2 == want);
#endif
                ptl_store_row8(dxp, xrow, 2 * o0, Wi, v.lo);
                ptl_store_row8(dxp, xrow, 2 * o0 + 8, Wi, v.hi);
            }
            continue;
        }
        for(int o0 = 0; o0 < Wo; o0 += 8)
        {
            float8 g = psc_lanes(dyp, yrow, o0, Wo);
#if POOL_MODE == 1
            const float8 x0 = (float8)((float)(o0 * sw - pw)) + (float8)(0.0f, 1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f, 7.0f) * (float)sw;
            g = g / (area * (fmin(x0 + (float)kw, (float8)((float)Wi)) - fmax(x0, (float8)(0.0f))));
#elif POOL_MODE == 2
            g = g * (1.0f / (float)(kd * kh * kw));
#endif
            vstore8(g, 0, grow + o0);
#if POOL_MODE == 0
            vstore8(psc_index_lanes(ip, irow, o0, Wo, iw_), 0, qrow + o0);
#endif
        }
        for(int w0 = 0; w0 < Wi; w0 += 8)
        {
            float a[8];
            for(int l = 0; l < 8; ++l)
            {
                const int w = min(w0 + l, Wi - 1), o = src[w];
#if POOL_MODE == 0
#if POOL_INDEX_IMAGE
                const int want = want0 + w;
#else
                const int want = want0 + fxt[w];
#endif
                a[l] = o >= 0 && qrow[o] == want ? grow[o] : 0.0f;
#else
                a[l] = o >= 0 ? grow[o] : 0.0f;
#endif
            }
            ptl_store_row8(dxp, xrow, w0, Wi, vload8(0, a));
        }
    }
}

KERNEL void pool_bwd_tiles_channels_cpu(GLOBAL data_t* RESTRICT dxp, const GLOBAL data_t* RESTRICT dyp,
                                        const GLOBAL idx_t* RESTRICT ip, PTL_SHAPE_ARGS)
{
    const i64 t = GLOBAL_ID0;
    if(t >= (i64)N * Di * Hi)
        return;
    const int h = (int)(t % Hi);
    const i64 r1 = t / Hi;
    const int di = (int)(r1 % Di);
    const i64 n = r1 / Di;
    int fz, fy;
    const int od = ptl_source(di, pd, sd, kd, Do, &fz);
    const int oh = od >= 0 ? ptl_source(h, ph, sh, kh, Ho, &fy) : -1;
    const i64 xrow = n * xn + di * xd + h * xh;
#if POOL_MODE != 0
    const float area = oh >= 0 ? (float)ptl_area(od, oh, sd, sh, pd, ph, kd, kh, Di, Hi) : 1.0f;
#endif
    /* ow, fx of position w by counting: w + pw = ow * sw + fx */
    int ow = pw / sw, fx = pw - ow * sw;
    for(int w = 0; w < Wi; ++w)
    {
        const i64 xo = xrow + w * xw;
        if(oh < 0 || ow >= Wo || fx >= kw)
        {
            for(int c0 = 0; c0 < C; c0 += 8)
                ptl_store_row8(dxp, xo, c0, C, (float8)(0.0f));
        }
        else
        {
            const i64 yo = n * yn + od * yd + oh * yh + ow * yw;
#if POOL_MODE == 0
            const i64 io = n * in_ + od * id_ + oh * ih_ + ow * iw_;
#if POOL_INDEX_IMAGE
            const int8 want = (int8)((di * Hi + h) * Wi + w);
#else
            const int8 want = (int8)((fz * kh + fy) * kw + fx);
#endif
#elif POOL_MODE == 1
            const int x0 = ow * sw - pw;
            const float scale = 1.0f / (area * (float)(min(x0 + kw, Wi) - max(x0, 0)));
#else
            const float scale = 1.0f / (float)(kd * kh * kw);
#endif
            for(int c0 = 0; c0 < C; c0 += 8)
            {
                const float8 g = psc_lanes(dyp, yo, c0, C);
#if POOL_MODE == 0
                const float8 v = select((float8)(0.0f), g, psc_index_lanes(ip, io, c0, C, ic) == want);
#else
                const float8 v = g * scale;
#endif
                ptl_store_row8(dxp, xo, c0, C, v);
            }
        }
        if(++fx == sw)
        {
            fx = 0;
            ++ow;
        }
    }
}
#endif

#endif
