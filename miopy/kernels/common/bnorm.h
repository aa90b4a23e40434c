/* Batch norm on dense tensors (OpenCL and CUDA): the fast path of the packed batch-norm solvers.
   Types, vector access and the meaning of the statistics follow common/norm.h (shifted sums
   s1 = sum(x - K), s2 = sum((x - K)^2), K = the key's first element; backward adds
   g1 = sum(dy), g2 = sum(dy * (x - K))); the coefficients bn_finalize writes are norm_finalize's.

   Three launches, two passes over the data:
     bn_reduce_cols / bn_reduce_rows: per-block partial sums of a slab of the data into
       ws[(chunk * 4 + s) * K + k] (one read of x, and of dy backward);
     bn_finalize: one work-group per 32 keys combines the chunks (8 lanes per key, a fixed order:
       deterministic), writes the statistics asked for and the per-key coefficients;
     bn_apply: a flat elementwise pass (BN_BWD 0: y from x; 1: dx from x and dy). It runs through
       the data from the end, so the last slabs the reduction read are still in L2.
   Columns (NHWC, per-activation): x[row * rstride + k]; a work-group of BN_TX x BN_TY items takes
   BN_TX * NORM_VW channels (16-byte loads along C) and a slab of rows. Rows (NCHW): key k's data
   are S segments of L elements at k * kstride + s * sstride; a work-group per (key, chunk).
   Index arithmetic is 32-bit: the packed solvers take fewer than 2^31 elements. */
#ifndef MIOPY_BNORM_H
#define MIOPY_BNORM_H
#ifndef NORM_ONLY
#define NORM_ONLY 0 /* none of norm.h's kernels: only its types and helpers */
#endif
#include "common/norm.h"

#ifndef BN_TX
#define BN_TX 32
#endif
#define BN_TY (NORM_LOCAL / BN_TX)
#ifndef BN_BWD
#define BN_BWD 0
#endif
#define BN_ID_bn_reduce_cols 1
#define BN_ID_bn_reduce_rows 2
#define BN_ID_bn_finalize 3
#define BN_ID_bn_apply 4
#define BN_ID_bn_apply_2d 5
#define BN_ID_bn_reduce_cols_cpu 6
#define BN_ID_bn_apply_cpu 7
#ifdef BN_ONLY
#define BN_WANT(name) (BN_ONLY == BN_ID_##name)
#else
#define BN_WANT(name) 1
#endif
#ifndef BN_FK
#define BN_FK 32 /* bn_finalize: keys per work-group (a power of two) */
#endif
#ifndef BN_FL
#define BN_FL (NORM_LOCAL / BN_FK) /* and lanes per key (CPU OpenCL: 1, a key per work item) */
#endif
#ifndef BN_UNR
#define BN_UNR 2 /* bn_reduce_cols: rows per step and work item (loads in flight) */
#endif

