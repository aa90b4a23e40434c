/* Normalisation kernels shared by batch norm, layer norm and group norm (OpenCL and CUDA).

   Every norm is "statistics per key over a reduction set, then an affine map per element":
     batch norm spatial: key = channel, reduction = N and the spatial dims;
     batch norm per-activation: key = (C, D, H, W), reduction = N;
     layer norm: key = the leading dims, reduction = the normalised dims;
     group norm: key = (N, group), reduction = the group's channels and the spatial dims.

   Statistics are shifted sums: s1 = sum(x - K), s2 = sum((x - K)^2) with K one element of the
   key's own data (its first), so a large mean does not cancel (var = s2/n - (s1/n)^2 is the
   variance of data centred near zero). Partial sums per (key, chunk) go to the workspace; a
   finalise kernel combines the chunks in a fixed order (deterministic), writes the statistics the
   caller asked for and per-key coefficients; an apply kernel then maps every element:
     forward:  y  = (xc * c0[k] + c2[k]) * w[p] + b[p]   (w, b only per element: LN, GN)
     backward: dx = dy * w[p] * c0[k] + xc * c4[k] + c2[k]
   with xc = (x - c1[k]) - c3[k] = x - mean: c1 is the shift K and c3 = mean - K, so x - mean is
   formed without cancellation however large the mean (c5 = inverse std, for the weight grads)
   Two passes over the data in all (the reduction reads x, and dy backward; the apply reads them
   again and writes). Backward of layer and group norm adds a reduction per weight element
   (dw, db).

   Generic kernels see the tensors through an 8-dim view: dims 0-3 index the key, dims 4-7 the
   reduction (unused dims have length 1); every tensor has its own 8 strides (0 where it does not
   vary), so any layout or strides work. Packed kernels (norm_*_rows, norm_*_cols, norm_*_packed)
   take dense tensors: rows when the reduction is contiguous in memory (NCHW batch norm, layer
   norm, NCHW group norm; NHWC group norm as segments of a group's channels, its key split in an
   outer and an inner part), columns when the key is (NHWC or per-activation batch norm), with
   16-byte vector access where NORM_VW == VEC. Packed weight gradients (norm_pgrad_cols / _rows)
   write partial sums per chunk that norm_pgrad_finish adds up.

   NORM_PTYPE: the type of scale / bias / statistics (0 fp32, 1 fp16, 2 bf16); the data (x, y,
   dy, dx) have MIOPY_DTYPE. Accumulation is fp32. */
#ifndef MIOPY_NORM_H
#define MIOPY_NORM_H
#include "common/vec.h"
/* cpu_vec.h: float8 helpers of the *_cpu kernels, OpenCL only (empty elsewhere) */
#include "common/cpu_vec.h"

#ifndef NORM_PTYPE
#define NORM_PTYPE 0
#endif
#ifndef NORM_VW
#define NORM_VW 1
#endif
#define NORM_LOCAL 256
#define NORM_CX 32 /* columns kernel: work items across columns */
#define NORM_CY 8  /* and across rows */

