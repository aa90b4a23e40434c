/* bn_apply_cl: batch norm's elementwise pass (bn_apply's kmode 2) for channels-last data on
   CUDA, with BN_AU 16-byte vectors in flight per work item (bn_apply keeps one).

   Included after common/bnorm.h, compiled with BN_ONLY = bn_apply's id (bn_coefs, BN_MAP). The host
   guarantees NORM_VW > 1, n and K multiples of NORM_VW and a grid whose stride (in vectors) is a
   multiple of K / NORM_VW, so a work item's NORM_VW channels never change and their coefficients
   stay in registers. Like bn_apply it walks the data from the end (the last slabs the reduction
   read are the likeliest still in L2). Tensors not 16-byte aligned take a scalar loop. */
#if BN_WANT(bn_apply) && !defined(__OPENCL_VERSION__) && NORM_VW > 1
#ifndef BN_AU
#define BN_AU 4
#endif
KERNEL void bn_apply_cl(const GLOBAL data_t* RESTRICT x, const GLOBAL data_t* RESTRICT dy,
                        GLOBAL data_t* RESTRICT out, const GLOBAL float* RESTRICT ws, i64 coef, int K, int n)
{
#if BN_BWD
    const int vec_ok = ALIGNED16(x) && ALIGNED16(dy) && ALIGNED16(out);
#else
    const int vec_ok = ALIGNED16(x) && ALIGNED16(out);
#endif
    const int gsz = (int)GLOBAL_SIZE0;
    const int t = (int)GLOBAL_ID0;
    if(!vec_ok)
    {
        for(int i = n - 1 - t; i >= 0; i -= gsz)
        {
            float a, sft, b, d;
            bn_coefs(ws, coef, K, i % K, &a, &sft, &b, &d);
#if BN_BWD
            const float g = LOAD(dy, i);
#else
            const float g = 0.0f;
#endif
            STORE(out, i, BN_MAP(LOAD(x, i), g, a, sft, b, d));
        }
        return;
    }
    const int nv = n / NORM_VW;
    if(t >= nv)
        return;
    float A[NORM_VW], SH[NORM_VW], B[NORM_VW], D[NORM_VW];
    const int k0 = ((nv - 1 - t) * NORM_VW) % K;
    UNROLL
    for(int e = 0; e < NORM_VW; ++e)
        bn_coefs(ws, coef, K, k0 + e, &A[e], &SH[e], &B[e], &D[e]);
    for(int v0 = nv - 1 - t; v0 >= 0; v0 -= BN_AU * gsz)
    {
        float xv[BN_AU][NORM_VW];
#if BN_BWD
        float gv[BN_AU][NORM_VW];
#endif
        UNROLL
        for(int u = 0; u < BN_AU; ++u)
        {
            const int v = v0 - u * gsz;
            if(v >= 0)
            {
                load_vec(x, (i64)v * NORM_VW, xv[u]);
#if BN_BWD
                load_vec(dy, (i64)v * NORM_VW, gv[u]);
#endif
            }
        }
        UNROLL
        for(int u = 0; u < BN_AU; ++u)
        {
            const int v = v0 - u * gsz;
            if(v >= 0)
            {
                UNROLL
                for(int e = 0; e < NORM_VW; ++e)
                {
#if BN_BWD
                    xv[u][e] = BN_MAP(xv[u][e], gv[u][e], A[e], SH[e], B[e], D[e]);
#else
                    xv[u][e] = BN_MAP(xv[u][e], 0.0f, A[e], SH[e], B[e], D[e]);
#endif
                }
                store_vec(out, (i64)v * NORM_VW, xv[u]);
            }
        }
    }
}
#endif
