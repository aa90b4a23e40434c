/* Batch norm training forward and backward in ONE kernel (and inference as one streaming pass) over dense tensors (CUDA, sm_90 for
   clusters): the data a key needs are read once into registers, reduced, and the output written
   from the registers, so x (and dy) are read once and y (dx) written once, with no workspace and
   no second launch. Small and medium ResNet shapes, where the three launches of bnorm.h (reduce,
   finalise, apply) cost more than the data.

   A key (channel) is reduced by a team of work items in one work-group, or by a thread-block
   cluster of BNF_CL work-groups whose partial sums meet in distributed shared memory (cluster
   barriers: every work-group of a cluster is resident at once, which the hardware guarantees;
   no grid-wide barrier, no counter in global memory). Sums are shifted by the key's first
   element K (s1 = sum(x - K), s2 = sum((x - K)^2); backward adds g1 = sum(dy),
   g2 = sum(dy (x - K))) as bnorm.h's, so a large mean does not cancel; every work-group of a
   cluster adds the partials in rank order and so computes the same coefficients.

   bn_fused_rows (NCHW): key k's data are S segments of L elements at k * kstride + s * sstride;
     a team of BNF_TEAM work items per key (BNF_BT / BNF_TEAM keys per work-group), or with
     BNF_CL > 1 one key per cluster (BNF_TEAM == BNF_BT). Vector j of the key (NORM_VW elements)
     is held by team lane j % BNF_TEAM of rank (j / BNF_TEAM) % BNF_CL as its register
     (j / BNF_TEAM) / BNF_CL < BNF_FR.
   bn_fused_cols (NHWC): x[row * rstride + k]; a cluster per BNF_TX * NORM_VW channels, its
     work-groups of BNF_TX x (BNF_BT / BNF_TX) work items taking rows (i * BNF_CL + rank) * TY + ty.

   Outputs as bn_finalize + bn_apply: forward y = (x - K) * a + d with a = scale * inv,
   d = bias - m1 * a (m1 = mean - K); saved mean / inverse std and the running statistics
   (MIOpen's factor, unbiased variance); backward dx = dy * a + (x - K) * b + d, dscale, dbias,
   from the saved statistics (F_SAVED) or from x; with BNF_RELOAD backward holds only x and reads
   dy again for dx (from L2), for keys twice as long. Index arithmetic is 32-bit (host: < 2^31).
   bn_infer_flat (below): inference forward, the coefficients computed in the kernel. */
#ifndef MIOPY_BN_FUSED_H
#define MIOPY_BN_FUSED_H
#ifndef NORM_ONLY
#define NORM_ONLY 0 /* none of norm.h's kernels: its types and helpers */
#endif
#include "common/norm.h"
#include "common/raw16.h"

#ifndef BN_BWD
#define BN_BWD 0
#endif
#ifndef BNF_BT
#define BNF_BT 256 /* work items per work-group */
#endif
#ifndef BNF_TEAM
#define BNF_TEAM BNF_BT
#endif
#ifndef BNF_CL
#define BNF_CL 1 /* work-groups per cluster */
#endif
#ifndef BNF_FR
#define BNF_FR 4 /* vectors held per work item (of x, and of dy backward) */
#endif
#ifndef BNF_TX
#define BNF_TX 4 /* bn_fused_cols: work items across the channels */
#endif
#ifndef BNF_RELOAD
#define BNF_RELOAD 0 /* backward: dy read again for dx (from L2) instead of held in registers */
#endif
#define BNF_NS (BN_BWD ? 4 : 2) /* sums per key */
#define BNF_WARPS (BNF_BT / 32)

#if BNF_CL > 1
#define BNF_CLUSTER_DIMS __cluster_dims__(BNF_CL, 1, 1)
#else
#define BNF_CLUSTER_DIMS
#endif

