/* Pooling forward and backward: max (POOL_MODE 0), average excluding padding (1), including
   padding (2); 2-D runs as 3-D with D = 1. Lens, window, strides, pads and the strides of every
   tensor (logical N,C,D,H,W order) are run-time arguments; with POOL_FIXED the shape (POOL_N,
   POOL_C, POOL_DI/HI/WI, POOL_DO/HO/WO, POOL_KD/KH/KW, POOL_SD/SH/SW, POOL_PD/PH/PW) is compiled
   in instead (GPUs: index arithmetic becomes shifts and multiplies, windows unroll), and the
   arguments are ignored. POOL_IDX32 says the work-item count fits 32 bits (cheaper arithmetic).

   Work items own POOL_TH x POOL_TW neighbouring outputs (forward) or a cell of POOL_CH x POOL_CW
   neighbouring input positions (backward), and CVEC channels (tiles: see below).
   POOL_NHWC orders work items channels-innermost so that neighbours touch neighbouring channels
   (coalesced for channels-last tensors); POOL_VEC gives each work item VEC channels read and
   written 16 bytes at a time (needs channel stride 1, C and the other strides multiples of VEC).

   Max pooling stores, with POOL_SAVE_INDEX, the position of the first maximum: inside the window
   ((fz*KH + fy)*KW + fx from the window's unclipped start) or, with POOL_INDEX_IMAGE, in the image
   ((d*H + h)*W + w), as POOL_INDEX_TYPE 0-3 = u8/u16/u32/u64. Backward gathers: each dx element
   sums the dy of the windows covering it (max: those whose index names it); no atomics. */
#include "common/vec.h"

#ifndef POOL_MODE
#define POOL_MODE 0
#endif
#ifndef POOL_SAVE_INDEX
#define POOL_SAVE_INDEX 0
#endif
#ifndef POOL_INDEX_IMAGE
#define POOL_INDEX_IMAGE 0
#endif
#ifndef POOL_INDEX_TYPE
#define POOL_INDEX_TYPE 0
#endif
#ifndef POOL_NHWC
#define POOL_NHWC 0
#endif
#ifndef POOL_VEC
#define POOL_VEC 0
#endif
#ifndef POOL_IDX32
#define POOL_IDX32 0
#endif

#if POOL_VEC
#define CVEC VEC
#else
#define CVEC 1
#endif

#ifdef POOL_FIXED
#define P_N POOL_N
#define P_C POOL_C
#define P_DI POOL_DI
#define P_HI POOL_HI
#define P_WI POOL_WI
#define P_DO POOL_DO
#define P_HO POOL_HO
#define P_WO POOL_WO
#define KD POOL_KD
#define KH POOL_KH
#define KW POOL_KW
#define P_SD POOL_SD
#define P_SH POOL_SH
#define P_SW POOL_SW
#define P_PD POOL_PD
#define P_PH POOL_PH
#define P_PW POOL_PW
#else
#define P_N N
#define P_C C
#define P_DI Di
#define P_HI Hi
#define P_WI Wi
#define P_DO Do
#define P_HO Ho
#define P_WO Wo
#define KD kd
#define KH kh
#define KW kw
#define P_SD sd
#define P_SH sh
#define P_SW sw
#define P_PD pd
#define P_PH ph
#define P_PW pw
#endif

/* the type of work-item numbers and their arithmetic */
#if POOL_IDX32
typedef u32 pidx_t;
#else
typedef i64 pidx_t;
#endif

#include "common/pool_index.h"

/* index values as read back and compared: 32 bits unless the index type is u64 */
#if POOL_INDEX_TYPE == 3
typedef u64 pool_ival_t;
#else
typedef u32 pool_ival_t;
#endif

#define POOL_LOWEST (-3.402823466e+38f)

#define POOL_SHAPE_ARGS                                                                                \
    int N, int C, int Di, int Hi, int Wi, int Do, int Ho, int Wo, int kd, int kh, int kw, int sd, int sh, \
        int sw, int pd, int ph, int pw, i64 xn, i64 xc, i64 xd, i64 xh, i64 xw, i64 yn, i64 yc, i64 yd,  \
        i64 yh, i64 yw, i64 in_, i64 ic, i64 id_, i64 ih_, i64 iw_

DEVICE_FN void pool_load(const GLOBAL data_t* p, i64 off, float* v, int aligned)
{
#if POOL_VEC
    if(aligned)
    {
        load_vec(p, off, v);
        return;
    }
    for(int k = 0; k < CVEC; ++k)
        v[k] = LOAD(p, off + k);
#else
    v[0] = LOAD(p, off);
#endif
}

DEVICE_FN void pool_store(GLOBAL data_t* p, i64 off, const float* v, int aligned)
{
#if POOL_VEC
    if(aligned)
    {
        store_vec(p, off, v);
        return;
    }
    for(int k = 0; k < CVEC; ++k)
        STORE(p, off + k, v[k]);
#else
    STORE(p, off, v[0]);
#endif
}

/* CVEC indices at ip[off + k*ic]: as 32-bit words when they are contiguous and 4-byte aligned */
#define POOL_INDEX_WORDS ((CVEC * (int)sizeof(idx_t) + 3) / 4)

DEVICE_FN void pool_store_index(GLOBAL idx_t* ip, i64 off, i64 ic, const u32* arg)
{
#if POOL_VEC
    if((ic == 1) & ((((u64)(ip + off)) & 3) == 0) & ((CVEC * (int)sizeof(idx_t)) % 4 == 0))
    {
        u32 words[POOL_INDEX_WORDS];
        for(int k = 0; k < POOL_INDEX_WORDS; ++k)
            words[k] = 0;
        for(int k = 0; k < CVEC; ++k)
        {
#if POOL_INDEX_TYPE == 0
            words[k / 4] |= (arg[k] & 0xffu) << (8 * (k % 4));
#elif POOL_INDEX_TYPE == 1
            words[k / 2] |= (arg[k] & 0xffffu) << (16 * (k % 2));
#elif POOL_INDEX_TYPE == 2
            words[k] = arg[k];
#else
            words[2 * k] = arg[k];
#endif
        }
        GLOBAL u32* wp = (GLOBAL u32*)(ip + off);
        for(int k = 0; k < POOL_INDEX_WORDS; ++k)
            wp[k] = words[k];
        return;
    }
#endif
    for(int k = 0; k < CVEC; ++k)
        ip[off + k * ic] = (idx_t)arg[k];
}

DEVICE_FN void pool_load_index(const GLOBAL idx_t* ip, i64 off, i64 ic, pool_ival_t* out)
{
#if POOL_VEC
    if((ic == 1) & ((((u64)(ip + off)) & 3) == 0) & ((CVEC * (int)sizeof(idx_t)) % 4 == 0))
    {
        const GLOBAL u32* wp = (const GLOBAL u32*)(ip + off);
        u32 words[POOL_INDEX_WORDS];
        for(int k = 0; k < POOL_INDEX_WORDS; ++k)
            words[k] = wp[k];
        for(int k = 0; k < CVEC; ++k)
        {
#if POOL_INDEX_TYPE == 0
            out[k] = (words[k / 4] >> (8 * (k % 4))) & 0xffu;
#elif POOL_INDEX_TYPE == 1
            out[k] = (words[k / 2] >> (16 * (k % 2))) & 0xffffu;
#elif POOL_INDEX_TYPE == 2
            out[k] = words[k];
#else
            out[k] = (u64)words[2 * k] | ((u64)words[2 * k + 1] << 32);
#endif
        }
        return;
    }
#endif
    for(int k = 0; k < CVEC; ++k)
        out[k] = (pool_ival_t)ip[off + k * ic];
}

/* (n, c, d, h, w) of work item i over N x C x D x H x W positions, CVEC channels per item */
#if POOL_NHWC
#define POOL_DECOMPOSE(D, H, W)                                 \
    pidx_t r = i;                                               \
    const int c = (int)(r % (pidx_t)(P_C / CVEC)) * CVEC;       \
    r /= (pidx_t)(P_C / CVEC);                                  \
    const int w = (int)(r % (pidx_t)(W));                       \
    r /= (pidx_t)(W);                                           \
    const int h = (int)(r % (pidx_t)(H));                       \
    r /= (pidx_t)(H);                                           \
    const int d = (int)(r % (pidx_t)(D));                       \
    const int n = (int)(r / (pidx_t)(D));
