/* Local response normalisation, forward and backward (see miopy/problem/lrn.py), in fp32.

   Every kernel takes the shape (N, C, H, W; a 5-D tensor's D folds into H) and each tensor's
   strides, so any layout runs. lrn_*_direct: one work item per element, its window read from
   global memory (neighbouring work items share it through the cache): in NHWC the channel window
   is contiguous, in NCHW consecutive work items read consecutive pixels.
   lrn_fwd_cross_slide: one work item per pixel walks the channels with a sliding sum of squares
   (each x read as it enters the window, again from cache as it leaves); consecutive work items
   take consecutive pixels, so NCHW reads coalesce. */
#include "common/miopy_types.h"

#ifdef __OPENCL_VERSION__
/* s > 0 (k plus a sum of squares); PoCL's general pow costs ~100 ns a call, exp2(log2) a few */
#define LRN_POW(s, e) exp2((e) * log2(s))
#else
#define LRN_POW powf
#endif

#define LRN_SHAPE int N, int C, int H, int W
#define LRN_STRIDES(t) i64 t##n, i64 t##c, i64 t##h, i64 t##w
#define LRN_AT(t, n_, c_, h_, w_) ((n_) * t##n + (c_) * t##c + (h_) * t##h + (w_) * t##w)
/* element i -> (n, c, h, w); in 32 bits where i fits (a GPU divides 64-bit integers in software,
   several times slower) */
DEVICE_FN void lrn_decompose(i64 i, int C, int H, int W, int* n, int* c, int* h, int* w)
{
    if(i < 0x7fffffff)
    {
        int q = (int)i;
        *w = q % W;
        q /= W;
        *h = q % H;
        q /= H;
        *c = q % C;
        *n = q / C;
    }
    else
    {
        i64 r = i;
        *w = (int)(r % W);
        r /= W;
        *h = (int)(r % H);
        r /= H;
        *c = (int)(r % C);
        *n = (int)(r / C);
    }
}
#define LRN_DECOMPOSE(i) \
    int n, c, h, w;      \
    lrn_decompose((i), C, H, W, &n, &c, &h, &w);

/* the within-channel window of (h, w): [h0, h1) x [w0, w1) inside the image, and its area */
#define LRN_WINDOW                                                   \
    int h0 = h - pad, w0 = w - pad;                                  \
    int h1 = h0 + size < H + pad ? h0 + size : H + pad;              \
    int w1 = w0 + size < W + pad ? w0 + size : W + pad;              \
    const float area = (float)((h1 - h0) * (w1 - w0));               \
    h0 = h0 > 0 ? h0 : 0;                                            \
    w0 = w0 > 0 ? w0 : 0;                                            \
    h1 = h1 < H ? h1 : H;                                            \
    w1 = w1 < W ? w1 : W;

KERNEL void lrn_fwd_direct(const GLOBAL data_t* RESTRICT x, GLOBAL data_t* RESTRICT y, GLOBAL data_t* RESTRICT scale,
                           LRN_SHAPE, LRN_STRIDES(xs), LRN_STRIDES(ys), int cross, int size, float alpha,
                           float beta, float k, int save)
{
    const int pad = (size - 1) / 2;
    const i64 total = (i64)N * C * H * W;
    for(i64 i = GLOBAL_ID0; i < total; i += GLOBAL_SIZE0)
    {
        LRN_DECOMPOSE(i)
        float acc = 0.0f, s;
        if(cross)
        {
            const int c0 = c - pad > 0 ? c - pad : 0;
            const int c1 = c - pad + size < C ? c - pad + size : C;
            for(int j = c0; j < c1; ++j)
            {
                const float v = LOAD(x, LRN_AT(xs, n, j, h, w));
                acc += v * v;
            }
            s = k + alpha / (float)size * acc;
        }
        else
        {
            LRN_WINDOW
            for(int a = h0; a < h1; ++a)
                for(int b = w0; b < w1; ++b)
                {
                    const float v = LOAD(x, LRN_AT(xs, n, c, a, b));
                    acc += v * v;
                }
            s = k + alpha / area * acc;
        }
        const i64 o = LRN_AT(ys, n, c, h, w);
        STORE(y, o, LOAD(x, LRN_AT(xs, n, c, h, w)) * LRN_POW(s, -beta));
        if(save)
            STORE(scale, o, s);
    }
}

KERNEL void lrn_fwd_cross_slide(const GLOBAL data_t* RESTRICT x, GLOBAL data_t* RESTRICT y,
                                GLOBAL data_t* RESTRICT scale, LRN_SHAPE, LRN_STRIDES(xs), LRN_STRIDES(ys),
                                int size, float alpha, float beta, float k, int save)
{
    const int pad = (size - 1) / 2;
    const i64 pixels = (i64)N * H * W;
    const float aon = alpha / (float)size;
    for(i64 p = GLOBAL_ID0; p < pixels; p += GLOBAL_SIZE0)
    {
        i64 r_ = p;
        const int w = (int)(r_ % W);
        r_ /= W;
        const int h = (int)(r_ % H);
        const int n = (int)(r_ / H);
        float acc = 0.0f;
        /* window of channel c: [c - pad, c - pad + size); start with channel 0's, less its last */
        for(int j = 0; j < size - 1 - pad && j < C; ++j)
        {
            const float v = LOAD(x, LRN_AT(xs, n, j, h, w));
            acc += v * v;
        }
        for(int c = 0; c < C; ++c)
        {
            const int enter = c - pad + size - 1, leave = c - pad - 1;
            if(enter < C)
            {
                const float v = LOAD(x, LRN_AT(xs, n, enter, h, w));
                acc += v * v;
            }
            if(leave >= 0)
            {
                const float v = LOAD(x, LRN_AT(xs, n, leave, h, w));
                acc -= v * v;
            }
            acc = acc > 0.0f ? acc : 0.0f; /* rounding of the running sum */
            const float s = k + aon * acc;
            const i64 o = LRN_AT(ys, n, c, h, w);
            STORE(y, o, LOAD(x, LRN_AT(xs, n, c, h, w)) * LRN_POW(s, -beta));
            if(save)
                STORE(scale, o, s);
        }
    }
}

