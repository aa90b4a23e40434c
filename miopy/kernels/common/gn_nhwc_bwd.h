/* Group norm backward in one pass over channels-last data (CUDA): gn_nhwc_bwd.

   The work-groups are gn_nhwc_fwd's (common/gn_nhwc.h): one work-group of GNB_LOCAL work items per
   GNB_GPB neighbouring groups of one image, vector v of the work-group at pixel v / GNB_SPAN, its
   place in the pixel j = v % GNB_SPAN fixed per work item (GNB_LOCAL is a multiple of GNB_SPAN):
   group j / GNB_VPP of the block, channels (j % GNB_VPP) * NORM_VW + e of that group. x is held
   in registers (GNB_PER 16-byte vectors a work item, raw) and read once; dy is read once for
   the sums and again for dx (GNB_RELOAD 1: from L2, where the work-group's own slice of dy still
   is; 0: held in registers too).

   With xhat = (x - mean) * rstd, g = dy * w: dx = rstd * (g - sum(g) / L - xhat * sum(g xhat) / L)
   over the group's L = cg * HW elements (gn_rows_bwd's arithmetic). The weight gradients'
   partial sums per (n, channel), sum(dy xhat) and sum(dy), are added over the work-group in a
   fixed order (shuffles, then the warps in order: deterministic) and written to
   ws[(n * 2 + s) * C + c]; ln_pgrad_finish adds up the N images. */
#ifndef MIOPY_GN_NHWC_BWD_H
#define MIOPY_GN_NHWC_BWD_H
#ifndef NORM_ONLY
#define NORM_ONLY 0 /* only norm.h's types and helpers */
#endif
#include "common/norm.h"
#include "common/raw16.h"

#ifndef GNB_LOCAL
#define GNB_LOCAL 1024
#endif
#ifndef GNB_PER
#define GNB_PER 4
#endif
#ifndef GNB_GPB
#define GNB_GPB 1
#endif
#ifndef GNB_VPP
#define GNB_VPP 1
#endif
#ifndef GNB_RELOAD
#define GNB_RELOAD 0
#endif
#define GNB_SPAN (GNB_VPP * GNB_GPB) /* vectors a pixel of the work-group (at most 32) */
#define GNB_WARPS (GNB_LOCAL / 32)

#if NORM_VW > 1
typedef uint4 gnb_raw;
DEVICE_FN gnb_raw gnb_ld(const data_t* p, i64 off, int va)
{ return raw16_ld(p, off, va); }
DEVICE_FN void gnb_unpack(gnb_raw t, float* v) { raw16_unpack(t, v); }
#else
typedef float gnb_raw;
DEVICE_FN gnb_raw gnb_ld(const data_t* p, i64 off, int va)
{
    (void)va;
    return LOAD(p, off);
}
DEVICE_FN void gnb_unpack(gnb_raw t, float* v) { v[0] = t; }
#endif

/* the sum of a and b over the work items of group gi (lanes of one group differ in the bits
   outside (GNB_GPB - 1) * GNB_VPP); sh holds 2 * GNB_WARPS * GNB_GPB floats */
DEVICE_FN void gnb_group_sum2(float* sh, float* a, float* b, int lid, int gi)
{
    const int gmask = (GNB_GPB - 1) * GNB_VPP;
    float x = *a, y = *b;
    UNROLL
    for(int o = 16; o > 0; o >>= 1)
        if(!(o & gmask))
        {
            x += __shfl_xor_sync(0xffffffffu, x, o);
            y += __shfl_xor_sync(0xffffffffu, y, o);
        }
    if((lid & 31 & ~gmask) == 0)
    {
        sh[(lid >> 5) * GNB_GPB + gi] = x;
        sh[(GNB_WARPS + (lid >> 5)) * GNB_GPB + gi] = y;
    }
    __syncthreads();
    x = 0.0f;
    y = 0.0f;
    for(int w = 0; w < GNB_WARPS; ++w)
    {
        x += sh[w * GNB_GPB + gi];
        y += sh[(GNB_WARPS + w) * GNB_GPB + gi];
    }
    *a = x;
    *b = y;
}