#else
#define POOL_DECOMPOSE(D, H, W)                                 \
    pidx_t r = i;                                               \
    const int w = (int)(r % (pidx_t)(W));                       \
    r /= (pidx_t)(W);                                           \
    const int h = (int)(r % (pidx_t)(H));                       \
    r /= (pidx_t)(H);                                           \
    const int d = (int)(r % (pidx_t)(D));                       \
    r /= (pidx_t)(D);                                           \
    const int c = (int)(r % (pidx_t)(P_C));                     \
    const int n = (int)(r / (pidx_t)(P_C));
#endif

/* Work-item tiles. Forward: each work item computes POOL_TH x POOL_TW neighbouring outputs (along
   H and W) and loads every input position of their joint span once, so the columns and rows that
   overlapping windows share are read once per work item. Backward: each work item owns a cell of
   POOL_CH x POOL_CW neighbouring input positions (GPUs: the stride), and reads the dy (and index)
   of every output whose window covers the cell once. 1 x 1 is one position per work item. */
#ifndef POOL_TH
#define POOL_TH 1
#endif
#ifndef POOL_TW
#define POOL_TW 1
#endif
#ifndef POOL_CH
#define POOL_CH 1
#endif
#ifndef POOL_CW
#define POOL_CW 1
#endif

/* Tensor strides: compiled in when POOL_XS_N ... POOL_IS_W are defined (the solvers do with
   POOL_FIXED), else the arguments.
   POOL_OFF32: every offset into every tensor fits 31 bits, so offsets are 32-bit ints. */
#ifndef POOL_OFF32
#define POOL_OFF32 0
#endif
#if POOL_OFF32
typedef int poff_t;
#else
typedef i64 poff_t;
#endif
#ifdef POOL_XS_N
#define S_XN ((poff_t)POOL_XS_N)
#define S_XC ((poff_t)POOL_XS_C)
#define S_XD ((poff_t)POOL_XS_D)
#define S_XH ((poff_t)POOL_XS_H)
#define S_XW ((poff_t)POOL_XS_W)
#define S_YN ((poff_t)POOL_YS_N)
#define S_YC ((poff_t)POOL_YS_C)
#define S_YD ((poff_t)POOL_YS_D)
#define S_YH ((poff_t)POOL_YS_H)
#define S_YW ((poff_t)POOL_YS_W)
#define S_IN ((poff_t)POOL_IS_N)
#define S_IC ((poff_t)POOL_IS_C)
#define S_ID ((poff_t)POOL_IS_D)
#define S_IH ((poff_t)POOL_IS_H)
#define S_IW ((poff_t)POOL_IS_W)
#else
#define S_XN ((poff_t)xn)
#define S_XC ((poff_t)xc)
#define S_XD ((poff_t)xd)
#define S_XH ((poff_t)xh)
#define S_XW ((poff_t)xw)
#define S_YN ((poff_t)yn)
#define S_YC ((poff_t)yc)
#define S_YD ((poff_t)yd)
#define S_YH ((poff_t)yh)
#define S_YW ((poff_t)yw)
#define S_IN ((poff_t)in_)
#define S_IC ((poff_t)ic)
#define S_ID ((poff_t)id_)
#define S_IH ((poff_t)ih_)
#define S_IW ((poff_t)iw_)
#endif

#ifndef POOL_ROWVEC
#define POOL_ROWVEC 0
#endif
#if POOL_ROWVEC && (!defined(POOL_FIXED) || POOL_VEC) /* needs a compiled-in window, one channel */
#undef POOL_ROWVEC
#define POOL_ROWVEC 0
#endif
/* POOL_ROWVEC (CUDA, POOL_FIXED, one channel per work item, W stride 1, (POOL_TW * SW) a multiple
   of VEC and KW - SW >= PW): a forward tile row's span of input columns w0 .. w0 + POOL_SPAN_W - 1
   loads as PW scalars, POOL_TW * SW elements at column w0 + PW = (first output) * SW in 16-byte
   vectors, and scalars after; scalar loads where the vectors would leave the row or are not
   aligned. Columns outside the image read as 0 (never used). */
#define POOL_SPAN_W ((POOL_TW - 1) * P_SW + KW)
#define POOL_CHUNK (POOL_TW * P_SW)
#if POOL_ROWVEC
DEVICE_FN void pool_load_row(const GLOBAL data_t* p, i64 row, int w0, float* rv)
{
    const int mid = w0 + P_PW;
    if(mid + POOL_CHUNK <= P_WI && (((u64)(p + row + mid)) & 15ull) == 0)
    {
        UNROLL
        for(int e = 0; e < P_PW; ++e)
            rv[e] = w0 + e >= 0 ? LOAD(p, row + w0 + e) : 0.0f;
        UNROLL
        for(int q = 0; q < POOL_CHUNK / VEC; ++q)
            load_vec(p, row + mid + q * VEC, rv + P_PW + q * VEC);
        UNROLL
        for(int e = P_PW + POOL_CHUNK; e < POOL_SPAN_W; ++e)
            rv[e] = w0 + e < P_WI ? LOAD(p, row + w0 + e) : 0.0f;
        return;
    }
    UNROLL
    for(int e = 0; e < POOL_SPAN_W; ++e)
        rv[e] = (w0 + e >= 0 && w0 + e < P_WI) ? LOAD(p, row + w0 + e) : 0.0f;
}
#endif

#ifndef POOL_H2
#define POOL_H2 0
#endif
#if POOL_H2 && (defined(__OPENCL_VERSION__) || MIOPY_DTYPE != 1 || !POOL_VEC || POOL_MODE != 0 || \
                (POOL_SAVE_INDEX && (POOL_INDEX_TYPE != 0 || POOL_INDEX_IMAGE)))
#undef POOL_H2 /* applies only where the comment below says */
#define POOL_H2 0
#endif
/* POOL_H2 (CUDA, fp16, POOL_VEC, max, index u8 inside the window or none): the 8 channels of a
   vector stay fp16, as four half2, compared and maxed in half precision (exact: max selects and
   never rounds; NaN and ties behave as in the fp32 path), and each channel's index is one byte of
   two 32-bit words, chosen by byte masks; fewer instructions and registers than 8 fp32 lanes. */
#if POOL_H2
typedef union
{
    u32 u;
    __half2 h;
} pool_h2_t;

DEVICE_FN void pool_load_h2(const data_t* p, poff_t off, int aligned, __half2* hv)
{
    u32 w[4];
    if(aligned)
    {
        const uint4 t = __ldg((const uint4*)(p + off));
        w[0] = t.x; w[1] = t.y; w[2] = t.z; w[3] = t.w;
    }
    else
    {
        UNROLL
        for(int q = 0; q < 4; ++q)
            w[q] = (u32)__half_as_ushort(p[off + 2 * q]) | ((u32)__half_as_ushort(p[off + 2 * q + 1]) << 16);
    }
    UNROLL
    for(int q = 0; q < 4; ++q)
    {
        pool_h2_t t;
        t.u = w[q];
        hv[q] = t.h;
    }
}

DEVICE_FN void pool_store_h2(data_t* p, poff_t off, int aligned, const __half2* hv)
{
    u32 w[4];
    UNROLL
    for(int q = 0; q < 4; ++q)
    {
        pool_h2_t t;
        t.h = hv[q];
        w[q] = t.u;
    }
    if(aligned)
    {
        *(uint4*)(p + off) = make_uint4(w[0], w[1], w[2], w[3]);
        return;
    }
    UNROLL
    for(int q = 0; q < 8; ++q)
        p[off + q] = __ushort_as_half((unsigned short)(w[q / 2] >> (16 * (q % 2))));
}