KERNEL void lrn_bwd_direct(const GLOBAL data_t* RESTRICT x, const GLOBAL data_t* RESTRICT y,
                           const GLOBAL data_t* RESTRICT dy, const GLOBAL data_t* RESTRICT scale,
                           GLOBAL data_t* RESTRICT dx, LRN_SHAPE, LRN_STRIDES(xs), LRN_STRIDES(ys), LRN_STRIDES(gs),
                           LRN_STRIDES(ss), LRN_STRIDES(os), int cross, int size, float alpha, float beta)
{
    const int pad = (size - 1) / 2;
    const i64 total = (i64)N * C * H * W;
    for(i64 i = GLOBAL_ID0; i < total; i += GLOBAL_SIZE0)
    {
        LRN_DECOMPOSE(i)
        float acc = 0.0f, ratio;
        if(cross)
        {
            const int c0 = c - (size - 1 - pad) > 0 ? c - (size - 1 - pad) : 0;
            const int c1 = c + pad + 1 < C ? c + pad + 1 : C;
            for(int j = c0; j < c1; ++j)
                acc += LOAD(dy, LRN_AT(gs, n, j, h, w)) * LOAD(y, LRN_AT(ys, n, j, h, w)) /
                       LOAD(scale, LRN_AT(ss, n, j, h, w));
            ratio = 2.0f * alpha * beta / (float)size;
        }
        else
        {
            LRN_WINDOW
            for(int a = h0; a < h1; ++a)
                for(int b = w0; b < w1; ++b)
                    acc += LOAD(dy, LRN_AT(gs, n, c, a, b)) * LOAD(y, LRN_AT(ys, n, c, a, b)) /
                           LOAD(scale, LRN_AT(ss, n, c, a, b));
            ratio = 2.0f * alpha * beta / area;
        }
        const float s = LOAD(scale, LRN_AT(ss, n, c, h, w));
        const float g = LOAD(dy, LRN_AT(gs, n, c, h, w)) * LRN_POW(s, -beta);
        STORE(dx, LRN_AT(os, n, c, h, w), g - ratio * LOAD(x, LRN_AT(xs, n, c, h, w)) * acc);
    }
}

/* Cross-channel LRN for CPU OpenCL devices (PoCL), float8 vectors (common/cpu_vec.h); every
   tensor of the call has the same strides. Elements (n, c, p), p = h * W + w.
   *_planes_cpu: each image's planes are contiguous (offset n sn + c sc + p, P = H W >= 8): a work
   item takes a run of pixels of one channel and sums its window's planes along it (each plane
   read in order: a walk along the channels with 8 pixels a work item read 32 bytes of a plane at a
   time, 4-10x slower).
   *_channels_cpu: channels contiguous (offset n sn + p sp + c): a work item per pixel, 8 channels
   at a time; the window sums of blocks whose windows stay inside [0, C) are sums of shifted
   vectors, the rest go channel by channel. */
#if defined(__OPENCL_VERSION__) && MIOPY_DTYPE != 3
#include "common/cpu_vec.h"

/* s^e for normal s > 0 as 2^(e log2 s), both computed here in float8 (PoCL's vector log2 costs
   ~4 ns an element, its exp2 ~1 ns; convert_* builtins are slow there, so integers become floats
   through the 1.5 * 2^23 bias instead). log2: s = m 2^q, m in [sqrt(1/2), sqrt(2)),
   ln m = 2 atanh(z), z = (m - 1) / (m + 1), |z| < 0.172, series to z^9 (truncation < 4e-10).
   2^t: exp2_f8 (common/cpu_vec.h). */
DEVICE_FN float8 lrn_pow8(float8 s, float e)
{
    const int8 i = as_int8(s);
    const int8 q = (i - 0x3f3504f3) >> 23;
    const float8 m = as_float8(i - (q << 23));
    const float8 qf = as_float8(q + 0x4b400000) - 0x1.8p23f;
    const float8 z = (m - 1.0f) / (m + 1.0f), z2 = z * z;
    const float8 series = z2 * (1.0f / 3 + z2 * (1.0f / 5 + z2 * (1.0f / 7 + z2 * (1.0f / 9))));
    const float8 ln_m = 2.0f * z + 2.0f * z * series;
    return exp2_f8(e * (qf + ln_m * 1.4426950408889634f));
}

/* s^e: e = -0.75 (MIOpen's and Caffe's default beta) as r sqrt(r), r = rsqrt(s): two square
   roots and a division (within a few ulp), a third of lrn_pow8's time on PoCL; else lrn_pow8. The
   branch is the same for every element of a call. */
DEVICE_FN float8 lrn_pow8_beta(float8 s, float e)
{
    if(e == -0.75f)
    {
        const float8 r = rsqrt(s);
        return r * sqrt(r);
    }
    return lrn_pow8(s, e);
}
#define LRN_POW8(s, e) lrn_pow8_beta((s), (e))

/* work item (n, pixel run, channel c), c fastest (a work-group's items share their windows in
   cache): pixels [p0, p0 + run) of channel c, run a multiple of 8 and at most P; the last run
   starts at P - run, overlapping its neighbour (which writes the same values) */
#define LRN_PLANES_ITEM                                                      \
    const i64 runs = (P + run - 1) / run;                                    \
    const i64 t = GLOBAL_ID0;                                                \
    if(t >= (i64)N * runs * C)                                               \
        return;                                                              \
    const int c = (int)(t % C);                                              \
    const i64 nr = t / C, n = nr / runs, r = nr - n * runs;                  \
    const i64 base = n * sn + (r * run < P - run ? r * run : P - run);

