/* Winograd F(2x2, 3x3) forward (and stride-1 backward-data) convolution, fp32 (solvers
   ConvWinogradFwdF2x3Tf32x3 and ConvWinogradBwdF2x3Tf32x3, solvers/conv/winograd_fwd_tf32x3.py):
   the data, filter and output transforms around 16 GEMMs run by kernels/cuda/igemm_wrw_tf32x3.cu
   (3xTF32, batched over gridDim.z).

   The convolution run here reads an input of WF_CI channels of WF_HI x WF_WI pixels and writes
   WF_CO channels of WF_HO x WF_WO pixels (forward: x -> y; backward data: dy -> dx with the
   filter rotated by 180 degrees and its two channel axes swapped, WF_BWD = 1). The output is cut
   into tiles t = (n, th, tw) of 2 x 2 pixels (TH x TW per image, the last ones partly past the
   output; T tiles padded to WF_T4, a multiple of 4). For each tile the 4 x 4 input patch d at
   rows 2*th - PH.., columns 2*tw - PW.. (zero outside the input) and for each filter g (3 x 3):
       V = B^T d B,  U = G g G^T,
   B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1], G = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1].
   Per position xi of the 16: M[xi][t][co] = sum over ci of V[xi][ci][t] * U[xi][ci][co] (the
   GEMMs; the reduction index outermost in both operands, as the batched wrw GEMM reads them),
   then the output tile Y = A^T M A with A^T = [1 1 1 0; 0 1 -1 -1].

   wf_in_f2x3:     V[xi][CI4][T4] (zero past CI and T), one work item per (ci, t).
   wf_filter_f2x3: U[xi][CI4][CO4] (zero past CI and CO), one work item per (ci, co).
   wf_out_f2x3:    the output from M[xi][T4][CO4], one work item per (t, co).
   Layouts: WF_IN_NHWC / WF_OUT_NHWC (else NCHW), WF_FILT_NHWC (K x R x S x C, else K x C x R x S
   of the tensor as it lies: forward K = CO, C = CI; backward data K = CI, C = CO). */

// miopy-compile-test: -DMIOPY_DTYPE=0
// miopy-compile-test: -DMIOPY_DTYPE=0 -DWF_N=2 -DWF_CI=5 -DWF_HI=7 -DWF_WI=9 -DWF_CO=6 -DWF_HO=5 -DWF_WO=7 -DWF_PH=0 -DWF_PW=0 -DWF_TH=3 -DWF_TW=4 -DWF_T4=24 -DWF_CI4=8 -DWF_CO4=8 -DWF_IN_NHWC=1 -DWF_OUT_NHWC=1 -DWF_FILT_NHWC=1 -DWF_BWD=1

#include "common/miopy_types.h"
#include "common/winograd_f2x3.h"

#if MIOPY_DTYPE != 0
#error "the Winograd 3xTF32 kernels are for fp32 (MIOPY_DTYPE 0)"
#endif

#ifndef WF_N
#define WF_N 32
#define WF_CI 128
#define WF_HI 28
#define WF_WI 28
#define WF_CO 128
#define WF_HO 28
#define WF_WO 28
#define WF_PH 1
#define WF_PW 1
#define WF_TH 14
#define WF_TW 14
#define WF_T4 6272
#define WF_CI4 128
#define WF_CO4 128
#endif
#ifndef WF_IN_NHWC
#define WF_IN_NHWC 0
#endif
#ifndef WF_OUT_NHWC
#define WF_OUT_NHWC 0
#endif
#ifndef WF_FILT_NHWC
#define WF_FILT_NHWC 0
#endif
#ifndef WF_BWD
#define WF_BWD 0
#endif

#define WF_T ((i64)WF_N * WF_TH * WF_TW) /* real tiles; WF_T4 >= WF_T */

KERNEL void wf_in_f2x3(const float* RESTRICT x, i64 x_off, float* RESTRICT v, i64 v_off)
{
    const i64 total = (i64)WF_T4 * WF_CI4;
    for(i64 e = GLOBAL_ID0; e < total; e += GLOBAL_SIZE0)
    {
        /* channels fastest for NHWC input (its reads coalesce), tiles fastest for NCHW */
        const int c = WF_IN_NHWC ? (int)(e % WF_CI4) : (int)(e / WF_T4);
        const i64 t = WF_IN_NHWC ? e / WF_CI4 : e % WF_T4;
        const int tw = (int)(t % WF_TW);
        const int th = (int)(t / WF_TW % WF_TH);
        const int n = (int)(t / (WF_TW * WF_TH));
        const bool live = c < WF_CI && t < WF_T;
        float d[4][4];
#pragma unroll
        for(int i = 0; i < 4; ++i)
#pragma unroll
            for(int j = 0; j < 4; ++j)
            {
                const int ih = 2 * th - WF_PH + i, iw = 2 * tw - WF_PW + j;
                const bool ok = live && (unsigned)ih < (unsigned)WF_HI && (unsigned)iw < (unsigned)WF_WI;
                const i64 at = WF_IN_NHWC ? (((i64)n * WF_HI + ih) * WF_WI + iw) * WF_CI + c
                                          : (((i64)n * WF_CI + c) * WF_HI + ih) * WF_WI + iw;
                d[i][j] = ok ? x[x_off + at] : 0.0f;
            }
        wino_f2x3_store_bt_d_b(d, v + v_off + (i64)c * WF_T4 + t, (i64)WF_CI4 * WF_T4);
    }
}