/* 8 index bytes (channel k in byte k % 4 of word k / 4) at ip[off + k*step] */
DEVICE_FN void pool_store_index_bytes(idx_t* ip, poff_t off, poff_t step, const u32* b)
{
    if(step == 1 && (((u64)(ip + off)) & 7ull) == 0)
    {
        *(uint2*)(ip + off) = make_uint2(b[0], b[1]);
        return;
    }
    UNROLL
    for(int k = 0; k < 8; ++k)
        ip[off + k * step] = (idx_t)((b[k / 4] >> (8 * (k % 4))) & 0xffu);
}
#endif

KERNEL void pool_fwd(const GLOBAL data_t* RESTRICT xp, GLOBAL data_t* RESTRICT yp, GLOBAL idx_t* RESTRICT ip,
                     POOL_SHAPE_ARGS)
{
    const int tiles_h = (P_HO + POOL_TH - 1) / POOL_TH, tiles_w = (P_WO + POOL_TW - 1) / POOL_TW;
    const pidx_t total = (pidx_t)P_N * (P_C / CVEC) * P_DO * tiles_h * tiles_w;
    const int aligned = ALIGNED16(xp) && ALIGNED16(yp);
    for(pidx_t i = (pidx_t)GLOBAL_ID0; i < total; i += (pidx_t)GLOBAL_SIZE0)
    {
        POOL_DECOMPOSE(P_DO, tiles_h, tiles_w)
        const int oh = h * POOL_TH, ow = w * POOL_TW; /* the tile's first output */
        const int d0 = d * P_SD - P_PD, h0 = oh * P_SH - P_PH, w0 = ow * P_SW - P_PW;
        const poff_t xbase = n * S_XN + c * S_XC;
#if POOL_H2
        __half2 hacc[POOL_TH][POOL_TW][4];
        u32 barg[POOL_TH][POOL_TW][2];
        UNROLL
        for(int th = 0; th < POOL_TH; ++th)
        {
            UNROLL
            for(int tw = 0; tw < POOL_TW; ++tw)
            {
                UNROLL
                for(int q = 0; q < 4; ++q)
                {
                    pool_h2_t lowest;
                    lowest.u = 0xfc00fc00u; /* -inf, -inf */
                    hacc[th][tw][q] = lowest.h;
                }
                barg[th][tw][0] = barg[th][tw][1] = 0;
            }
        }
#else
        float acc[POOL_TH][POOL_TW][CVEC];
#if POOL_MODE == 0
        u32 arg[POOL_TH][POOL_TW][CVEC];
#else
        int count[POOL_TH][POOL_TW];
#endif
        UNROLL
        for(int th = 0; th < POOL_TH; ++th)
        {
            UNROLL
            for(int tw = 0; tw < POOL_TW; ++tw)
            {
                for(int k = 0; k < CVEC; ++k)
                {
#if POOL_MODE == 0
                    acc[th][tw][k] = POOL_LOWEST;
                    arg[th][tw][k] = 0;
#else
                    acc[th][tw][k] = 0.0f;
#endif
                }
#if POOL_MODE != 0
                count[th][tw] = 0;
#endif
            }
        }
#endif /* POOL_H2 */
        UNROLL
        for(int fz = 0; fz < KD; ++fz)
        {
            const int di = d0 + fz;
            if(di < 0 || di >= P_DI)
                continue;
            /* rows and columns of the tile's span, each loaded once, offered to every window of
               the tile that covers it, in window order (so the first maximum wins as before) */
            UNROLL
            for(int r = 0; r < (POOL_TH - 1) * P_SH + KH; ++r)
            {
                const int hi = h0 + r;
                if(hi < 0 || hi >= P_HI)
                    continue;
#if POOL_ROWVEC
                float rv[POOL_SPAN_W];
                pool_load_row(xp, xbase + di * S_XD + hi * S_XH, w0, rv);
#endif
                UNROLL
                for(int e = 0; e < POOL_SPAN_W; ++e)
                {
                    const int wi = w0 + e;
                    if(wi < 0 || wi >= P_WI)
                        continue;
#if POOL_H2
                    __half2 hv[4];
                    pool_load_h2(xp, xbase + di * S_XD + hi * S_XH + wi * S_XW, aligned, hv);
#else
                    float v[CVEC];
#endif
#if POOL_ROWVEC
                    v[0] = rv[e];
#elif !POOL_H2
                    pool_load(xp, xbase + di * S_XD + hi * S_XH + wi * S_XW, v, aligned);
#endif
                    UNROLL
                    for(int th = 0; th < POOL_TH; ++th)
                    {
                        const int fy = r - th * P_SH;
                        if(fy < 0 || fy >= KH)
                            continue;
                        UNROLL
                        for(int tw = 0; tw < POOL_TW; ++tw)
                        {
                            const int fx = e - tw * P_SW;
                            if(fx < 0 || fx >= KW)
                                continue;
#if POOL_MODE == 0
#if POOL_INDEX_IMAGE
                            const u32 pos = ((u32)di * P_HI + hi) * P_WI + wi;
#else
                            const u32 pos = (fz * KH + fy) * KW + fx;
#endif
#if POOL_H2
                            u32 m[4];
                            UNROLL
                            for(int q = 0; q < 4; ++q)
                            {
                                m[q] = __hgt2_mask(hv[q], hacc[th][tw][q]); /* 0xffff per half where greater */
                                hacc[th][tw][q] = __hmax2(hacc[th][tw][q], hv[q]);
                            }
                            const u32 posb = pos * 0x01010101u;
                            const u32 b0 = __byte_perm(m[0], m[1], 0x6420), b1 = __byte_perm(m[2], m[3], 0x6420);
                            barg[th][tw][0] = (barg[th][tw][0] & ~b0) | (posb & b0);
                            barg[th][tw][1] = (barg[th][tw][1] & ~b1) | (posb & b1);
#else
                            for(int k = 0; k < CVEC; ++k)
                            {
                                arg[th][tw][k] = v[k] > acc[th][tw][k] ? pos : arg[th][tw][k];
                                acc[th][tw][k] = F_MAX(acc[th][tw][k], v[k]);
                            }
#endif
#else
                            for(int k = 0; k < CVEC; ++k)
                                acc[th][tw][k] += v[k];
                            ++count[th][tw];
#endif
                        }
                    }
                }
            }
        }
        UNROLL
        for(int th = 0; th < POOL_TH; ++th)
        {
            UNROLL
            for(int tw = 0; tw < POOL_TW; ++tw)
            {
                const int ho = oh + th, wo = ow + tw;
                if(ho >= P_HO || wo >= P_WO)
                    continue;
#if POOL_H2
                pool_store_h2(yp, n * S_YN + c * S_YC + d * S_YD + ho * S_YH + wo * S_YW, aligned, hacc[th][tw]);
#if POOL_SAVE_INDEX
                pool_store_index_bytes(ip, n * S_IN + c * S_IC + d * S_ID + ho * S_IH + wo * S_IW, S_IC, barg[th][tw]);
#endif
#else
#if POOL_MODE == 1
                const float scale = 1.0f / (float)(count[th][tw] > 0 ? count[th][tw] : 1);
                for(int k = 0; k < CVEC; ++k)
                    acc[th][tw][k] *= scale;
#elif POOL_MODE == 2
                for(int k = 0; k < CVEC; ++k)
                    acc[th][tw][k] *= 1.0f / (float)(KD * KH * KW);
#endif
                pool_store(yp, n * S_YN + c * S_YC + d * S_YD + ho * S_YH + wo * S_YW, acc[th][tw], aligned);
#if POOL_MODE == 0 && POOL_SAVE_INDEX
                pool_store_index(ip, n * S_IN + c * S_IC + d * S_ID + ho * S_IH + wo * S_IW, S_IC, arg[th][tw]);
#endif
#endif /* POOL_H2 */
            }
        }
    }
}

/* first output index whose window [o*s - p, o*s - p + K) covers input position t */
DEVICE_FN int pool_first_out(int t, int p, int s, int K)
{
    const int lo = t + p - K + 1;
    return lo <= 0 ? 0 : (lo + s - 1) / s;
}