KERNEL void lrn_fwd_planes_cpu(const GLOBAL data_t* RESTRICT x, GLOBAL data_t* RESTRICT y,
                               GLOBAL data_t* RESTRICT scale, int N, int C, i64 P, i64 sn, i64 sc, int size,
                               float alpha, float beta, float k, int save, int run)
{
    LRN_PLANES_ITEM
    const int pad = (size - 1) / 2;
    const int j0 = c - pad > 0 ? c - pad : 0, j1 = c - pad + size < C ? c - pad + size : C;
    const float aon = alpha / (float)size;
    for(int e = 0; e < run; e += 8)
    {
        float8 acc = (float8)(0.0f);
        for(int j = j0; j < j1; ++j)
        {
            const float8 v = load_f8_loop(x, base + j * sc + e);
            acc += v * v;
        }
        const float8 s = k + aon * acc;
        const i64 o = base + c * sc + e;
        store_f8(y, o, load_f8_loop(x, o) * LRN_POW8(s, -beta));
        if(save)
            store_f8(scale, o, s);
    }
}

/* the most channels of a backward window (LRNProblem allows up to 16) */
#define LRN_TERMS 16

/* work item (n, pixel run): pixels [p0, p0 + run) of every channel, walking the channels in
   order with the last `size` terms dy y / scale of each 8 pixels in a private ring: each term
   (and its division) is computed once, where a work item per channel computed all `size` terms
   of its window (5 divisions and 15 loads an element for size 5) */
KERNEL void lrn_bwd_planes_cpu(const GLOBAL data_t* RESTRICT x, const GLOBAL data_t* RESTRICT y,
                               const GLOBAL data_t* RESTRICT dy, const GLOBAL data_t* RESTRICT scale,
                               GLOBAL data_t* RESTRICT dx, int N, int C, i64 P, i64 sn, i64 sc, int size, float alpha,
                               float beta, int run)
{
    const i64 runs = (P + run - 1) / run;
    const i64 t = GLOBAL_ID0;
    if(t >= (i64)N * runs)
        return;
    const i64 n = t / runs, r = t - n * runs;
    const i64 base = n * sn + (r * run < P - run ? r * run : P - run);
    const int pad = (size - 1) / 2; /* window of c: [c - (size - 1 - pad), c + pad] */
    const float ratio = 2.0f * alpha * beta / (float)size;
    for(int e = 0; e < run; e += 8)
    {
        float8 ring[LRN_TERMS];
        for(int i = 0; i < size; ++i)
            ring[i] = (float8)(0.0f);
        int slot = 0;
        /* after pushing the term of channel j, the ring holds the window of channel j - pad */
        for(int j = 0; j < C + pad; ++j)
        {
            float8 term = (float8)(0.0f);
            if(j < C)
            {
                const i64 o = base + j * sc + e;
                term = load_f8_loop(dy, o) * load_f8_loop(y, o) / load_f8_loop(scale, o);
            }
            ring[slot] = term;
            slot = slot + 1 == size ? 0 : slot + 1;
            const int c = j - pad;
            if(c < 0)
                continue;
            float8 acc = ring[0];
            for(int i = 1; i < size; ++i)
                acc += ring[i];
            const i64 o = base + c * sc + e;
            const float8 g = load_f8_loop(dy, o) * LRN_POW8(load_f8_loop(scale, o), -beta);
            store_f8(dx, o, g - ratio * load_f8_loop(x, o) * acc);
        }
    }
}

/* lanes c0 .. c0 + 7 of a channels-contiguous run, 0 at and past C (the last, partial block) */
DEVICE_FN float8 lrn_lanes_f8(const GLOBAL data_t* p, i64 base, int c0, int C)
{
    if(c0 + 8 <= C)
        return load_f8_loop(p, base + c0);
    float a[8];
    for(int l = 0; l < 8; ++l)
        a[l] = c0 + l < C ? LOAD(p, base + c0 + l) : 0.0f;
    return vload8(0, a);
}

DEVICE_FN void lrn_store_lanes_f8(GLOBAL data_t* p, i64 base, int c0, int C, float8 v)
{
    if(c0 + 8 <= C)
    {
        store_f8(p, base + c0, v);
        return;
    }
    float a[8];
    vstore8(v, 0, a);
    for(int l = 0; l < 8 && c0 + l < C; ++l)
        STORE(p, base + c0 + l, a[l]);
}

/* lrn_*_channels_direct (a pixel whose channels do not fit lrn_*_channels_cpu's buffer): blocks
   whose windows stay inside [0, C) sum shifted vectors of the data, the others (the first and last
   blocks) sum their lanes' windows channel by channel into a private vector. Either way the power
   and the stores run on float8 (a scalar power costs several ns). */
DEVICE_FN void lrn_fwd_channels_direct(const GLOBAL data_t* RESTRICT x, GLOBAL data_t* RESTRICT y,
                                       GLOBAL data_t* RESTRICT scale, int C, i64 base, int size, float alpha,
                                       float beta, float k, int save)
{
    const int pad = (size - 1) / 2;
    const float aon = alpha / (float)size;
    for(int c0 = 0; c0 < C; c0 += 8)
    {
        float8 acc = (float8)(0.0f);
        if(c0 - pad >= 0 && c0 + 8 - pad + size - 1 <= C) /* every window inside [0, C) */
        {
            for(int j = c0 - pad; j < c0 - pad + size; ++j)
            {
                const float8 v = load_f8_loop(x, base + j);
                acc += v * v;
            }
        }
        else
        {
            float a[8];
            for(int l = 0; l < 8; ++l)
            {
                const int c = c0 + l;
                const int j0 = c - pad > 0 ? c - pad : 0, j1 = c - pad + size < C ? c - pad + size : C;
                float sum = 0.0f;
                for(int j = j0; j < j1; ++j)
                {
                    const float v = LOAD(x, base + j);
                    sum += v * v;
                }
                a[l] = sum;
            }
            acc = vload8(0, a);
        }
        const float8 s = k + aon * acc;
        lrn_store_lanes_f8(y, base, c0, C, lrn_lanes_f8(x, base, c0, C) * LRN_POW8(s, -beta));
        if(save)
            lrn_store_lanes_f8(scale, base, c0, C, s);
    }
}

