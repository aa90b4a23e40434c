/* Pooling forward and backward: max (POOL_MODE 0), average excluding padding (1), including
   padding (2); 2-D runs as 3-D with D = 1. Strides, pads, lens and the strides of every tensor
   (logical N,C,D,H,W order) are run-time arguments, and so is the window unless compiled in.

   Work items own one output (forward) or one input (backward) position and POOL_CVEC channels.
   POOL_NHWC orders work items channels-innermost so that neighbours touch neighbouring channels
   (coalesced for channels-last tensors); POOL_VEC gives each work item VEC channels read and
   written 16 bytes at a time (needs channel stride 1, C and the other strides multiples of VEC).

   Max pooling stores, with POOL_SAVE_INDEX, the position of the first maximum: inside the window
   ((fz*KH + fy)*KW + fx from the window's unclipped start) or, with POOL_INDEX_IMAGE, in the image
   ((d*H + h)*W + w), as POOL_INDEX_TYPE 0-3 = u8/u16/u32/u64. Backward gathers: each dx element
   sums the dy of the windows covering it (max: those whose index names it). */
#include "common/vec.h"

#ifndef POOL_MODE
#define POOL_MODE 0
#endif
/* the window: compiled in when POOL_KD/KH/KW are defined (GPUs), else the kd/kh/kw arguments */
#ifdef POOL_KW
#define KD POOL_KD
#define KH POOL_KH
#define KW POOL_KW
#else
#define KD kd
#define KH kh
#define KW kw
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

#if POOL_VEC
#define CVEC VEC
#else
#define CVEC 1
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

#define POOL_SHAPE_ARGS                                                                           \
    int N, int C, int Di, int Hi, int Wi, int Do, int Ho, int Wo, int kd, int kh, int kw, int sd,  \
        int sh, int sw, int pd, int ph, int pw, i64 xn, i64 xc, i64 xd, i64 xh, i64 xw, i64 yn, i64 yc, i64 yd, i64 yh,    \
        i64 yw, i64 in_, i64 ic, i64 id_, i64 ih_, i64 iw_

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

/* (n, c, d, h, w) of work item i over a tensor of N x C x D x H x W, CVEC channels per item */
#if POOL_NHWC
#define POOL_DECOMPOSE(D, H, W)                     \
    i64 r = i;                                      \
    const int c = (int)(r % (C / CVEC)) * CVEC;     \
    r /= (C / CVEC);                                \
    const int w = (int)(r % W); r /= W;             \
    const int h = (int)(r % H); r /= H;             \
    const int d = (int)(r % D);                     \
    const int n = (int)(r / D);
#else
#define POOL_DECOMPOSE(D, H, W)                     \
    i64 r = i;                                      \
    const int w = (int)(r % W); r /= W;             \
    const int h = (int)(r % H); r /= H;             \
    const int d = (int)(r % D); r /= D;             \
    const int c = (int)(r % C);                     \
    const int n = (int)(r / C);
#endif

KERNEL void pool_fwd(const GLOBAL data_t* RESTRICT xp, GLOBAL data_t* RESTRICT yp, GLOBAL idx_t* RESTRICT ip,
                     POOL_SHAPE_ARGS)
{
    const i64 total = (i64)N * (C / CVEC) * Do * Ho * Wo;
    const int aligned = ALIGNED16(xp) && ALIGNED16(yp);
    for(i64 i = GLOBAL_ID0; i < total; i += GLOBAL_SIZE0)
    {
        POOL_DECOMPOSE(Do, Ho, Wo)
        const int d0 = d * sd - pd, h0 = h * sh - ph, w0 = w * sw - pw;
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
            if(di < 0 || di >= Di)
                continue;
            UNROLL
            for(int fy = 0; fy < KH; ++fy)
            {
                const int hi = h0 + fy;
                if(hi < 0 || hi >= Hi)
                    continue;
                UNROLL
                for(int fx = 0; fx < KW; ++fx)
                {
                    const int wi = w0 + fx;
                    if(wi < 0 || wi >= Wi)
                        continue;
                    float v[CVEC];
                    pool_load(xp, xbase + di * xd + hi * xh + wi * xw, v, aligned);
#if POOL_MODE == 0
#if POOL_INDEX_IMAGE
                    const u32 pos = ((u32)di * Hi + hi) * Wi + wi;
#else
                    const u32 pos = (fz * KH + fy) * KW + fx;
#endif
                    for(int k = 0; k < CVEC; ++k)
                    {
                        if(v[k] > acc[k])
                        {
                            acc[k] = v[k];
                            arg[k] = pos;
                        }
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
        const i64 ioff = n * in_ + c * ic + d * id_ + h * ih_ + w * iw_;
        for(int k = 0; k < CVEC; ++k)
            ip[ioff + k * ic] = (idx_t)arg[k];
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
    const i64 total = (i64)N * (C / CVEC) * Di * Hi * Wi;
    const int aligned = ALIGNED16(dxp) && ALIGNED16(dyp);
    for(i64 i = GLOBAL_ID0; i < total; i += GLOBAL_SIZE0)
    {
        POOL_DECOMPOSE(Di, Hi, Wi)
        float acc[CVEC];
        for(int k = 0; k < CVEC; ++k)
            acc[k] = 0.0f;
        const int od0 = pool_first_out(d, pd, sd, KD), od1 = min((d + pd) / sd + 1, Do);
        const int oh0 = pool_first_out(h, ph, sh, KH), oh1 = min((h + ph) / sh + 1, Ho);
        const int ow0 = pool_first_out(w, pw, sw, KW), ow1 = min((w + pw) / sw + 1, Wo);
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
                    const u64 want = ((u64)d * Hi + h) * Wi + w;
#else
                    const u64 want =
                        ((u64)(d - (od * sd - pd)) * KH + (h - (oh * sh - ph))) * KW + (w - (ow * sw - pw));
#endif
                    const i64 ioff = ibase + od * id_ + oh * ih_ + ow * iw_;
                    for(int k = 0; k < CVEC; ++k)
                        if((u64)ip[ioff + k * ic] == want)
                            acc[k] += g[k];
#elif POOL_MODE == 1
                    const int dlo = max(od * sd - pd, 0), dhi = min(od * sd - pd + KD, Di);
                    const int hlo = max(oh * sh - ph, 0), hhi = min(oh * sh - ph + KH, Hi);
                    const int wlo = max(ow * sw - pw, 0), whi = min(ow * sw - pw + KW, Wi);
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
