/* Pooling forward and backward: max (POOL_MODE 0), average excluding padding (1), including
   padding (2); 2-D runs as 3-D with D = 1. Lens, window, strides, pads and the strides of every
   tensor (logical N,C,D,H,W order) are run-time arguments; with POOL_FIXED the shape (POOL_N,
   POOL_C, POOL_DI/HI/WI, POOL_DO/HO/WO, POOL_KD/KH/KW, POOL_SD/SH/SW, POOL_PD/PH/PW) is compiled
   in instead (GPUs: index arithmetic becomes shifts and multiplies, windows unroll), and the
   arguments are ignored. POOL_IDX32 says the work-item count fits 32 bits (cheaper arithmetic).

   Work items own one output (forward) or one input (backward) position and CVEC channels.
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

#ifdef __OPENCL_VERSION__
#if POOL_INDEX_TYPE == 0
typedef uchar idx_t;
#elif POOL_INDEX_TYPE == 1
typedef ushort idx_t;
#elif POOL_INDEX_TYPE == 2
typedef uint idx_t;
#else
typedef ulong idx_t;
#endif
#else
#if POOL_INDEX_TYPE == 0
typedef unsigned char idx_t;
#elif POOL_INDEX_TYPE == 1
typedef unsigned short idx_t;
#elif POOL_INDEX_TYPE == 2
typedef unsigned int idx_t;
#else
typedef unsigned long long idx_t;
#endif
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

DEVICE_FN void pool_load_index(const GLOBAL idx_t* ip, i64 off, i64 ic, u64* out)
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
        out[k] = (u64)ip[off + k * ic];
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

KERNEL void pool_fwd(const GLOBAL data_t* RESTRICT xp, GLOBAL data_t* RESTRICT yp, GLOBAL idx_t* RESTRICT ip,
                     POOL_SHAPE_ARGS)
{
    const pidx_t total = (pidx_t)P_N * (P_C / CVEC) * P_DO * P_HO * P_WO;
    const int aligned = ALIGNED16(xp) && ALIGNED16(yp);
    for(pidx_t i = (pidx_t)GLOBAL_ID0; i < total; i += (pidx_t)GLOBAL_SIZE0)
    {
        POOL_DECOMPOSE(P_DO, P_HO, P_WO)
        const int d0 = d * P_SD - P_PD, h0 = h * P_SH - P_PH, w0 = w * P_SW - P_PW;
        const i64 xbase = n * xn + c * xc;
        float acc[CVEC];
#if POOL_MODE == 0
        u32 arg[CVEC];
        for(int k = 0; k < CVEC; ++k)
        {
            acc[k] = POOL_LOWEST;
            arg[k] = 0;
        }
#else
        for(int k = 0; k < CVEC; ++k)
            acc[k] = 0.0f;
        int count = 0;
#endif
        UNROLL
        for(int fz = 0; fz < KD; ++fz)
        {
            const int di = d0 + fz;
            if(di < 0 || di >= P_DI)
                continue;
            UNROLL
            for(int fy = 0; fy < KH; ++fy)
            {
                const int hi = h0 + fy;
                if(hi < 0 || hi >= P_HI)
                    continue;
                UNROLL
                for(int fx = 0; fx < KW; ++fx)
                {
                    const int wi = w0 + fx;
                    if(wi < 0 || wi >= P_WI)
                        continue;
                    float v[CVEC];
                    pool_load(xp, xbase + di * xd + hi * xh + wi * xw, v, aligned);
#if POOL_MODE == 0
#if POOL_INDEX_IMAGE
                    const u32 pos = ((u32)di * P_HI + hi) * P_WI + wi;
#else
                    const u32 pos = (fz * KH + fy) * KW + fx;
#endif
                    for(int k = 0; k < CVEC; ++k)
                    {
                        arg[k] = v[k] > acc[k] ? pos : arg[k];
                        acc[k] = F_MAX(acc[k], v[k]);
                    }
#else
                    for(int k = 0; k < CVEC; ++k)
                        acc[k] += v[k];
                    ++count;
#endif
                }
            }
        }
#if POOL_MODE == 1
        const float scale = 1.0f / (float)(count > 0 ? count : 1);
        for(int k = 0; k < CVEC; ++k)
            acc[k] *= scale;
#elif POOL_MODE == 2
        for(int k = 0; k < CVEC; ++k)
            acc[k] *= 1.0f / (float)(KD * KH * KW);
#endif
        pool_store(yp, n * yn + c * yc + d * yd + h * yh + w * yw, acc, aligned);
#if POOL_MODE == 0 && POOL_SAVE_INDEX
        pool_store_index(ip, n * in_ + c * ic + d * id_ + h * ih_ + w * iw_, ic, arg);
#endif
    }
}

/* first output index whose window [o*s - p, o*s - p + K) covers input position t */
DEVICE_FN int pool_first_out(int t, int p, int s, int K)
{
    const int lo = t + p - K + 1;
    return lo <= 0 ? 0 : (lo + s - 1) / s;
}