DEVICE_FN void lrn_bwd_channels_direct(const GLOBAL data_t* RESTRICT x, const GLOBAL data_t* RESTRICT y,
                                       const GLOBAL data_t* RESTRICT dy, const GLOBAL data_t* RESTRICT scale,
                                       GLOBAL data_t* RESTRICT dx, int C, i64 base, int size, float alpha, float beta)
{
    const int pad = (size - 1) / 2, before = size - 1 - pad;
    const float ratio = 2.0f * alpha * beta / (float)size;
    for(int c0 = 0; c0 < C; c0 += 8)
    {
        float8 acc = (float8)(0.0f);
        if(c0 - before >= 0 && c0 + 8 + pad <= C)
        {
            for(int j = c0 - before; j <= c0 + pad; ++j)
                acc += load_f8_loop(dy, base + j) * load_f8_loop(y, base + j) / load_f8_loop(scale, base + j);
        }
        else
        {
            float a[8];
            for(int l = 0; l < 8; ++l)
            {
                const int c = c0 + l;
                const int j0 = c - before > 0 ? c - before : 0, j1 = c + pad + 1 < C ? c + pad + 1 : C;
                float sum = 0.0f;
                for(int j = j0; j < j1; ++j)
                    sum += LOAD(dy, base + j) * LOAD(y, base + j) / LOAD(scale, base + j);
                a[l] = sum;
            }
            acc = vload8(0, a);
        }
        /* the partial block's missing lanes: scale 1 (a finite power), their results dropped */
        float8 sc = lrn_lanes_f8(scale, base, c0, C);
        sc = c0 + 8 <= C ? sc : select(sc, (float8)(1.0f), (int8)(0, 1, 2, 3, 4, 5, 6, 7) >= C - c0);
        const float8 g = lrn_lanes_f8(dy, base, c0, C) * LRN_POW8(sc, -beta);
        lrn_store_lanes_f8(dx, base, c0, C, g - ratio * lrn_lanes_f8(x, base, c0, C) * acc);
    }
}

/* lrn_*_channels_cpu: a pixel's window terms (x^2 forward, dy y / scale backward) computed once
   each into a private buffer with zeros around [0, C) (lo before, hi after, the block tail), so
   that every block's window sums are `size` unaligned float8 loads of it, edges included. */
#define LRN_TB 1056 /* floats of the buffer: C rounded up to 8, plus the window, at most this */
DEVICE_FN void lrn_zero_halo(float* tb, int lo, int Cr, int hi)
{
    for(int i = 0; i < lo; ++i)
        tb[i] = 0.0f;
    for(int i = lo + Cr; i < lo + Cr + hi; ++i)
        tb[i] = 0.0f;
}

KERNEL void lrn_fwd_channels_cpu(const GLOBAL data_t* RESTRICT x, GLOBAL data_t* RESTRICT y,
                                 GLOBAL data_t* RESTRICT scale, int N, int C, i64 P, i64 sn, i64 sp, int size,
                                 float alpha, float beta, float k, int save)
{
    const i64 t = GLOBAL_ID0;
    if(t >= (i64)N * P)
        return;
    const i64 n = t / P, p = t - n * P;
    const i64 base = n * sn + p * sp;
    const int lo = (size - 1) / 2, hi = size - 1 - lo, Cr = (C + 7) / 8 * 8;
    if(lo + Cr + hi > LRN_TB)
    {
        lrn_fwd_channels_direct(x, y, scale, C, base, size, alpha, beta, k, save);
        return;
    }
    float tb[LRN_TB];
    lrn_zero_halo(tb, lo, Cr, hi);
    for(int c0 = 0; c0 < C; c0 += 8)
    {
        const float8 v = lrn_lanes_f8(x, base, c0, C);
        vstore8(v * v, 0, tb + lo + c0);
    }
    const float aon = alpha / (float)size;
    for(int c0 = 0; c0 < C; c0 += 8)
    {
        float8 acc = vload8(0, tb + c0);
        for(int j = 1; j < size; ++j)
            acc += vload8(0, tb + c0 + j);
        const float8 s = k + aon * acc;
        lrn_store_lanes_f8(y, base, c0, C, lrn_lanes_f8(x, base, c0, C) * LRN_POW8(s, -beta));
        if(save)
            lrn_store_lanes_f8(scale, base, c0, C, s);
    }
}

