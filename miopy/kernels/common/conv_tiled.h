/* Tiled direct forward convolution (ConvDirectTiledFwd). Shapes, strides and the tuning config
   are compile-time constants (CT_*), so index arithmetic folds and the filter loops unroll.

   One work-group computes a CT_TILE_K (output channels, inside one group) x CT_TILE_H x CT_TILE_W
   block of one image's output. For each block of CT_C_BLOCK input channels it stages the input
   window the block reads (padding as zeros) and the matching weights in local memory, then each
   work item accumulates CT_OUT_K x CT_OUT_W outputs in fp32 registers: channels kq + i*TKQ and
   columns wq + i*TWQ, strided so that neighbouring work items read neighbouring local words and
   write neighbouring outputs. Any tensor strides work (they are compiled in). */
#include "common/miopy_types.h"

/* Defaults only so that the file compiles on its own (the CUDA compile test); the solver always
   defines every one of these. */
#ifndef CT_N
#define CT_N 1
#define CT_C 4
#define CT_K 4
#define CT_G 1
#define CT_HI 8
#define CT_WI 8
#define CT_HO 8
#define CT_WO 8
#define CT_Y 3
#define CT_X 3
#define CT_PH 1
#define CT_PW 1
#define CT_SH 1
#define CT_SW 1
#define CT_DH 1
#define CT_DW 1
#define CT_XN 256
#define CT_XC 64
#define CT_XH 8
#define CT_XW 1
#define CT_WK 36
#define CT_WC 9
#define CT_WY 3
#define CT_WX 1
#define CT_YN 256
#define CT_YK 64
#define CT_YH 8
#define CT_YW 1
#endif
#ifndef CT_TILE_H
#define CT_TILE_H 4
#define CT_TILE_W 8
#define CT_TILE_K 4
#define CT_OUT_W 2
#define CT_OUT_K 2
#define CT_C_BLOCK 2
#endif

#define CT_CG (CT_C / CT_G)
#define CT_KG (CT_K / CT_G)
#define CT_TWQ (CT_TILE_W / CT_OUT_W)
#define CT_TKQ (CT_TILE_K / CT_OUT_K)
#define CT_THREADS (CT_TKQ * CT_TILE_H * CT_TWQ)
#define CT_IN_H ((CT_TILE_H - 1) * CT_SH + (CT_Y - 1) * CT_DH + 1)
#define CT_IN_W ((CT_TILE_W - 1) * CT_SW + (CT_X - 1) * CT_DW + 1)
#define CT_TILES_W ((CT_WO + CT_TILE_W - 1) / CT_TILE_W)
#define CT_TILES_H ((CT_HO + CT_TILE_H - 1) / CT_TILE_H)
#define CT_TILES_K ((CT_KG + CT_TILE_K - 1) / CT_TILE_K)
#define CT_XS_SIZE (CT_C_BLOCK * CT_IN_H * CT_IN_W)
#define CT_WS_SIZE (CT_TILE_K * CT_C_BLOCK * CT_Y * CT_X)

KERNEL void conv_tiled_fwd(const GLOBAL data_t* RESTRICT xp, const GLOBAL data_t* RESTRICT wp,
                           GLOBAL data_t* RESTRICT yp)
{
    LOCAL float xs[CT_XS_SIZE];
    LOCAL float wl[CT_WS_SIZE];
    const int tid = LOCAL_ID0;
    int t = GROUP_ID0;
    const int tw = t % CT_TILES_W; t /= CT_TILES_W;
    const int th = t % CT_TILES_H; t /= CT_TILES_H;
    const int tk = t % CT_TILES_K; t /= CT_TILES_K;
    const int g = t % CT_G;
    const int n = t / CT_G;
    const int wq = tid % CT_TWQ;
    const int hy = (tid / CT_TWQ) % CT_TILE_H;
    const int kq = tid / (CT_TWQ * CT_TILE_H);
    const int oh0 = th * CT_TILE_H, ow0 = tw * CT_TILE_W, k0 = tk * CT_TILE_K;
    const int ih0 = oh0 * CT_SH - CT_PH, iw0 = ow0 * CT_SW - CT_PW;
    const i64 xbase = (i64)n * CT_XN + (i64)g * CT_CG * CT_XC;
    const i64 wbase = (i64)g * CT_KG * CT_WK;

    float acc[CT_OUT_K][CT_OUT_W];
    for(int ok = 0; ok < CT_OUT_K; ++ok)
        for(int i = 0; i < CT_OUT_W; ++i)
            acc[ok][i] = 0.0f;

    for(int c0 = 0; c0 < CT_CG; c0 += CT_C_BLOCK)
    {
        for(int e = tid; e < CT_XS_SIZE; e += CT_THREADS)
        {
            const int col = e % CT_IN_W;
            const int row = (e / CT_IN_W) % CT_IN_H;
            const int c = c0 + e / (CT_IN_W * CT_IN_H);
            const int ih = ih0 + row, iw = iw0 + col;
            xs[e] = (c < CT_CG && ih >= 0 && ih < CT_HI && iw >= 0 && iw < CT_WI)
                        ? LOAD(xp, xbase + (i64)c * CT_XC + (i64)ih * CT_XH + (i64)iw * CT_XW)
                        : 0.0f;
        }
        for(int e = tid; e < CT_WS_SIZE; e += CT_THREADS)
        {
            const int fx = e % CT_X;
            const int fy = (e / CT_X) % CT_Y;
            const int c = c0 + (e / (CT_X * CT_Y)) % CT_C_BLOCK;
            const int k = k0 + e / (CT_X * CT_Y * CT_C_BLOCK);
            wl[e] = (c < CT_CG && k < CT_KG)
                        ? LOAD(wp, wbase + (i64)k * CT_WK + (i64)c * CT_WC + (i64)fy * CT_WY + (i64)fx * CT_WX)
                        : 0.0f;
        }
        BARRIER();
        for(int cl = 0; cl < CT_C_BLOCK; ++cl)
            for(int fy = 0; fy < CT_Y; ++fy)
                for(int fx = 0; fx < CT_X; ++fx)
                {
                    float wv[CT_OUT_K];
                    for(int ok = 0; ok < CT_OUT_K; ++ok)
                        wv[ok] = wl[(((kq + ok * CT_TKQ) * CT_C_BLOCK + cl) * CT_Y + fy) * CT_X + fx];
                    const int xrow = (cl * CT_IN_H + hy * CT_SH + fy * CT_DH) * CT_IN_W + fx * CT_DW;
                    for(int i = 0; i < CT_OUT_W; ++i)
                    {
                        const float xv = xs[xrow + (wq + i * CT_TWQ) * CT_SW];
                        for(int ok = 0; ok < CT_OUT_K; ++ok)
                            acc[ok][i] += xv * wv[ok];
                    }
                }
        BARRIER();
    }

    const int oh = oh0 + hy;
    if(oh >= CT_HO) return;
    for(int ok = 0; ok < CT_OUT_K; ++ok)
    {
        const int k = k0 + kq + ok * CT_TKQ;
        if(k >= CT_KG) continue;
        const i64 ybase = (i64)n * CT_YN + (i64)(g * CT_KG + k) * CT_YK + (i64)oh * CT_YH;
        for(int i = 0; i < CT_OUT_W; ++i)
        {
            const int ow = ow0 + wq + i * CT_TWQ;
            if(ow < CT_WO) STORE(yp, ybase + (i64)ow * CT_YW, acc[ok][i]);
        }
    }
}
