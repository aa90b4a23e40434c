/* Group norm forward in one pass over channels-last data (NHWC-packed x and y): gn_nhwc_fwd.

   Included after common/norm.h and compiled with NORM_ONLY = gn_rows_fwd's id (it uses that
   kernel's helpers: gn_raw_t, gn_load, gn_unpack, GN_LOCAL, GN_PER). One work-group of GN_LOCAL
   work items per GN_GPB neighbouring groups of one image (so that a pixel's read is GN_GPB * cg
   contiguous channels: 16 bytes alone waste most of each DRAM access). A group is HW pixels of cg
   contiguous channels, GN_VPP = cg / NORM_VW vectors a pixel; the work-group's vector v is pixel
   v / (GN_VPP GN_GPB), group (v / GN_VPP) % GN_GPB of the block, and since GN_LOCAL is a multiple
   of GN_VPP GN_GPB a work item stays in one group. The data are held in registers in their storage
   type (GN_PER vectors a work item): x is read once and y written once. Statistics as
   gn_rows_fwd: shifted by the group's first element, two passes over the registers (no
   cancellation on large means), summed per group across the work-group. */
#if NORM_WANT(gn_rows_fwd)
#ifndef GN_GPB
#define GN_GPB 1 /* groups per work-group (a power of two) */
#endif
#ifndef GN_VPP
#define GN_VPP 1 /* vectors a pixel of a group: cg / NORM_VW (a power of two) */
#endif
#define GN_SPAN (GN_VPP * GN_GPB) /* vectors a pixel of the work-group */

/* the sum of v over the work items of this work item's group gi; sh holds GN_LOCAL floats */
#ifdef __OPENCL_VERSION__
DEVICE_FN float gnh_sum(LOCAL float* sh, float v, int lid, int gi)
{
    sh[lid] = v;
    BARRIER();
    float t = 0.0f;
    for(int i = gi * GN_VPP; i < GN_LOCAL; i += GN_SPAN)
        for(int j = 0; j < GN_VPP; ++j)
            t += sh[i + j];
    BARRIER();
    return t;
}
#else
DEVICE_FN float gnh_sum(float* sh, float v, int lid, int gi)
{
    /* lanes of one group differ in the bits outside (GN_GPB - 1) * GN_VPP */
    const int gmask = (GN_GPB - 1) * GN_VPP;
    UNROLL
    for(int o = 16; o > 0; o >>= 1)
        if(!(o & gmask))
            v += __shfl_xor_sync(0xffffffffu, v, o);
    if((lid & 31 & ~gmask) == 0)
        sh[(lid >> 5) * GN_GPB + gi] = v;
    __syncthreads();
    float t = 0.0f;
    for(int w = 0; w < GN_LOCAL / 32; ++w)
        t += sh[w * GN_GPB + gi];
    __syncthreads();
    return t;
}
#endif

KERNEL void GN_BOUNDS gn_nhwc_fwd(const GLOBAL data_t* RESTRICT x, GLOBAL data_t* RESTRICT y,
                                  const GLOBAL param_t* RESTRICT w, const GLOBAL param_t* RESTRICT b,
                                  GLOBAL param_t* RESTRICT mean, GLOBAL param_t* RESTRICT rstd, i64 blocks, int G,
                                  int cg, int HW, int C, float eps, int affine)
{
    LOCAL float sh[GN_LOCAL];
    const int lid = LOCAL_ID0;
    const int va = ALIGNED16(x) && ALIGNED16(y);
    const int nvec = HW * GN_SPAN;
    const int L = cg * HW;
    const int j = lid % GN_SPAN, gi = j / GN_VPP, q = j % GN_VPP; /* the same for all its vectors */
    const int gpb_rows = G / GN_GPB;                              /* work-groups of an image */
    for(i64 blk = GROUP_ID0; blk < blocks; blk += GLOBAL_SIZE0 / GN_LOCAL)
    {
        const i64 n = blk / gpb_rows;
        const int g = (int)(blk - n * gpb_rows) * GN_GPB + gi;
        const i64 row = n * G + g;
        const int c0 = g * cg;
        const i64 base = n * (i64)HW * C + c0 + q * NORM_VW;
        const float shift = LOAD(x, n * (i64)HW * C + c0);
        gn_raw_t xr[GN_PER];
        float s = 0.0f;
#if GN_BATCH /* (norm.h) */
        UNROLL
        for(int t = 0; t < GN_PER; ++t)
        {
            const int v = t * GN_LOCAL + lid;
            xr[t] = v < nvec ? gn_load(x, base + (i64)(v / GN_SPAN) * C, va) : gn_zero();
        }
#endif
        for(int t = 0; t < GN_PER; ++t)
        {
            const int v = t * GN_LOCAL + lid;
            if(v < nvec)
            {
#if !GN_BATCH
                xr[t] = gn_load(x, base + (i64)(v / GN_SPAN) * C, va);
#endif
                float f[NORM_VW];
                gn_unpack(xr[t], f);
                for(int e = 0; e < NORM_VW; ++e)
                    s += f[e] - shift;
            }
        }
        const float m = gnh_sum(sh, s, lid, gi) / (float)L;
        float s2 = 0.0f;
        for(int t = 0; t < GN_PER; ++t)
        {
            const int v = t * GN_LOCAL + lid;
            if(v < nvec)
            {
                float f[NORM_VW];
                gn_unpack(xr[t], f);
                for(int e = 0; e < NORM_VW; ++e)
                {
                    const float d = (f[e] - shift) - m;
                    s2 += d * d;
                }
            }
        }
        const float r = NORM_RSQRT(gnh_sum(sh, s2, lid, gi) / (float)L + eps);
        float a[NORM_VW], bb[NORM_VW];
        for(int e = 0; e < NORM_VW; ++e)
        {
            const int c = c0 + q * NORM_VW + e;
            a[e] = affine ? r * PLOAD(w, c) : r;
            bb[e] = affine ? PLOAD(b, c) : 0.0f;
        }
        for(int t = 0; t < GN_PER; ++t)
        {
            const int v = t * GN_LOCAL + lid;
            if(v < nvec)
            {
                float f[NORM_VW];
                gn_unpack(xr[t], f);
                for(int e = 0; e < NORM_VW; ++e)
                    f[e] = ((f[e] - shift) - m) * a[e] + bb[e];
                const i64 off = base + (i64)(v / GN_SPAN) * C;
#if NORM_VW > 1
                if(va)
                    store_vec(y, off, f);
                else
#endif
                    for(int e = 0; e < NORM_VW; ++e)
                        STORE(y, off + e, f[e]);
            }
        }
        if(lid == gi * GN_VPP) /* the group's first work item */
        {
            PSTORE(mean, row, shift + m);
            PSTORE(rstd, row, r);
        }
    }
}
#endif