KERNEL void lrn_bwd_channels_cpu(const GLOBAL data_t* RESTRICT x, const GLOBAL data_t* RESTRICT y,
                                 const GLOBAL data_t* RESTRICT dy, const GLOBAL data_t* RESTRICT scale,
                                 GLOBAL data_t* RESTRICT dx, int N, int C, i64 P, i64 sn, i64 sp, int size,
                                 float alpha, float beta)
{
    const i64 t = GLOBAL_ID0;
    if(t >= (i64)N * P)
        return;
    const i64 n = t / P, p = t - n * P;
    const i64 base = n * sn + p * sp;
    const int hi = (size - 1) / 2, lo = size - 1 - hi, Cr = (C + 7) / 8 * 8; /* window [c - lo, c + hi] */
    if(lo + Cr + hi > LRN_TB)
    {
        lrn_bwd_channels_direct(x, y, dy, scale, dx, C, base, size, alpha, beta);
        return;
    }
    float tb[LRN_TB];
    lrn_zero_halo(tb, lo, Cr, hi);
    const int8 lane = (int8)(0, 1, 2, 3, 4, 5, 6, 7);
    for(int c0 = 0; c0 < C; c0 += 8)
    {
        /* the partial block's missing lanes: scale 1 (a finite power, a term of 0) */
        float8 sc = lrn_lanes_f8(scale, base, c0, C);
        sc = c0 + 8 <= C ? sc : select(sc, (float8)(1.0f), lane >= C - c0);
        vstore8(lrn_lanes_f8(dy, base, c0, C) * lrn_lanes_f8(y, base, c0, C) / sc, 0, tb + lo + c0);
    }
    const float ratio = 2.0f * alpha * beta / (float)size;
    for(int c0 = 0; c0 < C; c0 += 8)
    {
        float8 acc = vload8(0, tb + c0);
        for(int j = 1; j < size; ++j)
            acc += vload8(0, tb + c0 + j);
        float8 sc = lrn_lanes_f8(scale, base, c0, C);
        sc = c0 + 8 <= C ? sc : select(sc, (float8)(1.0f), lane >= C - c0);
        const float8 g = lrn_lanes_f8(dy, base, c0, C) * LRN_POW8(sc, -beta);
        lrn_store_lanes_f8(dx, base, c0, C, g - ratio * lrn_lanes_f8(x, base, c0, C) * acc);
    }
}

/* Within-channel LRN for CPU OpenCL devices: each pixel's window of size x size positions of its
   own channel, clipped to the image, its area counted before clipping at H + pad / W + pad (as
   LRN_WINDOW). Every tensor of the call has the same strides.
   *_within_rows_cpu: rows contiguous (offset n sn + c sc + h W + w), see below.
   *_within_channels_cpu: channels contiguous (offset n sn + h sh + w sw + c): the same bands and
   ring, 8 channels at a time (a work item per (n, band of rows, block of 8 channels); the
   clipping is the same for every lane).
   The direct kernel (a scalar work item per element) took 150-400 times a copy on PoCL; a work
   item per row (rows) or per pixel (channels) summing all size x size terms, 6-30 times. */
/* lrn_*_within_rows_cpu: a work item per (n, c, band of up to RB rows); each window row's terms
   are computed once for the band into a zero-padded private row, their window sums along the row
   kept in a ring of `size` rows (the rows of the current output row's window, those outside the
   image as zeros), and each output row adds all rows of the ring (the previous kernel, a work item per row, computed every term `size` times:
   the backward's division by the scale too). */
#define LRN_RING 4096 /* floats of the ring: size * (W rounded up to 8), at most this */
#define LRN_WITHIN_ITEM_ROWS                                      \
    const int bands = (H + RB - 1) / RB;                          \
    const i64 t = GLOBAL_ID0;                                     \
    if(t >= (i64)N * C * bands)                                   \
        return;                                                   \
    const int hb0 = (int)(t % bands) * RB;                        \
    const int hb1 = hb0 + RB < H ? hb0 + RB : H;                  \
    const i64 nc = t / bands, n = nc / C, c = nc - n * C;         \
    const i64 plane = n * sn + c * sc;                            \
    const int pad = (size - 1) / 2, hi = size - 1 - pad;          \
    const int Wr = (W + 7) / 8 * 8;                               \
    float tb[LRN_TB], ring[LRN_RING];                             \
    lrn_zero_halo(tb, pad, W, Wr - W + hi);                       \
    int next = hb0 - pad, slot = 0; /* the next row to sum, its slot */

/* the block of 8 columns of a row that starts at w0, moved back to end at the row's end where it
   would run past it (rows of 8 or more): every block is one vector load and store (the lanes of a
   partial block went one by one: bf16 within-channel LRN took longer than fp32); the overlapped
   columns are computed twice, to the same values */
#define LRN_ROW_BLOCK(w0) ((w0) + 8 > W && W >= 8 ? W - 8 : (w0))

/* the ring's slot := the window sums along the row of the terms now in tb */
#define LRN_WITHIN_ROW_SUMS                                       \
    for(int w0 = 0; w0 < W; w0 += 8)                              \
    {                                                             \
        float8 acc = vload8(0, tb + w0);                          \
        for(int j = 1; j < size; ++j)                             \
            acc += vload8(0, tb + w0 + j);                        \
        vstore8(acc, 0, ring + slot * Wr + w0);                   \
    }

/* output row h: its window's rows [h - pad, h - pad + size) put into the ring first, rows outside
   the image as zeros, so that the window sums are the sums of all `size` slots (TERMS_OF_NEXT:
   fill tb with row `next`'s terms); area_h: the window's height before clipping at H + pad */
#define LRN_WITHIN_FILL_RING(TERMS_OF_NEXT, ROW_SUMS, ZERO_ROW)             \
    const float area_h = (float)(min(h - pad + size, H + pad) - (h - pad)); \
    for(; next < h - pad + size; ++next, slot = slot + 1 < size ? slot + 1 : 0) \
    {                                                                       \
        if(next >= 0 && next < H)                                           \
        {                                                                   \
            TERMS_OF_NEXT                                                   \
            ROW_SUMS                                                        \
        }                                                                   \
        else                                                                \
            ZERO_ROW                                                        \
    }
#define LRN_WITHIN_ZERO_ROW              \
    for(int w0 = 0; w0 < W; w0 += 8)     \
        vstore8((float8)(0.0f), 0, ring + slot * Wr + w0);
#define LRN_WITHIN_OUTPUT_ROW(TERMS_OF_NEXT) \
    LRN_WITHIN_FILL_RING(TERMS_OF_NEXT, LRN_WITHIN_ROW_SUMS, LRN_WITHIN_ZERO_ROW)