/* One row of a backward cell: POOL_CW scalars at p[off + j*step]; on CUDA, as one 8- or 16-byte
   (fp32) or 4- or 8-byte (16-bit types) store when they are contiguous and aligned. */
DEVICE_FN void pool_store_cell_row(GLOBAL data_t* p, i64 off, i64 step, const float* v, int n_valid)
{
#if !defined(__OPENCL_VERSION__) && !POOL_VEC && (POOL_CW == 2 || POOL_CW == 4) && MIOPY_DTYPE <= 2
    const int bytes = POOL_CW * (int)sizeof(data_t);
    if(step == 1 && n_valid >= POOL_CW && (((u64)(p + off)) & (u64)(bytes - 1)) == 0)
    {
#if MIOPY_DTYPE == 0
#if POOL_CW == 2
        *(float2*)(p + off) = make_float2(v[0], v[1]);
#else
        *(float4*)(p + off) = make_float4(v[0], v[1], v[2], v[3]);
#endif
#else
        u32 wds[POOL_CW / 2];
        UNROLL
        for(int j = 0; j < POOL_CW / 2; ++j)
        {
#if MIOPY_DTYPE == 1
            wds[j] = (u32)__half_as_ushort(__float2half_rn(v[2 * j])) |
                     ((u32)__half_as_ushort(__float2half_rn(v[2 * j + 1])) << 16);
#else
            wds[j] = (u32)float_to_bf16(v[2 * j]) | ((u32)float_to_bf16(v[2 * j + 1]) << 16);
#endif
        }
#if POOL_CW == 2
        *(u32*)(p + off) = wds[0];
#else
        *(uint2*)(p + off) = make_uint2(wds[0], wds[1]);
#endif
#endif
        return;
    }
#endif
    for(int j = 0; j < POOL_CW; ++j)
        if(j < n_valid)
            STORE(p, off + j * step, v[j]);
}

/* POOL_CELL_STATIC: compiled-in shape, cells a whole number of strides (POOL_CH % SH == 0,
   POOL_CW % SW == 0) and at most 16 candidate outputs per cell. Output hc / SH + POOL_JH0 + jh, jh < POOL_NJH, covers the cell (likewise W). */
#define POOL_FDIV(a, b) ((a) >= 0 ? (a) / (b) : -((-(a) + (b) - 1) / (b)))
#define POOL_CDIV(a, b) (-POOL_FDIV(-(a), (b)))
#define POOL_CELL_STATIC 0
#ifdef POOL_FIXED
#if POOL_CH % POOL_SH == 0 && POOL_CW % POOL_SW == 0
#undef POOL_CELL_STATIC
#define POOL_CELL_STATIC 1
#define POOL_JH0 POOL_CDIV(P_PH - KH + 1, P_SH)
#define POOL_NJH (POOL_FDIV(POOL_CH - 1 + P_PH, P_SH) - POOL_JH0 + 1)
#define POOL_JW0 POOL_CDIV(P_PW - KW + 1, P_SW)
#define POOL_NJW (POOL_FDIV(POOL_CW - 1 + P_PW, P_SW) - POOL_JW0 + 1)
#if POOL_NJH * POOL_NJW > 16 /* large windows (global pooling): most candidates miss, loop instead */
#undef POOL_CELL_STATIC
#define POOL_CELL_STATIC 0
#endif
#endif
#endif

/* backward, for output (od, oh, ow): its dy vector g and, max: its index values got; average:
   its scale */
#if POOL_MODE == 0
#define POOL_BWD_LOAD_OUTPUT                                                                      \
    float g[CVEC];                                                                                \
    pool_load(dyp, ybase + od * S_YD + oh * S_YH + ow * S_YW, g, aligned);                        \
    pool_ival_t got[CVEC];                                                                        \
    pool_load_index(ip, ibase + od * S_ID + oh * S_IH + ow * S_IW, S_IC, got);
#elif POOL_MODE == 1
#define POOL_BWD_LOAD_OUTPUT                                                                      \
    float g[CVEC];                                                                                \
    pool_load(dyp, ybase + od * S_YD + oh * S_YH + ow * S_YW, g, aligned);                        \
    const int dlo = max(od * P_SD - P_PD, 0), dhi = min(od * P_SD - P_PD + KD, P_DI);             \
    const int hlo = max(oh * P_SH - P_PH, 0), hhi = min(oh * P_SH - P_PH + KH, P_HI);             \
    const int wlo = max(ow * P_SW - P_PW, 0), whi = min(ow * P_SW - P_PW + KW, P_WI);             \
    const int count = (dhi - dlo) * (hhi - hlo) * (whi - wlo);                                    \
    const float scale = 1.0f / (float)(count > 0 ? count : 1);
#else
#define POOL_BWD_LOAD_OUTPUT                                                                      \
    float g[CVEC];                                                                                \
    pool_load(dyp, ybase + od * S_YD + oh * S_YH + ow * S_YW, g, aligned);                        \
    const float scale = 1.0f / (float)(KD * KH * KW);
#endif

/* backward: cell position (ch, cw) at (fz, fy, fx) of the current output's window takes its share */
#if POOL_MODE == 0
#if POOL_INDEX_IMAGE
#define POOL_WANT ((pool_ival_t)(((u64)d * P_HI + (hc + ch)) * P_WI + (wc + cw)))
#else
#define POOL_WANT ((pool_ival_t)((fz * KH + fy) * KW + fx))
#endif
#define POOL_BWD_TAKE                                                                             \
    {                                                                                             \
        const pool_ival_t want = POOL_WANT;                                                       \
        for(int k = 0; k < CVEC; ++k)                                                             \
            acc[ch][cw][k] += got[k] == want ? g[k] : 0.0f;                                       \
    }
#else
#define POOL_BWD_TAKE                                                                             \
    for(int k = 0; k < CVEC; ++k)                                                                 \
        acc[ch][cw][k] += g[k] * scale;
#endif

