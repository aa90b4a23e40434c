/* Backward pooling for CPU OpenCL devices (PoCL) over channels-contiguous tensors (NHWC, NDHWC)
   by scatter into a private band of dx: a work item per (n, d, band of RH dx rows, 8 channels)
   zeroes its band (float8 a position) in private memory, walks once over every output whose
   window touches the band and adds its dy at each window position inside the band (max: the
   lanes masked by the index; average: divided by the window's count), then stores the band. No
   atomics (a work item writes only its own band). Every output and its index are read and
   converted once a band, where the gathering kernels read them once for every dx cell they cover
   (4 times for a 3x3/2 window). A scalar version for rows-contiguous tensors (NCHW: an index
   decoded per output, a scalar add) measured twice as slow as pool_bwd_rows_cpu's vector gather.

   Same arguments as kernels/common/pool.h (POOL_SHAPE_ARGS: logical N, C, D, H, W lens, window,
   strides, pads, and the strides of dx, dy and the index), then RH.
   Max index: POOL_INDEX_IMAGE 0 = the position inside the window ((fz*KH + fy)*KW + fx from the
   window's unclipped start), 1 = in the image ((d*H + h)*W + w); POOL_INDEX_TYPE 0-3 =
   u8/u16/u32/u64. POOL_MODE 0 max, 1 average excluding the padding, 2 average including it. */
#ifndef MIOPY_POOL_SCATTER_CPU_H
#define MIOPY_POOL_SCATTER_CPU_H
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
#define PSC_BUF 4096 /* floats of a work item's band (the solver picks RH to fit) */

#if defined(__OPENCL_VERSION__) && MIOPY_DTYPE != 3
#include "common/cpu_vec.h"

#include "common/pool_cpu_lanes.h"
#include "common/pool_index.h"

#define PSC_SHAPE_ARGS                                                                                \
    int N, int C, int Di, int Hi, int Wi, int Do, int Ho, int Wo, int kd, int kh, int kw, int sd, int sh, \
        int sw, int pd, int ph, int pw, i64 xn, i64 xc, i64 xd, i64 xh, i64 xw, i64 yn, i64 yc, i64 yd,  \
        i64 yh, i64 yw, i64 in_, i64 ic, i64 id_, i64 ih_, i64 iw_, int RH

KERNEL void pool_bwd_scatter_channels_cpu(GLOBAL data_t* RESTRICT dxp, const GLOBAL data_t* RESTRICT dyp,
                                          const GLOBAL idx_t* RESTRICT ip, PSC_SHAPE_ARGS)
{
    const int bands = (Hi + RH - 1) / RH, blocks = (C + 7) / 8;
    const i64 t = GLOBAL_ID0;
    if(t >= (i64)N * Di * bands * blocks)
        return;
    const int c0 = (int)(t % blocks) * 8;
    const i64 r1 = t / blocks;
    const int h0 = (int)(r1 % bands) * RH, h1 = min(h0 + RH, Hi);
    const i64 r2 = r1 / bands;
    const int di = (int)(r2 % Di);
    const i64 n = r2 / Di;
    float8 acc[PSC_BUF / 8];
    for(int i = 0; i < (h1 - h0) * Wi; ++i)
        acc[i] = (float8)(0.0f);
    PSC_COVER(od0, od1, di, di + 1, pd, sd, kd, Do)
    PSC_COVER(oh0, oh1, h0, h1, ph, sh, kh, Ho)
    for(int od = od0; od < od1; ++od)
    {
        const int z0 = od * sd - pd;
#if POOL_MODE == 0
#if POOL_INDEX_IMAGE
        const int want_d = di * Hi;
#else
        const int want_d = (di - z0) * kh;
#endif
#endif
        for(int oh = oh0; oh < oh1; ++oh)
        {
            const int y0 = oh * sh - ph, ya = max(y0, h0), yb = min(y0 + kh, h1);
            const i64 yrow = n * yn + od * yd + oh * yh;
#if POOL_MODE == 0
            const i64 irow = n * in_ + od * id_ + oh * ih_;
#endif
            for(int ow = 0; ow < Wo; ++ow)
            {
                const int x0 = ow * sw - pw, xa = max(x0, 0), xb = min(x0 + kw, Wi);
                float8 g = psc_lanes(dyp, yrow + ow * yw, c0, C);
#if POOL_MODE == 0
                const int8 got = psc_index_lanes(ip, irow + ow * iw_, c0, C, ic);
#else
                g = g * (1.0f / psc_count(z0, y0, x0, kd, kh, kw, Di, Hi, Wi));
#endif
                for(int h = ya; h < yb; ++h)
                {
#if POOL_MODE == 0
#if POOL_INDEX_IMAGE
                    const int want_h = (want_d + h) * Wi;
#else
                    const int want_h = (want_d + h - y0) * kw - x0;
#endif
#endif
                    for(int w = xa; w < xb; ++w)
                    {
#if POOL_MODE == 0
                        acc[(h - h0) * Wi + w] += select((float8)(0.0f), g, got == (int8)(want_h + w));
#else
                        acc[(h - h0) * Wi + w] += g;
#endif
                    }
                }
            }
        }
    }
    for(int h = h0; h < h1; ++h)
        for(int w = 0; w < Wi; ++w)
        {
            const i64 o = n * xn + di * xd + h * xh + w * xw;
            const float8 v = acc[(h - h0) * Wi + w];
            if(c0 + 8 <= C)
                store_f8(dxp, o + c0, v);
            else
            {
#define PSC_LANE(k, e)      \
    if(c0 + (k) < C)        \
        STORE(dxp, o + c0 + (k), v.e);
                PSC_LANE(0, s0) PSC_LANE(1, s1) PSC_LANE(2, s2) PSC_LANE(3, s3)
                PSC_LANE(4, s4) PSC_LANE(5, s5) PSC_LANE(6, s6)
#undef PSC_LANE
            }
        }
}