KERNEL void pool_bwd(GLOBAL data_t* RESTRICT dxp, const GLOBAL data_t* RESTRICT dyp,
                     const GLOBAL idx_t* RESTRICT ip, POOL_SHAPE_ARGS)
{
    const pidx_t total = (pidx_t)P_N * (P_C / CVEC) * P_DI * P_HI * P_WI;
    const int aligned = ALIGNED16(dxp) && ALIGNED16(dyp);
    for(pidx_t i = (pidx_t)GLOBAL_ID0; i < total; i += (pidx_t)GLOBAL_SIZE0)
    {
        POOL_DECOMPOSE(P_DI, P_HI, P_WI)
        float acc[CVEC];
        for(int k = 0; k < CVEC; ++k)
            acc[k] = 0.0f;
        const int od0 = pool_first_out(d, P_PD, P_SD, KD), od1 = min((d + P_PD) / P_SD + 1, P_DO);
        const int oh0 = pool_first_out(h, P_PH, P_SH, KH), oh1 = min((h + P_PH) / P_SH + 1, P_HO);
        const int ow0 = pool_first_out(w, P_PW, P_SW, KW), ow1 = min((w + P_PW) / P_SW + 1, P_WO);
        const i64 ybase = n * yn + c * yc;
#if POOL_MODE == 0
        const i64 ibase = n * in_ + c * ic;
#endif
        for(int od = od0; od < od1; ++od)
        {
            for(int oh = oh0; oh < oh1; ++oh)
            {
                for(int ow = ow0; ow < ow1; ++ow)
                {
                    float g[CVEC];
                    pool_load(dyp, ybase + od * yd + oh * yh + ow * yw, g, aligned);
#if POOL_MODE == 0
#if POOL_INDEX_IMAGE
                    const u64 want = ((u64)d * P_HI + h) * P_WI + w;
#else
                    const u64 want = ((u64)(d - (od * P_SD - P_PD)) * KH + (h - (oh * P_SH - P_PH))) * KW +
                                     (w - (ow * P_SW - P_PW));
#endif
                    u64 got[CVEC];
                    pool_load_index(ip, ibase + od * id_ + oh * ih_ + ow * iw_, ic, got);
                    for(int k = 0; k < CVEC; ++k)
                        acc[k] += got[k] == want ? g[k] : 0.0f;
#elif POOL_MODE == 1
                    const int dlo = max(od * P_SD - P_PD, 0), dhi = min(od * P_SD - P_PD + KD, P_DI);
                    const int hlo = max(oh * P_SH - P_PH, 0), hhi = min(oh * P_SH - P_PH + KH, P_HI);
                    const int wlo = max(ow * P_SW - P_PW, 0), whi = min(ow * P_SW - P_PW + KW, P_WI);
                    const int count = (dhi - dlo) * (hhi - hlo) * (whi - wlo);
                    const float scale = 1.0f / (float)(count > 0 ? count : 1);
                    for(int k = 0; k < CVEC; ++k)
                        acc[k] += g[k] * scale;
#else
                    for(int k = 0; k < CVEC; ++k)
                        acc[k] += g[k] * (1.0f / (float)(KD * KH * KW));
#endif
                }
            }
        }
        pool_store(dxp, n * xn + c * xc + d * xd + h * xh + w * xw, acc, aligned);
    }
}