KERNEL void pool_bwd(GLOBAL data_t* RESTRICT dxp, const GLOBAL data_t* RESTRICT dyp,
                     const GLOBAL idx_t* RESTRICT ip, POOL_SHAPE_ARGS)
{
    const int cells_h = (P_HI + POOL_CH - 1) / POOL_CH, cells_w = (P_WI + POOL_CW - 1) / POOL_CW;
    const pidx_t total = (pidx_t)P_N * (P_C / CVEC) * P_DI * cells_h * cells_w;
    const int aligned = ALIGNED16(dxp) && ALIGNED16(dyp);
    for(pidx_t i = (pidx_t)GLOBAL_ID0; i < total; i += (pidx_t)GLOBAL_SIZE0)
    {
        POOL_DECOMPOSE(P_DI, cells_h, cells_w)
        const int hc = h * POOL_CH, wc = w * POOL_CW; /* the cell's first input position */
        float acc[POOL_CH][POOL_CW][CVEC];
        UNROLL
        for(int ch = 0; ch < POOL_CH; ++ch)
        {
            UNROLL
            for(int cw = 0; cw < POOL_CW; ++cw)
            {
                for(int k = 0; k < CVEC; ++k)
                    acc[ch][cw][k] = 0.0f;
            }
        }
        const poff_t ybase = n * S_YN + c * S_YC;
#if POOL_MODE == 0
        const poff_t ibase = n * S_IN + c * S_IC;
#endif
        const int od0 = pool_first_out(d, P_PD, P_SD, KD), od1 = min((d + P_PD) / P_SD + 1, P_DO);
        for(int od = od0; od < od1; ++od)
        {
            const int fz = d - (od * P_SD - P_PD);
#if POOL_CELL_STATIC
            /* the cell starts on a stride multiple: which outputs cover it, relative to hc / SH and
               wc / SW, and where each cell position sits in their windows, are compile-time */
            const int mh = hc / P_SH, mw = wc / P_SW;
            UNROLL
            for(int jh = 0; jh < POOL_NJH; ++jh)
            {
                const int oh = mh + POOL_JH0 + jh;
                if(oh < 0 || oh >= P_HO)
                    continue;
                UNROLL
                for(int jw = 0; jw < POOL_NJW; ++jw)
                {
                    const int ow = mw + POOL_JW0 + jw;
                    if(ow < 0 || ow >= P_WO)
                        continue;
                    POOL_BWD_LOAD_OUTPUT
                    UNROLL
                    for(int ch = 0; ch < POOL_CH; ++ch)
                    {
                        const int fy = ch + P_PH - (POOL_JH0 + jh) * P_SH;
                        UNROLL
                        for(int cw = 0; cw < POOL_CW; ++cw)
                        {
                            const int fx = cw + P_PW - (POOL_JW0 + jw) * P_SW;
                            if(fy < 0 || fy >= KH || fx < 0 || fx >= KW)
                                continue;
                            POOL_BWD_TAKE
                        }
                    }
                }
            }
#else
            /* the outputs whose windows cover any position of the cell */
            const int oh0 = pool_first_out(hc, P_PH, P_SH, KH);
            const int oh1 = min((hc + POOL_CH - 1 + P_PH) / P_SH + 1, P_HO);
            const int ow0 = pool_first_out(wc, P_PW, P_SW, KW);
            const int ow1 = min((wc + POOL_CW - 1 + P_PW) / P_SW + 1, P_WO);
            for(int oh = oh0; oh < oh1; ++oh)
            {
                for(int ow = ow0; ow < ow1; ++ow)
                {
                    POOL_BWD_LOAD_OUTPUT
                    UNROLL
                    for(int ch = 0; ch < POOL_CH; ++ch)
                    {
                        const int fy = hc + ch - (oh * P_SH - P_PH);
                        UNROLL
                        for(int cw = 0; cw < POOL_CW; ++cw)
                        {
                            const int fx = wc + cw - (ow * P_SW - P_PW);
                            if(fy < 0 || fy >= KH || fx < 0 || fx >= KW)
                                continue;
                            POOL_BWD_TAKE
                        }
                    }
                }
            }
#endif
            (void)fz;
        }
        const poff_t dbase = n * S_XN + c * S_XC + d * S_XD;
        UNROLL
        for(int ch = 0; ch < POOL_CH; ++ch)
        {
            if(hc + ch >= P_HI)
                continue;
#if POOL_VEC
            UNROLL
            for(int cw = 0; cw < POOL_CW; ++cw)
                if(wc + cw < P_WI)
                    pool_store(dxp, dbase + (hc + ch) * S_XH + (wc + cw) * S_XW, acc[ch][cw], aligned);
#else
            float row[POOL_CW];
            UNROLL
            for(int cw = 0; cw < POOL_CW; ++cw)
                row[cw] = acc[ch][cw][0];
            pool_store_cell_row(dxp, dbase + (hc + ch) * S_XH + wc * S_XW, S_XW, row, P_WI - wc);
#endif
        }
    }
}

/* pool_fwd_{rows,channels}_cpu: forward pooling for CPU OpenCL devices (PoCL) in float8 vectors
   (common/cpu_vec.h); POOL_SHAPE_ARGS as pool_fwd, run-time shape (POOL_FIXED is not used), the
   same results: max keeps the first strictly greater value in window order (from POOL_LOWEST),
   average divides by the positions inside the image (POOL_MODE 1) or by the window (2).
   *_rows_cpu: x and y rows contiguous (W stride 1): a work item per output row (n, c, d, oh).
   Columns first: the window's input rows are reduced 8 columns at a time straight from x into a
   private row padded with the neutral value (POOL_LOWEST or 0; max: with the winning row, the
   first in window order), then 8 outputs at a time reduce kw columns of it, each one load
   (strides 1 and 2: vload8, or the even lanes of a vload16) or 8 (other strides); max ties go to
   the earlier row, then the earlier column, which is window order. kh + kw taps an output
   instead of kh x kw (a fifth to a quarter less CPU time than staging each input row, 3x3/2).
   *_channels_cpu: x and y channels contiguous: a work item per output position, 8 channels at a
   time, the window clipped once for every lane.
   The GPU kernel took 20-120 times the time of a copy on PoCL. */
/* Built only into the programs of the solvers that launch them (POOL_CPU_KERNELS=1): the other
   pooling programs skip their compilation on PoCL. */
#ifndef POOL_CPU_KERNELS
#define POOL_CPU_KERNELS 0
#endif
#if defined(__OPENCL_VERSION__) && MIOPY_DTYPE != 3 && POOL_CPU_KERNELS
#include "common/cpu_vec.h"
#define POOL_ROW_BUF 2112 /* floats of a padded input row (the solver checks the fit) */
#if POOL_MODE == 0
#define POOL_PAD_VALUE POOL_LOWEST
#else
#define POOL_PAD_VALUE 0.0f
#endif

/* lanes w0 .. w0 + 7 of a row of `len` (w0 may be negative): those inside. The edges store lane
   by lane from the register (through a private array, the reload missed store forwarding: a
   fifth of the backward kernel's time) */
DEVICE_FN void pool_store_edge_f8(GLOBAL data_t* p, i64 base, int w0, int len, float8 v)
{
#define POOL_LANE(k, e)                                                                            \
    if(w0 + (k) >= 0 && w0 + (k) < len)                                                            \
        STORE(p, base + w0 + (k), v.e);
    POOL_LANE(0, s0) POOL_LANE(1, s1) POOL_LANE(2, s2) POOL_LANE(3, s3)
    POOL_LANE(4, s4) POOL_LANE(5, s5) POOL_LANE(6, s6) POOL_LANE(7, s7)
#undef POOL_LANE
}

/* the whole-vector case inlined, the edges a call (PoCL had kept the whole function a call) */
__attribute__((always_inline)) DEVICE_FN void pool_store_span_f8(GLOBAL data_t* p, i64 base, int w0, int len, float8 v)
{
    if(w0 >= 0 && w0 + 8 <= len)
    {
        store_f8(p, base + w0, v);
        return;
    }
    pool_store_edge_f8(p, base, w0, len, v);
}

/* lanes l0 .. l0 + 7 of a contiguous run of `len` elements, `fill` at and past len */
DEVICE_FN float8 pool_lanes_f8(const GLOBAL data_t* p, i64 base, int l0, int len, float fill)
{
    if(l0 + 8 <= len)
        return load_f8(p, base + l0);
#define POOL_LANE(k) (l0 + (k) < len ? LOAD(p, base + l0 + (k)) : fill)
    return (float8)(POOL_LANE(0), POOL_LANE(1), POOL_LANE(2), POOL_LANE(3), POOL_LANE(4), POOL_LANE(5),
                    POOL_LANE(6), POOL_LANE(7));
#undef POOL_LANE
}

DEVICE_FN void pool_store_lanes_f8(GLOBAL data_t* p, i64 base, int l0, int len, float8 v)
{
    if(l0 + 8 <= len)
    {
        store_f8(p, base + l0, v);
        return;
    }
    pool_store_span_f8(p, base, l0, len, v);
}

DEVICE_FN void pool_store_index8(GLOBAL idx_t* ip, i64 base, i64 step, int count, int8 arg)
{
#define POOL_LANE(k, e)                                                                            \
    if((k) < count)                                                                                \
        ip[base + (k) * step] = (idx_t)(uint)arg.e;
    POOL_LANE(0, s0) POOL_LANE(1, s1) POOL_LANE(2, s2) POOL_LANE(3, s3)
    POOL_LANE(4, s4) POOL_LANE(5, s5) POOL_LANE(6, s6) POOL_LANE(7, s7)
#undef POOL_LANE
}

DEVICE_FN void pool_store_index8_fast(GLOBAL idx_t* ip, i64 base, i64 step, int count, int8 arg)
{
#if POOL_INDEX_TYPE == 0
    if(step == 1 && count == 8)
    {
        vstore8((uchar8)((uchar)arg.s0, (uchar)arg.s1, (uchar)arg.s2, (uchar)arg.s3, (uchar)arg.s4, (uchar)arg.s5,
                         (uchar)arg.s6, (uchar)arg.s7), 0, ip + base);
        return;
    }
#elif POOL_INDEX_TYPE == 2
    if(step == 1 && count == 8)
    {
        vstore8(as_uint8(arg), 0, ip + base);
        return;
    }
#endif
    pool_store_index8(ip, base, step, count, arg);
}