/* Element offset in the filter tensor of tap (r, s) from input channel ci to output channel co. */
DEVICE_FN i64 filt_index(int co, int ci, int r, int s)
{
    /* backward data: the tensor's K is our CI and its C our CO, taps rotated by 180 degrees */
    const int k = WF_BWD ? ci : co, c = WF_BWD ? co : ci, cs = WF_BWD ? WF_CO : WF_CI;
    const int rr = WF_BWD ? 2 - r : r, ss = WF_BWD ? 2 - s : s;
    return WF_FILT_NHWC ? (((i64)k * 3 + rr) * 3 + ss) * cs + c : (((i64)k * cs + c) * 3 + rr) * 3 + ss;
}

KERNEL void wf_filter_f2x3(const float* RESTRICT w, float* RESTRICT u, i64 u_off)
{
    const i64 total = (i64)WF_CI4 * WF_CO4;
    for(i64 e = GLOBAL_ID0; e < total; e += GLOBAL_SIZE0)
    {
        const int co = (int)(e % WF_CO4);
        const int ci = (int)(e / WF_CO4);
        const bool live = ci < WF_CI && co < WF_CO;
        float g[3][3];
#pragma unroll
        for(int r = 0; r < 3; ++r)
#pragma unroll
            for(int s = 0; s < 3; ++s)
                g[r][s] = live ? w[filt_index(co, ci, r, s)] : 0.0f;
        float h[4][3]; /* G g */
#pragma unroll
        for(int s = 0; s < 3; ++s)
        {
            h[0][s] = g[0][s];
            h[1][s] = 0.5f * (g[0][s] + g[1][s] + g[2][s]);
            h[2][s] = 0.5f * (g[0][s] - g[1][s] + g[2][s]);
            h[3][s] = g[2][s];
        }
        float* out = u + u_off + (i64)ci * WF_CO4 + co;
        const i64 plane = (i64)WF_CI4 * WF_CO4;
#pragma unroll
        for(int i = 0; i < 4; ++i)
        {
            out[(i * 4 + 0) * plane] = h[i][0];
            out[(i * 4 + 1) * plane] = 0.5f * (h[i][0] + h[i][1] + h[i][2]);
            out[(i * 4 + 2) * plane] = 0.5f * (h[i][0] - h[i][1] + h[i][2]);
            out[(i * 4 + 3) * plane] = h[i][2];
        }
    }
}

KERNEL void wf_out_f2x3(const float* RESTRICT m, i64 m_off, float* RESTRICT y)
{
    const i64 total = WF_T * WF_CO;
    for(i64 e = GLOBAL_ID0; e < total; e += GLOBAL_SIZE0)
    {
        const int co = (int)(e % WF_CO);
        const i64 t = e / WF_CO;
        const int tw = (int)(t % WF_TW);
        const int th = (int)(t / WF_TW % WF_TH);
        const int n = (int)(t / (WF_TW * WF_TH));
        const float* src = m + m_off + t * WF_CO4 + co;
        const i64 plane = (i64)WF_T4 * WF_CO4;
        float s[4][4];
#pragma unroll
        for(int xi = 0; xi < 16; ++xi)
            s[xi / 4][xi % 4] = src[xi * plane];
        float a[2][4]; /* A^T M */
#pragma unroll
        for(int j = 0; j < 4; ++j)
        {
            a[0][j] = s[0][j] + s[1][j] + s[2][j];
            a[1][j] = s[1][j] - s[2][j] - s[3][j];
        }
#pragma unroll
        for(int i = 0; i < 2; ++i)
        {
            const float o[2] = {a[i][0] + a[i][1] + a[i][2], a[i][1] - a[i][2] - a[i][3]};
            const int oh = 2 * th + i;
#pragma unroll
            for(int j = 0; j < 2; ++j)
            {
                const int ow = 2 * tw + j;
                if(oh < WF_HO && ow < WF_WO)
                {
                    const i64 at = WF_OUT_NHWC ? (((i64)n * WF_HO + oh) * WF_WO + ow) * WF_CO + co
                                               : (((i64)n * WF_CO + co) * WF_HO + oh) * WF_WO + ow;
                    y[at] = o[j];
                }
            }
        }
    }
}