#if BN_WANT(bn_reduce_cols)
KERNEL void bn_reduce_cols(const GLOBAL data_t* RESTRICT x, const GLOBAL data_t* RESTRICT dy,
                           GLOBAL float* RESTRICT ws, int K, int rows, int rstride, int rows_per_chunk,
                           int flags)
{
    LOCAL float sh[NORM_LOCAL * NORM_VW];
    const int lx = LOCAL_ID0, ly = LOCAL_ID1;
    const int c = GROUP_ID1;
    const int col = (GROUP_ID0 * BN_TX + lx) * NORM_VW;
    const int live = col < K;
    const int va = ALIGNED16(x) && ALIGNED16(dy);
    float shift[NORM_VW], a0[NORM_VW], a1[NORM_VW], a2[NORM_VW], a3[NORM_VW];
    for(int e = 0; e < NORM_VW; ++e)
    {
        shift[e] = (live && col + e < K) ? LOAD(x, col + e) : 0.0f;
        a0[e] = a1[e] = a2[e] = a3[e] = 0.0f;
    }
    const int r0 = c * rows_per_chunk;
    const int r1 = r0 + rows_per_chunk < rows ? r0 + rows_per_chunk : rows;
    if(live)
    {
        int r = r0 + ly;
        /* BN_UNR rows per step: that many loads (of x, and of dy) in flight per work item */
        for(; r + (BN_UNR - 1) * BN_TY < r1; r += BN_UNR * BN_TY)
        {
            float v[BN_UNR][NORM_VW];
#if BN_BWD
            float g[BN_UNR][NORM_VW];
#endif
            for(int u = 0; u < BN_UNR; ++u)
            {
                const i64 o = (i64)(r + u * BN_TY) * rstride + col;
                NORM_LOADV(x, o, v[u], va);
#if BN_BWD
                NORM_LOADV(dy, o, g[u], va);
#endif
            }
            for(int u = 0; u < BN_UNR; ++u)
                for(int e = 0; e < NORM_VW; ++e)
                {
                    const float d = v[u][e] - shift[e];
                    a0[e] += d;
                    a1[e] += d * d;
#if BN_BWD
                    a2[e] += g[u][e];
                    a3[e] += g[u][e] * d;
#endif
                }
        }
        for(; r < r1; r += BN_TY)
        {
            const i64 o0 = (i64)r * rstride + col;
            float v[NORM_VW];
            NORM_LOADV(x, o0, v, va);
#if BN_BWD
            float g[NORM_VW];
            NORM_LOADV(dy, o0, g, va);
#endif
            for(int e = 0; e < NORM_VW; ++e)
            {
                const float d0 = v[e] - shift[e];
                a0[e] += d0;
                a1[e] += d0 * d0;
#if BN_BWD
                a2[e] += g[e];
                a3[e] += g[e] * d0;
#endif
            }
        }
    }
    (void)flags;
    const int nsum = BN_BWD ? 4 : 2;
    for(int s = 0; s < nsum; ++s)
    {
        for(int e = 0; e < NORM_VW; ++e)
            sh[(ly * BN_TX + lx) * NORM_VW + e] = s == 0 ? a0[e] : s == 1 ? a1[e] : s == 2 ? a2[e] : a3[e];
        BARRIER();
        /* BN_TX * NORM_VW columns, each summed over the BN_TY rows by one work item */
        for(int q = ly * BN_TX + lx; q < BN_TX * NORM_VW; q += NORM_LOCAL)
        {
            const int cc = GROUP_ID0 * BN_TX * NORM_VW + q;
            float t = 0.0f;
            for(int y = 0; y < BN_TY; ++y)
                t += sh[y * BN_TX * NORM_VW + q];
            if(cc < K) ws[((i64)c * 4 + s) * K + cc] = t;
        }
        BARRIER();
    }
}
#endif

#if BN_WANT(bn_reduce_rows)
KERNEL void bn_reduce_rows(const GLOBAL data_t* RESTRICT x, const GLOBAL data_t* RESTRICT dy,
                           GLOBAL float* RESTRICT ws, int K, int S, int L, int kstride, int sstride,
                           int chunk, int nchunks, int flags)
{
    LOCAL float sh[4 * NORM_LOCAL];
    const int lid = LOCAL_ID0;
    const int total = S * L;
    const int va = ALIGNED16(x) && ALIGNED16(dy);
    (void)flags;
    for(int u = GROUP_ID0; u < K * nchunks; u += NUM_GROUPS0)
    {
        const int k = u / nchunks, c = u - (u / nchunks) * nchunks;
        const i64 base = (i64)k * kstride;
        const float shift = LOAD(x, base);
        float s1 = 0.0f, s2 = 0.0f, g1 = 0.0f, g2 = 0.0f;
        const u32 q1 = (u32)((i64)(c + 1) * chunk < total ? (i64)(c + 1) * chunk : total);
        const u32 st = NORM_LOCAL * NORM_VW;
        u32 q = (u32)c * chunk + lid * NORM_VW;
        /* two steps at once: two loads (of x, and of dy) in flight per work item */
        for(; q + st < q1; q += 2 * st)
        {
            const u32 sa = q / (u32)L, sb = (q + st) / (u32)L;
            const i64 oa = base + (i64)sa * sstride + (q - sa * (u32)L);
            const i64 ob = base + (i64)sb * sstride + (q + st - sb * (u32)L);
            float v[NORM_VW], w[NORM_VW];
            NORM_LOADV(x, oa, v, va);
            NORM_LOADV(x, ob, w, va);
#if BN_BWD
            float g[NORM_VW], h[NORM_VW];
            NORM_LOADV(dy, oa, g, va);
            NORM_LOADV(dy, ob, h, va);
#endif
            for(int e = 0; e < NORM_VW; ++e)
            {
                const float d = v[e] - shift, f = w[e] - shift;
                s1 += d + f;
                s2 += d * d + f * f;
#if BN_BWD
                g1 += g[e] + h[e];
                g2 += g[e] * d + h[e] * f;
#endif
            }
        }
        if(q < q1)
        {
            const u32 sa = q / (u32)L;
            const i64 off = base + (i64)sa * sstride + (q - sa * (u32)L);
            float v[NORM_VW];
            NORM_LOADV(x, off, v, va);
#if BN_BWD
            float g[NORM_VW];
            NORM_LOADV(dy, off, g, va);
#endif
            for(int e = 0; e < NORM_VW; ++e)
            {
                const float d = v[e] - shift;
                s1 += d;
                s2 += d * d;
#if BN_BWD
                g1 += g[e];
                g2 += g[e] * d;
#endif
            }
        }
        sh[lid] = s1;
        sh[NORM_LOCAL + lid] = s2;
        sh[2 * NORM_LOCAL + lid] = g1;
        sh[3 * NORM_LOCAL + lid] = g2;
        BARRIER();
        for(int h = NORM_LOCAL / 2; h > 0; h >>= 1)
        {
            if(lid < h)
            {
                sh[lid] += sh[lid + h];
                sh[NORM_LOCAL + lid] += sh[NORM_LOCAL + lid + h];
#if BN_BWD
                sh[2 * NORM_LOCAL + lid] += sh[2 * NORM_LOCAL + lid + h];
                sh[3 * NORM_LOCAL + lid] += sh[3 * NORM_LOCAL + lid + h];
#endif
            }
            BARRIER();
        }
        if(lid < 4) ws[((i64)c * 4 + lid) * K + k] = sh[lid * NORM_LOCAL];
        BARRIER();
    }
}
#endif