#define POOL_FWD_RH 8 /* pool_fwd_rows_cpu: output rows per work item */

KERNEL void pool_fwd_rows_cpu(const GLOBAL data_t* RESTRICT xp, GLOBAL data_t* RESTRICT yp,
                              GLOBAL idx_t* RESTRICT ip, POOL_SHAPE_ARGS)
{
    /* a work item per POOL_FWD_RH output rows of a plane: its index arithmetic and the padding of
       the private rows once for all of them (a third of the time with one row an item) */
    const int bands = (Ho + POOL_FWD_RH - 1) / POOL_FWD_RH;
    const i64 t = GLOBAL_ID0;
    if(t >= (i64)N * C * Do * bands)
        return;
    const int ohb = (int)(t % bands) * POOL_FWD_RH;
    const i64 r1 = t / bands;
    const int od = (int)(r1 % Do);
    const i64 nc = r1 / Do, n = nc / C, c = nc - n * C;
    const int d0 = od * sd - pd;
    const int Wo8 = (Wo + 7) / 8 * 8, span = (Wo8 - 1) * sw + kw + 16;
    const int z0 = max(d0, 0), z1 = min(d0 + kd, Di);
    float col[POOL_ROW_BUF];
#if POOL_MODE == 0
    int key[POOL_ROW_BUF];
#endif
    for(int e = 0; e < pw; ++e)
    {
        col[e] = POOL_PAD_VALUE;
#if POOL_MODE == 0
        key[e] = 0;
#endif
    }
    for(int e = pw + (Wi + 7) / 8 * 8; e < span; ++e)
    {
        col[e] = POOL_PAD_VALUE;
#if POOL_MODE == 0
        key[e] = 0;
#endif
    }
    const i64 xbase = n * xn + c * xc;
    for(int oh = ohb; oh < min(ohb + POOL_FWD_RH, Ho); ++oh)
    {
        const int h0 = oh * sh - ph;
        const int y0 = max(h0, 0), y1 = min(h0 + kh, Hi);
        for(int w0 = 0; w0 < Wi; w0 += 8)
        {
            float8 a = (float8)(POOL_PAD_VALUE);
#if POOL_MODE == 0
            int8 g = (int8)(0);
#endif
            for(int di = z0; di < z1; ++di)
                for(int hi = y0; hi < y1; ++hi)
                {
                    const float8 v = pool_lanes_f8(xp, xbase + di * xd + hi * xh, w0, Wi, POOL_PAD_VALUE);
#if POOL_MODE == 0
#if POOL_INDEX_IMAGE
                    const int r = di * Hi + hi;
#else
                    const int r = (di - d0) * kh + hi - h0;
#endif
                    const int8 greater = v > a;
                    g = select(g, (int8)(r), greater);
                    a = select(a, v, greater);
#else
                    a += v;
#endif
                }
            vstore8(a, 0, col + pw + w0);
#if POOL_MODE == 0
            vstore8(g, 0, key + pw + w0);
#endif
        }
        const i64 yrow = n * yn + c * yc + od * yd + oh * yh;
        const int rows = (z1 - z0) * (y1 - y0);
        for(int b = 0; b < Wo8 / 8; ++b)
        {
            const int base = b * 8 * sw;
            float8 a = (float8)(POOL_PAD_VALUE);
#if POOL_MODE == 0
            int8 g = (int8)(0), f = (int8)(0);
#endif
            for(int fx = 0; fx < kw; ++fx)
            {
                float8 v;
#if POOL_MODE == 0
                int8 r;
#endif
                if(sw == 1)
                {
                    v = vload8(0, col + base + fx);
#if POOL_MODE == 0
                    r = vload8(0, key + base + fx);
#endif
                }
                else if(sw == 2)
                {
                    v = vload16(0, col + base + fx).even;
#if POOL_MODE == 0
                    r = vload16(0, key + base + fx).even;
#endif
                }
                else
                {
                    float tv[8];
#if POOL_MODE == 0
                    int tr[8];
#endif
                    for(int l = 0; l < 8; ++l)
                    {
                        tv[l] = col[base + fx + l * sw];
#if POOL_MODE == 0
                        tr[l] = key[base + fx + l * sw];
#endif
                    }
                    v = vload8(0, tv);
#if POOL_MODE == 0
                    r = vload8(0, tr);
#endif
                }
#if POOL_MODE == 0
                /* window order: the greater value, or an equal one on an earlier row */
                const int8 wins = (v > a) | ((v == a) & (r < g));
                g = select(g, r, wins);
                f = select(f, (int8)(fx), wins);
                a = select(a, v, wins);
#else
                a += v;
#endif
            }
#if POOL_MODE == 1
            const float8 ws = (float8)((float)(base - pw)) + (float8)(0.0f, 1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f, 7.0f) * (float)sw;
            const float8 cols = fmin(ws + (float)kw, (float8)((float)Wi)) - fmax(ws, (float8)(0.0f));
            a = a / fmax((float)rows * cols, (float8)(1.0f));
#elif POOL_MODE == 2
            a = a * (1.0f / (float)(kd * kh * kw));
#endif
            pool_store_lanes_f8(yp, yrow, b * 8, Wo, a);
#if POOL_MODE == 0 && POOL_SAVE_INDEX
#if POOL_INDEX_IMAGE
            const int8 arg = g * Wi + (int8)(base - pw) + (int8)(0, 1, 2, 3, 4, 5, 6, 7) * sw + f;
#else
            const int8 arg = g * kw + f;
#endif
            const int count = Wo - b * 8 < 8 ? Wo - b * 8 : 8;
            pool_store_index8_fast(ip, n * in_ + c * ic + od * id_ + oh * ih_ + (i64)b * 8 * iw_, iw_, count, arg);
#endif
        }
    }
}

KERNEL void pool_fwd_channels_cpu(const GLOBAL data_t* RESTRICT xp, GLOBAL data_t* RESTRICT yp,
                                  GLOBAL idx_t* RESTRICT ip, POOL_SHAPE_ARGS)
{
    /* a work item per output row (n, od, oh): the index arithmetic once for its Wo positions (a
       quarter of the time with one position an item) */
    const i64 t = GLOBAL_ID0;
    if(t >= (i64)N * Do * Ho)
        return;
    const int oh = (int)(t % Ho);
    const i64 r2 = t / Ho;
    const int od = (int)(r2 % Do);
    const i64 n = r2 / Do;
    for(int ow = 0; ow < Wo; ++ow)
    {
    const int d0 = od * sd - pd, h0 = oh * sh - ph, w0 = ow * sw - pw;
        const int z0 = d0 > 0 ? d0 : 0, z1 = d0 + kd < Di ? d0 + kd : Di;
        const int y0 = h0 > 0 ? h0 : 0, y1 = h0 + kh < Hi ? h0 + kh : Hi;
        const int x0 = w0 > 0 ? w0 : 0, x1 = w0 + kw < Wi ? w0 + kw : Wi;
        const i64 ybase = n * yn + od * yd + oh * yh + ow * yw;
        for(int c0 = 0; c0 < C; c0 += 8)
        {
            float8 a = (float8)(POOL_PAD_VALUE);
#if POOL_MODE == 0
            int8 g = (int8)(0);
#endif
            for(int di = z0; di < z1; ++di)
                for(int hi = y0; hi < y1; ++hi)
                    for(int wi = x0; wi < x1; ++wi)
                    {
                        const float8 v = pool_lanes_f8(xp, n * xn + di * xd + hi * xh + wi * xw, c0, C, 0.0f);
#if POOL_MODE == 0
#if POOL_INDEX_IMAGE
                        const int pos = (di * Hi + hi) * Wi + wi;
#else
                        const int pos = ((di - d0) * kh + hi - h0) * kw + wi - w0;
#endif
                        const int8 greater = v > a;
                        g = select(g, (int8)(pos), greater);
                        a = select(a, v, greater);
#else
                        a += v;
#endif
                    }
#if POOL_MODE == 1
            const int count = (z1 - z0) * (y1 - y0) * (x1 - x0);
            a = a * (1.0f / (float)(count > 0 ? count : 1));
#elif POOL_MODE == 2
            a = a * (1.0f / (float)(kd * kh * kw));
#endif
            pool_store_lanes_f8(yp, ybase, c0, C, a);
#if POOL_MODE == 0 && POOL_SAVE_INDEX
            pool_store_index8(ip, n * in_ + od * id_ + oh * ih_ + ow * iw_ + (i64)c0 * ic, ic, C - c0 < 8 ? C - c0 : 8, g);
#endif
        }
    }
}

