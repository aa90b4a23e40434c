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
#define LRN_DECOMPOSE(i)            \
    i64 r_ = (i);                   \
    const int w = (int)(r_ % W);    \
    r_ /= W;                        \
    const int h = (int)(r_ % H);    \
    r_ /= H;                        \
    const int c = (int)(r_ % C);    \
    const int n = (int)(r_ / C);

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