/* pool_bwd_scatter_rows_cpu: max pooling backward over rows-contiguous tensors (NCHW: dx, dy and
   the index W-contiguous) with 2-D windows (kd == 1, pd == 0), by scatter into a private band:
   a work item per (n, c, d, band of RH dx rows) zeroes the dx rows the covering outputs' windows
   span (padding columns included: the buffer's column j is dx column j - pw, BW floats a row),
   reads 8 outputs and their indices at a time, decodes each index into its window's row and
   column in vector operations (kh compares: no division), adds each lane's dy to its one target
   (8 scalar adds; a lane whose index names no position of its window, or past Wo, adds to a slot
   never stored) and stores the band's rows (8 columns a vector). Every output is read once a
   band and costs one add, where the gathering pool_bwd_rows_cpu tests every window tap of every
   dx element (2.25 compare-selects an element for a 3x3/2 window). Targets in the padding or in
   rows outside the band land in the buffer and are not stored. */
#define PSR_BUF 8192 /* floats of the band's buffer (the solver picks RH and BW to fit) */

KERNEL void pool_bwd_scatter_rows_cpu(GLOBAL data_t* RESTRICT dxp, const GLOBAL data_t* RESTRICT dyp,
                                      const GLOBAL idx_t* RESTRICT ip, PSC_SHAPE_ARGS, int BW)
{
    const int bands = (Hi + RH - 1) / RH;
    const i64 t = GLOBAL_ID0;
    if(t >= (i64)N * C * Di * bands)
        return;
    const int h0 = (int)(t % bands) * RH, h1 = min(h0 + RH, Hi);
    const i64 r1 = t / bands;
    const int di = (int)(r1 % Di);
    const i64 nc = r1 / Di, n = nc / C, c = nc - n * C;
    float8 acc8[PSR_BUF / 8 + 1]; /* 32-byte aligned: the zeroing in whole vectors */
    float* acc = (float*)acc8;
    PSC_COVER(oh0, oh1, h0, h1, ph, sh, kh, Ho)
    /* od covering di: kd == 1, pd == 0 */
    const int od = di % sd == 0 && di / sd < Do ? di / sd : -1;
    const int yb0 = oh0 * sh - ph; /* dx row of the buffer's row 0 */
    const int rows = od >= 0 && oh1 > oh0 ? (oh1 - 1 - oh0) * sh + kh : 0;
    for(int i = 0; i < rows * BW / 8; ++i)
        acc8[i] = (float8)(0.0f);
    if(rows > 0)
    {
        const int8 lane = (int8)(0, 1, 2, 3, 4, 5, 6, 7);
        const int dummy = PSR_BUF;
        for(int oh = oh0; oh < oh1; ++oh)
        {
            const int y0 = oh * sh - ph, rowbase = (y0 - yb0) * BW;
            const i64 yrow = n * yn + c * yc + od * yd + oh * yh;
            const i64 irow = n * in_ + c * ic + od * id_ + oh * ih_;
#if POOL_INDEX_IMAGE
            const int rw = Wi, at0 = (di * Hi + y0) * Wi - pw; /* index of the window's first tap: at0 + ow sw */
#else
            const int rw = kw;
#endif
            for(int ow0 = 0; ow0 < Wo; ow0 += 8)
            {
                const float8 g = psc_lanes(dyp, yrow, ow0, Wo);
                const int8 got = psc_index_lanes(ip, irow, ow0, Wo, iw_);
                const int8 col = ((int8)(ow0) + lane) * sw; /* buffer column of each window's first tap */
#if POOL_INDEX_IMAGE
                const int8 rel = got - ((int8)(at0) + col);
#else
                const int8 rel = got;
#endif
                int8 tgt = (int8)(dummy);
                for(int fy = 0; fy < kh; ++fy)
                {
                    const int8 f = rel - (int8)(fy * rw);
                    tgt = select(tgt, (int8)(rowbase + fy * BW) + col + f, (f >= 0) & (f < kw) & (got >= 0));
                }
                acc[tgt.s0] += g.s0;
                acc[tgt.s1] += g.s1;
                acc[tgt.s2] += g.s2;
                acc[tgt.s3] += g.s3;
                acc[tgt.s4] += g.s4;
                acc[tgt.s5] += g.s5;
                acc[tgt.s6] += g.s6;
                acc[tgt.s7] += g.s7;
            }
        }
    }
    for(int h = h0; h < h1; ++h)
    {
        const i64 xrow = n * xn + c * xc + di * xd + h * xh;
        const int r = h - yb0;
        const bool in = r >= 0 && r < rows;
        for(int w0 = 0; w0 < Wi; w0 += 8)
        {
            const float8 v = in ? vload8(0, acc + r * BW + pw + w0) : (float8)(0.0f);
            if(w0 + 8 <= Wi)
                store_f8(dxp, xrow + w0, v);
            else
            {
#define PSC_LANE(k, e)      \
    if(w0 + (k) < Wi)       \
        STORE(dxp, xrow + w0 + (k), v.e);
                PSC_LANE(0, s0) PSC_LANE(1, s1) PSC_LANE(2, s2) PSC_LANE(3, s3)
                PSC_LANE(4, s4) PSC_LANE(5, s5) PSC_LANE(6, s6)
#undef PSC_LANE
            }
        }
    }
}
#endif

#endif