/* ---- a held vector: 16 raw bytes (NORM_VW elements) or one element as fp32 ---- */
#if NORM_VW > 1
typedef uint4 bnf_v;
DEVICE_FN bnf_v bnf_ld(const data_t* p, i64 off, int va)
{ return raw16_ld(p, off, va); }
DEVICE_FN void bnf_unpack(bnf_v t, float* v) { raw16_unpack(t, v); }
DEVICE_FN void bnf_st(data_t* p, i64 off, const float* v, int va)
{
    if(va)
    {
        store_vec(p, off, v);
        return;
    }
    UNROLL
    for(int e = 0; e < NORM_VW; ++e)
        STORE(p, off + e, v[e]);
}
#define BNF_ZERO make_uint4(0u, 0u, 0u, 0u)
#else
typedef float bnf_v;
DEVICE_FN bnf_v bnf_ld(const data_t* p, i64 off, int va)
{
    (void)va;
    return LOAD(p, off);
}
DEVICE_FN void bnf_unpack(bnf_v t, float* v) { v[0] = t; }
DEVICE_FN void bnf_st(data_t* p, i64 off, const float* v, int va)
{
    (void)va;
    STORE(p, off, v[0]);
}
#define BNF_ZERO 0.0f
#endif

/* ---- distributed shared memory ---- */
DEVICE_FN u32 bnf_smem(const void* p) { return (u32)__cvta_generic_to_shared(p); }
#if BNF_CL > 1
DEVICE_FN u32 bnf_rank()
{
    u32 r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
    return r;
}
DEVICE_FN void bnf_cluster_sync()
{
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
DEVICE_FN void bnf_cluster_arrive() { asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory"); }
DEVICE_FN void bnf_cluster_wait() { asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory"); }
/* the float at shared address addr (this block's) in work-group `rank` of the cluster */
DEVICE_FN float bnf_remote(u32 addr, u32 rank)
{
    u32 a;
    float v;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(a) : "r"(addr), "r"(rank));
    asm volatile("ld.shared::cluster.f32 %0, [%1];\n" : "=f"(v) : "r"(a) : "memory");
    return v;
}
#else
DEVICE_FN u32 bnf_rank() { return 0u; }
#endif

/* ---- the per-key parameters the coefficients need (loaded apart, so that a caller can have them
   in flight while it waits): scale, bias (forward), and the running statistics (forward, read by
   the writer) or the saved ones (backward, F_SAVED) ---- */
typedef struct
{
    float sc, bi, ra, rb;
} bnf_pv;

DEVICE_FN bnf_pv bnf_params(int k, int writer, const param_t* scale, const param_t* bias, const param_t* s_a,
                            const param_t* s_b, int flags)
{
    bnf_pv p;
    p.sc = PLOAD(scale, k);
#if !BN_BWD
    p.bi = PLOAD(bias, k);
    const int rd = writer && (flags & F_RUNNING);
#else
    (void)bias, (void)writer;
    p.bi = 0.0f;
    const int rd = flags & F_SAVED;
#endif
    p.ra = rd ? PLOAD(s_a, k) : 0.0f;
    p.rb = rd ? PLOAD(s_b, k) : 0.0f;
    return p;
}

/* ---- a key's coefficients from its sums (bn_finalize's arithmetic) and parameters `pv`; `writer`
   stores the statistics. t: s1, s2 (, g1, g2); returns a, b, d of y / dx = ... (see the file's
   text) ---- */
DEVICE_FN void bnf_coefs_p(const float* t, float n, float shift, int k, int writer, bnf_pv pv, param_t* s_a,
                           param_t* s_b, param_t* s_c, param_t* s_d, int flags, float eps, float factor, float* a,
                           float* b, float* d)
{
    float m1 = t[0] / n;
    float var = t[1] / n - m1 * m1;
    var = var > 0.0f ? var : 0.0f;
    float inv = NORM_RSQRT(var + eps);
    const float sc = pv.sc;
#if !BN_BWD
    if(writer)
    {
        if(flags & F_SAVE)
        {
            PSTORE(s_c, k, shift + m1);
            PSTORE(s_d, k, inv);
        }
        if(flags & F_RUNNING)
        {
            const float unbiased = n > 1.0f ? var * n / (n - 1.0f) : var;
            PSTORE(s_a, k, (1.0f - factor) * pv.ra + factor * (shift + m1));
            PSTORE(s_b, k, (1.0f - factor) * pv.rb + factor * unbiased);
        }
    }
    *a = sc * inv;
    *b = 0.0f;
    *d = pv.bi - m1 * *a;
#else
    (void)s_a, (void)s_b, (void)eps, (void)factor;
    if(flags & F_SAVED)
    {
        m1 = pv.ra - shift;
        inv = pv.rb;
    }
    const float g1 = t[2], gx = t[3] - m1 * t[2]; /* sum(dy), sum(dy * (x - mean)) */
    const float dscale = inv * gx;
    if(writer)
    {
        PSTORE(s_c, k, dscale);
        PSTORE(s_d, k, g1);
    }
    const float alpha = sc * inv;
    const float c4 = -sc * inv * inv * dscale / n;
    *a = alpha;
    *b = c4;
    *d = -alpha * g1 / n - m1 * c4;
#endif
}

/* bnf_coefs_p with the parameters loaded here */
DEVICE_FN void bnf_coefs(const float* t, float n, float shift, int k, int writer, const param_t* scale,
                         const param_t* bias, param_t* s_a, param_t* s_b, param_t* s_c, param_t* s_d, int flags,
                         float eps, float factor, float* a, float* b, float* d)
{
    const bnf_pv pv = bnf_params(k, writer, scale, bias, s_a, s_b, flags);
    bnf_coefs_p(t, n, shift, k, writer, pv, s_a, s_b, s_c, s_d, flags, eps, factor, a, b, d);
}

DEVICE_FN float bnf_warp_sum(float v, int width)
{
    for(int o = 16; o >= width; o >>= 1) /* lanes that differ in the bits from `width` up */
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* ---------------------------------------------------------------------------------------- */
#if !defined(BNF_ONLY) || BNF_ONLY == 1
KERNEL void __launch_bounds__(BNF_BT) BNF_CLUSTER_DIMS
    bn_fused_rows(const data_t* RESTRICT x, const data_t* RESTRICT dy, data_t* RESTRICT out,
                  const param_t* RESTRICT scale, const param_t* RESTRICT bias, param_t* s_a, param_t* s_b,
                  param_t* s_c, param_t* s_d, int K, int S, int L, int kstride, int sstride, int flags, float eps,
                  float factor)
{
    __shared__ float wsum[BNF_NS][BNF_WARPS];
    __shared__ float part[BNF_NS];
    __shared__ float tot[BNF_NS];
    const int tid = (int)threadIdx.x;
    const int team = tid / BNF_TEAM, lt = tid % BNF_TEAM;
    const int rank = (int)bnf_rank();
    const int k = (int)(blockIdx.x / BNF_CL) * (BNF_BT / BNF_TEAM) + team;
    const int live = k < K;
    const int LV = L / NORM_VW;
    const int nv = S * LV;
    const i64 base = (i64)(live ? k : 0) * kstride;
#if BN_BWD
    const int va = NORM_VW > 1 && ALIGNED16(x) && ALIGNED16(dy) && ALIGNED16(out);
#else
    const int va = NORM_VW > 1 && ALIGNED16(x) && ALIGNED16(out);
    (void)dy;
#endif
    const float shift = LOAD(x, base);
    bnf_v xv[BNF_FR];
#if BN_BWD
    bnf_v gv[BNF_FR];
#endif
    UNROLL
    for(int i = 0; i < BNF_FR; ++i)
    {
        const int j = (i * BNF_CL + rank) * BNF_TEAM + lt;
        xv[i] = BNF_ZERO;
#if BN_BWD
        gv[i] = BNF_ZERO;
#endif
        if(live && j < nv)
        {
            const int s = j / LV;
            const i64 o = base + (i64)s * sstride + (j - s * LV) * NORM_VW;
            xv[i] = bnf_ld(x, o, va);
#if BN_BWD && !BNF_RELOAD
            gv[i] = bnf_ld(dy, o, va);
#endif
        }
    }
    float acc[BNF_NS];
    UNROLL
    for(int s = 0; s < BNF_NS; ++s)
        acc[s] = 0.0f;
    UNROLL
    for(int i = 0; i < BNF_FR; ++i)
    {
        const int j = (i * BNF_CL + rank) * BNF_TEAM + lt;
        if(live && j < nv)
        {
            float v[NORM_VW];
            bnf_unpack(xv[i], v);
#if BN_BWD
#if BNF_RELOAD
            const int s_ = j / LV;
            gv[i] = bnf_ld(dy, base + (i64)s_ * sstride + (j - s_ * LV) * NORM_VW, va);
#endif
            float g[NORM_VW];
            bnf_unpack(gv[i], g);
#endif
            UNROLL
            for(int e = 0; e < NORM_VW; ++e)
            {
                const float dd = v[e] - shift;
                acc[0] += dd;
                acc[1] += dd * dd;
#if BN_BWD
                acc[2] += g[e];
                acc[3] += g[e] * dd;
#endif
            }
        }
    }
    /* the team's sums: a warp's by shuffles, then the team's warps through shared memory */
    UNROLL
    for(int s = 0; s < BNF_NS; ++s)
        acc[s] = bnf_warp_sum(acc[s], 1);
#if BNF_TEAM > 32
    if((tid & 31) == 0)
        UNROLL
        for(int s = 0; s < BNF_NS; ++s)
            wsum[s][tid >> 5] = acc[s];
    __syncthreads();
    UNROLL
    for(int s = 0; s < BNF_NS; ++s)
    {
        float t = 0.0f;
        const int w0 = team * (BNF_TEAM / 32);
        for(int w = 0; w < BNF_TEAM / 32; ++w)
            t += wsum[s][w0 + w];
        acc[s] = t;
    }
#else
    (void)wsum;
#endif
#if BNF_CL > 1
    /* the cluster's: every work-group adds the ranks' partials in rank order */
    if(tid < BNF_NS)
        part[tid] = acc[tid];
    bnf_cluster_sync();
    if(tid < BNF_NS)
    {
        float t = 0.0f;
        for(int r = 0; r < BNF_CL; ++r)
            t += bnf_remote(bnf_smem(&part[tid]), (u32)r);
        tot[tid] = t;
    }
    bnf_cluster_arrive(); /* done reading the others' partials (waited for before leaving) */
    __syncthreads();
    UNROLL
    for(int s = 0; s < BNF_NS; ++s)
        acc[s] = tot[s];
#else
    (void)part, (void)tot;
#endif
    float ca = 0.0f, cb = 0.0f, cd = 0.0f;
    if(live)
        bnf_coefs(acc, (float)S * (float)L, shift, k, rank == 0 && lt == 0, scale, bias, s_a, s_b, s_c, s_d, flags,
                  eps, factor, &ca, &cb, &cd);
    UNROLL
    for(int i = 0; i < BNF_FR; ++i)
    {
        const int j = (i * BNF_CL + rank) * BNF_TEAM + lt;
        if(live && j < nv)
        {
            const int s = j / LV;
            const i64 o = base + (i64)s * sstride + (j - s * LV) * NORM_VW;
            float v[NORM_VW];
            bnf_unpack(xv[i], v);
#if BN_BWD
#if BNF_RELOAD
            gv[i] = bnf_ld(dy, o, va); /* from L2: the cluster read it a moment ago */
#endif
            float g[NORM_VW];
            bnf_unpack(gv[i], g);
            UNROLL
            for(int e = 0; e < NORM_VW; ++e)
                v[e] = g[e] * ca + ((v[e] - shift) * cb + cd);
#else
            UNROLL
            for(int e = 0; e < NORM_VW; ++e)
                v[e] = (v[e] - shift) * ca + cd;
#endif
            bnf_st(out, o, v, va);
        }
    }
#if BNF_CL > 1
    bnf_cluster_wait(); /* no work-group leaves while another may still read its partials */
#endif
}
#endif

/* ---------------------------------------------------------------------------------------- */
#if !defined(BNF_ONLY) || BNF_ONLY == 2
#define BNF_TY (BNF_BT / BNF_TX)
#define BNF_CW (BNF_TX * NORM_VW) /* channels per cluster */
KERNEL void __launch_bounds__(BNF_BT) BNF_CLUSTER_DIMS
    bn_fused_cols(const data_t* RESTRICT x, const data_t* RESTRICT dy, data_t* RESTRICT out,
                  const param_t* RESTRICT scale, const param_t* RESTRICT bias, param_t* s_a, param_t* s_b,
                  param_t* s_c, param_t* s_d, int K, int rows, int rstride, int flags, float eps, float factor)
{
    __shared__ float wsum[BNF_NS][BNF_WARPS][BNF_CW];
    __shared__ float part[BNF_NS][BNF_CW];
    __shared__ float tot[BNF_NS][BNF_CW];
    __shared__ float coef[3][BNF_CW];
    __shared__ float shs[BNF_CW]; /* the channels' shifts */
    const int tid = (int)threadIdx.x;
    const int tx = tid % BNF_TX, ty = tid / BNF_TX;
    const int rank = (int)bnf_rank();
    const int c0 = (int)(blockIdx.x / BNF_CL) * BNF_CW;
    const int col = c0 + tx * NORM_VW;
    const int live = col < K; /* K is a multiple of NORM_VW */
#if BN_BWD
    const int va = NORM_VW > 1 && ALIGNED16(x) && ALIGNED16(dy) && ALIGNED16(out);
#else
    const int va = NORM_VW > 1 && ALIGNED16(x) && ALIGNED16(out);
    (void)dy;
#endif
    bnf_v xv[BNF_FR];
#if BN_BWD
    bnf_v gv[BNF_FR];
#endif
    UNROLL
    for(int i = 0; i < BNF_FR; ++i)
    {
        const int r = (i * BNF_CL + rank) * BNF_TY + ty;
        xv[i] = BNF_ZERO;
#if BN_BWD
        gv[i] = BNF_ZERO;
#endif
        if(live && r < rows)
        {
            const i64 o = (i64)r * rstride + col;
            xv[i] = bnf_ld(x, o, va);
#if BN_BWD && !BNF_RELOAD
            gv[i] = bnf_ld(dy, o, va);
#endif
        }
    }
    /* the shifts (x's first row): one load per channel and work-group, not one per work item (a
       hot spot of those few L2 lines) */
    for(int c = tid; c < BNF_CW; c += BNF_BT)
        shs[c] = c0 + c < K ? LOAD(x, c0 + c) : 0.0f;
    __syncthreads();
    float shift[NORM_VW];
    UNROLL
    for(int e = 0; e < NORM_VW; ++e)
        shift[e] = shs[tx * NORM_VW + e];
    float acc[BNF_NS][NORM_VW];
    UNROLL
    for(int s = 0; s < BNF_NS; ++s)
        UNROLL
        for(int e = 0; e < NORM_VW; ++e)
            acc[s][e] = 0.0f;
    UNROLL
    for(int i = 0; i < BNF_FR; ++i)
    {
        const int r = (i * BNF_CL + rank) * BNF_TY + ty;
        if(live && r < rows)
        {
            float v[NORM_VW];
            bnf_unpack(xv[i], v);
#if BN_BWD
#if BNF_RELOAD
            gv[i] = bnf_ld(dy, (i64)r * rstride + col, va);
#endif
            float g[NORM_VW];
            bnf_unpack(gv[i], g);
#endif
            UNROLL
            for(int e = 0; e < NORM_VW; ++e)
            {
                const float dd = v[e] - shift[e];
                acc[0][e] += dd;
                acc[1][e] += dd * dd;
#if BN_BWD
                acc[2][e] += g[e];
                acc[3][e] += g[e] * dd;
#endif
            }
        }
    }
    /* over the rows of a warp (lanes tx + BNF_TX * t) by shuffles, then over the warps */
    UNROLL
    for(int s = 0; s < BNF_NS; ++s)
        UNROLL
        for(int e = 0; e < NORM_VW; ++e)
            acc[s][e] = bnf_warp_sum(acc[s][e], BNF_TX);
    if((tid & 31) < BNF_TX)
        UNROLL
        for(int s = 0; s < BNF_NS; ++s)
            UNROLL
            for(int e = 0; e < NORM_VW; ++e)
                wsum[s][tid >> 5][tx * NORM_VW + e] = acc[s][e];
    __syncthreads();
    for(int q = tid; q < BNF_NS * BNF_CW; q += BNF_BT)
    {
        const int s = q / BNF_CW, c = q % BNF_CW;
        float t = 0.0f;
        for(int w = 0; w < BNF_WARPS; ++w)
            t += wsum[s][w][c];
        part[s][c] = t;
    }
#if BNF_CL > 1
    bnf_cluster_sync();
    for(int q = tid; q < BNF_NS * BNF_CW; q += BNF_BT)
    {
        const int s = q / BNF_CW, c = q % BNF_CW;
        float t = 0.0f;
        for(int r = 0; r < BNF_CL; ++r)
            t += bnf_remote(bnf_smem(&part[s][c]), (u32)r);
        tot[s][c] = t;
    }
    bnf_cluster_arrive();
#else
    for(int q = tid; q < BNF_NS * BNF_CW; q += BNF_BT)
        tot[q / BNF_CW][q % BNF_CW] = part[q / BNF_CW][q % BNF_CW];
#endif
    __syncthreads();
    for(int c = tid; c < BNF_CW; c += BNF_BT)
    {
        float t[BNF_NS];
        UNROLL
        for(int s = 0; s < BNF_NS; ++s)
            t[s] = tot[s][c];
        float a = 0.0f, b = 0.0f, d = 0.0f;
        if(c0 + c < K)
            bnf_coefs(t, (float)rows, shs[c], c0 + c, rank == 0, scale, bias, s_a, s_b, s_c, s_d, flags, eps,
                      factor, &a, &b, &d);
        coef[0][c] = a;
        coef[1][c] = b;
        coef[2][c] = d;
    }
    __syncthreads();
    float ca[NORM_VW], cb[NORM_VW], cd[NORM_VW];
    UNROLL
    for(int e = 0; e < NORM_VW; ++e)
    {
        shift[e] = shs[tx * NORM_VW + e]; /* again: no register kept through the reduction */
        ca[e] = coef[0][tx * NORM_VW + e];
        cb[e] = coef[1][tx * NORM_VW + e];
        cd[e] = coef[2][tx * NORM_VW + e];
    }
    UNROLL
    for(int i = 0; i < BNF_FR; ++i)
    {
        const int r = (i * BNF_CL + rank) * BNF_TY + ty;
        if(live && r < rows)
        {
            const i64 o = (i64)r * rstride + col;
            float v[NORM_VW];
            bnf_unpack(xv[i], v);
#if BN_BWD
#if BNF_RELOAD
            gv[i] = bnf_ld(dy, o, va); /* from L2: the cluster read it a moment ago */
#endif
            float g[NORM_VW];
            bnf_unpack(gv[i], g);
            UNROLL
            for(int e = 0; e < NORM_VW; ++e)
                v[e] = g[e] * ca[e] + ((v[e] - shift[e]) * cb[e] + cd[e]);
#else
            UNROLL
            for(int e = 0; e < NORM_VW; ++e)
                v[e] = (v[e] - shift[e]) * ca[e] + cd[e];
#endif
            bnf_st(out, o, v, va);
        }
    }
#if BNF_CL > 1
    bnf_cluster_wait();
#endif
}
#endif

/* ---------------------------------------------------------------------------------------- */
/* bn_infer_flat: inference forward as one streaming pass, y = x * a[k] + d[k] with a = scale /
   sqrt(var + eps), d = bias - mean * a computed in the kernel (no finalise launch). Element i has
   key (i / kd) % K. Channels-last (kd == 1): the host makes the grid's stride (in vectors) a
   multiple of K / NORM_VW, so a work item's NORM_VW keys never change and their coefficients are
   computed once; otherwise kd is a multiple of NORM_VW and each vector has one key. BNF_AU
   16-byte vectors in flight per work item. Tensors not 16-byte aligned take a scalar loop. */
#if !defined(BNF_ONLY) || BNF_ONLY == 3
#ifndef BNF_AU
#define BNF_AU 4
#endif
DEVICE_FN void bnf_infer_coef(const param_t* scale, const param_t* bias, const param_t* mean, const param_t* var,
                              int k, float eps, float* a, float* d)
{
    *a = PLOAD(scale, k) * NORM_RSQRT(PLOAD(var, k) + eps);
    *d = PLOAD(bias, k) - PLOAD(mean, k) * *a;
}

KERNEL void __launch_bounds__(256)
    bn_infer_flat(const data_t* RESTRICT x, data_t* RESTRICT out, const param_t* RESTRICT scale,
                  const param_t* RESTRICT bias, const param_t* RESTRICT mean, const param_t* RESTRICT var, int K, int n,
                  int kd, float eps)
{
    const int gsz = (int)(gridDim.x * blockDim.x);
    const int t = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if(NORM_VW == 1 || !(ALIGNED16(x) && ALIGNED16(out)))
    {
        for(int i = t; i < n; i += gsz)
        {
            float a, d;
            bnf_infer_coef(scale, bias, mean, var, (i / kd) % K, eps, &a, &d);
            STORE(out, i, LOAD(x, i) * a + d);
        }
        return;
    }
#if NORM_VW > 1
    /* channels-last: the first batch's x loads are issued before the work item's coefficients
       are computed (32 parameter loads that they used to wait behind); other layouts compute
       each vector's coefficients as it is stored (loading them with the batch's x, tried on the
       H200, was within +-1 us on the fp32 NCHW ResNet-50 rows, 512x28x28 1 us slower) */
    const int nv = n / NORM_VW;
    float A[NORM_VW], D[NORM_VW];
    for(int v0 = t; v0 < nv; v0 += BNF_AU * gsz)
    {
        uint4 raw[BNF_AU];
        UNROLL
        for(int u = 0; u < BNF_AU; ++u)
            if(v0 + u * gsz < nv)
                raw[u] = vec_ld16(x + (i64)(v0 + u * gsz) * NORM_VW);
        if(kd == 1 && v0 == t)
            UNROLL
            for(int e = 0; e < NORM_VW; ++e)
                bnf_infer_coef(scale, bias, mean, var, (t * NORM_VW) % K + e, eps, &A[e], &D[e]);
        UNROLL
        for(int u = 0; u < BNF_AU; ++u)
        {
            const int v = v0 + u * gsz;
            if(v < nv)
            {
                float f[NORM_VW];
                raw16_unpack(raw[u], f);
                if(kd != 1)
                {
                    float a, d;
                    bnf_infer_coef(scale, bias, mean, var, (v * NORM_VW / kd) % K, eps, &a, &d);
                    UNROLL
                    for(int e = 0; e < NORM_VW; ++e)
                        f[e] = f[e] * a + d;
                }
                else
                    UNROLL
                    for(int e = 0; e < NORM_VW; ++e)
                        f[e] = f[e] * A[e] + D[e];
                store_vec(out, (i64)v * NORM_VW, f);
            }
        }
    }
#endif
}
#endif

#endif
