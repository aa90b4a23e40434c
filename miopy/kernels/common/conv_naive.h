/* Naive direct convolution, one work item per output element, in all three directions.
   Shapes and strides are run-time arguments (the solver is dynamic); every tensor is addressed
   through its element strides in logical N,C,D,H,W order, so any layout or strides work.
   2-D problems run as 3-D with D = 1. Accumulation is in fp32. */
#include "common/conv_shape.h"

/* y[n, k, o] = sum over c in k's group, z, y, x of x[n, c, o*s - p + f*d] * w[k, c, f] */
KERNEL void conv_naive_fwd(const GLOBAL data_t* RESTRICT xp, const GLOBAL data_t* RESTRICT wp,
                           GLOBAL data_t* RESTRICT yp, CONV_SHAPE_ARGS)
{
    const i64 total = (i64)N * K * Do * Ho * Wo;
    const int Cg = C / G, Kg = K / G;
    for(i64 i = GLOBAL_ID0; i < total; i += GLOBAL_SIZE0)
    {
        i64 r = i;
        const int wo = (int)(r % Wo); r /= Wo;
        const int ho = (int)(r % Ho); r /= Ho;
        const int od = (int)(r % Do); r /= Do;
        const int k = (int)(r % K);
        const int n = (int)(r / K);
        const int g = k / Kg;
        float acc = 0.0f;
        for(int c = 0; c < Cg; ++c)
        {
            const i64 xbase = n * xn + (i64)(g * Cg + c) * xc;
            const i64 wbase = k * wk + (i64)c * wc;
            for(int fz = 0; fz < Z; ++fz)
            {
                const int id = od * sd - pd + fz * dd;
                if(id < 0 || id >= Di) continue;
                for(int fy = 0; fy < Y; ++fy)
                {
                    const int ih = ho * sh - ph + fy * dh;
                    if(ih < 0 || ih >= Hi) continue;
                    for(int fx = 0; fx < X; ++fx)
                    {
                        const int iw = wo * sw - pw + fx * dw;
                        if(iw < 0 || iw >= Wi) continue;
                        acc += LOAD(xp, xbase + id * xd + ih * xh + iw * xw) *
                               LOAD(wp, wbase + fz * wz + fy * wy + fx * wx);
                    }
                }
            }
        }
        STORE(yp, n * yn + k * yk + od * yd + ho * yh + wo * yw, acc);
    }
}

/* dx[n, c, i] = sum over k in c's group, f with (i + p - f*d) = o*s, 0 <= o < out of dy[n, k, o] * w[k, c, f] */
KERNEL void conv_naive_bwd(GLOBAL data_t* RESTRICT xp, const GLOBAL data_t* RESTRICT wp,
                           const GLOBAL data_t* RESTRICT yp, CONV_SHAPE_ARGS)
{
    const i64 total = (i64)N * C * Di * Hi * Wi;
    const int Cg = C / G, Kg = K / G;
    for(i64 i = GLOBAL_ID0; i < total; i += GLOBAL_SIZE0)
    {
        i64 r = i;
        const int iw = (int)(r % Wi); r /= Wi;
        const int ih = (int)(r % Hi); r /= Hi;
        const int id = (int)(r % Di); r /= Di;
        const int c = (int)(r % C);
        const int n = (int)(r / C);
        const int g = c / Cg, cg = c - g * Cg;
        float acc = 0.0f;
        for(int kk = 0; kk < Kg; ++kk)
        {
            const int k = g * Kg + kk;
            const i64 ybase = n * yn + k * yk;
            const i64 wbase = k * wk + (i64)cg * wc;
            for(int fz = 0; fz < Z; ++fz)
            {
                const int od = conv_out_index(id, pd, fz, dd, sd, Do);
                if(od < 0) continue;
                for(int fy = 0; fy < Y; ++fy)
                {
                    const int oh = conv_out_index(ih, ph, fy, dh, sh, Ho);
                    if(oh < 0) continue;
                    for(int fx = 0; fx < X; ++fx)
                    {
                        const int ow = conv_out_index(iw, pw, fx, dw, sw, Wo);
                        if(ow < 0) continue;
                        acc += LOAD(yp, ybase + od * yd + oh * yh + ow * yw) *
                               LOAD(wp, wbase + fz * wz + fy * wy + fx * wx);
                    }
                }
            }
        }
        STORE(xp, n * xn + c * xc + id * xd + ih * xh + iw * xw, acc);
    }
}

/* dw[k, c, f] = sum over n, o of x[n, g*Cg + c, o*s - p + f*d] * dy[n, k, o] */
KERNEL void conv_naive_wrw(const GLOBAL data_t* RESTRICT xp, GLOBAL data_t* RESTRICT wp,
                           const GLOBAL data_t* RESTRICT yp, CONV_SHAPE_ARGS)
{
    const int Cg = C / G, Kg = K / G;
    const i64 total = (i64)K * Cg * Z * Y * X;
    for(i64 i = GLOBAL_ID0; i < total; i += GLOBAL_SIZE0)
    {
        i64 r = i;
        const int fx = (int)(r % X); r /= X;
        const int fy = (int)(r % Y); r /= Y;
        const int fz = (int)(r % Z); r /= Z;
        const int c = (int)(r % Cg);
        const int k = (int)(r / Cg);
        const int g = k / Kg;
        float acc = 0.0f;
        for(int n = 0; n < N; ++n)
        {
            const i64 xbase = n * xn + (i64)(g * Cg + c) * xc;
            const i64 ybase = n * yn + k * yk;
            for(int od = 0; od < Do; ++od)
            {
                const int id = od * sd - pd + fz * dd;
                if(id < 0 || id >= Di) continue;
                for(int oh = 0; oh < Ho; ++oh)
                {
                    const int ih = oh * sh - ph + fy * dh;
                    if(ih < 0 || ih >= Hi) continue;
                    for(int ow = 0; ow < Wo; ++ow)
                    {
                        const int iw = ow * sw - pw + fx * dw;
                        if(iw < 0 || iw >= Wi) continue;
                        acc += LOAD(xp, xbase + id * xd + ih * xh + iw * xw) *
                               LOAD(yp, ybase + od * yd + oh * yh + ow * yw);
                    }
                }
            }
        }
        STORE(wp, k * wk + c * wc + fz * wz + fy * wy + fx * wx, acc);
    }
}