/* pool_bwd_{rows,channels}_cpu: backward pooling for CPU OpenCL devices, the same results as
   pool_bwd (each dx element sums the dy of the windows covering it; max: those whose index names
   it) with no atomics: every work item writes only its own dx elements.
   *_rows_cpu: dx, dy and the index rows contiguous (W stride 1): a work item per POOL_BWD_RH dx
   rows. The output rows covering a dx row are staged (dy, scaled for the average; the index as
   int) in private rows padded with 8 zeros / -1 on both sides. The dx row is then computed in
   phases: positions m * sw + r take, for every tap fx = r, r + sw, ..., the output
   m - (fx - r) / sw, so that 8 positions of a phase are one unaligned load of the staged row per
   tap (max: masked where the index names another window position); stride 2 interleaves its two
   phases into 16 contiguous positions, other strides store lane by lane.
   *_channels_cpu: dx, dy and the index channels contiguous: a work item per cell of SH x SW dx
   positions, 8 channels at a time, each output covering the cell read once for all of them. */
DEVICE_FN int8 pool_index_lanes8(const GLOBAL idx_t* ip, i64 base, int l0, int len, i64 step)
{
    if(step == 1 && l0 >= 0 && l0 + 8 <= len)
    {
        /* lanes shifted out of whole words in vector operations */
        const GLOBAL idx_t* q = ip + base + l0;
#if POOL_INDEX_TYPE == 0
        const uint w0 = (uint)q[0] | ((uint)q[1] << 8) | ((uint)q[2] << 16) | ((uint)q[3] << 24);
        const uint w1 = (uint)q[4] | ((uint)q[5] << 8) | ((uint)q[6] << 16) | ((uint)q[7] << 24);
        const uint8 words = (uint8)(w0, w0, w0, w0, w1, w1, w1, w1);
        return as_int8((words >> (uint8)(0, 8, 16, 24, 0, 8, 16, 24)) & 0xffu);
#elif POOL_INDEX_TYPE == 1
        const uint w0 = (uint)q[0] | ((uint)q[1] << 16), w1 = (uint)q[2] | ((uint)q[3] << 16);
        const uint w2 = (uint)q[4] | ((uint)q[5] << 16), w3 = (uint)q[6] | ((uint)q[7] << 16);
        const uint8 words = (uint8)(w0, w0, w1, w1, w2, w2, w3, w3);
        return as_int8((words >> (uint8)(0, 16, 0, 16, 0, 16, 0, 16)) & 0xffffu);
#elif POOL_INDEX_TYPE == 2
        return as_int8(vload8(0, q));
#else
        const ulong8 u = vload8(0, q);
        return (int8)((int)u.s0, (int)u.s1, (int)u.s2, (int)u.s3, (int)u.s4, (int)u.s5, (int)u.s6, (int)u.s7);
#endif
    }
#define POOL_LANE(k) (l0 + (k) >= 0 && l0 + (k) < len ? (int)ip[base + (i64)(l0 + (k)) * step] : -1)
    return (int8)(POOL_LANE(0), POOL_LANE(1), POOL_LANE(2), POOL_LANE(3), POOL_LANE(4), POOL_LANE(5),
                  POOL_LANE(6), POOL_LANE(7));
#undef POOL_LANE
}

/* one output row staged for pool_bwd_rows_cpu: dy times `scale` (average excluding the padding:
   divided by each window's positions, `scale` holding its rows) at g[8 + o], the index at
   q[8 + o] (max), zero / -1 for o outside [0, Wo), up to o < end */
DEVICE_FN void pool_stage_row(const GLOBAL data_t* RESTRICT dyp, const GLOBAL idx_t* RESTRICT ip, i64 yrow,
                              i64 irow, i64 iw_, int Wo, int end, float scale, int sw, int pw, int kw, int Wi,
                              float* g, int* q)
{
    vstore8((float8)(0.0f), 0, g);
#if POOL_MODE == 0
    vstore8((int8)(-1), 0, q);
#endif
    for(int o0 = 0; o0 < end; o0 += 8)
    {
        if(o0 >= Wo) /* past the row: no loads */
        {
            vstore8((float8)(0.0f), 0, g + 8 + o0);
#if POOL_MODE == 0
            vstore8((int8)(-1), 0, q + 8 + o0);
#endif
            continue;
        }
        float8 v = pool_lanes_f8(dyp, yrow, o0, Wo, 0.0f);
#if POOL_MODE == 1
        const float8 ws = (float8)((float)(o0 * sw - pw)) +
                          (float8)(0.0f, 1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f, 7.0f) * (float)sw;
        const float8 cols = fmin(ws + (float)kw, (float8)((float)Wi)) - fmax(ws, (float8)(0.0f));
        v = v / fmax(scale * cols, (float8)(1.0f));
#elif POOL_MODE == 2
        v = v * scale;
#endif
        vstore8(v, 0, g + 8 + o0);
#if POOL_MODE == 0
        vstore8(pool_index_lanes8(ip, irow, o0, Wo, iw_), 0, q + 8 + o0);
#endif
    }
}

/* pool_bwd_rows_cpu's staged output rows: at most POOL_BWD_STAGES cover a dx row, each at most
   POOL_BWD_ROW - 8 long with its padding (the solver checks both) */
#define POOL_BWD_ROW 520
#define POOL_BWD_STAGES 4
#define POOL_BWD_RH 8 /* dx rows per work item */