/* Work-group (BN_FK, BN_FL): keys GROUP_ID0 * BN_FK + lx; lane ly sums chunks ly, ly + BN_FL, ...
   Arguments as norm_finalize's (the stat tensors through their key strides ss). */
#if BN_WANT(bn_finalize)
KERNEL void bn_finalize(const GLOBAL data_t* RESTRICT x, GLOBAL float* RESTRICT ws,
                        const GLOBAL param_t* RESTRICT scale, const GLOBAL param_t* RESTRICT bias,
                        GLOBAL param_t* s_a, GLOBAL param_t* s_b, GLOBAL param_t* s_c, GLOBAL param_t* s_d,
                        i64 part, i64 coef, i64 K, i64 nchunks, float n, int op, int flags, float eps,
                        float factor, LENS8, STR8(xs), STR8(ss))
{
    LOCAL float sh[4 * NORM_LOCAL];
    const int lx = LOCAL_ID0, ly = LOCAL_ID1;
    const i64 k = (i64)GROUP_ID0 * BN_FK + lx;
    const int live = k < K;
    const int nsum = op == OP_BN_BWD ? 4 : 2;
    float s1 = 0.0f, s2 = 0.0f, g1 = 0.0f, g2 = 0.0f;
    if(op != OP_BN_INFER)
    {
        float t[4] = {0.0f, 0.0f, 0.0f, 0.0f}, u[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        if(live)
        {
            i64 c = ly;
            for(; c + BN_FL < nchunks; c += 2 * BN_FL)
                for(int s = 0; s < nsum; ++s)
                {
                    t[s] += ws[part + (c * 4 + s) * K + k];
                    u[s] += ws[part + ((c + BN_FL) * 4 + s) * K + k];
                }
            if(c < nchunks)
                for(int s = 0; s < nsum; ++s)
                    t[s] += ws[part + (c * 4 + s) * K + k];
        }
        for(int s = 0; s < 4; ++s)
            sh[(s * BN_FL + ly) * BN_FK + lx] = t[s] + u[s];
        BARRIER();
        for(int h = BN_FL / 2; h > 0; h >>= 1)
        {
            if(ly < h)
                for(int s = 0; s < nsum; ++s)
                    sh[(s * BN_FL + ly) * BN_FK + lx] += sh[(s * BN_FL + ly + h) * BN_FK + lx];
            BARRIER();
        }
        s1 = sh[lx];
        s2 = sh[BN_FL * BN_FK + lx];
        g1 = sh[2 * BN_FL * BN_FK + lx];
        g2 = sh[3 * BN_FL * BN_FK + lx];
    }
    if(!live || ly != 0) return;
    KEY_IDX(k);
    const i64 so = KOFF(ss);
    const float shift = op == OP_BN_INFER ? 0.0f : LOAD(x, KOFF(xs));
    float m1 = s1 / n;
    float var = s2 / n - m1 * m1;
    var = var > 0.0f ? var : 0.0f;
    float inv = NORM_RSQRT(var + eps);
    if(op == OP_BN_TRAIN)
    {
        if(flags & F_SAVE)
        {
            PSTORE(s_c, so, shift + m1);
            PSTORE(s_d, so, inv);
        }
        if(flags & F_RUNNING)
        {
            const float unbiased = n > 1.0f ? var * n / (n - 1.0f) : var;
            PSTORE(s_a, so, (1.0f - factor) * PLOAD(s_a, so) + factor * (shift + m1));
            PSTORE(s_b, so, (1.0f - factor) * PLOAD(s_b, so) + factor * unbiased);
        }
    }
    if(op == OP_BN_INFER)
    {
        m1 = PLOAD(s_a, so);
        inv = NORM_RSQRT(PLOAD(s_b, so) + eps);
    }
    ws[coef + K + k] = shift;
    ws[coef + 4 * K + k] = 0.0f;
    if(op != OP_BN_BWD)
    {
        ws[coef + k] = PLOAD(scale, so) * inv;
        ws[coef + 2 * K + k] = PLOAD(bias, so);
        ws[coef + 3 * K + k] = m1;
    }
    else
    {
        if(flags & F_SAVED)
        {
            m1 = PLOAD(s_a, so) - shift;
            inv = PLOAD(s_b, so);
        }
        const float gx = g2 - m1 * g1; /* sum(dy * (x - mean)) */
        const float dbias = g1, dscale = inv * gx, sc = PLOAD(scale, so);
        PSTORE(s_c, so, dscale);
        PSTORE(s_d, so, dbias);
        const float alpha = sc * inv;
        ws[coef + k] = alpha;
        ws[coef + 2 * K + k] = -alpha * dbias / n;
        ws[coef + 3 * K + k] = m1;
        ws[coef + 4 * K + k] = -sc * inv * inv * dscale / n;
        ws[coef + 5 * K + k] = inv;
    }
}
#endif

/* Elementwise: element i has key (i / kd) % km. kmode 2: kd == 1 and the grid's stride is a
   multiple of K, so a work item's NORM_VW keys never change (coefficients kept in registers);
   1: kd is a multiple of the step, one key per step; 0: a key per element.
   forward:  y  = (x - K) * c0 + (c2 - m1 * c0)
   backward: dx = dy * c0 + (x - K) * c4 + (c2 - m1 * c4) */
DEVICE_FN void bn_coefs(const GLOBAL float* RESTRICT ws, i64 coef, int K, int k, float* a, float* sft,
                        float* b, float* d)
{
    *a = ws[coef + k];
    *sft = ws[coef + K + k];
    const float m1 = ws[coef + 3 * K + k];
#if BN_BWD
    *b = ws[coef + 4 * K + k];
    *d = ws[coef + 2 * K + k] - m1 * *b;
#else
    *b = 0.0f;
    *d = ws[coef + 2 * K + k] - m1 * *a;
#endif
}

#if BN_BWD
#define BN_MAP(xe, ge, a, sft, b, d) ((ge) * (a) + (((xe) - (sft)) * (b) + (d)))
#else
#define BN_MAP(xe, ge, a, sft, b, d) (((xe) - (sft)) * (a) + (d))
#endif

#if BN_WANT(bn_apply)
KERNEL void bn_apply(const GLOBAL data_t* RESTRICT x, const GLOBAL data_t* RESTRICT dy,
                     GLOBAL data_t* RESTRICT out, const GLOBAL float* RESTRICT ws, i64 coef, int K, int n,
                     int kd, int km, int kmode)
{
#if BN_BWD
    const int vec_ok = NORM_VW > 1 && ALIGNED16(x) && ALIGNED16(dy) && ALIGNED16(out);
#else
    const int vec_ok = NORM_VW > 1 && ALIGNED16(x) && ALIGNED16(out);
    (void)dy;
#endif
    const int step = vec_ok ? NORM_VW : 1;
    /* the host sets kmode > 0 only where n, kd (and K) are multiples of NORM_VW */
    const int mode = (vec_ok || NORM_VW == 1) ? kmode : 0;
    const int nv = (n + step - 1) / step; /* steps, the last one maybe partial */
    const int gsz = (int)GLOBAL_SIZE0;
    const int t = (int)GLOBAL_ID0;
    float A[NORM_VW], SH[NORM_VW], B[NORM_VW], D[NORM_VW];
    if(mode == 2 && t < nv)
    {
        const int k0 = ((nv - 1 - t) * NORM_VW) % K;
        for(int e = 0; e < NORM_VW; ++e)
            bn_coefs(ws, coef, K, k0 + e, &A[e], &SH[e], &B[e], &D[e]);
    }
    for(int v = nv - 1 - t; v >= 0; v -= gsz)
    {
        const int i0 = v * step;
        const int cnt = n - i0 < step ? n - i0 : step;
        float xv[NORM_VW], gv[NORM_VW];
#if NORM_VW > 1
        if(cnt == NORM_VW && vec_ok)
        {
            load_vec(x, i0, xv);
#if BN_BWD
            load_vec(dy, i0, gv);
#endif
        }
        else
#endif
            for(int e = 0; e < cnt; ++e)
            {
                xv[e] = LOAD(x, i0 + e);
#if BN_BWD
                gv[e] = LOAD(dy, i0 + e);
#else
                gv[e] = 0.0f;
#endif
            }
#if !BN_BWD && NORM_VW > 1
        if(cnt == NORM_VW && vec_ok)
            for(int e = 0; e < NORM_VW; ++e)
                gv[e] = 0.0f;
#endif
        if(mode == 2)
        {
            for(int e = 0; e < NORM_VW; ++e)
                xv[e] = BN_MAP(xv[e], gv[e], A[e], SH[e], B[e], D[e]);
        }
        else if(mode == 1)
        {
            float a, sft, b, d;
            bn_coefs(ws, coef, K, (i0 / kd) % km, &a, &sft, &b, &d);
            for(int e = 0; e < NORM_VW; ++e)
                xv[e] = BN_MAP(xv[e], gv[e], a, sft, b, d);
        }
        else
        {
            for(int e = 0; e < cnt; ++e)
            {
                float a, sft, b, d;
                bn_coefs(ws, coef, K, ((i0 + e) / kd) % km, &a, &sft, &b, &d);
                xv[e] = BN_MAP(xv[e], gv[e], a, sft, b, d);
            }
        }
#if NORM_VW > 1
        if(cnt == NORM_VW && vec_ok)
            store_vec(out, i0, xv);
        else
#endif
            for(int e = 0; e < cnt; ++e)
                STORE(out, i0 + e, xv[e]);
    }
}
#endif

/* bn_apply by rows for CPU OpenCL devices (see norm_apply_2d in norm.h): work item o maps the d0
   contiguous elements i = o * d0 + j in a plain loop; key (o / kq) % km for the whole row (kmode
   0: d0 divides a key's run, e.g. H*W in NCHW) or j (kmode 1: d0 = K, the channels of NHWC). */
#if BN_WANT(bn_apply_2d)
KERNEL void bn_apply_2d(const GLOBAL data_t* RESTRICT x, const GLOBAL data_t* RESTRICT dy,
                        GLOBAL data_t* RESTRICT out, const GLOBAL float* RESTRICT ws, i64 coef, int K, int rows,
                        int d0, int kq, int km, int kmode)
{
    const int o = (int)GLOBAL_ID0;
    if(o >= rows)
        return;
    const i64 i0 = (i64)o * d0;
#if !BN_BWD
    (void)dy;
#endif
    if(!kmode)
    {
        float a, sft, b, d;
        bn_coefs(ws, coef, K, (o / kq) % km, &a, &sft, &b, &d);
        for(int j = 0; j < d0; ++j)
        {
#if BN_BWD
            const float g = LOAD(dy, i0 + j);
#else
            const float g = 0.0f;
#endif
            STORE(out, i0 + j, BN_MAP(LOAD(x, i0 + j), g, a, sft, b, d));
        }
        return;
    }
    for(int j = 0; j < d0; ++j)
    {
        float a, sft, b, d;
        bn_coefs(ws, coef, K, j, &a, &sft, &b, &d);
#if BN_BWD
        const float g = LOAD(dy, i0 + j);
#else
        const float g = 0.0f;
#endif
        STORE(out, i0 + j, BN_MAP(LOAD(x, i0 + j), g, a, sft, b, d));
    }
}
#endif

/* CPU OpenCL devices (PoCL): float8 vectors (common/cpu_vec.h), a work item per long run.
   bn_reduce_cols_cpu: columns (NHWC), K a multiple of 8; work item (chunk c, tile of BN_CB * 8
   channels) walks the chunk's rows, each row's tile one contiguous run, and writes the partial
   sums bn_reduce_cols does (ws[(c * 4 + s) * K + k], shifted by the key's first element).
   bn_apply_cpu: bn_apply_2d's rows (d0 a multiple of 8) eight elements at a time, the keys' five
   coefficients loaded as vectors (kmode 1) or broadcast (kmode 0). */
#if defined(__OPENCL_VERSION__) && MIOPY_DTYPE != 3
#if BN_BWD
#define BN_CB 4 /* float8 blocks per tile: four sums each stay in registers */
#else
#define BN_CB 8
#endif
#if BN_WANT(bn_reduce_cols_cpu)
KERNEL void bn_reduce_cols_cpu(const GLOBAL data_t* RESTRICT x, const GLOBAL data_t* RESTRICT dy,
                               GLOBAL float* RESTRICT ws, int K, int rows, int rstride, int rows_per_chunk,
                               int nchunks)
{
    const int tiles = (K + BN_CB * 8 - 1) / (BN_CB * 8);
    const int t = (int)GLOBAL_ID0;
    if(t >= tiles * nchunks)
        return;
    const int c = t / tiles, col0 = (t - c * tiles) * BN_CB * 8;
    const int nb = (K - col0) / 8 < BN_CB ? (K - col0) / 8 : BN_CB;
    float8 shift[BN_CB], a0[BN_CB], a1[BN_CB];
#if BN_BWD
    float8 a2[BN_CB], a3[BN_CB];
#else
    (void)dy;
#endif
    for(int b = 0; b < BN_CB; ++b)
    {
        shift[b] = b < nb ? load_f8_loop(x, col0 + 8 * b) : (float8)(0.0f);
        a0[b] = a1[b] = (float8)(0.0f);
#if BN_BWD
        a2[b] = a3[b] = (float8)(0.0f);
#endif
    }
    const int r0 = c * rows_per_chunk;
    const int r1 = r0 + rows_per_chunk < rows ? r0 + rows_per_chunk : rows;
    for(int r = r0; r < r1; ++r)
    {
        const i64 o = (i64)r * rstride + col0;
        for(int b = 0; b < BN_CB; ++b)
        {
            if(b < nb)
            {
                const float8 d = load_f8_loop(x, o + 8 * b) - shift[b];
                a0[b] += d;
                a1[b] += d * d;
#if BN_BWD
                const float8 g = load_f8_loop(dy, o + 8 * b);
                a2[b] += g;
                a3[b] += g * d;
#endif
            }
        }
    }
    GLOBAL float* w = ws + (i64)c * 4 * K + col0;
    for(int b = 0; b < nb; ++b)
    {
        vstore8(a0[b], 0, w + 8 * b);
        vstore8(a1[b], 0, w + K + 8 * b);
#if BN_BWD
        vstore8(a2[b], 0, w + 2 * K + 8 * b);
        vstore8(a3[b], 0, w + 3 * K + 8 * b);
#endif
    }
}
#endif

#if BN_WANT(bn_apply_cpu)
KERNEL void bn_apply_cpu(const GLOBAL data_t* RESTRICT x, const GLOBAL data_t* RESTRICT dy,
                         GLOBAL data_t* RESTRICT out, const GLOBAL float* RESTRICT ws, i64 coef, int K, int rows,
                         int d0, int kq, int km, int kmode)
{
    const int o = (int)GLOBAL_ID0;
    if(o >= rows)
        return;
    const i64 i0 = (i64)o * d0;
    const GLOBAL float* cf = ws + coef;
#if !BN_BWD
    (void)dy;
#endif
    float8 a, sft, b, d;
    if(!kmode)
    {
        float as, ss, bs, ds;
        bn_coefs(ws, coef, K, (o / kq) % km, &as, &ss, &bs, &ds);
        a = as, sft = ss, b = bs, d = ds;
    }
    for(int j = 0; j < d0; j += 8)
    {
        if(kmode)
        {
            a = vload8(0, cf + j);
            sft = vload8(0, cf + K + j);
            const float8 m1 = vload8(0, cf + 3 * K + j);
#if BN_BWD
            b = vload8(0, cf + 4 * K + j);
            d = vload8(0, cf + 2 * K + j) - m1 * b;
#else
            d = vload8(0, cf + 2 * K + j) - m1 * a;
#endif
        }
#if BN_BWD
        const float8 g = load_f8_loop(dy, i0 + j);
#else
        const float8 g = (float8)(0.0f);
#endif
        store_f8(out, i0 + j, BN_MAP(load_f8_loop(x, i0 + j), g, a, sft, b, d));
    }
}
#endif
#endif

#endif
