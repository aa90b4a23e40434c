/* Data movement for the GEMM convolutions: im2col (forward, backward weights), col2im (backward
   data) and a strided 3-d copy (to make dy's (n, spatial) index one stride for backward weights).

   The column matrix of group g holds, for reduction index j and output position (n, o),
       col[off + g*cs_g + n*cs_n + j*cs_j + o*cs_o]  =  x[n0 + n, g*Cg + c, o*s - p + f*d]  (0 in the pad)
   where j(c, f) = c*wc + fz*wz + fy*wy + fx*wx is the weight's own offset inside one output channel,
   so the column rows follow w's memory order (NCHW or NHWC filters alike) and w needs no copy.
   o is the row-major linear output position (od, oh, ow), which is also its memory order in every
   packed layout. Shapes are run-time arguments (CONV_SHAPE_ARGS, common/conv_shape.h). */
#include "common/conv_shape.h"

#ifndef IM2COL_COL_F32
#define IM2COL_COL_F32 0
#endif

#if IM2COL_COL_F32
typedef float col_t;
#define COL_LOAD(p, i) ((p)[i])
#else
typedef data_t col_t;
#define COL_LOAD(p, i) LOAD(p, i)
#endif

#define COL_ARGS i64 col_off, i64 cs_g, i64 cs_n, i64 cs_j, i64 cs_o, int n0, int nb

/* Images n0 .. n0+nb-1 of x into col (data_t: a copy, so no rounding). */
KERNEL void im2col(const GLOBAL data_t* RESTRICT xp, GLOBAL data_t* RESTRICT col, COL_ARGS,
                   CONV_SHAPE_ARGS)
{
    const int Cg = C / G;
    const i64 P = (i64)Do * Ho * Wo;
    const i64 total = (i64)nb * C * Z * Y * X * P;
    for(i64 i = GLOBAL_ID0; i < total; i += GLOBAL_SIZE0)
    {
        /* o fastest: neighbouring work items read neighbouring x in NCHW and write neighbouring col */
        i64 r = i;
        const i64 o = r % P; r /= P;
        const int fx = (int)(r % X); r /= X;
        const int fy = (int)(r % Y); r /= Y;
        const int fz = (int)(r % Z); r /= Z;
        const int c = (int)(r % C);
        const int n = (int)(r / C);
        const int ow = (int)(o % Wo);
        const int oh = (int)((o / Wo) % Ho);
        const int od = (int)(o / ((i64)Wo * Ho));
        const int id = od * sd - pd + fz * dd;
        const int ih = oh * sh - ph + fy * dh;
        const int iw = ow * sw - pw + fx * dw;
        const int g = c / Cg, cg = c - g * Cg;
        const float v = (id >= 0 && id < Di && ih >= 0 && ih < Hi && iw >= 0 && iw < Wi)
                            ? LOAD(xp, (n0 + n) * xn + c * xc + id * xd + ih * xh + iw * xw)
                            : 0.0f;
        const i64 j = cg * wc + fz * wz + fy * wy + fx * wx;
        STORE(col, col_off + g * cs_g + n * cs_n + j * cs_j + o * cs_o, v);
    }
}

/* dx for images n0 .. n0+nb-1: the sum of every column entry that input element fed, in fp32. */
KERNEL void col2im(const GLOBAL col_t* RESTRICT col, GLOBAL data_t* RESTRICT xp, COL_ARGS,
                   CONV_SHAPE_ARGS)
{
    const int Cg = C / G;
    const i64 total = (i64)nb * C * Di * Hi * Wi;
    for(i64 i = GLOBAL_ID0; i < total; i += GLOBAL_SIZE0)
    {
        i64 r = i;
        const int iw = (int)(r % Wi); r /= Wi;
        const int ih = (int)(r % Hi); r /= Hi;
        const int id = (int)(r % Di); r /= Di;
        const int c = (int)(r % C);
        const int n = (int)(r / C);
        const int g = c / Cg, cg = c - g * Cg;
        const i64 base = col_off + g * cs_g + n * cs_n;
        float acc = 0.0f;
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
                    const i64 j = cg * wc + fz * wz + fy * wy + fx * wx;
                    const i64 o = ((i64)od * Ho + oh) * Wo + ow;
                    acc += COL_LOAD(col, base + j * cs_j + o * cs_o);
                }
            }
        }
        STORE(xp, (n0 + n) * xn + c * xc + id * xd + ih * xh + iw * xw, acc);
    }
}

/* dst[off + a*da + b*db + c*dc] = src[a*sa + b*sb + c*sc] for a < A, b < B, c < Cn (a copy). */
KERNEL void copy3d(const GLOBAL data_t* RESTRICT src, GLOBAL data_t* RESTRICT dst, i64 dst_off,
                   int A, int B, int Cn, i64 sa, i64 sb, i64 sc, i64 da, i64 db, i64 dc)
{
    const i64 total = (i64)A * B * Cn;
    for(i64 i = GLOBAL_ID0; i < total; i += GLOBAL_SIZE0)
    {
        const int c = (int)(i % Cn);
        const int b = (int)((i / Cn) % B);
        const int a = (int)(i / ((i64)Cn * B));
        STORE(dst, dst_off + a * da + b * db + c * dc, LOAD(src, a * sa + b * sb + c * sc));
    }
}