/* the window sums of columns w0 .. w0 + 7: all slots of the ring */
DEVICE_FN float8 lrn_ring_sum(const float* ring, int size, int Wr, int w0)
{
    float8 acc = vload8(0, ring + w0);
    for(int j = 1; j < size; ++j)
        acc += vload8(0, ring + j * Wr + w0);
    return acc;
}

/* the window areas of columns w0 .. w0 + 7 (exact small integers in float) */
DEVICE_FN float8 lrn_area_w8(int w0, int W, int pad, int size)
{
    const float8 ws = (float8)((float)(w0 - pad)) + (float8)(0.0f, 1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f, 7.0f);
    return fmin(ws + (float)size, (float8)((float)(W + pad))) - ws;
}

KERNEL void lrn_fwd_within_rows_cpu(const GLOBAL data_t* RESTRICT x, GLOBAL data_t* RESTRICT y,
                                    GLOBAL data_t* RESTRICT scale, int N, int C, int H, int W, i64 sn, i64 sc,
                                    int size, float alpha, float beta, float k, int save, int RB)
{
    LRN_WITHIN_ITEM_ROWS
    for(int h = hb0; h < hb1; ++h)
    {
#define LRN_TERMS_FWD                                                        \
    for(int w0 = 0; w0 < W; w0 += 8)                                         \
    {                                                                        \
        const int wb = LRN_ROW_BLOCK(w0);                                    \
        const float8 v = lrn_lanes_f8(x, plane + (i64)next * W, wb, W);      \
        vstore8(v * v, 0, tb + pad + wb);                                    \
    }
        LRN_WITHIN_OUTPUT_ROW(LRN_TERMS_FWD)
#undef LRN_TERMS_FWD
        const i64 row = plane + (i64)h * W;
        /* the moved last block's input read before any store of the row (y may be x) */
        const float8 xlast = lrn_lanes_f8(x, row, LRN_ROW_BLOCK(W - 1), W);
        for(int w = 0; w < W; w += 8)
        {
            const int w0 = LRN_ROW_BLOCK(w);
            const float8 rs = lrn_ring_sum(ring, size, Wr, w0);
            const float8 s = k + alpha / (area_h * lrn_area_w8(w0, W, pad, size)) * rs;
            const float8 xv = w0 != w ? xlast : lrn_lanes_f8(x, row, w0, W);
            lrn_store_lanes_f8(y, row, w0, W, xv * LRN_POW8(s, -beta));
            if(save)
                lrn_store_lanes_f8(scale, row, w0, W, s);
        }
    }
}

KERNEL void lrn_bwd_within_rows_cpu(const GLOBAL data_t* RESTRICT x, const GLOBAL data_t* RESTRICT y,
                                    const GLOBAL data_t* RESTRICT dy, const GLOBAL data_t* RESTRICT scale,
                                    GLOBAL data_t* RESTRICT dx, int N, int C, int H, int W, i64 sn, i64 sc, int size,
                                    float alpha, float beta, int RB)
{
    LRN_WITHIN_ITEM_ROWS
    const int8 lane = (int8)(0, 1, 2, 3, 4, 5, 6, 7);
    const float ab2 = 2.0f * alpha * beta;
    for(int h = hb0; h < hb1; ++h)
    {
        /* the partial block's missing lanes: scale 1, a term of 0 */
#define LRN_TERMS_BWD                                                                                    \
    const i64 ra = plane + (i64)next * W;                                                                \
    for(int wa = 0; wa < W; wa += 8)                                                                     \
    {                                                                                                    \
        const int w0 = LRN_ROW_BLOCK(wa);                                                                \
        float8 sc8 = lrn_lanes_f8(scale, ra, w0, W);                                                     \
        sc8 = w0 + 8 <= W ? sc8 : select(sc8, (float8)(1.0f), lane >= W - w0);                           \
        vstore8(lrn_lanes_f8(dy, ra, w0, W) * lrn_lanes_f8(y, ra, w0, W) / sc8, 0, tb + pad + w0);       \
    }
        LRN_WITHIN_OUTPUT_ROW(LRN_TERMS_BWD)
#undef LRN_TERMS_BWD
        const i64 row = plane + (i64)h * W;
        /* the moved last block's inputs read before any store of the row (dx may be dy) */
        const int wl = LRN_ROW_BLOCK(W - 1);
        const float8 sc_last = lrn_lanes_f8(scale, row, wl, W), dy_last = lrn_lanes_f8(dy, row, wl, W);
        const float8 x_last = lrn_lanes_f8(x, row, wl, W);
        for(int w = 0; w < W; w += 8)
        {
            const int w0 = LRN_ROW_BLOCK(w);
            const int moved = w0 != w;
            float8 sc8 = moved ? sc_last : lrn_lanes_f8(scale, row, w0, W);
            sc8 = w0 + 8 <= W ? sc8 : select(sc8, (float8)(1.0f), lane >= W - w0);
            const float8 factor = ab2 / (area_h * lrn_area_w8(w0, W, pad, size));
            const float8 g = (moved ? dy_last : lrn_lanes_f8(dy, row, w0, W)) * LRN_POW8(sc8, -beta);
            const float8 rs = lrn_ring_sum(ring, size, Wr, w0);
            const float8 xv = moved ? x_last : lrn_lanes_f8(x, row, w0, W);
            lrn_store_lanes_f8(dx, row, w0, W, g - factor * xv * rs);
        }
    }
}

