/* Winograd F(2x2, 3x3) backward-weights convolution, fp32 (solver ConvWinogradWrwF2x3Tf32x3,
   solvers/conv/winograd_wrw_tf32x3.py): the transforms around 16 GEMMs run by
   kernels/cuda/igemm_wrw_tf32x3.cu (3xTF32, batched over gridDim.z).

   For each output tile t = (n, th, tw) of 2 x 2 pixels (TH x TW tiles per image, the last ones
   partly past the output) the input patch d (4 x 4 at rows 2*th - PH.., columns 2*tw - PW..,
   zero outside x) and the output-gradient patch e (2 x 2, zero outside dy) are transformed:
       V = B^T d B,  U = A e A^T,
   B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1], A^T = [1 1 1 0; 0 1 -1 -1]. Then for each of the
   16 positions xi, M[xi][k][c] = sum over tiles of U[xi][t][k] * V[xi][t][c] (the GEMMs), and
   dw[k][c] = G^T M[k][c] G with G = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1].

   wino_in_f2x3: V[xi][t][c] (C4 channels, zero past C) from NHWC x, one work item per (t, c).
   wino_dy_f2x3: U[xi][t][k] (K4 channels) from NHWC dy, one work item per (t, k).
   wino_out_f2x3: dw (WG_OUT_NCHW 1: packed K x C x 3 x 3, else K x 3 x 3 x C) from the GEMMs'
   WG_SPLIT slices of partial sums m[split][xi][K4][C4], summed here; one work item per (k, c). */

// miopy-compile-test: -DMIOPY_DTYPE=0
// miopy-compile-test: -DMIOPY_DTYPE=0 -DWG_N=2 -DWG_C=5 -DWG_H=7 -DWG_W=9 -DWG_K=6 -DWG_P=5 -DWG_Q=7 -DWG_PH=0 -DWG_PW=0 -DWG_TH=3 -DWG_TW=4 -DWG_C4=8 -DWG_K4=8 -DWG_SPLIT=1 -DWG_OUT_NCHW=0

#include "common/miopy_types.h"
#include "common/winograd_f2x3.h"

#if MIOPY_DTYPE != 0
#error "the Winograd 3xTF32 kernels are for fp32 (MIOPY_DTYPE 0)"
#endif

#ifndef WG_N
#define WG_N 32
#define WG_C 256
#define WG_H 14
#define WG_W 14
#define WG_K 256
#define WG_P 14
#define WG_Q 14
#define WG_PH 1
#define WG_PW 1
#define WG_TH 7
#define WG_TW 7
#define WG_C4 256
#define WG_K4 256
#define WG_SPLIT 4
#define WG_OUT_NCHW 1
#endif

#define WG_T ((i64)WG_N * WG_TH * WG_TW) /* tiles: the GEMMs' reduction */

KERNEL void wino_in_f2x3(const float* RESTRICT x, i64 x_off, float* RESTRICT v, i64 v_off)
{
    const i64 total = WG_T * WG_C4;
    for(i64 e = GLOBAL_ID0; e < total; e += GLOBAL_SIZE0)
    {
        const int c = (int)(e % WG_C4);
        const i64 t = e / WG_C4;
        const int tw = (int)(t % WG_TW);
        const int th = (int)(t / WG_TW % WG_TH);
        const int n = (int)(t / (WG_TW * WG_TH));
        float d[4][4];
#pragma unroll
        for(int i = 0; i < 4; ++i)
#pragma unroll
            for(int j = 0; j < 4; ++j)
            {
                const int ih = 2 * th - WG_PH + i, iw = 2 * tw - WG_PW + j;
                const bool ok = c < WG_C && (unsigned)ih < (unsigned)WG_H && (unsigned)iw < (unsigned)WG_W;
                d[i][j] = ok ? x[x_off + (((i64)n * WG_H + ih) * WG_W + iw) * WG_C + c] : 0.0f;
            }
        wino_f2x3_store_bt_d_b(d, v + v_off + t * WG_C4 + c, WG_T * WG_C4);
    }
}

KERNEL void wino_dy_f2x3(const float* RESTRICT dy, i64 dy_off, float* RESTRICT u, i64 u_off)
{
    const i64 total = WG_T * WG_K4;
    for(i64 e = GLOBAL_ID0; e < total; e += GLOBAL_SIZE0)
    {
        const int k = (int)(e % WG_K4);
        const i64 t = e / WG_K4;
        const int tw = (int)(t % WG_TW);
        const int th = (int)(t / WG_TW % WG_TH);
        const int n = (int)(t / (WG_TW * WG_TH));
        float g[2][2];
#pragma unroll
        for(int i = 0; i < 2; ++i)
#pragma unroll
            for(int j = 0; j < 2; ++j)
            {
                const int p = 2 * th + i, q = 2 * tw + j;
                const bool ok = k < WG_K && p < WG_P && q < WG_Q;
                g[i][j] = ok ? dy[dy_off + (((i64)n * WG_P + p) * WG_Q + q) * WG_K + k] : 0.0f;
            }
        float a[4][2]; /* A e */
#pragma unroll
        for(int j = 0; j < 2; ++j)
        {
            a[0][j] = g[0][j];
            a[1][j] = g[0][j] + g[1][j];
            a[2][j] = g[0][j] - g[1][j];
            a[3][j] = -g[1][j];
        }
        float* out = u + u_off + t * WG_K4 + k;
        const i64 plane = WG_T * WG_K4;
#pragma unroll
        for(int i = 0; i < 4; ++i)
        {
            out[(i * 4 + 0) * plane] = a[i][0];
            out[(i * 4 + 1) * plane] = a[i][0] + a[i][1];
            out[(i * 4 + 2) * plane] = a[i][0] - a[i][1];
            out[(i * 4 + 3) * plane] = -a[i][1];
        }
    }
}

KERNEL void wino_out_f2x3(const float* RESTRICT m, i64 m_off, float* RESTRICT dw)
{
    const int e = (int)GLOBAL_ID0;
    if(e >= WG_K * WG_C)
        return;
    const int k = e / WG_C;
    const int c = e - k * WG_C;
    const i64 plane = (i64)WG_K4 * WG_C4;
    const float* src = m + m_off + (i64)k * WG_C4 + c;
    float s[4][4];
#pragma unroll
    for(int xi = 0; xi < 16; ++xi)
    {
        float acc = 0.0f;
        for(int sp = 0; sp < WG_SPLIT; ++sp)
            acc += src[((i64)sp * 16 + xi) * plane];
        s[xi / 4][xi % 4] = acc;
    }
    float h[3][4]; /* G^T M */
#pragma unroll
    for(int j = 0; j < 4; ++j)
    {
        h[0][j] = s[0][j] + 0.5f * (s[1][j] + s[2][j]);
        h[1][j] = 0.5f * (s[1][j] - s[2][j]);
        h[2][j] = 0.5f * (s[1][j] + s[2][j]) + s[3][j];
    }
#pragma unroll
    for(int r = 0; r < 3; ++r)
    {
        const float o[3] = {h[r][0] + 0.5f * (h[r][1] + h[r][2]), 0.5f * (h[r][1] - h[r][2]),
                            0.5f * (h[r][1] + h[r][2]) + h[r][3]};
#pragma unroll
        for(int q = 0; q < 3; ++q)
        {
            if(WG_OUT_NCHW)
                dw[((i64)k * WG_C + c) * 9 + r * 3 + q] = o[q];
            else
                dw[((i64)k * 9 + r * 3 + q) * WG_C + c] = o[q];
        }
    }
}
