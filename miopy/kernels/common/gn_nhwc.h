/* Group norm forward in one pass over channels-last data (NHWC-packed x and y): gn_nhwc_fwd.

   Included after common/norm.h and compiled with NORM_ONLY = gn_rows_fwd's id (it uses that
   kernel's helpers: gn_raw_t, gn_load, gn_unpack, gn_sum2, GN_LOCAL, GN_PER). One work-group of
   GN_LOCAL work items per (n, group): the group is HW pixels of cg contiguous channels, taken as
   vpp = cg / NORM_VW vectors per pixel (vector v: pixel v / vpp, channels (v % vpp) * NORM_VW on
   from the group's first), held in registers in its storage type (GN_PER vectors a work item) so
   that x is read once and y written once. Statistics as gn_rows_fwd: shifted by the group's first
   element, two passes over the registers (no cancellation on large means). */
#if NORM_WANT(gn_rows_fwd)
KERNEL void GN_BOUNDS gn_nhwc_fwd(const GLOBAL data_t* RESTRICT x, GLOBAL data_t* RESTRICT y,
                                  const GLOBAL param_t* RESTRICT w, const GLOBAL param_t* RESTRICT b,
                                  GLOBAL param_t* RESTRICT mean, GLOBAL param_t* RESTRICT rstd, i64 rows, int G,
                                  int cg, int HW, int C, float eps, int affine)
{
    LOCAL float sh[2 * GN_LOCAL];
    const int lid = LOCAL_ID0;
    const int va = ALIGNED16(x) && ALIGNED16(y);
    const int vpp = cg / NORM_VW;
    const int nvec = HW * vpp;
    const int L = cg * HW;
    for(i64 row = GROUP_ID0; row < rows; row += GLOBAL_SIZE0 / GN_LOCAL)
    {
        const i64 n = row / G;
        const int c0 = (int)(row - n * G) * cg;
        const i64 base = n * (i64)HW * C + c0;
        const float shift = LOAD(x, base);
        gn_raw_t xr[GN_PER];
        float s = 0.0f, unused = 0.0f;
        for(int t = 0; t < GN_PER; ++t)
        {
            const int v = t * GN_LOCAL + lid;
            if(v < nvec)
            {
                const int p = v / vpp, q = v - p * vpp;
                xr[t] = gn_load(x, base + (i64)p * C + q * NORM_VW, va);
                float f[NORM_VW];
                gn_unpack(xr[t], f);
                for(int e = 0; e < NORM_VW; ++e)
                    s += f[e] - shift;
            }
        }
        gn_sum2(sh, &s, &unused, lid);
        const float m = s / (float)L;
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
        unused = 0.0f;
        gn_sum2(sh, &s2, &unused, lid);
        const float r = NORM_RSQRT(s2 / (float)L + eps);
        for(int t = 0; t < GN_PER; ++t)
        {
            const int v = t * GN_LOCAL + lid;
            if(v < nvec)
            {
                const int p = v / vpp, q = v - p * vpp;
                float f[NORM_VW];
                gn_unpack(xr[t], f);
                for(int e = 0; e < NORM_VW; ++e)
                {
                    const int c = c0 + q * NORM_VW + e;
                    const float a = affine ? r * PLOAD(w, c) : r;
                    const float bb = affine ? PLOAD(b, c) : 0.0f;
                    f[e] = ((f[e] - shift) - m) * a + bb;
                }
                const i64 off = base + (i64)p * C + q * NORM_VW;
#if NORM_VW > 1
                if(va)
                    store_vec(y, off, f);
                else
#endif
                    for(int e = 0; e < NORM_VW; ++e)
                        STORE(y, off + e, f[e]);
            }
        }
        if(lid == 0)
        {
            PSTORE(mean, row, shift + m);
            PSTORE(rstd, row, r);
        }
    }
}
#endif