/* lrn_*_within_channels_cpu: rows of a channel block are W float8 (pixel-major) */
#define LRN_RING8 512 /* float8 of the ring: size * W, at most this */
#define LRN_WITHIN_ITEM_CHANNELS                                  \
    const int bands = (H + RB - 1) / RB, blocks = (C + 7) / 8;    \
    const i64 t = GLOBAL_ID0;                                     \
    if(t >= (i64)N * bands * blocks)                              \
        return;                                                   \
    const int c0 = (int)(t % blocks) * 8;                         \
    const i64 nb = t / blocks, n = nb / bands;                    \
    const int hb0 = (int)(nb % bands) * RB;                       \
    const int hb1 = hb0 + RB < H ? hb0 + RB : H;                  \
    const int pad = (size - 1) / 2;                               \
    float8 tb[LRN_TB / 8], ring[LRN_RING8];                       \
    for(int i = 0; i < pad; ++i)                                  \
        tb[i] = (float8)(0.0f);                                   \
    for(int i = pad + W; i < W + size - 1; ++i)                   \
        tb[i] = (float8)(0.0f);                                   \
    int next = hb0 - pad, slot = 0;

#define LRN_WITHIN_ROW_SUMS8                                      \
    for(int w = 0; w < W; ++w)                                    \
    {                                                             \
        float8 acc = tb[w];                                       \
        for(int j = 1; j < size; ++j)                             \
            acc += tb[w + j];                                     \
        ring[slot * W + w] = acc;                                 \
    }

/* (the ring of float8 columns: one slot row of W vectors) */
#define LRN_WITHIN_ZERO_ROW8        \
    for(int w = 0; w < W; ++w)      \
        ring[slot * W + w] = (float8)(0.0f);
#define LRN_WITHIN_OUTPUT_ROW8(TERMS_OF_NEXT) \
    LRN_WITHIN_FILL_RING(TERMS_OF_NEXT, LRN_WITHIN_ROW_SUMS8, LRN_WITHIN_ZERO_ROW8)

DEVICE_FN float8 lrn_ring_sum8(const float8* ring, int size, int W, int w)
{
    float8 acc = ring[w];
    for(int j = 1; j < size; ++j)
        acc += ring[j * W + w];
    return acc;
}

/* the unclipped window width of column w */
DEVICE_FN float lrn_area_w(int w, int W, int pad, int size)
{
    const int w0 = w - pad, w1 = w0 + size < W + pad ? w0 + size : W + pad;
    return (float)(w1 - w0);
}

KERNEL void lrn_fwd_within_channels_cpu(const GLOBAL data_t* RESTRICT x, GLOBAL data_t* RESTRICT y,
                                        GLOBAL data_t* RESTRICT scale, int N, int C, int H, int W, i64 sn, i64 sh,
                                        i64 sw, int size, float alpha, float beta, float k, int save, int RB)
{
    LRN_WITHIN_ITEM_CHANNELS
    for(int h = hb0; h < hb1; ++h)
    {
#define LRN_TERMS_FWD8                                                                   \
    for(int w = 0; w < W; ++w)                                                           \
    {                                                                                    \
        const float8 v = lrn_lanes_f8(x, n * sn + next * sh + w * sw, c0, C);            \
        tb[pad + w] = v * v;                                                             \
    }
        LRN_WITHIN_OUTPUT_ROW8(LRN_TERMS_FWD8)
#undef LRN_TERMS_FWD8
        for(int w = 0; w < W; ++w)
        {
            const i64 o = n * sn + h * sh + w * sw;
            const float8 rs = lrn_ring_sum8(ring, size, W, w);
            const float8 s = k + alpha / (area_h * lrn_area_w(w, W, pad, size)) * rs;
            lrn_store_lanes_f8(y, o, c0, C, lrn_lanes_f8(x, o, c0, C) * LRN_POW8(s, -beta));
            if(save)
                lrn_store_lanes_f8(scale, o, c0, C, s);
        }
    }
}

KERNEL void lrn_bwd_within_channels_cpu(const GLOBAL data_t* RESTRICT x, const GLOBAL data_t* RESTRICT y,
                                        const GLOBAL data_t* RESTRICT dy, const GLOBAL data_t* RESTRICT scale,
                                        GLOBAL data_t* RESTRICT dx, int N, int C, int H, int W, i64 sn, i64 sh,
                                        i64 sw, int size, float alpha, float beta, int RB)
{
    LRN_WITHIN_ITEM_CHANNELS
    const int8 lane = (int8)(0, 1, 2, 3, 4, 5, 6, 7);
    const float ab2 = 2.0f * alpha * beta;
    for(int h = hb0; h < hb1; ++h)
    {
        /* the partial block's missing lanes: scale 1, a term of 0 */
#define LRN_TERMS_BWD8                                                                   \
    for(int w = 0; w < W; ++w)                                                           \
    {                                                                                    \
        const i64 o = n * sn + next * sh + w * sw;                                       \
        float8 sc8 = lrn_lanes_f8(scale, o, c0, C);                                      \
        sc8 = c0 + 8 <= C ? sc8 : select(sc8, (float8)(1.0f), lane >= C - c0);           \
        tb[pad + w] = lrn_lanes_f8(dy, o, c0, C) * lrn_lanes_f8(y, o, c0, C) / sc8;      \
    }
        LRN_WITHIN_OUTPUT_ROW8(LRN_TERMS_BWD8)
#undef LRN_TERMS_BWD8
        for(int w = 0; w < W; ++w)
        {
            const i64 o = n * sn + h * sh + w * sw;
            float8 sc8 = lrn_lanes_f8(scale, o, c0, C);
            sc8 = c0 + 8 <= C ? sc8 : select(sc8, (float8)(1.0f), lane >= C - c0);
            const float factor = ab2 / (area_h * lrn_area_w(w, W, pad, size));
            const float8 g = lrn_lanes_f8(dy, o, c0, C) * LRN_POW8(sc8, -beta);
            const float8 rs = lrn_ring_sum8(ring, size, W, w);
            lrn_store_lanes_f8(dx, o, c0, C, g - factor * lrn_lanes_f8(x, o, c0, C) * rs);
        }
    }
}
#endif