DEVICE_FN float norm_bf16_to_f(u16 v)
{
#ifdef __OPENCL_VERSION__
    return as_float(((u32)v) << 16);
#else
    return __uint_as_float(((u32)v) << 16);
#endif
}
DEVICE_FN u16 norm_f_to_bf16(float f)
{
#ifdef __OPENCL_VERSION__
    u32 u = as_uint(f);
#else
    u32 u = __float_as_uint(f);
#endif
    if((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) return (u16)0x7fc0;
    u += 0x7fffu + ((u >> 16) & 1u);
    return (u16)(u >> 16);
}

#if NORM_PTYPE == 0
typedef float param_t;
#define PLOAD(p, i) ((p)[i])
#define PSTORE(p, i, v) ((p)[i] = (v))
#elif NORM_PTYPE == 1
#ifdef __OPENCL_VERSION__
typedef half param_t;
#define PLOAD(p, i) vload_half((i), (p))
#define PSTORE(p, i, v) vstore_half_rte((v), (i), (p))
#else
typedef __half param_t;
#define PLOAD(p, i) __half2float((p)[i])
#define PSTORE(p, i, v) ((p)[i] = __float2half_rn(v))
#endif
#else
typedef u16 param_t;
#define PLOAD(p, i) norm_bf16_to_f((p)[i])
#define PSTORE(p, i, v) ((p)[i] = norm_f_to_bf16(v))
#endif

#ifdef __OPENCL_VERSION__ /* eight weights as a float8 (the *_cpu kernels) */
DEVICE_FN float8 norm_pload8(const GLOBAL param_t* p, i64 i)
{
#if NORM_PTYPE == 0
    return vload8(0, p + i);
#else
    return (float8)(PLOAD(p, i), PLOAD(p, i + 1), PLOAD(p, i + 2), PLOAD(p, i + 3), PLOAD(p, i + 4),
                    PLOAD(p, i + 5), PLOAD(p, i + 6), PLOAD(p, i + 7));
#endif
}
#endif

#ifdef __OPENCL_VERSION__
#define NORM_RSQRT(v) rsqrt(v)
#define NORM_SQRT(v) sqrt(v)
#else
#define NORM_RSQRT(v) rsqrtf(v)
#define NORM_SQRT(v) sqrtf(v)
#endif
/* NORM_ONLY=name compiles that kernel alone (a CPU compiler's time grows with the file) */
#define NORM_ID_norm_reduce_generic 1
#define NORM_ID_norm_reduce_rows 2
#define NORM_ID_norm_reduce_cols 3
#define NORM_ID_norm_finalize 4
#define NORM_ID_norm_fwd_generic 5
#define NORM_ID_norm_bwd_generic 6
#define NORM_ID_norm_pgrad_generic 7
#define NORM_ID_norm_fwd_packed 8
#define NORM_ID_norm_bwd_packed 9
#define NORM_ID_norm_pgrad_cols 10
#define NORM_ID_norm_pgrad_rows 11
#define NORM_ID_norm_pgrad_finish 12
#define NORM_ID_norm_apply_2d 13
#define NORM_ID_norm_reduce_rows_serial 14
#define NORM_SERIAL_BLOCK 64 /* norm_reduce_rows_serial: elements summed apart */
#define NORM_ID_norm_pgrad_cols_serial 15
#define NORM_ID_ln_rows_fwd 16
#define NORM_ID_norm_pgrad_rows_serial 17
#define NORM_ID_ln_rows_bwd 18
#define NORM_ID_ln_pgrad_finish 19
#define NORM_ID_gn_rows_fwd 20
#define NORM_ID_gn_rows_bwd 21
#define NORM_ID_norm_coef_expand 22
#define NORM_ID_norm_reduce_split_cpu 23
#define NORM_ID_norm_apply_cyc_cpu 24
#define NORM_ID_norm_pgrad_cyc_cpu 25
#define NORM_ID_ln_rows_fwd_cpu 26
#define NORM_ID_ln_rows_bwd_cpu 27
#ifdef NORM_ONLY
#define NORM_WANT(name) (NORM_ONLY == NORM_ID_##name)
#else
#define NORM_WANT(name) 1
#endif
#if NORM_VW > 1
#define NORM_LOADV(p, off, v, va)                                                                  \
    do                                                                                             \
    {                                                                                              \
        if(va)                                                                                     \
            load_vec((p), (off), (v));                                                             \
        else                                                                                       \
            for(int e_ = 0; e_ < NORM_VW; ++e_)                                                    \
                (v)[e_] = LOAD((p), (off) + e_);                                                   \
    } while(0)
#else
#define NORM_LOADV(p, off, v, va) ((v)[0] = LOAD((p), (off)))
#endif
#define NUM_GROUPS0 (GLOBAL_SIZE0 / NORM_LOCAL)
#define NUM_GROUPS_LN (GLOBAL_SIZE0 / LN_LOCAL)

/* finalise: what the call computes */
#define OP_BN_TRAIN 0
#define OP_BN_INFER 1
#define OP_BN_BWD 2
#define OP_LN_FWD 3
#define OP_LN_BWD 4
/* flags */
#define F_DY 1       /* reduce: also sum dy and dy * (x - K) */
#define F_WEIGHTED 2 /* reduce: dy is multiplied by w[p] first (layer / group norm) */
#define F_SAVE 4     /* training: write saved mean and inverse std */
#define F_RUNNING 8  /* training: update the running mean and variance */
#define F_SAVED 16   /* batch norm backward: mean and inverse std come from the caller */

/* ---- the 8-dim view ------------------------------------------------------------------------ */
#define LENS8 i64 l0, i64 l1, i64 l2, i64 l3, i64 l4, i64 l5, i64 l6, i64 l7
#define STR8(s) i64 s##0, i64 s##1, i64 s##2, i64 s##3, i64 s##4, i64 s##5, i64 s##6, i64 s##7
#define KEY_IDX(k)                                                                                 \
    i64 k3_, k2_, k1_, k0_;                                                                        \
    {                                                                                              \
        i64 t_ = (k);                                                                              \
        k3_ = t_ % l3; t_ /= l3;                                                                   \
        k2_ = t_ % l2; t_ /= l2;                                                                   \
        k1_ = t_ % l1; k0_ = t_ / l1;                                                              \
    }
#define RED_IDX(r)                                                                                 \
    i64 r7_, r6_, r5_, r4_;                                                                        \
    {                                                                                              \
        i64 t_ = (r);                                                                              \
        r7_ = t_ % l7; t_ /= l7;                                                                   \
        r6_ = t_ % l6; t_ /= l6;                                                                   \
        r5_ = t_ % l5; r4_ = t_ / l5;                                                              \
    }
#define KOFF(s) (k0_ * s##0 + k1_ * s##1 + k2_ * s##2 + k3_ * s##3)
#define ROFF(s) (r4_ * s##4 + r5_ * s##5 + r6_ * s##6 + r7_ * s##7)

/* tree sum of NORM_LOCAL values per lane of sh[4][NORM_LOCAL]; the total lands in sh[s][0] */
#define NORM_TREE4(sh, lid)                                                                        \
    for(int h_ = NORM_LOCAL / 2; h_ > 0; h_ >>= 1)                                                 \
    {                                                                                              \
        if((lid) < h_)                                                                             \
        {                                                                                          \
            for(int s_ = 0; s_ < 4; ++s_)                                                          \
                sh[s_ * NORM_LOCAL + (lid)] += sh[s_ * NORM_LOCAL + (lid) + h_];                   \
        }                                                                                          \
        BARRIER();                                                                                 \
    }

/* Partial sums of (key, chunk) units: ws[part + (chunk * 4 + s) * K + k], s = s1, s2, g1, g2. */
#if NORM_WANT(norm_reduce_generic)
KERNEL void norm_reduce_generic(const GLOBAL data_t* RESTRICT x, const GLOBAL data_t* RESTRICT dy,
                                const GLOBAL param_t* RESTRICT w, GLOBAL float* RESTRICT ws, i64 part,
                                i64 K, i64 R, i64 chunk, i64 nchunks, int flags, LENS8, STR8(xs),
                                STR8(ds), STR8(ps))
{
    LOCAL float sh[4 * NORM_LOCAL];
    const int lid = LOCAL_ID0;
    for(i64 u = GROUP_ID0; u < K * nchunks; u += NUM_GROUPS0)
    {
        const i64 k = u / nchunks, c = u % nchunks;
        KEY_IDX(k);
        const float shift = LOAD(x, KOFF(xs));
        float s1 = 0.0f, s2 = 0.0f, g1 = 0.0f, g2 = 0.0f;
        const i64 r1 = (c + 1) * chunk < R ? (c + 1) * chunk : R;
        for(i64 r = c * chunk + lid; r < r1; r += NORM_LOCAL)
        {
            RED_IDX(r);
            const float v = LOAD(x, KOFF(xs) + ROFF(xs)) - shift;
            s1 += v;
            s2 += v * v;
            if(flags & F_DY)
            {
                float g = LOAD(dy, KOFF(ds) + ROFF(ds));
                if(flags & F_WEIGHTED) g *= PLOAD(w, KOFF(ps) + ROFF(ps));
                g1 += g;
                g2 += g * v;
            }
        }
        sh[lid] = s1;
        sh[NORM_LOCAL + lid] = s2;
        sh[2 * NORM_LOCAL + lid] = g1;
        sh[3 * NORM_LOCAL + lid] = g2;
        BARRIER();
        NORM_TREE4(sh, lid)
        if(lid < 4) ws[part + (c * 4 + lid) * K + k] = sh[lid * NORM_LOCAL];
        BARRIER();
    }
}
#endif

/* Packed, reduction contiguous: key k holds S segments of L elements at x + (k / klo) * khi +
   (k % klo) * kstride + s*sstride (klo = K, khi = 0 when the key is one block). Units (key, chunk)
   split the S*L elements; chunk is a multiple of NORM_VW, and so are L, kstride, khi and sstride
   when NORM_VW > 1. Weighted: p = (k % pkm) * pkmul + j / pjd. */
#if NORM_WANT(norm_reduce_rows)
KERNEL void norm_reduce_rows(const GLOBAL data_t* RESTRICT x, const GLOBAL data_t* RESTRICT dy,
                             const GLOBAL param_t* RESTRICT w, GLOBAL float* RESTRICT ws, i64 part, i64 K,
                             i64 S, i64 L, i64 kstride, i64 sstride, i64 chunk, i64 nchunks, int flags,
                             i64 pkm, i64 pkmul, i64 pjd, i64 klo, i64 khi)
{
    LOCAL float sh[4 * NORM_LOCAL];
    const int lid = LOCAL_ID0;
    const i64 total = S * L;
    const int va = ALIGNED16(x) && ALIGNED16(dy);
    for(i64 u = GROUP_ID0; u < K * nchunks; u += NUM_GROUPS0)
    {
        const i64 k = u / nchunks, c = u % nchunks;
        const i64 base = (k / klo) * khi + (k % klo) * kstride;
        const float shift = LOAD(x, base);
        float s1 = 0.0f, s2 = 0.0f, g1 = 0.0f, g2 = 0.0f;
        const i64 q1 = (c + 1) * chunk < total ? (c + 1) * chunk : total;
        for(i64 q = c * chunk + (i64)lid * NORM_VW; q < q1; q += NORM_LOCAL * NORM_VW)
        {
            const i64 s = q / L, j = q - s * L;
            const i64 off = base + s * sstride + j;
            float v[NORM_VW];
            NORM_LOADV(x, off, v, va);
            for(int e = 0; e < NORM_VW; ++e)
            {
                const float d = v[e] - shift;
                s1 += d;
                s2 += d * d;
                v[e] = d;
            }
            if(flags & F_DY)
            {
                float g[NORM_VW];
                NORM_LOADV(dy, off, g, va);
                for(int e = 0; e < NORM_VW; ++e)
                {
                    float ge = g[e];
                    if(flags & F_WEIGHTED) ge *= PLOAD(w, (k % pkm) * pkmul + (j + e) / pjd);
                    g1 += ge;
                    g2 += ge * v[e];
                }
            }
        }
        sh[lid] = s1;
        sh[NORM_LOCAL + lid] = s2;
        sh[2 * NORM_LOCAL + lid] = g1;
        sh[3 * NORM_LOCAL + lid] = g2;
        BARRIER();
        NORM_TREE4(sh, lid)
        if(lid < 4) ws[part + (c * 4 + lid) * K + k] = sh[lid * NORM_LOCAL];
        BARRIER();
    }
}
#endif

/* norm_reduce_rows for CPU OpenCL devices when a key's segments interleave with other keys'
   (channels-last group norm: key (n, group), segments of cg channels, C apart): work item u takes
   outer key ko = u / nchunks and the segments [c * spc, ...) of chunk c = u % nchunks for every
   inner key ki < klo in turn (those segments share cache lines, so each line is read from memory
   once), eight elements of a segment at a time in float8 vectors (cpu_vec.h), a scalar tail when
   L is not a multiple of 8. Same partial sums as norm_reduce_rows, keyed k = ko * klo + ki;
   weighted dy: p = (k % pkm) * pkmul + j. */
#if NORM_WANT(norm_reduce_split_cpu) && defined(__OPENCL_VERSION__) && MIOPY_DTYPE != 3
KERNEL void norm_reduce_split_cpu(const GLOBAL data_t* RESTRICT x, const GLOBAL data_t* RESTRICT dy,
                                  const GLOBAL param_t* RESTRICT w, GLOBAL float* RESTRICT ws, i64 part,
                                  i64 K, i64 S, i64 L, i64 kstride, i64 sstride, i64 spc, i64 nchunks,
                                  int flags, i64 pkm, i64 pkmul, i64 klo, i64 khi)
{
    const i64 u = GLOBAL_ID0;
    if(u >= (K / klo) * nchunks)
        return;
    const i64 ko = u / nchunks, c = u % nchunks;
    const i64 s0 = c * spc, s1 = s0 + spc < S ? s0 + spc : S;
    const int use_dy = flags & F_DY, weighted = flags & F_WEIGHTED;
    for(i64 ki = 0; ki < klo; ++ki)
    {
        const i64 k = ko * klo + ki;
        const i64 base = ko * khi + ki * kstride;
        const float shift = LOAD(x, base);
        const i64 p0 = (k % pkm) * pkmul;
        float8 a1 = 0.0f, a2 = 0.0f, b1 = 0.0f, b2 = 0.0f;
        float t1 = 0.0f, t2 = 0.0f, t3 = 0.0f, t4 = 0.0f;
        i64 j = 0;
        for(; j + 8 <= L; j += 8)
        {
            if(!use_dy)
            {
                for(i64 s = s0; s < s1; ++s)
                {
                    const float8 d = load_f8_loop(x, base + s * sstride + j) - shift;
                    a1 += d;
                    a2 += d * d;
                }
                continue;
            }
            float8 wv = 1.0f;
            if(weighted)
                wv = (float8)(PLOAD(w, p0 + j), PLOAD(w, p0 + j + 1), PLOAD(w, p0 + j + 2),
                              PLOAD(w, p0 + j + 3), PLOAD(w, p0 + j + 4), PLOAD(w, p0 + j + 5),
                              PLOAD(w, p0 + j + 6), PLOAD(w, p0 + j + 7));
            for(i64 s = s0; s < s1; ++s)
            {
                const i64 off = base + s * sstride + j;
                const float8 d = load_f8_loop(x, off) - shift;
                const float8 g = load_f8_loop(dy, off) * wv;
                a1 += d;
                a2 += d * d;
                b1 += g;
                b2 += g * d;
            }
        }
        for(; j < L; ++j)
        {
            const float wj = weighted ? PLOAD(w, p0 + j) : 1.0f;
            for(i64 s = s0; s < s1; ++s)
            {
                const i64 off = base + s * sstride + j;
                const float d = LOAD(x, off) - shift;
                t1 += d;
                t2 += d * d;
                if(use_dy)
                {
                    const float g = LOAD(dy, off) * wj;
                    t3 += g;
                    t4 += g * d;
                }
            }
        }
        ws[part + (c * 4 + 0) * K + k] = hsum8(a1) + t1;
        ws[part + (c * 4 + 1) * K + k] = hsum8(a2) + t2;
        ws[part + (c * 4 + 2) * K + k] = hsum8(b1) + t3;
        ws[part + (c * 4 + 3) * K + k] = hsum8(b2) + t4;
    }
}
#endif

/* norm_reduce_rows for CPU OpenCL devices (PoCL): one work item per (key, chunk) unit walks its
   elements segment by segment in plain loops (no work-group tree, no division per element; the
   weight index of a weighted dy advances by counting; float8 vectors on OpenCL but fp64). Same
   arguments and partial sums. */
#if NORM_WANT(norm_reduce_rows_serial)
#if defined(__OPENCL_VERSION__) && MIOPY_DTYPE != 3
/* CPU OpenCL: a block's sums eight elements at a time in float8 (cpu_vec.h), a scalar tail; a
   weighted dy takes the weight of each vector (one, or lane by lane where the weight changes) */
DEVICE_FN void norm_serial_block_cpu(const GLOBAL data_t* RESTRICT x, const GLOBAL data_t* RESTRICT dy,
                                     const GLOBAL param_t* RESTRICT w, i64 off, i64 j, i64 e0, i64 e1, float shift,
                                     int flags, i64 pk, i64 pjd, float* b1, float* b2, float* bg1, float* bg2)
{
    float8 v1 = 0.0f, v2 = 0.0f, v3 = 0.0f, v4 = 0.0f;
    float t1 = 0.0f, t2 = 0.0f, t3 = 0.0f, t4 = 0.0f;
    i64 e = e0;
    if(!(flags & F_DY))
    {
        for(; e + 8 <= e1; e += 8)
        {
            const float8 d = load_f8_loop(x, off + e) - shift;
            v1 += d;
            v2 += d * d;
        }
        for(; e < e1; ++e)
        {
            const float d = LOAD(x, off + e) - shift;
            t1 += d;
            t2 += d * d;
        }
    }
    else
    {
        const int weighted = flags & F_WEIGHTED;
        i64 p = 0, pr = 0;
        if(weighted)
        {
            p = pk + (j + e0) / pjd;
            pr = (j + e0) % pjd;
        }
        for(; e + 8 <= e1; e += 8)
        {
            const float8 d = load_f8_loop(x, off + e) - shift;
            float8 g = load_f8_loop(dy, off + e);
            if(weighted)
            {
                if(pr + 8 <= pjd)
                    g *= PLOAD(w, p);
                else
                {
                    float wl[8];
                    i64 pp = p, rr = pr;
                    for(int l = 0; l < 8; ++l)
                    {
                        wl[l] = PLOAD(w, pp);
                        if(++rr == pjd)
                        {
                            rr = 0;
                            ++pp;
                        }
                    }
                    g *= vload8(0, wl);
                }
                for(pr += 8; pr >= pjd; pr -= pjd)
                    ++p;
            }
            v1 += d;
            v2 += d * d;
            v3 += g;
            v4 += g * d;
        }
        for(; e < e1; ++e)
        {
            const float d = LOAD(x, off + e) - shift;
            float g = LOAD(dy, off + e);
            if(weighted)
            {
                g *= PLOAD(w, p);
                if(++pr == pjd)
                {
                    pr = 0;
                    ++p;
                }
            }
            t1 += d;
            t2 += d * d;
            t3 += g;
            t4 += g * d;
        }
    }
    *b1 = hsum8(v1) + t1;
    *b2 = hsum8(v2) + t2;
    *bg1 = hsum8(v3) + t3;
    *bg2 = hsum8(v4) + t4;
}
#endif
DEVICE_FN void norm_kahan(float* sum, float* comp, float v)
{
    const float y = v - *comp;
    const float t = *sum + y;
    const float c = (t - *sum) - y;
    *comp = (t - t) == 0.0f ? c : 0.0f; /* an inf or NaN sum drops the compensation */
    *sum = t;
}

KERNEL void norm_reduce_rows_serial(const GLOBAL data_t* RESTRICT x, const GLOBAL data_t* RESTRICT dy,
                                    const GLOBAL param_t* RESTRICT w, GLOBAL float* RESTRICT ws, i64 part,
                                    i64 K, i64 S, i64 L, i64 kstride, i64 sstride, i64 chunk, i64 nchunks,
                                    int flags, i64 pkm, i64 pkmul, i64 pjd, i64 klo, i64 khi)
{
    const i64 u = GLOBAL_ID0;
    if(u >= K * nchunks)
        return;
    const i64 k = u / nchunks, c = u % nchunks;
    const i64 base = (k / klo) * khi + (k % klo) * kstride;
    const float shift = LOAD(x, base);
    const i64 total = S * L;
    const i64 q0 = c * chunk, q1 = q0 + chunk < total ? q0 + chunk : total;
    const i64 pk = (k % pkm) * pkmul;
    float s1a = 0.0f, s2a = 0.0f, g1 = 0.0f, g2 = 0.0f, c1 = 0.0f, c2 = 0.0f, c3 = 0.0f, c4 = 0.0f;
    i64 s = q0 / L, j = q0 - s * L;
    for(i64 q = q0; q < q1; ++s, j = 0)
    {
        const i64 run = L - j < q1 - q ? L - j : q1 - q;
        const i64 off = base + s * sstride + j;
        /* blocks of NORM_SERIAL_BLOCK elements summed apart, then added up with compensation:
           the rounding error is a block's, however long the run (the shifted sums can be large
           next to the mean, e.g. n times a first element far from it) */
        for(i64 e0 = 0; e0 < run; e0 += NORM_SERIAL_BLOCK)
        {
            const i64 e1 = e0 + NORM_SERIAL_BLOCK < run ? e0 + NORM_SERIAL_BLOCK : run;
            float b1 = 0.0f, b2 = 0.0f, bg1 = 0.0f, bg2 = 0.0f;
#if defined(__OPENCL_VERSION__) && MIOPY_DTYPE != 3
            norm_serial_block_cpu(x, dy, w, off, j, e0, e1, shift, flags, pk, pjd, &b1, &b2, &bg1, &bg2);
#else
            if(!(flags & F_DY))
            {
                for(i64 e = e0; e < e1; ++e)
                {
                    const float d = LOAD(x, off + e) - shift;
                    b1 += d;
                    b2 += d * d;
                }
            }
            else if(!(flags & F_WEIGHTED))
            {
                for(i64 e = e0; e < e1; ++e)
                {
                    const float d = LOAD(x, off + e) - shift, g = LOAD(dy, off + e);
                    b1 += d;
                    b2 += d * d;
                    bg1 += g;
                    bg2 += g * d;
                }
            }
            else
            {
                i64 p = pk + (j + e0) / pjd, pr = (j + e0) % pjd;
                for(i64 e = e0; e < e1; ++e)
                {
                    const float d = LOAD(x, off + e) - shift, g = LOAD(dy, off + e) * PLOAD(w, p);
                    b1 += d;
                    b2 += d * d;
                    bg1 += g;
                    bg2 += g * d;
                    if(++pr == pjd)
                    {
                        pr = 0;
                        ++p;
                    }
                }
            }
#endif
            norm_kahan(&s1a, &c1, b1);
            norm_kahan(&s2a, &c2, b2);
            norm_kahan(&g1, &c3, bg1);
            norm_kahan(&g2, &c4, bg2);
        }
        q += run;
    }
    ws[part + (c * 4 + 0) * K + k] = s1a;
    ws[part + (c * 4 + 1) * K + k] = s2a;
    ws[part + (c * 4 + 2) * K + k] = g1;
    ws[part + (c * 4 + 3) * K + k] = g2;
}
#endif

/* Packed, key contiguous: x[row * rstride + k], k < K. Work-group (NORM_CX x NORM_CY) covers
   NORM_CX * NORM_VW keys and the rows of chunk GROUP_ID1. Unweighted (batch norm). */
#if NORM_WANT(norm_reduce_cols)
KERNEL void norm_reduce_cols(const GLOBAL data_t* RESTRICT x, const GLOBAL data_t* RESTRICT dy,
                             GLOBAL float* RESTRICT ws, i64 part, i64 K, i64 rows, i64 rstride,
                             i64 rows_per_chunk, int flags)
{
    LOCAL float sh[NORM_CY * NORM_CX * NORM_VW];
    const int lx = LOCAL_ID0, ly = LOCAL_ID1;
    const i64 c = GROUP_ID1;
    const i64 col = ((i64)GROUP_ID0 * NORM_CX + lx) * NORM_VW;
    const int live = col < K;
    const int va = ALIGNED16(x) && ALIGNED16(dy);
    float shift[NORM_VW], acc[4][NORM_VW];
    for(int e = 0; e < NORM_VW; ++e)
    {
        shift[e] = (live && col + e < K) ? LOAD(x, col + e) : 0.0f;
        acc[0][e] = acc[1][e] = acc[2][e] = acc[3][e] = 0.0f;
    }
    const i64 r0 = c * rows_per_chunk;
    const i64 r1 = r0 + rows_per_chunk < rows ? r0 + rows_per_chunk : rows;
    if(live)
    {
        for(i64 r = r0 + ly; r < r1; r += NORM_CY)
        {
            const i64 off = r * rstride + col;
            float v[NORM_VW];
            NORM_LOADV(x, off, v, va);
            for(int e = 0; e < NORM_VW; ++e)
            {
                v[e] -= shift[e];
                acc[0][e] += v[e];
                acc[1][e] += v[e] * v[e];
            }
            if(flags & F_DY)
            {
                float g[NORM_VW];
                NORM_LOADV(dy, off, g, va);
                for(int e = 0; e < NORM_VW; ++e)
                {
                    acc[2][e] += g[e];
                    acc[3][e] += g[e] * v[e];
                }
            }
        }
    }
    const int nsum = (flags & F_DY) ? 4 : 2;
    for(int s = 0; s < nsum; ++s)
    {
        for(int e = 0; e < NORM_VW; ++e)
            sh[(ly * NORM_CX + lx) * NORM_VW + e] = acc[s][e];
        BARRIER();
        if(ly == 0 && live)
        {
            for(int e = 0; e < NORM_VW; ++e)
            {
                float t = 0.0f;
                for(int y = 0; y < NORM_CY; ++y)
                    t += sh[(y * NORM_CX + lx) * NORM_VW + e];
                if(col + e < K) ws[part + (c * 4 + s) * K + col + e] = t;
            }
        }
        BARRIER();
    }
}
#endif

/* One work item per key: combine the chunks, write the statistics asked for, and the per-key
   coefficients ws[coef + i * K + k] (i = 0..4; see the top of the file). The stat tensors (s_a..
   s_d, scale, bias) are addressed through their key strides ss; x's key strides xs give the
   shift K. n is the reduction count. */
#if NORM_WANT(norm_finalize)
KERNEL void norm_finalize(const GLOBAL data_t* RESTRICT x, GLOBAL float* RESTRICT ws,
                          const GLOBAL param_t* RESTRICT scale, const GLOBAL param_t* RESTRICT bias,
                          GLOBAL param_t* s_a, GLOBAL param_t* s_b, GLOBAL param_t* s_c,
                          GLOBAL param_t* s_d, i64 part, i64 coef, i64 K, i64 nchunks, float n, int op,
                          int flags, float eps, float factor, LENS8, STR8(xs), STR8(ss))
{
    for(i64 k = GLOBAL_ID0; k < K; k += GLOBAL_SIZE0)
    {
        KEY_IDX(k);
        const i64 so = KOFF(ss);
        float s1 = 0.0f, s2 = 0.0f, g1 = 0.0f, g2 = 0.0f;
        const int need_dy = (op == OP_BN_BWD || op == OP_LN_BWD);
        if(op != OP_BN_INFER)
        {
            for(i64 c = 0; c < nchunks; ++c)
            {
                s1 += ws[part + (c * 4 + 0) * K + k];
                s2 += ws[part + (c * 4 + 1) * K + k];
                if(need_dy)
                {
                    g1 += ws[part + (c * 4 + 2) * K + k];
                    g2 += ws[part + (c * 4 + 3) * K + k];
                }
            }
        }
        const float shift = op == OP_BN_INFER ? 0.0f : LOAD(x, KOFF(xs));
        /* the mean is kept as shift + m1: x - shift is exact near the mean, so applying
           (x - shift) - m1 loses nothing however large the mean is */
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
        if(op == OP_BN_TRAIN || op == OP_BN_INFER)
        {
            ws[coef + k] = PLOAD(scale, so) * inv;
            ws[coef + 2 * K + k] = PLOAD(bias, so);
            ws[coef + 3 * K + k] = m1;
        }
        else if(op == OP_LN_FWD)
        {
            PSTORE(s_c, so, shift + m1);
            PSTORE(s_d, so, inv);
            ws[coef + k] = inv;
            ws[coef + 2 * K + k] = 0.0f;
            ws[coef + 3 * K + k] = m1;
        }
        else
        {
            if(op == OP_LN_BWD || (flags & F_SAVED))
            {
                m1 = PLOAD(s_a, so) - shift;
                inv = PLOAD(s_b, so);
            }
            /* sum(g * (x - mean)) = g2 - (mean - shift) * g1 */
            const float gx = g2 - m1 * g1;
            float alpha, beta, gamma;
            if(op == OP_BN_BWD)
            {
                const float dbias = g1, dscale = inv * gx, sc = PLOAD(scale, so);
                PSTORE(s_c, so, dscale);
                PSTORE(s_d, so, dbias);
                alpha = sc * inv;
                beta = -sc * inv * inv * dscale / n;
                gamma = -alpha * dbias / n;
            }
            else
            {
                const float mg = g1 / n, mgx = inv * gx / n;
                alpha = inv;
                beta = -inv * inv * mgx;
                gamma = -inv * mg;
            }
            ws[coef + k] = alpha;
            ws[coef + 2 * K + k] = gamma;
            ws[coef + 3 * K + k] = m1;
            ws[coef + 4 * K + k] = beta;
            ws[coef + 5 * K + k] = inv;
        }
    }
}
#endif

/* ---- apply ------------------------------------------------------------------------------------ */
#if NORM_WANT(norm_fwd_generic)
KERNEL void norm_fwd_generic(const GLOBAL data_t* RESTRICT x, GLOBAL data_t* RESTRICT y,
                             const GLOBAL float* RESTRICT ws, const GLOBAL param_t* RESTRICT w,
                             const GLOBAL param_t* RESTRICT b, i64 coef, i64 K, i64 R, int affine, LENS8,
                             STR8(xs), STR8(ys), STR8(ps))
{
    for(i64 e = GLOBAL_ID0; e < K * R; e += GLOBAL_SIZE0)
    {
        const i64 k = e / R;
        KEY_IDX(k);
        RED_IDX(e - k * R);
        float v = ((LOAD(x, KOFF(xs) + ROFF(xs)) - ws[coef + K + k]) - ws[coef + 3 * K + k]) * ws[coef + k] +
                  ws[coef + 2 * K + k];
        if(affine)
        {
            const i64 p = KOFF(ps) + ROFF(ps);
            v = v * PLOAD(w, p) + PLOAD(b, p);
        }
        STORE(y, KOFF(ys) + ROFF(ys), v);
    }
}
#endif

#if NORM_WANT(norm_bwd_generic)
KERNEL void norm_bwd_generic(const GLOBAL data_t* RESTRICT x, const GLOBAL data_t* RESTRICT dy,
                             GLOBAL data_t* RESTRICT dx, const GLOBAL float* RESTRICT ws,
                             const GLOBAL param_t* RESTRICT w, i64 coef, i64 K, i64 R, int affine, LENS8,
                             STR8(xs), STR8(ds), STR8(os), STR8(ps))
{
    for(i64 e = GLOBAL_ID0; e < K * R; e += GLOBAL_SIZE0)
    {
        const i64 k = e / R;
        KEY_IDX(k);
        RED_IDX(e - k * R);
        float g = LOAD(dy, KOFF(ds) + ROFF(ds));
        if(affine) g *= PLOAD(w, KOFF(ps) + ROFF(ps));
        const float xc = (LOAD(x, KOFF(xs) + ROFF(xs)) - ws[coef + K + k]) - ws[coef + 3 * K + k];
        const float v = g * ws[coef + k] + xc * ws[coef + 4 * K + k] + ws[coef + 2 * K + k];
        STORE(dx, KOFF(os) + ROFF(os), v);
    }
}
#endif

/* Weight gradients of layer / group norm: one unit per weight element p (dims 0-3 of this view
   index the weight), summing dy * xhat and dy over dims 4-7. ks: strides of the statistics' key
   (linear, as the coefficients are stored); os: strides of dw / db. */
#if NORM_WANT(norm_pgrad_generic)
KERNEL void norm_pgrad_generic(const GLOBAL data_t* RESTRICT x, const GLOBAL data_t* RESTRICT dy,
                               const GLOBAL float* RESTRICT ws, GLOBAL param_t* RESTRICT dw,
                               GLOBAL param_t* RESTRICT db, i64 coef, i64 K, i64 P, i64 R, LENS8,
                               STR8(xs), STR8(ds), STR8(ks), STR8(os))
{
    LOCAL float sh[4 * NORM_LOCAL];
    const int lid = LOCAL_ID0;
    for(i64 p = GROUP_ID0; p < P; p += NUM_GROUPS0)
    {
        KEY_IDX(p);
        float a = 0.0f, c = 0.0f;
        for(i64 r = lid; r < R; r += NORM_LOCAL)
        {
            RED_IDX(r);
            const i64 k = KOFF(ks) + ROFF(ks);
            const float g = LOAD(dy, KOFF(ds) + ROFF(ds));
            const float xh =
                ((LOAD(x, KOFF(xs) + ROFF(xs)) - ws[coef + K + k]) - ws[coef + 3 * K + k]) * ws[coef + 5 * K + k];
            a += g * xh;
            c += g;
        }
        sh[lid] = a;
        sh[NORM_LOCAL + lid] = c;
        sh[2 * NORM_LOCAL + lid] = 0.0f;
        sh[3 * NORM_LOCAL + lid] = 0.0f;
        BARRIER();
        NORM_TREE4(sh, lid)
        if(lid == 0)
        {
            PSTORE(dw, KOFF(os), sh[0]);
            PSTORE(db, KOFF(os), sh[NORM_LOCAL]);
        }
        BARRIER();
    }
}
#endif

/* Packed weight gradients, weight index contiguous in memory: element (row, col) at
   row * rstride + col, col < P the weight index, key (row / rdiv) * rmul + col / cdiv (layer norm:
   rdiv = 1, rmul = 1, cdiv = P; NHWC group norm: rdiv = H*W, rmul = G, cdiv = C/G). A work-group
   of NORM_CX x NORM_CY covers NORM_CX columns and the rows of chunk GROUP_ID1; partial sums of
   dy * xhat and dy go to ws[part + (chunk * 2 + s) * P + col]. */
#if NORM_WANT(norm_pgrad_cols)
KERNEL void norm_pgrad_cols(const GLOBAL data_t* RESTRICT x, const GLOBAL data_t* RESTRICT dy,
                            GLOBAL float* RESTRICT ws, i64 part, i64 coef, i64 K, i64 P, i64 rows,
                            i64 rstride, i64 rows_per_chunk, i64 rdiv, i64 rmul, i64 cdiv)
{
    LOCAL float sh[2 * NORM_CY * NORM_CX];
    const int lx = LOCAL_ID0, ly = LOCAL_ID1;
    const i64 c = GROUP_ID1;
    const i64 col = (i64)GROUP_ID0 * NORM_CX + lx;
    const int live = col < P;
    const i64 kc = live ? col / cdiv : 0;
    const i64 r0 = c * rows_per_chunk;
    const i64 r1 = r0 + rows_per_chunk < rows ? r0 + rows_per_chunk : rows;
    float a = 0.0f, b = 0.0f;
    if(live && r0 + ly < r1)
    {
        i64 rq = (r0 + ly) / rdiv, rr = (r0 + ly) % rdiv;
        for(i64 row = r0 + ly; row < r1; row += NORM_CY)
        {
            const i64 k = rq * rmul + kc;
            const i64 off = row * rstride + col;
            const float g = LOAD(dy, off);
            const float xh =
                ((LOAD(x, off) - ws[coef + K + k]) - ws[coef + 3 * K + k]) * ws[coef + 5 * K + k];
            a += g * xh;
            b += g;
            rr += NORM_CY;
            while(rr >= rdiv)
            {
                rr -= rdiv;
                ++rq;
            }
        }
    }
    sh[ly * NORM_CX + lx] = a;
    sh[(NORM_CY + ly) * NORM_CX + lx] = b;
    BARRIER();
    if(ly < 2 && live)
    {
        float t = 0.0f;
        for(int y = 0; y < NORM_CY; ++y)
            t += sh[(ly * NORM_CY + y) * NORM_CX + lx];
        ws[part + (c * 2 + ly) * P + col] = t;
    }
}
#endif

/* Packed weight gradients, weight index outermost of its data: weight p's elements are S
   segments of L contiguous elements at p * pstride + s * sstride (NCHW group norm: S = N,
   L = H*W, pstride = H*W, sstride = C*H*W), key s * smul + p / pdiv. Units (p, chunk) split the
   S*L elements; partial sums as norm_pgrad_cols. */
#if NORM_WANT(norm_pgrad_rows)
KERNEL void norm_pgrad_rows(const GLOBAL data_t* RESTRICT x, const GLOBAL data_t* RESTRICT dy,
                            GLOBAL float* RESTRICT ws, i64 part, i64 coef, i64 K, i64 P, i64 S, i64 L,
                            i64 pstride, i64 sstride, i64 chunk, i64 nchunks, i64 smul, i64 pdiv)
{
    LOCAL float sh[4 * NORM_LOCAL];
    const int lid = LOCAL_ID0;
    const i64 total = S * L;
    for(i64 u = GROUP_ID0; u < P * nchunks; u += NUM_GROUPS0)
    {
        const i64 p = u / nchunks, c = u % nchunks;
        const i64 kp = p / pdiv;
        float a = 0.0f, b = 0.0f;
        const i64 q1 = (c + 1) * chunk < total ? (c + 1) * chunk : total;
        for(i64 q = c * chunk + lid; q < q1; q += NORM_LOCAL)
        {
            const i64 s = q / L, j = q - s * L;
            const i64 k = s * smul + kp;
            const i64 off = p * pstride + s * sstride + j;
            const float g = LOAD(dy, off);
            const float xh =
                ((LOAD(x, off) - ws[coef + K + k]) - ws[coef + 3 * K + k]) * ws[coef + 5 * K + k];
            a += g * xh;
            b += g;
        }
        sh[lid] = a;
        sh[NORM_LOCAL + lid] = b;
        sh[2 * NORM_LOCAL + lid] = 0.0f;
        sh[3 * NORM_LOCAL + lid] = 0.0f;
        BARRIER();
        NORM_TREE4(sh, lid)
        if(lid < 2) ws[part + (c * 2 + lid) * P + p] = sh[lid * NORM_LOCAL];
        BARRIER();
    }
}
#endif

/* Chunk c's two rows of P partial sums (dweight, then dbias) at ws[part + c * 2 * P], zeroed:
   the start of the CPU partial-gradient kernels. */
DEVICE_FN GLOBAL float* pgrad_chunk_zeroed(GLOBAL float* ws, i64 part, i64 P, i64 c)
{
    GLOBAL float* pa = ws + part + (c * 2) * P;
    for(i64 col = 0; col < 2 * P; ++col)
        pa[col] = 0.0f;
    return pa;
}

/* norm_pgrad_cols for CPU OpenCL devices: work item c takes rows [c * rows_per_chunk, ...) and
   accumulates every column into its own partial sums ws[part + (c * 2 + {0, 1}) * P + col] in a
   loop along the row (the key's coefficients per row when cdiv >= P, as in layer norm). */
#if NORM_WANT(norm_pgrad_cols_serial)
KERNEL void norm_pgrad_cols_serial(const GLOBAL data_t* RESTRICT x, const GLOBAL data_t* RESTRICT dy,
                                   GLOBAL float* RESTRICT ws, i64 part, i64 coef, i64 K, i64 P, i64 rows,
                                   i64 rstride, i64 rows_per_chunk, i64 nchunks, i64 rdiv, i64 rmul,
                                   i64 cdiv)
{
    const i64 c = GLOBAL_ID0;
    if(c >= nchunks)
        return;
    GLOBAL float* RESTRICT pa = pgrad_chunk_zeroed(ws, part, P, c);
    GLOBAL float* RESTRICT pb = pa + P;
    const i64 r0 = c * rows_per_chunk;
    const i64 r1 = r0 + rows_per_chunk < rows ? r0 + rows_per_chunk : rows;
    for(i64 row = r0; row < r1; ++row)
    {
        const i64 kr = (row / rdiv) * rmul, off = row * rstride;
        if(cdiv >= P)
        {
            const float c1 = ws[coef + K + kr], c3 = ws[coef + 3 * K + kr], c5 = ws[coef + 5 * K + kr];
            for(i64 col = 0; col < P; ++col)
            {
                const float g = LOAD(dy, off + col);
                pa[col] += g * (((LOAD(x, off + col) - c1) - c3) * c5);
                pb[col] += g;
            }
            continue;
        }
        i64 kc = 0, cr = 0;
        for(i64 col = 0; col < P; ++col)
        {
            const i64 k = kr + kc;
            const float g = LOAD(dy, off + col);
            pa[col] += g * (((LOAD(x, off + col) - ws[coef + K + k]) - ws[coef + 3 * K + k]) * ws[coef + 5 * K + k]);
            pb[col] += g;
            if(++cr == cdiv)
            {
                cr = 0;
                ++kc;
            }
        }
    }
}
#endif

/* norm_pgrad_rows for CPU OpenCL devices: one work item per (weight, chunk) unit walks its
   segments in plain loops (the key's coefficients once per segment), blocks of
   NORM_SERIAL_BLOCK summed apart (float8 vectors on OpenCL but fp64) and added with
   compensation. Same arguments and partial sums. */
#if NORM_WANT(norm_pgrad_rows_serial)
DEVICE_FN void norm_kahan2(float* sum, float* comp, float v)
{
    const float y = v - *comp;
    const float t = *sum + y;
    const float c = (t - *sum) - y;
    *comp = (t - t) == 0.0f ? c : 0.0f;
    *sum = t;
}

KERNEL void norm_pgrad_rows_serial(const GLOBAL data_t* RESTRICT x, const GLOBAL data_t* RESTRICT dy,
                                   GLOBAL float* RESTRICT ws, i64 part, i64 coef, i64 K, i64 P, i64 S,
                                   i64 L, i64 pstride, i64 sstride, i64 chunk, i64 nchunks, i64 smul,
                                   i64 pdiv)
{
    const i64 u = GLOBAL_ID0;
    if(u >= P * nchunks)
        return;
    const i64 p = u / nchunks, c = u % nchunks;
    const i64 kp = p / pdiv, total = S * L;
    const i64 q0 = c * chunk, q1 = q0 + chunk < total ? q0 + chunk : total;
    float a = 0.0f, b = 0.0f, ca = 0.0f, cb = 0.0f;
    i64 s = q0 / L, j = q0 - s * L;
    for(i64 q = q0; q < q1; ++s, j = 0)
    {
        const i64 run = L - j < q1 - q ? L - j : q1 - q;
        const i64 off = p * pstride + s * sstride + j;
        const i64 k = s * smul + kp;
        const float c1 = ws[coef + K + k], c3 = ws[coef + 3 * K + k], c5 = ws[coef + 5 * K + k];
        for(i64 e0 = 0; e0 < run; e0 += NORM_SERIAL_BLOCK)
        {
            const i64 e1 = e0 + NORM_SERIAL_BLOCK < run ? e0 + NORM_SERIAL_BLOCK : run;
            float ba = 0.0f, bb = 0.0f;
#if defined(__OPENCL_VERSION__) && MIOPY_DTYPE != 3
            i64 e = e0;
            float8 va = 0.0f, vb = 0.0f;
            for(; e + 8 <= e1; e += 8)
            {
                const float8 g = load_f8_loop(dy, off + e);
                va += g * (((load_f8_loop(x, off + e) - c1) - c3) * c5);
                vb += g;
            }
            for(; e < e1; ++e)
            {
                const float g = LOAD(dy, off + e);
                ba += g * (((LOAD(x, off + e) - c1) - c3) * c5);
                bb += g;
            }
            ba += hsum8(va);
            bb += hsum8(vb);
#else
            for(i64 e = e0; e < e1; ++e)
            {
                const float g = LOAD(dy, off + e);
                ba += g * (((LOAD(x, off + e) - c1) - c3) * c5);
                bb += g;
            }
#endif
            norm_kahan2(&a, &ca, ba);
            norm_kahan2(&b, &cb, bb);
        }
        q += run;
    }
    ws[part + (c * 2) * P + p] = a;
    ws[part + (c * 2 + 1) * P + p] = b;
}
#endif

/* dw[p], db[p] (dense) from the partial sums of nchunks chunks, in a fixed order. */
#if NORM_WANT(norm_pgrad_finish)
KERNEL void norm_pgrad_finish(const GLOBAL float* RESTRICT ws, GLOBAL param_t* RESTRICT dw,
                              GLOBAL param_t* RESTRICT db, i64 part, i64 P, i64 nchunks)
{
    for(i64 p = GLOBAL_ID0; p < P; p += GLOBAL_SIZE0)
    {
        float a = 0.0f, b = 0.0f;
        for(i64 c = 0; c < nchunks; ++c)
        {
            a += ws[part + (c * 2) * P + p];
            b += ws[part + (c * 2 + 1) * P + p];
        }
        PSTORE(dw, p, a);
        PSTORE(db, p, b);
    }
}
#endif

/* Packed apply: x, y (dy, dx) dense with the same strides; element i has key
   (i / kd) % km + (i / kd2) * kmul2 and weight index (i / pd) % pm. NORM_VW elements per step
   (16-byte access when aligned). */
#define NORM_NEXT(idx, rem, d, m)                                                                  \
    if(++rem == d)                                                                                 \
    {                                                                                              \
        rem = 0;                                                                                   \
        if(++idx == m) idx = 0;                                                                    \
    }

/* index division in 32 bits when both sides fit (a GPU divides 64-bit integers in software,
   several times slower); the branch is uniform in practice */
DEVICE_FN i64 norm_div(i64 a, i64 b)
{
    return (a < 4294967296LL && b < 4294967296LL) ? (i64)((u32)a / (u32)b) : a / b;
}
DEVICE_FN i64 norm_mod(i64 a, i64 b)
{
    return (a < 4294967296LL && b < 4294967296LL) ? (i64)((u32)a % (u32)b) : a % b;
}
#define NORM_DIV(a, b) norm_div((a), (b))
#define NORM_MOD(a, b) norm_mod((a), (b))

#if NORM_WANT(norm_fwd_packed)
KERNEL void norm_fwd_packed(const GLOBAL data_t* RESTRICT x, GLOBAL data_t* RESTRICT y,
                            const GLOBAL float* RESTRICT ws, const GLOBAL param_t* RESTRICT w,
                            const GLOBAL param_t* RESTRICT b, i64 coef, i64 K, i64 n, i64 kd, i64 km,
                            i64 pd, i64 pm, int affine, i64 kd2, i64 kmul2)
{
    const int vec_ok = NORM_VW > 1 && ALIGNED16(x) && ALIGNED16(y);
    const i64 step = vec_ok ? NORM_VW : 1;
    for(i64 i0 = GLOBAL_ID0 * step; i0 < n; i0 += GLOBAL_SIZE0 * step)
    {
        i64 kr = NORM_MOD(i0, kd), k1 = NORM_MOD(NORM_DIV(i0, kd), km);
        i64 pr = NORM_MOD(i0, pd), p = NORM_MOD(NORM_DIV(i0, pd), pm);
        i64 r2 = NORM_MOD(i0, kd2), k2 = NORM_DIV(i0, kd2);
        const int cnt = (int)(n - i0 < step ? n - i0 : step);
        float v[NORM_VW];
#if NORM_VW > 1
        if(cnt == NORM_VW && vec_ok)
            load_vec(x, i0, v);
        else
#endif
            for(int e = 0; e < NORM_VW; ++e) if(e < cnt) /* constant count: v stays in registers */
                v[e] = LOAD(x, i0 + e);
        for(int e = 0; e < NORM_VW; ++e) if(e < cnt) /* constant count: v stays in registers */
        {
            const i64 k = k1 + k2 * kmul2;
            float t = ((v[e] - ws[coef + K + k]) - ws[coef + 3 * K + k]) * ws[coef + k] + ws[coef + 2 * K + k];
            if(affine) t = t * PLOAD(w, p) + PLOAD(b, p);
            v[e] = t;
            NORM_NEXT(k1, kr, kd, km)
            NORM_NEXT(p, pr, pd, pm)
            if(++r2 == kd2)
            {
                r2 = 0;
                ++k2;
            }
        }
#if NORM_VW > 1
        if(cnt == NORM_VW && vec_ok)
            store_vec(y, i0, v);
        else
#endif
            for(int e = 0; e < NORM_VW; ++e) if(e < cnt) /* constant count: v stays in registers */
                STORE(y, i0 + e, v[e]);
    }
}
#endif

#if NORM_WANT(norm_bwd_packed)
KERNEL void norm_bwd_packed(const GLOBAL data_t* RESTRICT x, const GLOBAL data_t* RESTRICT dy,
                            GLOBAL data_t* RESTRICT dx, const GLOBAL float* RESTRICT ws,
                            const GLOBAL param_t* RESTRICT w, i64 coef, i64 K, i64 n, i64 kd, i64 km,
                            i64 pd, i64 pm, int affine, i64 kd2, i64 kmul2)
{
    const int vec_ok = NORM_VW > 1 && ALIGNED16(x) && ALIGNED16(dy) && ALIGNED16(dx);
    const i64 step = vec_ok ? NORM_VW : 1;
    for(i64 i0 = GLOBAL_ID0 * step; i0 < n; i0 += GLOBAL_SIZE0 * step)
    {
        i64 kr = NORM_MOD(i0, kd), k1 = NORM_MOD(NORM_DIV(i0, kd), km);
        i64 pr = NORM_MOD(i0, pd), p = NORM_MOD(NORM_DIV(i0, pd), pm);
        i64 r2 = NORM_MOD(i0, kd2), k2 = NORM_DIV(i0, kd2);
        const int cnt = (int)(n - i0 < step ? n - i0 : step);
        float v[NORM_VW], g[NORM_VW];
#if NORM_VW > 1
        if(cnt == NORM_VW && vec_ok)
        {
            load_vec(x, i0, v);
            load_vec(dy, i0, g);
        }
        else
#endif
            for(int e = 0; e < NORM_VW; ++e) if(e < cnt) /* constant count: v stays in registers */
            {
                v[e] = LOAD(x, i0 + e);
                g[e] = LOAD(dy, i0 + e);
            }
        for(int e = 0; e < NORM_VW; ++e) if(e < cnt) /* constant count: v stays in registers */
        {
            const i64 k = k1 + k2 * kmul2;
            float ge = g[e];
            if(affine) ge *= PLOAD(w, p);
            const float xc = (v[e] - ws[coef + K + k]) - ws[coef + 3 * K + k];
            v[e] = ge * ws[coef + k] + xc * ws[coef + 4 * K + k] + ws[coef + 2 * K + k];
            NORM_NEXT(k1, kr, kd, km)
            NORM_NEXT(p, pr, pd, pm)
            if(++r2 == kd2)
            {
                r2 = 0;
                ++k2;
            }
        }
#if NORM_VW > 1
        if(cnt == NORM_VW && vec_ok)
            store_vec(dx, i0, v);
        else
#endif
            for(int e = 0; e < NORM_VW; ++e) if(e < cnt) /* constant count: v stays in registers */
                STORE(dx, i0 + e, v[e]);
    }
}
#endif

/* For CPU OpenCL devices (PoCL), keys that cycle inside a row (channels-last group norm: key
   n * G + c / cg along a row of C = G * cg channels): copies of the ncoef per-key coefficients per
   (outer key, element of the row), ws[coef2 + i * K2 + kk] = ws[coef + i * K + kk / kd], so that
   norm_apply_cyc_cpu maps rows of kd * km elements without a division per element. */
#if NORM_WANT(norm_coef_expand)
KERNEL void norm_coef_expand(GLOBAL float* RESTRICT ws, i64 coef, i64 K, i64 coef2, i64 K2, i64 kd,
                             int ncoef)
{
    for(i64 kk = GLOBAL_ID0; kk < K2; kk += GLOBAL_SIZE0)
    {
        const i64 k = kk / kd;
        for(int i = 0; i < ncoef; ++i)
            ws[coef2 + i * K2 + kk] = ws[coef + i * K + k];
    }
}
#endif

/* The apply of cycling keys for CPU OpenCL devices: work item o maps the d0 elements of row o
   (i = o * d0 + j) with the expanded coefficients of norm_coef_expand (key (o / kq2) * d0 + j,
   weight index j), eight at a time in float8 vectors (cpu_vec.h), a scalar tail when d0 is not a
   multiple of 8. bwd: dx from x and dy, else y from x (as norm_apply_2d). */
#if NORM_WANT(norm_apply_cyc_cpu) && defined(__OPENCL_VERSION__) && MIOPY_DTYPE != 3
KERNEL void norm_apply_cyc_cpu(const GLOBAL data_t* RESTRICT x, const GLOBAL data_t* RESTRICT dy,
                               GLOBAL data_t* RESTRICT out, const GLOBAL float* RESTRICT ws,
                               const GLOBAL param_t* RESTRICT w, const GLOBAL param_t* RESTRICT b,
                               i64 coef, i64 K2, i64 rows, i64 d0, i64 kq2, int affine, int bwd)
{
    const i64 o = GLOBAL_ID0;
    if(o >= rows)
        return;
    const i64 i0 = o * d0;
    const GLOBAL float* c0 = ws + coef + (o / kq2) * d0;
    const GLOBAL float* c1 = c0 + K2;
    const GLOBAL float* c2 = c0 + 2 * K2;
    const GLOBAL float* c3 = c0 + 3 * K2;
    const GLOBAL float* c4 = c0 + 4 * K2;
    i64 j = 0;
    if(bwd)
        for(; j + 8 <= d0; j += 8)
        {
            const float8 xc = (load_f8_loop(x, i0 + j) - vload8(0, c1 + j)) - vload8(0, c3 + j);
            float8 g = load_f8_loop(dy, i0 + j);
            if(affine)
                g *= norm_pload8(w, j);
            store_f8(out, i0 + j, g * vload8(0, c0 + j) + xc * vload8(0, c4 + j) + vload8(0, c2 + j));
        }
    else
        for(; j + 8 <= d0; j += 8)
        {
            const float8 xc = (load_f8_loop(x, i0 + j) - vload8(0, c1 + j)) - vload8(0, c3 + j);
            float8 r = xc * vload8(0, c0 + j) + vload8(0, c2 + j);
            if(affine)
                r = r * norm_pload8(w, j) + norm_pload8(b, j);
            store_f8(out, i0 + j, r);
        }
    for(; j < d0; ++j)
    {
        const float xc = (LOAD(x, i0 + j) - c1[j]) - c3[j];
        const float wj = affine ? PLOAD(w, j) : 1.0f;
        float r;
        if(bwd)
            r = LOAD(dy, i0 + j) * wj * c0[j] + xc * c4[j] + c2[j];
        else
            r = (xc * c0[j] + c2[j]) * wj + (affine ? PLOAD(b, j) : 0.0f);
        STORE(out, i0 + j, r);
    }
}
#endif

/* Weight gradients of cycling keys for CPU OpenCL devices (channels-last group norm backward):
   work item c takes rows [c * rows_per_chunk, ...) of P elements (weight index = column) and adds
   dy * xhat and dy per column into its partial sums ws[part + (c * 2 + {0, 1}) * P + col], eight
   columns at a time in float8 vectors, with the expanded coefficients of norm_coef_expand (row
   r's key (r / rdiv) * P + col; xhat = ((x - c1) - c3) * c5). norm_pgrad_finish adds the chunks. */
#if NORM_WANT(norm_pgrad_cyc_cpu) && defined(__OPENCL_VERSION__) && MIOPY_DTYPE != 3
KERNEL void norm_pgrad_cyc_cpu(const GLOBAL data_t* RESTRICT x, const GLOBAL data_t* RESTRICT dy,
                               GLOBAL float* RESTRICT ws, i64 part, i64 coef, i64 K2, i64 P, i64 rows,
                               i64 rows_per_chunk, i64 nchunks, i64 rdiv)
{
    const i64 c = GLOBAL_ID0;
    if(c >= nchunks)
        return;
    GLOBAL float* RESTRICT pa = pgrad_chunk_zeroed(ws, part, P, c);
    GLOBAL float* RESTRICT pb = pa + P;
    const i64 r0 = c * rows_per_chunk;
    const i64 r1 = r0 + rows_per_chunk < rows ? r0 + rows_per_chunk : rows;
    for(i64 row = r0; row < r1; ++row)
    {
        const i64 off = row * P;
        const GLOBAL float* c1 = ws + coef + K2 + (row / rdiv) * P;
        const GLOBAL float* c3 = c1 + 2 * K2;
        const GLOBAL float* c5 = c1 + 4 * K2;
        i64 j = 0;
        for(; j + 8 <= P; j += 8)
        {
            const float8 g = load_f8_loop(dy, off + j);
            const float8 h = ((load_f8_loop(x, off + j) - vload8(0, c1 + j)) - vload8(0, c3 + j)) * vload8(0, c5 + j);
            vstore8(vload8(0, pa + j) + g * h, 0, pa + j);
            vstore8(vload8(0, pb + j) + g, 0, pb + j);
        }
        for(; j < P; ++j)
        {
            const float g = LOAD(dy, off + j);
            pa[j] += g * (((LOAD(x, off + j) - c1[j]) - c3[j]) * c5[j]);
            pb[j] += g;
        }
    }
}
#endif

/* Apply by rows, for CPU OpenCL devices (PoCL): work item o maps the d0 contiguous elements
   i = o * d0 + j, j < d0, in a plain loop the compiler vectorises. The host picks d0 so that
   along a row the key is constant (kmode 0: key = (o / kq) % km + (o / kq2) * kmul2; its
   coefficients load once) or j plus that second term (kmode 1), and the weight index constant
   (pmode 0: p = (o / pq) % pm) or j (pmode 1): no division per element (PoCL spends ~30 ns on
   one, ten times a copy's time per element). bwd: dx from x and dy, else y from x. */
#if NORM_WANT(norm_apply_2d)
#define NORM_ROW_LOOP(body)                                                                        \
    for(i64 j = 0; j < d0; ++j)                                                                    \
    {                                                                                              \
        const i64 i = i0 + j;                                                                      \
        body                                                                                       \
    }
KERNEL void norm_apply_2d(const GLOBAL data_t* RESTRICT x, const GLOBAL data_t* RESTRICT dy,
                          GLOBAL data_t* RESTRICT out, const GLOBAL float* RESTRICT ws,
                          const GLOBAL param_t* RESTRICT w, const GLOBAL param_t* RESTRICT b, i64 coef,
                          i64 K, i64 rows, i64 d0, i64 kq, i64 km, i64 kq2, i64 kmul2, int kmode, i64 pq,
                          i64 pm, int pmode, int affine, int bwd)
{
    const i64 o = GLOBAL_ID0;
    if(o >= rows)
        return;
    const i64 i0 = o * d0;
    const i64 khi = (o / kq2) * kmul2;
    const i64 pc = (o / pq) % pm;
    const int pj = affine && pmode; /* a weight per element j */
    const float wc = affine && !pmode ? PLOAD(w, pc) : 1.0f;
    const float bc = affine && !pmode && !bwd ? PLOAD(b, pc) : 0.0f;
    if(!kmode)
    {
        const i64 k = (o / kq) % km + khi;
        const float c0 = ws[coef + k], c1 = ws[coef + K + k], c2 = ws[coef + 2 * K + k];
        const float c3 = ws[coef + 3 * K + k], c4 = bwd ? ws[coef + 4 * K + k] : 0.0f;
#if defined(__OPENCL_VERSION__) && MIOPY_DTYPE != 3 /* float8 (cpu_vec.h), then a scalar tail */
        i64 j = 0;
        for(; j + 8 <= d0; j += 8)
        {
            const i64 i = i0 + j;
            const float8 xc = (load_f8_loop(x, i) - c1) - c3;
            float8 r;
            if(bwd)
            {
                const float8 g = pj ? load_f8_loop(dy, i) * norm_pload8(w, j) : load_f8_loop(dy, i) * wc;
                r = g * c0 + xc * c4 + c2;
            }
            else if(pj)
                r = (xc * c0 + c2) * norm_pload8(w, j) + norm_pload8(b, j);
            else
                r = (xc * c0 + c2) * wc + bc;
            store_f8(out, i, r);
        }
        for(; j < d0; ++j)
        {
            const i64 i = i0 + j;
            const float xc = (LOAD(x, i) - c1) - c3;
            const float wj = pj ? PLOAD(w, j) : wc;
            STORE(out, i, bwd ? LOAD(dy, i) * wj * c0 + xc * c4 + c2 : (xc * c0 + c2) * wj + (pj ? PLOAD(b, j) : bc));
        }
        return;
#endif
        if(bwd && pj)
            NORM_ROW_LOOP(STORE(out, i, LOAD(dy, i) * PLOAD(w, j) * c0 + ((LOAD(x, i) - c1) - c3) * c4 + c2);)
        else if(bwd)
            NORM_ROW_LOOP(STORE(out, i, LOAD(dy, i) * wc * c0 + ((LOAD(x, i) - c1) - c3) * c4 + c2);)
        else if(pj)
            NORM_ROW_LOOP(STORE(out, i, (((LOAD(x, i) - c1) - c3) * c0 + c2) * PLOAD(w, j) + PLOAD(b, j));)
        else
            NORM_ROW_LOOP(STORE(out, i, (((LOAD(x, i) - c1) - c3) * c0 + c2) * wc + bc);)
        return;
    }
    NORM_ROW_LOOP({
        const i64 k = khi + j;
        const float xc = (LOAD(x, i) - ws[coef + K + k]) - ws[coef + 3 * K + k];
        const float wj = pj ? PLOAD(w, j) : wc;
        float r;
        if(bwd)
            r = LOAD(dy, i) * wj * ws[coef + k] + xc * ws[coef + 4 * K + k] + ws[coef + 2 * K + k];
        else
            r = (xc * ws[coef + k] + ws[coef + 2 * K + k]) * wj + (pj ? PLOAD(b, j) : bc);
        STORE(out, i, r);
    })
}
#undef NORM_ROW_LOOP
#endif

/* Layer norm forward in one pass over the data: a work-group of LN_LOCAL work items per row of L
   contiguous elements (row-major x, y), each holding up to LN_PER vectors of NORM_VW elements in
   registers, less the row's first element K (exact near a large mean, as the shifted sums
   above); the mean of those, then the sum of squared deviations from it (two passes over the
   registers: no cancellation), then y = (x - mean) * rstd (* w[j] + b[j]), mean[row] = K + that
   mean and rstd[row]. */
#if NORM_WANT(ln_rows_fwd)
#ifndef LN_LOCAL
#define LN_LOCAL 128
#endif
#ifndef LN_PER
#define LN_PER 1
#endif
#ifdef __OPENCL_VERSION__
#define LN_SHARED_PTR LOCAL float*
#else
#define LN_SHARED_PTR float* /* CUDA: a plain pointer into __shared__ memory */
#endif
DEVICE_FN float ln_block_sum(LN_SHARED_PTR sh, float v, int lid)
{
#ifdef __OPENCL_VERSION__
    sh[lid] = v;
    BARRIER();
    for(int h = LN_LOCAL / 2; h > 0; h >>= 1)
    {
        if(lid < h)
            sh[lid] += sh[lid + h];
        BARRIER();
    }
    const float r = sh[0];
    BARRIER();
    return r;
#else
    for(int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    if((lid & 31) == 0)
        sh[lid >> 5] = v;
    __syncthreads();
    float r = 0.0f;
    for(int i = 0; i < LN_LOCAL / 32; ++i)
        r += sh[i];
    __syncthreads();
    return r;
#endif
}

KERNEL void ln_rows_fwd(const GLOBAL data_t* RESTRICT x, GLOBAL data_t* RESTRICT y,
                        const GLOBAL param_t* RESTRICT w, const GLOBAL param_t* RESTRICT b,
                        GLOBAL param_t* RESTRICT mean, GLOBAL param_t* RESTRICT rstd, i64 rows, int L,
                        float eps, int affine)
{
    LOCAL float sh[LN_LOCAL];
    const int lid = LOCAL_ID0;
    const int va = ALIGNED16(x) && ALIGNED16(y);
    for(i64 row = GROUP_ID0; row < rows; row += NUM_GROUPS_LN)
    {
        const i64 base = row * L;
        const float shift = LOAD(x, base);
        float v[LN_PER][NORM_VW];
        float s = 0.0f;
        for(int t = 0; t < LN_PER; ++t)
        {
            const int j = (t * LN_LOCAL + lid) * NORM_VW;
            if(j < L)
            {
                NORM_LOADV(x, base + j, v[t], va);
                for(int e = 0; e < NORM_VW; ++e)
                {
                    v[t][e] -= shift;
                    s += v[t][e];
                }
            }
        }
        const float m = ln_block_sum(sh, s, lid) / (float)L;
        float s2 = 0.0f;
        for(int t = 0; t < LN_PER; ++t)
        {
            const int j = (t * LN_LOCAL + lid) * NORM_VW;
            if(j < L)
                for(int e = 0; e < NORM_VW; ++e)
                {
                    const float d = v[t][e] - m;
                    s2 += d * d;
                }
        }
        const float r = NORM_RSQRT(ln_block_sum(sh, s2, lid) / (float)L + eps);
        for(int t = 0; t < LN_PER; ++t)
        {
            const int j = (t * LN_LOCAL + lid) * NORM_VW;
            if(j < L)
            {
                for(int e = 0; e < NORM_VW; ++e)
                {
                    float o = (v[t][e] - m) * r;
                    if(affine)
                        o = o * PLOAD(w, j + e) + PLOAD(b, j + e);
                    v[t][e] = o;
                }
#if NORM_VW > 1
                if(va)
                    store_vec(y, base + j, v[t]);
                else
#endif
                    for(int e = 0; e < NORM_VW; ++e)
                        STORE(y, base + j + e, v[t][e]);
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

/* ---- layer norm backward in one pass ----------------------------------------------------------
   ln_rows_bwd: LN_ROWS rows at once per work-group (LOCAL_ID1), LN_LOCAL work items per row, each
   row held in registers (LN_PER vectors of NORM_VW per work item). From the saved mean and rstd:
     xhat = (x - mean) * rstd, g = dy * w,
     dx = rstd * (g - mean(g) - xhat * mean(g * xhat))
   (x - mean is exact in fp32 when both are near each other, so a large mean costs nothing). With
   pgrad, every work item also sums dy * xhat and dy over the rows it visits (its columns are the
   same in every row), the LN_ROWS rows of a work-group are added in local memory, and the
   work-group writes one partial row pair ws[(group * 2 + s) * L + j], s = dweight, dbias, that
   ln_pgrad_finish adds up in a fixed order (deterministic). */
#if NORM_WANT(ln_rows_bwd) || NORM_WANT(ln_pgrad_finish)
#ifndef LN_LOCAL
#define LN_LOCAL 128
#endif
#ifndef LN_PER
#define LN_PER 1
#endif
#ifndef LN_ROWS
#define LN_ROWS 1
#endif
#endif

#if NORM_WANT(ln_rows_bwd)
/* the sums of two values over the LN_LOCAL work items of each row; sh holds 2 * LN_ROWS *
   LN_LOCAL floats */
#ifdef __OPENCL_VERSION__
#define LN2_SUM(sh, a, b, lid, ly)                                                                 \
    do                                                                                             \
    {                                                                                              \
        LOCAL float* s0_ = (sh) + (ly) * 2 * LN_LOCAL;                                             \
        s0_[lid] = (a);                                                                            \
        s0_[LN_LOCAL + (lid)] = (b);                                                               \
        BARRIER();                                                                                 \
        for(int h_ = LN_LOCAL / 2; h_ > 0; h_ >>= 1)                                               \
        {                                                                                          \
            if((lid) < h_)                                                                         \
            {                                                                                      \
                s0_[lid] += s0_[(lid) + h_];                                                       \
                s0_[LN_LOCAL + (lid)] += s0_[LN_LOCAL + (lid) + h_];                               \
            }                                                                                      \
            BARRIER();                                                                             \
        }                                                                                          \
        (a) = s0_[0];                                                                              \
        (b) = s0_[LN_LOCAL];                                                                       \
        BARRIER();                                                                                 \
    } while(0)
#else
#define LN2_SUM(sh, a, b, lid, ly)                                                                 \
    do                                                                                             \
    {                                                                                              \
        for(int o_ = 16; o_ > 0; o_ >>= 1)                                                         \
        {                                                                                          \
            (a) += __shfl_xor_sync(0xffffffffu, (a), o_);                                          \
            (b) += __shfl_xor_sync(0xffffffffu, (b), o_);                                          \
        }                                                                                          \
        float* s0_ = (sh) + (ly) * 2 * (LN_LOCAL / 32);                                           \
        if(((lid) & 31) == 0)                                                                      \
        {                                                                                          \
            s0_[(lid) >> 5] = (a);                                                                 \
            s0_[LN_LOCAL / 32 + ((lid) >> 5)] = (b);                                               \
        }                                                                                          \
        __syncthreads();                                                                           \
        (a) = 0.0f;                                                                                \
        (b) = 0.0f;                                                                                \
        for(int i_ = 0; i_ < LN_LOCAL / 32; ++i_)                                                  \
        {                                                                                          \
            (a) += s0_[i_];                                                                        \
            (b) += s0_[LN_LOCAL / 32 + i_];                                                        \
        }                                                                                          \
        __syncthreads();                                                                           \
    } while(0)
#endif

#ifdef __OPENCL_VERSION__
#define LN_BWD_BOUNDS
#else
#define LN_BWD_BOUNDS __launch_bounds__(LN_LOCAL * LN_ROWS, 1024 / (LN_LOCAL * LN_ROWS))
#endif
KERNEL void LN_BWD_BOUNDS ln_rows_bwd(const GLOBAL data_t* RESTRICT x, const GLOBAL data_t* RESTRICT dy,
                        const GLOBAL param_t* RESTRICT w, const GLOBAL param_t* RESTRICT mean,
                        const GLOBAL param_t* RESTRICT rstd, GLOBAL data_t* RESTRICT dx,
                        GLOBAL float* RESTRICT ws, i64 rows, int L, int affine, int pgrad)
{
    LOCAL float sh[2 * LN_ROWS * LN_LOCAL];
    LOCAL float shp[LN_ROWS * LN_LOCAL * NORM_VW];
    const int lid = LOCAL_ID0, ly = LOCAL_ID1;
    const int va = ALIGNED16(x) && ALIGNED16(dy) && ALIGNED16(dx);
    const float inv_l = 1.0f / (float)L;
    float aw[LN_PER][NORM_VW], ab[LN_PER][NORM_VW], wv[LN_PER][NORM_VW];
    for(int t = 0; t < LN_PER; ++t)
        for(int e = 0; e < NORM_VW; ++e)
        {
            const int j = (t * LN_LOCAL + lid) * NORM_VW + e;
            aw[t][e] = ab[t][e] = 0.0f;
            wv[t][e] = (affine && j < L) ? PLOAD(w, j) : 1.0f;
        }
    const i64 step = (i64)(GLOBAL_SIZE0 / LN_LOCAL) * LN_ROWS;
    for(i64 row0 = (i64)GROUP_ID0 * LN_ROWS; row0 < rows; row0 += step)
    {
        const i64 row = row0 + ly;
        const int live = row < rows;
        const i64 base = row * L;
        const float m = live ? PLOAD(mean, row) : 0.0f;
        const float r = live ? PLOAD(rstd, row) : 0.0f;
        float xh[LN_PER][NORM_VW], g[LN_PER][NORM_VW];
        float sg = 0.0f, sgx = 0.0f;
        for(int t = 0; t < LN_PER; ++t)
        {
            const int j = (t * LN_LOCAL + lid) * NORM_VW;
            if(live && j < L)
            {
                NORM_LOADV(x, base + j, xh[t], va);
                NORM_LOADV(dy, base + j, g[t], va);
                for(int e = 0; e < NORM_VW; ++e)
                {
                    const float h = (xh[t][e] - m) * r, d = g[t][e];
                    aw[t][e] += d * h;
                    ab[t][e] += d;
                    const float gw = d * wv[t][e];
                    sg += gw;
                    sgx += gw * h;
                    xh[t][e] = h;
                    g[t][e] = gw;
                }
            }
        }
        LN2_SUM(sh, sg, sgx, lid, ly);
        sg *= inv_l;
        sgx *= inv_l;
        for(int t = 0; t < LN_PER; ++t)
        {
            const int j = (t * LN_LOCAL + lid) * NORM_VW;
            if(live && j < L)
            {
                float o[NORM_VW];
                for(int e = 0; e < NORM_VW; ++e)
                    o[e] = r * (g[t][e] - sg - xh[t][e] * sgx);
#if NORM_VW > 1
                if(va)
                    store_vec(dx, base + j, o);
                else
#endif
                    for(int e = 0; e < NORM_VW; ++e)
                        STORE(dx, base + j + e, o[e]);
            }
        }
    }
    if(!pgrad)
        return; /* uniform across the work-group */
    for(int s = 0; s < 2; ++s)
        for(int t = 0; t < LN_PER; ++t)
        {
            for(int e = 0; e < NORM_VW; ++e)
                shp[(ly * LN_LOCAL + lid) * NORM_VW + e] = s == 0 ? aw[t][e] : ab[t][e];
            BARRIER();
            if(ly == 0)
                for(int e = 0; e < NORM_VW; ++e)
                {
                    const int j = (t * LN_LOCAL + lid) * NORM_VW + e;
                    float a = 0.0f;
                    for(int q = 0; q < LN_ROWS; ++q)
                        a += shp[(q * LN_LOCAL + lid) * NORM_VW + e];
                    if(j < L)
                        ws[((i64)GROUP_ID0 * 2 + s) * L + j] = a;
                }
            BARRIER();
        }
}
#endif

/* Layer norm by rows for CPU OpenCL devices (PoCL): one work item per row (forward) or per chunk
   of rows_per_chunk rows (backward), the row walked eight elements at a time in float8 vectors
   (cpu_vec.h), a scalar tail when L is not a multiple of 8; a row is small enough to stay in the
   core's cache between the passes. Forward: the shifted sums of norm_reduce_* (x less the row's
   first element, and its square) in one pass, then y. Backward: as ln_rows_bwd, with the
   chunk's dweight / dbias partial row in ws[(c * 2 + {0, 1}) * L + j] for ln_pgrad_finish. */
#if NORM_WANT(ln_rows_fwd_cpu) && defined(__OPENCL_VERSION__) && MIOPY_DTYPE != 3
KERNEL void ln_rows_fwd_cpu(const GLOBAL data_t* RESTRICT x, GLOBAL data_t* RESTRICT y,
                            const GLOBAL param_t* RESTRICT w, const GLOBAL param_t* RESTRICT b,
                            GLOBAL param_t* RESTRICT mean, GLOBAL param_t* RESTRICT rstd, i64 rows, int L,
                            float eps, int affine)
{
    const i64 row = GLOBAL_ID0;
    if(row >= rows)
        return;
    const i64 base = row * L;
    const float shift = LOAD(x, base);
    float8 a = 0.0f, a2 = 0.0f;
    float t = 0.0f, t2 = 0.0f;
    int j = 0;
    for(; j + 8 <= L; j += 8)
    {
        const float8 d = load_f8_loop(x, base + j) - shift;
        a += d;
        a2 += d * d;
    }
    for(; j < L; ++j)
    {
        const float d = LOAD(x, base + j) - shift;
        t += d;
        t2 += d * d;
    }
    const float m = (hsum8(a) + t) / (float)L;
    float var = (hsum8(a2) + t2) / (float)L - m * m; /* shifted sums: exact enough near the mean */
    var = var > 0.0f ? var : 0.0f;
    const float r = NORM_RSQRT(var + eps);
    for(j = 0; j + 8 <= L; j += 8)
    {
        float8 o = ((load_f8_loop(x, base + j) - shift) - m) * r;
        if(affine)
            o = o * norm_pload8(w, j) + norm_pload8(b, j);
        store_f8(y, base + j, o);
    }
    for(; j < L; ++j)
    {
        float o = ((LOAD(x, base + j) - shift) - m) * r;
        if(affine)
            o = o * PLOAD(w, j) + PLOAD(b, j);
        STORE(y, base + j, o);
    }
    PSTORE(mean, row, shift + m);
    PSTORE(rstd, row, r);
}
#endif

#if NORM_WANT(ln_rows_bwd_cpu) && defined(__OPENCL_VERSION__) && MIOPY_DTYPE != 3
KERNEL void ln_rows_bwd_cpu(const GLOBAL data_t* RESTRICT x, const GLOBAL data_t* RESTRICT dy,
                            const GLOBAL param_t* RESTRICT w, const GLOBAL param_t* RESTRICT mean,
                            const GLOBAL param_t* RESTRICT rstd, GLOBAL data_t* RESTRICT dx,
                            GLOBAL float* RESTRICT ws, i64 rows, int L, int affine, int pgrad,
                            i64 rows_per_chunk, i64 nchunks)
{
    const i64 c = GLOBAL_ID0;
    if(c >= nchunks)
        return;
    GLOBAL float* RESTRICT pa = ws + (c * 2) * L;
    GLOBAL float* RESTRICT pb = pa + L;
    if(pgrad)
        for(int j = 0; j < L; ++j)
        {
            pa[j] = 0.0f;
            pb[j] = 0.0f;
        }
    const float inv_l = 1.0f / (float)L;
    const i64 r0 = c * rows_per_chunk;
    const i64 r1 = r0 + rows_per_chunk < rows ? r0 + rows_per_chunk : rows;
    for(i64 row = r0; row < r1; ++row)
    {
        const i64 base = row * L;
        const float m = PLOAD(mean, row), r = PLOAD(rstd, row);
        float8 a = 0.0f, bsum = 0.0f;
        float ta = 0.0f, tb = 0.0f;
        int j = 0;
        for(; j + 8 <= L; j += 8)
        {
            const float8 h = (load_f8_loop(x, base + j) - m) * r;
            const float8 d = load_f8_loop(dy, base + j);
            const float8 g = affine ? d * norm_pload8(w, j) : d;
            a += g;
            bsum += g * h;
            if(pgrad)
            {
                vstore8(vload8(0, pa + j) + d * h, 0, pa + j);
                vstore8(vload8(0, pb + j) + d, 0, pb + j);
            }
        }
        for(; j < L; ++j)
        {
            const float h = (LOAD(x, base + j) - m) * r, d = LOAD(dy, base + j);
            const float g = affine ? d * PLOAD(w, j) : d;
            ta += g;
            tb += g * h;
            if(pgrad)
            {
                pa[j] += d * h;
                pb[j] += d;
            }
        }
        const float sg = (hsum8(a) + ta) * inv_l, sgx = (hsum8(bsum) + tb) * inv_l;
        for(j = 0; j + 8 <= L; j += 8)
        {
            const float8 h = (load_f8_loop(x, base + j) - m) * r;
            const float8 d = load_f8_loop(dy, base + j);
            const float8 g = affine ? d * norm_pload8(w, j) : d;
            store_f8(dx, base + j, r * (g - sg - h * sgx));
        }
        for(; j < L; ++j)
        {
            const float h = (LOAD(x, base + j) - m) * r, d = LOAD(dy, base + j);
            const float g = affine ? d * PLOAD(w, j) : d;
            STORE(dx, base + j, r * (g - sg - h * sgx));
        }
    }
}
#endif

/* dweight, dbias = the sums of ln_rows_bwd's partial rows: a work-group of (LN_FX, LN_FY) covers
   LN_FX columns, its LN_FY rows stride over the partials, a local tree adds them in a fixed
   order. */
#if NORM_WANT(ln_pgrad_finish)
#define LN_FX 32
#define LN_FY 16
KERNEL void ln_pgrad_finish(const GLOBAL float* RESTRICT ws, GLOBAL param_t* RESTRICT dw,
                            GLOBAL param_t* RESTRICT db, i64 L, i64 parts)
{
    LOCAL float sh[2 * LN_FY * LN_FX];
    const int lx = LOCAL_ID0, ly = LOCAL_ID1;
    const i64 j = (i64)GROUP_ID0 * LN_FX + lx;
    float a = 0.0f, b = 0.0f;
    if(j < L)
        for(i64 c = ly; c < parts; c += LN_FY)
        {
            a += ws[(c * 2) * L + j];
            b += ws[(c * 2 + 1) * L + j];
        }
    sh[ly * LN_FX + lx] = a;
    sh[(LN_FY + ly) * LN_FX + lx] = b;
    BARRIER();
    for(int h = LN_FY / 2; h > 0; h >>= 1)
    {
        if(ly < h)
        {
            sh[ly * LN_FX + lx] += sh[(ly + h) * LN_FX + lx];
            sh[(LN_FY + ly) * LN_FX + lx] += sh[(LN_FY + ly + h) * LN_FX + lx];
        }
        BARRIER();
    }
    if(ly == 0 && j < L)
    {
        PSTORE(dw, j, sh[lx]);
        PSTORE(db, j, sh[LN_FY * LN_FX + lx]);
    }
}
#endif

/* ---- group norm in one pass (x row-major: a group's channels are one contiguous row) ----------
   gn_rows_fwd / gn_rows_bwd: one work-group of GN_LOCAL work items per (n, group) row of
   L = cg * HW elements, the row kept in registers in its storage type (GN_PER vectors of NORM_VW
   per work item, loaded once), so the data move once: read x (and dy), write y (dx). Vector v of
   a row lies in channel (row % G) * cg + v / hwv (hwv = HW / NORM_VW vectors per channel).
   Forward: shifted two-pass statistics over the registers, y = (x - mean) * rstd * w + b.
   Backward: xhat and g = dy * w from the saved mean and rstd, dx as layer norm's; the sums of dy
   and dy * xhat per channel (weight gradients) are added per row slice by one warp per channel in
   a fixed order (deterministic) and written to ws[(n * 2 + s) * C + c]; ln_pgrad_finish adds up
   the N rows of partials. */
#if NORM_WANT(gn_rows_fwd) || NORM_WANT(gn_rows_bwd)
#ifndef GN_LOCAL
#define GN_LOCAL 256
#endif
#ifndef GN_PER
#define GN_PER 2
#endif
#ifndef GN_RELOAD
#define GN_RELOAD 0 /* gn_rows_bwd: 1 reads dy again in its second pass instead of keeping it */
#endif
#ifndef GN_CG_MOST
#define GN_CG_MOST 64 /* channels per group of gn_rows_bwd's local sums */
#endif
#ifndef GN_BATCH
#define GN_BATCH 0 /* 1: a row's loads (x, and dy unless reloaded) all issued before any is used */
#endif
/* warp sums on CUDA (the raw type below depends on the vector width, these do not) */
#ifdef __OPENCL_VERSION__
#define GN_WARP 1
DEVICE_FN float gn_wsum(float v) { return v; }
#else
#define GN_WARP 32
DEVICE_FN float gn_wsum(float v)
{
    for(int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
#endif
#if !defined(__OPENCL_VERSION__) && NORM_VW > 1
typedef uint4 gn_raw_t;
DEVICE_FN void gn_unpack(gn_raw_t t, float* v)
{
#if MIOPY_DTYPE == 0
    v[0] = __uint_as_float(t.x); v[1] = __uint_as_float(t.y);
    v[2] = __uint_as_float(t.z); v[3] = __uint_as_float(t.w);
#else
    const u32 w[4] = {t.x, t.y, t.z, t.w};
    UNROLL
    for(int k = 0; k < 4; ++k)
    {
#if MIOPY_DTYPE == 1
        v[2 * k] = __half2float(__ushort_as_half((unsigned short)(w[k] & 0xffffu)));
        v[2 * k + 1] = __half2float(__ushort_as_half((unsigned short)(w[k] >> 16)));
#else
        v[2 * k] = __uint_as_float(w[k] << 16);
        v[2 * k + 1] = __uint_as_float(w[k] & 0xffff0000u);
#endif
    }
#endif
}
DEVICE_FN gn_raw_t gn_load(const data_t* p, i64 off, int va)
{
    if(va)
        return vec_ld16(p + off); /* __ldg unless VEC_LD_HINT says otherwise */
    gn_raw_t t;
#if MIOPY_DTYPE == 0
    t.x = __float_as_uint(p[off]); t.y = __float_as_uint(p[off + 1]);
    t.z = __float_as_uint(p[off + 2]); t.w = __float_as_uint(p[off + 3]);
#else
    const unsigned short* q = (const unsigned short*)(p + off);
    t.x = (u32)q[0] | ((u32)q[1] << 16); t.y = (u32)q[2] | ((u32)q[3] << 16);
    t.z = (u32)q[4] | ((u32)q[5] << 16); t.w = (u32)q[6] | ((u32)q[7] << 16);
#endif
    return t;
}
DEVICE_FN gn_raw_t gn_zero(void) { return make_uint4(0u, 0u, 0u, 0u); }
#else
typedef float gn_raw_t;
DEVICE_FN void gn_unpack(gn_raw_t t, float* v) { v[0] = t; }
DEVICE_FN gn_raw_t gn_load(const GLOBAL data_t* p, i64 off, int va) { return LOAD(p, off); }
DEVICE_FN gn_raw_t gn_zero(void) { return 0.0f; }
#endif

#ifndef GN_MIN_BLOCKS
#define GN_MIN_BLOCKS 1 /* work-groups an SM that __launch_bounds__ guarantees (a register cap) */
#endif
#ifdef __OPENCL_VERSION__
#define GN_BOUNDS
#elif GN_MIN_BLOCKS > 1
#define GN_BOUNDS __launch_bounds__(GN_LOCAL, GN_MIN_BLOCKS)
#else
#define GN_BOUNDS __launch_bounds__(GN_LOCAL)
#endif

/* sums of (a, b) over the work-group; sh holds 2 * GN_LOCAL floats */
#ifdef __OPENCL_VERSION__
DEVICE_FN void gn_sum2(LOCAL float* sh, float* a, float* b, int lid)
{
    sh[lid] = *a;
    sh[GN_LOCAL + lid] = *b;
    BARRIER();
    for(int h = GN_LOCAL / 2; h > 0; h >>= 1)
    {
        if(lid < h)
        {
            sh[lid] += sh[lid + h];
            sh[GN_LOCAL + lid] += sh[GN_LOCAL + lid + h];
        }
        BARRIER();
    }
    *a = sh[0];
    *b = sh[GN_LOCAL];
    BARRIER();
}
#else
DEVICE_FN void gn_sum2(float* sh, float* a, float* b, int lid)
{
    float x = gn_wsum(*a), y = gn_wsum(*b);
    if((lid & 31) == 0)
    {
        sh[lid >> 5] = x;
        sh[GN_LOCAL / 32 + (lid >> 5)] = y;
    }
    __syncthreads();
    x = 0.0f;
    y = 0.0f;
    for(int i = 0; i < GN_LOCAL / 32; ++i)
    {
        x += sh[i];
        y += sh[GN_LOCAL / 32 + i];
    }
    __syncthreads();
    *a = x;
    *b = y;
}
#endif
#endif

#if NORM_WANT(gn_rows_fwd)
KERNEL void GN_BOUNDS gn_rows_fwd(const GLOBAL data_t* RESTRICT x, GLOBAL data_t* RESTRICT y,
                        const GLOBAL param_t* RESTRICT w, const GLOBAL param_t* RESTRICT b,
                        GLOBAL param_t* RESTRICT mean, GLOBAL param_t* RESTRICT rstd, i64 rows, int L,
                        int G, int cg, int hwv, float eps, int affine)
{
    LOCAL float sh[2 * GN_LOCAL];
    const int lid = LOCAL_ID0;
    const int va = ALIGNED16(x) && ALIGNED16(y);
    const int nvec = L / NORM_VW;
    for(i64 row = GROUP_ID0; row < rows; row += GLOBAL_SIZE0 / GN_LOCAL)
    {
        const i64 base = row * L;
        const float shift = LOAD(x, base);
        gn_raw_t xr[GN_PER];
        float s = 0.0f, unused = 0.0f;
#if GN_BATCH
        UNROLL
        for(int t = 0; t < GN_PER; ++t)
        {
            const int v = t * GN_LOCAL + lid;
            xr[t] = v < nvec ? gn_load(x, base + (i64)v * NORM_VW, va) : gn_zero();
        }
#endif
        for(int t = 0; t < GN_PER; ++t)
        {
            const int v = t * GN_LOCAL + lid;
            if(v < nvec)
            {
#if !GN_BATCH
                xr[t] = gn_load(x, base + (i64)v * NORM_VW, va);
#endif
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
        const int c0 = (int)(row % G) * cg;
        for(int t = 0; t < GN_PER; ++t)
        {
            const int v = t * GN_LOCAL + lid;
            if(v < nvec)
            {
                float f[NORM_VW];
                gn_unpack(xr[t], f);
                const int c = c0 + v / hwv;
                const float a = affine ? r * PLOAD(w, c) : r;
                const float bb = affine ? PLOAD(b, c) : 0.0f;
                for(int e = 0; e < NORM_VW; ++e)
                    f[e] = ((f[e] - shift) - m) * a + bb;
                const i64 off = base + (i64)v * NORM_VW;
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

#if NORM_WANT(gn_rows_bwd)
KERNEL void GN_BOUNDS gn_rows_bwd(const GLOBAL data_t* RESTRICT x, const GLOBAL data_t* RESTRICT dy,
                        const GLOBAL param_t* RESTRICT w, const GLOBAL param_t* RESTRICT mean,
                        const GLOBAL param_t* RESTRICT rstd, GLOBAL data_t* RESTRICT dx,
                        GLOBAL float* RESTRICT ws, i64 rows, int L, int G, int cg, int hwv, int affine)
{
    LOCAL float sh[2 * GN_LOCAL];
    LOCAL float seg[2 * GN_LOCAL];
    LOCAL float chs[2 * GN_CG_MOST];
    const int lid = LOCAL_ID0;
    const int lane = lid % GN_WARP, warp = lid / GN_WARP;
    const int va = ALIGNED16(x) && ALIGNED16(dy) && ALIGNED16(dx);
    const int nvec = L / NORM_VW;
    const float inv_l = 1.0f / (float)L;
    for(i64 row = GROUP_ID0; row < rows; row += GLOBAL_SIZE0 / GN_LOCAL)
    {
        const i64 base = row * L;
        const float m = PLOAD(mean, row), r = PLOAD(rstd, row);
        const int c0 = (int)(row % G) * cg;
        gn_raw_t xr[GN_PER], dr[GN_RELOAD ? 1 : GN_PER];
        float sg = 0.0f, sgx = 0.0f;
        for(int c = lid; c < 2 * cg; c += GN_LOCAL)
            chs[c] = 0.0f;
#if GN_BATCH
        UNROLL
        for(int t = 0; t < GN_PER; ++t)
        {
            const int v = t * GN_LOCAL + lid;
            const i64 off = base + (i64)v * NORM_VW;
            xr[t] = v < nvec ? gn_load(x, off, va) : gn_zero();
#if !GN_RELOAD
            dr[t] = v < nvec ? gn_load(dy, off, va) : gn_zero();
#endif
        }
#endif
        for(int t = 0; t < GN_PER; ++t)
        {
            const int v = t * GN_LOCAL + lid;
            float pd = 0.0f, pdh = 0.0f;
            if(v < nvec)
            {
                const i64 off = base + (i64)v * NORM_VW;
#if !GN_BATCH
                xr[t] = gn_load(x, off, va);
#endif
#if !GN_BATCH || GN_RELOAD
                dr[GN_RELOAD ? 0 : t] = gn_load(dy, off, va);
#endif
                float fx[NORM_VW], fd[NORM_VW];
                gn_unpack(xr[t], fx);
                gn_unpack(dr[GN_RELOAD ? 0 : t], fd);
                const float wc = affine ? PLOAD(w, c0 + v / hwv) : 1.0f;
                for(int e = 0; e < NORM_VW; ++e)
                {
                    const float h = (fx[e] - m) * r;
                    pd += fd[e];
                    pdh += fd[e] * h;
                }
                sg += pd * wc;
                sgx += pdh * wc;
            }
            if(affine)
            {
                /* per channel: the vectors of this slice t, one warp per channel */
                seg[lid] = pd;
                seg[GN_LOCAL + lid] = pdh;
                BARRIER();
                const int lo0 = t * GN_LOCAL;
                for(int c = warp; c < cg; c += GN_LOCAL / GN_WARP)
                {
                    int lo = c * hwv, hi = lo + hwv;
                    lo = lo > lo0 ? lo : lo0;
                    hi = hi < lo0 + GN_LOCAL ? hi : lo0 + GN_LOCAL;
                    hi = hi < nvec ? hi : nvec;
                    if(lo < hi)
                    {
                        float a = 0.0f, bsum = 0.0f;
                        for(int i = lo - lo0 + lane; i < hi - lo0; i += GN_WARP)
                        {
                            a += seg[i];
                            bsum += seg[GN_LOCAL + i];
                        }
                        a = gn_wsum(a);
                        bsum = gn_wsum(bsum);
                        if(lane == 0)
                        {
                            chs[c] += bsum; /* dweight: sum of dy * xhat */
                            chs[cg + c] += a; /* dbias: sum of dy */
                        }
                    }
                }
                BARRIER();
            }
        }
        gn_sum2(sh, &sg, &sgx, lid);
        sg *= inv_l;
        sgx *= inv_l;
        for(int t = 0; t < GN_PER; ++t)
        {
            const int v = t * GN_LOCAL + lid;
            if(v < nvec)
            {
                float fx[NORM_VW], fd[NORM_VW];
                gn_unpack(xr[t], fx);
#if GN_RELOAD
                gn_unpack(gn_load(dy, base + (i64)v * NORM_VW, va), fd); /* from L2: a row is recent */
#else
                gn_unpack(dr[t], fd);
#endif
                const float wc = affine ? PLOAD(w, c0 + v / hwv) : 1.0f;
                for(int e = 0; e < NORM_VW; ++e)
                {
                    const float h = (fx[e] - m) * r;
                    fx[e] = r * (fd[e] * wc - sg - h * sgx);
                }
                const i64 off = base + (i64)v * NORM_VW;
#if NORM_VW > 1
                if(va)
                    store_vec(dx, off, fx);
                else
#endif
                    for(int e = 0; e < NORM_VW; ++e)
                        STORE(dx, off + e, fx[e]);
            }
        }
        if(affine)
        {
            const i64 n = row / G, C = (i64)G * cg;
            for(int c = lid; c < cg; c += GN_LOCAL)
            {
                ws[(n * 2) * C + c0 + c] = chs[c];
                ws[(n * 2 + 1) * C + c0 + c] = chs[cg + c];
            }
        }
        BARRIER(); /* chs is reset by the next row */
    }
}
#endif

#endif