KERNEL void __launch_bounds__(GNB_LOCAL)
    gn_nhwc_bwd(const data_t* RESTRICT x, const data_t* RESTRICT dy, const param_t* RESTRICT w,
                const param_t* RESTRICT mean, const param_t* RESTRICT rstd, data_t* RESTRICT dx,
                float* RESTRICT ws, i64 blocks, int G, int cg, int HW, int C, int affine)
{
    __shared__ float sh[2 * GNB_WARPS * GNB_GPB];
    __shared__ float chw[2][GNB_WARPS][GNB_SPAN * NORM_VW];
    const int lid = (int)threadIdx.x;
    const int va = ALIGNED16(x) && ALIGNED16(dy) && ALIGNED16(dx);
    const int nvec = HW * GNB_SPAN;
    const int L = cg * HW;
    const int j = lid % GNB_SPAN, gi = j / GNB_VPP, q = j % GNB_VPP; /* fixed for all its vectors */
    const int gpb_rows = G / GNB_GPB;
    for(i64 blk = blockIdx.x; blk < blocks; blk += gridDim.x)
    {
        const i64 n = blk / gpb_rows;
        const int g = (int)(blk - n * gpb_rows) * GNB_GPB + gi;
        const i64 row = n * G + g;
        const int c = g * cg + q * NORM_VW; /* this work item's first channel */
        const i64 base = n * (i64)HW * C + c;
        const float m = PLOAD(mean, row), r = PLOAD(rstd, row);
        float wc[NORM_VW];
        UNROLL
        for(int e = 0; e < NORM_VW; ++e)
            wc[e] = affine ? PLOAD(w, c + e) : 1.0f;
        gnb_raw xr[GNB_PER];
#if !GNB_RELOAD
        gnb_raw dr[GNB_PER];
#endif
        UNROLL
        for(int t = 0; t < GNB_PER; ++t)
        {
            const int v = t * GNB_LOCAL + lid;
            if(v < nvec)
            {
                const i64 off = base + (i64)(v / GNB_SPAN) * C;
                xr[t] = gnb_ld(x, off, va);
#if !GNB_RELOAD
                dr[t] = gnb_ld(dy, off, va);
#endif
            }
        }
        float pd[NORM_VW], pdh[NORM_VW];
        UNROLL
        for(int e = 0; e < NORM_VW; ++e)
            pd[e] = pdh[e] = 0.0f;
        UNROLL
        for(int t = 0; t < GNB_PER; ++t)
        {
            const int v = t * GNB_LOCAL + lid;
            if(v < nvec)
            {
                float fx[NORM_VW], fd[NORM_VW];
                gnb_unpack(xr[t], fx);
#if GNB_RELOAD
                gnb_unpack(gnb_ld(dy, base + (i64)(v / GNB_SPAN) * C, va), fd);
#else
                gnb_unpack(dr[t], fd);
#endif
                UNROLL
                for(int e = 0; e < NORM_VW; ++e)
                {
                    const float h = (fx[e] - m) * r;
                    pd[e] += fd[e];
                    pdh[e] += fd[e] * h;
                }
            }
        }
        float sg = 0.0f, sgx = 0.0f;
        UNROLL
        for(int e = 0; e < NORM_VW; ++e)
        {
            sg += pd[e] * wc[e];
            sgx += pdh[e] * wc[e];
        }
        gnb_group_sum2(sh, &sg, &sgx, lid, gi);
        sg /= (float)L;
        sgx /= (float)L;
        if(affine)
        {
            /* per channel over the work-group: lanes of one j in a warp, then the warps in order */
            UNROLL
            for(int e = 0; e < NORM_VW; ++e)
                for(int o = 16; o >= GNB_SPAN; o >>= 1)
                {
                    pd[e] += __shfl_xor_sync(0xffffffffu, pd[e], o);
                    pdh[e] += __shfl_xor_sync(0xffffffffu, pdh[e], o);
                }
            if((lid & 31) < GNB_SPAN)
                UNROLL
                for(int e = 0; e < NORM_VW; ++e)
                {
                    chw[0][lid >> 5][j * NORM_VW + e] = pdh[e]; /* dweight: sum of dy * xhat */
                    chw[1][lid >> 5][j * NORM_VW + e] = pd[e];  /* dbias: sum of dy */
                }
        }
        __syncthreads();
        if(affine)
            for(int k = lid; k < 2 * GNB_SPAN * NORM_VW; k += GNB_LOCAL)
            {
                const int s = k / (GNB_SPAN * NORM_VW), cc = k % (GNB_SPAN * NORM_VW);
                float t = 0.0f;
                for(int wp = 0; wp < GNB_WARPS; ++wp)
                    t += chw[s][wp][cc];
                /* the block's channels: groups (blk % gpb_rows) * GNB_GPB ..., cc = gi * cg + channel */
                const int ch = (int)(blk - n * gpb_rows) * GNB_GPB * cg + cc;
                ws[(n * 2 + s) * C + ch] = t;
            }
        UNROLL
        for(int t = 0; t < GNB_PER; ++t)
        {
            const int v = t * GNB_LOCAL + lid;
            if(v < nvec)
            {
                const i64 off = base + (i64)(v / GNB_SPAN) * C;
                float fx[NORM_VW], fd[NORM_VW];
                gnb_unpack(xr[t], fx);
#if GNB_RELOAD
                gnb_unpack(gnb_ld(dy, off, va), fd);
#else
                gnb_unpack(dr[t], fd);
#endif
                UNROLL
                for(int e = 0; e < NORM_VW; ++e)
                {
                    const float h = (fx[e] - m) * r;
                    fx[e] = r * (fd[e] * wc[e] - sg - h * sgx);
                }
#if NORM_VW > 1
                if(va)
                    store_vec(dx, off, fx);
                else
#endif
                    UNROLL
                    for(int e = 0; e < NORM_VW; ++e)
                        STORE(dx, off + e, fx[e]);
            }
        }
        __syncthreads(); /* sh and chw are reused by the next block */
    }
}
#endif