/* lrn_*_cross_ring (LRN_SIZE, the window, a compile-time constant): one work item per pixel walks
   the channels keeping the window's terms in a shift register (x^2 forward, dy * y / scale
   backward), so every element is read once; each output sums its window afresh in channel order
   (the same sum as the direct kernels, no running subtraction). */
#ifdef LRN_SIZE
#define LRN_PAD ((LRN_SIZE - 1) / 2)
#ifndef UNROLL
#ifdef __OPENCL_VERSION__
#define UNROLL
#else
#define UNROLL _Pragma("unroll")
#endif
#endif
DEVICE_FN void lrn_pixel(i64 p, int H, int W, int* n, int* h, int* w)
{
    /* 32-bit division where the pixel count fits (a GPU divides 64-bit integers slowly) */
    if(p < 0x7fffffff)
    {
        const int q = (int)p;
        *w = q % W;
        *h = (q / W) % H;
        *n = q / W / H;
    }
    else
    {
        *w = (int)(p % W);
        *h = (int)((p / W) % H);
        *n = (int)(p / W / H);
    }
}

KERNEL void lrn_fwd_cross_ring(const GLOBAL data_t* RESTRICT x, GLOBAL data_t* RESTRICT y,
                               GLOBAL data_t* RESTRICT scale, LRN_SHAPE, LRN_STRIDES(xs), LRN_STRIDES(ys),
                               float alpha, float beta, float k, int save)
{
    const i64 pixels = (i64)N * H * W;
    const float aon = alpha / (float)LRN_SIZE;
    for(i64 p = GLOBAL_ID0; p < pixels; p += GLOBAL_SIZE0)
    {
        int n, h, w;
        lrn_pixel(p, H, W, &n, &h, &w);
        const i64 xb = LRN_AT(xs, n, 0, h, w), yb = LRN_AT(ys, n, 0, h, w);
        /* t[i]: x^2 of channel c - LRN_PAD + i; v: x of channel c */
        float t[LRN_SIZE];
        UNROLL
        for(int i = 0; i < LRN_SIZE; ++i)
        {
            const int j = i - LRN_PAD;
            const float v = (j >= 0 && j < C) ? LOAD(x, xb + j * xsc) : 0.0f;
            t[i] = v * v;
        }
        float v = LOAD(x, xb);
        for(int c = 0; c < C; ++c)
        {
            float acc = 0.0f;
            UNROLL
            for(int i = 0; i < LRN_SIZE; ++i)
                acc += t[i];
            const float s = k + aon * acc;
            const i64 o = yb + c * ysc;
            STORE(y, o, v * LRN_POW(s, -beta));
            if(save)
                STORE(scale, o, s);
            UNROLL
            for(int i = 0; i + 1 < LRN_SIZE; ++i)
                t[i] = t[i + 1];
            const int e = c + 1 - LRN_PAD + LRN_SIZE - 1;
            const float ve = e < C ? LOAD(x, xb + e * xsc) : 0.0f;
            t[LRN_SIZE - 1] = ve * ve;
            v = c + 1 < C ? LOAD(x, xb + (c + 1) * xsc) : 0.0f;
        }
    }
}

KERNEL void lrn_bwd_cross_ring(const GLOBAL data_t* RESTRICT x, const GLOBAL data_t* RESTRICT y,
                               const GLOBAL data_t* RESTRICT dy, const GLOBAL data_t* RESTRICT scale,
                               GLOBAL data_t* RESTRICT dx, LRN_SHAPE, LRN_STRIDES(xs), LRN_STRIDES(ys),
                               LRN_STRIDES(gs), LRN_STRIDES(ss), LRN_STRIDES(os), float alpha, float beta)
{
    const i64 pixels = (i64)N * H * W;
    const float ratio = 2.0f * alpha * beta / (float)LRN_SIZE;
    /* the window of channel c in backward: [c - (LRN_SIZE - 1 - LRN_PAD), c + LRN_PAD] */
    const int lo = LRN_SIZE - 1 - LRN_PAD;
    for(i64 p = GLOBAL_ID0; p < pixels; p += GLOBAL_SIZE0)
    {
        int n, h, w;
        lrn_pixel(p, H, W, &n, &h, &w);
        const i64 xb = LRN_AT(xs, n, 0, h, w), yb = LRN_AT(ys, n, 0, h, w), gb = LRN_AT(gs, n, 0, h, w);
        const i64 sb = LRN_AT(ss, n, 0, h, w), ob = LRN_AT(os, n, 0, h, w);
        float t[LRN_SIZE];
        UNROLL
        for(int i = 0; i < LRN_SIZE; ++i)
        {
            const int j = i - lo;
            t[i] = (j >= 0 && j < C)
                       ? LOAD(dy, gb + j * gsc) * LOAD(y, yb + j * ysc) / LOAD(scale, sb + j * ssc)
                       : 0.0f;
        }
        for(int c = 0; c < C; ++c)
        {
            float acc = 0.0f;
            UNROLL
            for(int i = 0; i < LRN_SIZE; ++i)
                acc += t[i];
            const float s = LOAD(scale, sb + c * ssc);
            const float g = LOAD(dy, gb + c * gsc) * LRN_POW(s, -beta);
            STORE(dx, ob + c * osc, g - ratio * LOAD(x, xb + c * xsc) * acc);
            UNROLL
            for(int i = 0; i + 1 < LRN_SIZE; ++i)
                t[i] = t[i + 1];
            const int e = c + 1 + LRN_PAD;
            t[LRN_SIZE - 1] = e < C ? LOAD(dy, gb + e * gsc) * LOAD(y, yb + e * ysc) / LOAD(scale, sb + e * ssc)
                                    : 0.0f;
        }
    }
}
#endif