KERNEL void pool_bwd_rows_cpu(GLOBAL data_t* RESTRICT dxp, const GLOBAL data_t* RESTRICT dyp,
                              const GLOBAL idx_t* RESTRICT ip, POOL_SHAPE_ARGS)
{
    const u32 chunks = ((u32)Hi + POOL_BWD_RH - 1) / POOL_BWD_RH;
    const u32 t = (u32)GLOBAL_ID0;
    if(t >= (u32)N * C * Di * chunks)
        return;
    const int h0 = (int)(t % chunks) * POOL_BWD_RH;
    const u32 r1 = t / chunks;
    const int di = (int)(r1 % (u32)Di);
    const u32 nc = r1 / (u32)Di;
    const i64 n = nc / (u32)C, c = nc % (u32)C;
    const int ms8 = ((Wi + pw + sw - 1) / sw + 7) / 8 * 8; /* phase positions m: (m * sw + r - pw) */
    const int staged = max(ms8, (Wo + 7) / 8 * 8) + 8;   /* outputs staged, from -8 */
    const int od0 = pool_first_out(di, pd, sd, kd), od1 = min((di + pd) / sd + 1, Do);
    float g[POOL_BWD_STAGES][POOL_BWD_ROW];
    int q[POOL_BWD_STAGES][POOL_BWD_ROW];
    int tap0[POOL_BWD_STAGES], slot[POOL_BWD_STAGES];
    /* output row (od, oh) is staged in slot (od - od0) * ch + oh % ch, where ch >= the output
       rows covering any dx row: consecutive dx rows share their staged rows (3x3/2: each staged
       once a work item instead of once for each of the 3 dx rows it covers) */
    const int ch = (kh + sh - 1) / sh;
    int tag[POOL_BWD_STAGES];
    for(int j = 0; j < POOL_BWD_STAGES; ++j)
        tag[j] = -1;
    for(int hi = h0; hi < min(h0 + POOL_BWD_RH, Hi); ++hi)
    {
        const int oh0 = pool_first_out(hi, ph, sh, kh), oh1 = min((hi + ph) / sh + 1, Ho);
        int k = 0; /* the output rows covering dx row (di, hi) */
        for(int od = od0; od < od1; ++od)
        {
            const int fz = di - (od * sd - pd);
#if POOL_MODE == 1
            const int dz = min(od * sd - pd + kd, Di) - max(od * sd - pd, 0);
#endif
            for(int oh = oh0; oh < oh1; ++oh, ++k)
            {
                const int sl = (od - od0) * ch + oh % ch;
                slot[k] = sl;
                tap0[k] = (fz * kh + hi - (oh * sh - ph)) * kw; /* the window index of tap fx = 0 */
                if(tag[sl] == od * Ho + oh)
                    continue;
                tag[sl] = od * Ho + oh;
#if POOL_MODE == 1
                const float scale = (float)(dz * (min(oh * sh - ph + kh, Hi) - max(oh * sh - ph, 0)));
#else
                const float scale = 1.0f / (float)(kd * kh * kw);
#endif
                pool_stage_row(dyp, ip, n * yn + c * yc + od * yd + oh * yh, n * in_ + c * ic + od * id_ + oh * ih_,
                               iw_, Wo, staged, scale, sw, pw, kw, Wi, g[sl], q[sl]);
            }
        }
        const i64 xrow = n * xn + c * xc + di * xd + hi * xh;
        for(int m0 = 0; m0 < ms8; m0 += 8)
        {
#if POOL_MODE == 0 && POOL_INDEX_IMAGE
            const int8 want = (int8)((di * Hi + hi) * Wi + m0 * sw - pw) + (int8)(0, 1, 2, 3, 4, 5, 6, 7) * sw;
#define POOL_TAP_ADD(acc, s, at, fx, r)                                                           \
    acc += select((float8)(0.0f), vload8(0, g[slot[s]] + (at)), vload8(0, q[slot[s]] + (at)) == want + (r))
#elif POOL_MODE == 0
#define POOL_TAP_ADD(acc, s, at, fx, r)                                                           \
    acc += select((float8)(0.0f), vload8(0, g[slot[s]] + (at)), vload8(0, q[slot[s]] + (at)) == (int8)(tap0[s] + (fx)))
#else
#define POOL_TAP_ADD(acc, s, at, fx, r) acc += vload8(0, g[slot[s]] + (at))
#endif
            /* phase r: positions (m0 + l) * sw + r, lane l from output m0 + l - (fx - r) / sw */
            if(sw == 1)
            {
                float8 acc = (float8)(0.0f);
                for(int s = 0; s < k; ++s)
                    for(int fx = 0; fx < kw; ++fx)
                        POOL_TAP_ADD(acc, s, 8 + m0 - fx, fx, 0);
                pool_store_span_f8(dxp, xrow, m0 - pw, Wi, acc);
            }
            else if(sw == 2)
            {
                float8 even = (float8)(0.0f), odd = (float8)(0.0f);
                for(int s = 0; s < k; ++s)
                {
                    for(int fx = 0; fx < kw; fx += 2)
                        POOL_TAP_ADD(even, s, 8 + m0 - fx / 2, fx, 0);
                    for(int fx = 1; fx < kw; fx += 2)
                        POOL_TAP_ADD(odd, s, 8 + m0 - fx / 2, fx, 1);
                }
                float16 both;
                both.even = even;
                both.odd = odd;
                pool_store_span_f8(dxp, xrow, 2 * m0 - pw, Wi, both.lo);
                pool_store_span_f8(dxp, xrow, 2 * m0 + 8 - pw, Wi, both.hi);
            }
            else
            {
                for(int r = 0; r < sw; ++r)
                {
                    float8 acc = (float8)(0.0f);
                    for(int s = 0; s < k; ++s)
                        for(int fx = r; fx < kw; fx += sw)
                            POOL_TAP_ADD(acc, s, 8 + m0 - (fx - r) / sw, fx, r);
                    float a[8];
                    vstore8(acc, 0, a);
                    for(int l = 0; l < 8; ++l)
                    {
                        const int w = (m0 + l) * sw + r - pw;
                        if(w >= 0 && w < Wi)
                            STORE(dxp, xrow + w, a[l]);
                    }
                }
            }
#undef POOL_TAP_ADD
        }
    }
}

#define POOL_BWD_CELL 16 /* pool_bwd_channels_cpu: positions of a cell (the solver checks SH x SW) */

KERNEL void pool_bwd_channels_cpu(GLOBAL data_t* RESTRICT dxp, const GLOBAL data_t* RESTRICT dyp,
                                  const GLOBAL idx_t* RESTRICT ip, POOL_SHAPE_ARGS)
{
    /* a work item per cell of SH x SW dx positions (the stride): each output covering the cell is
       read once for all of its positions */
    const u32 cells_h = ((u32)Hi + sh - 1) / sh, cells_w = ((u32)Wi + sw - 1) / sw;
    const u32 t = (u32)GLOBAL_ID0;
    if(t >= (u32)N * Di * cells_h * cells_w)
        return;
    const int wc = (int)(t % cells_w) * sw;
    const u32 r1 = t / cells_w;
    const int hc = (int)(r1 % cells_h) * sh;
    const u32 r2 = r1 / cells_h;
    const int di = (int)(r2 % (u32)Di);
    const i64 n = r2 / (u32)Di;
    const int nh = min(sh, Hi - hc), nw = min(sw, Wi - wc);
    const int od0 = pool_first_out(di, pd, sd, kd), od1 = min((di + pd) / sd + 1, Do);
    const int oh0 = pool_first_out(hc, ph, sh, kh), oh1 = min((hc + nh - 1 + ph) / sh + 1, Ho);
    const int ow0 = pool_first_out(wc, pw, sw, kw), ow1 = min((wc + nw - 1 + pw) / sw + 1, Wo);
    for(int c0 = 0; c0 < C; c0 += 8)
    {
        float8 acc[POOL_BWD_CELL];
        for(int j = 0; j < nh * nw; ++j)
            acc[j] = (float8)(0.0f);
        for(int od = od0; od < od1; ++od)
        {
            const int z0 = od * sd - pd;
            for(int oh = oh0; oh < oh1; ++oh)
            {
                const int y0 = oh * sh - ph;
                for(int ow = ow0; ow < ow1; ++ow)
                {
                    const int x0 = ow * sw - pw;
                    float8 g = pool_lanes_f8(dyp, n * yn + od * yd + oh * yh + ow * yw, c0, C, 0.0f);
#if POOL_MODE == 0
                    const int8 got = pool_index_lanes8(ip, n * in_ + od * id_ + oh * ih_ + ow * iw_, c0, C, ic);
#elif POOL_MODE == 1
                    const int count = (min(z0 + kd, Di) - max(z0, 0)) * (min(y0 + kh, Hi) - max(y0, 0)) *
                                      (min(x0 + kw, Wi) - max(x0, 0));
                    g = g * (1.0f / (float)(count > 0 ? count : 1));
#endif
                    for(int a = 0; a < nh; ++a)
                    {
                        const int fy = hc + a - y0;
                        if(fy < 0 || fy >= kh)
                            continue;
                        for(int b = 0; b < nw; ++b)
                        {
                            const int fx = wc + b - x0;
                            if(fx < 0 || fx >= kw)
                                continue;
#if POOL_MODE == 0
#if POOL_INDEX_IMAGE
                            const int want = (di * Hi + hc + a) * Wi + wc + b;
#else
                            const int want = ((di - z0) * kh + fy) * kw + fx;
#endif
                            acc[a * nw + b] += select((float8)(0.0f), g, got == (int8)(want));
#else
                            acc[a * nw + b] += g;
#endif
                        }
                    }
                }
            }
        }
        for(int a = 0; a < nh; ++a)
            for(int b = 0; b < nw; ++b)
            {
                float8 v = acc[a * nw + b];
#if POOL_MODE == 2
                v = v * (1.0f / (float)(kd * kh * kw));
#endif
                pool_store_lanes_f8(dxp, n * xn + di * xd + (hc + a) * xh + (wc + b) * xw, c0, C, v);
            }
    }
}
#endif
