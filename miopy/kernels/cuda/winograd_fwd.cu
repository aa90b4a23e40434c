/* Winograd F(2x2, 3x3) and F(4x4, 3x3) forward (and stride-1 backward-data) convolution, fp32
   (solvers ConvWinograd{Fwd,Bwd}F2x3Tf32x3 and ConvWinograd{Fwd,Bwd}F4x3Tf32x3,
   solvers/conv/winograd_fwd_tf32x3.py): the data, filter and output transforms around WF_A^2
   GEMMs run by kernels/cuda/igemm_wrw_tf32x3.cu (3xTF32, batched over gridDim.z).

   The convolution run here reads an input of WF_CI channels of WF_HI x WF_WI pixels and writes
   WF_CO channels of WF_HO x WF_WO pixels (forward: x -> y; backward data: dy -> dx with the
   filter rotated by 180 degrees and its two channel axes swapped, WF_BWD = 1). The output is cut
   into tiles t = (n, th, tw) of WF_M x WF_M pixels (WF_M = 2 or 4; TH x TW per image, the last
   ones partly past the output; T tiles padded to WF_T4, a multiple of 4). For each tile the
   WF_A x WF_A input patch d (WF_A = WF_M + 2) at rows WF_M*th - PH.., columns WF_M*tw - PW..
   (zero outside the input) and for each filter g (3 x 3):
       V = B^T d B,  U = G g G^T,
   (the matrices: common/winograd_f2x3.h, common/winograd_f4x3.h). Per position xi of the WF_A^2:
   M[xi][t][co] = sum over ci of V[xi][ci][t] * U[xi][ci][co] (the GEMMs; the reduction index
   outermost in both operands, as the batched wrw GEMM reads them), then the output tile
   Y = A^T M A.

   wf_in:     V[xi][CI4][T4] (zero past CI and T), one work item per (ci, t).
   wf_filter: U[xi][CI4][CO4] (zero past CI and CO), one work item per (ci, co).
   wf_out:    the output from M[xi][T4][CO4], one work item per (t, co).
   Layouts: WF_IN_NHWC / WF_OUT_NHWC (else NCHW), WF_FILT_NHWC (K x R x S x C, else K x C x R x S
   of the tensor as it lies: forward K = CO, C = CI; backward data K = CI, C = CO). */

// miopy-compile-test: -DMIOPY_DTYPE=0
// miopy-compile-test: -DMIOPY_DTYPE=0 -DWF_M=4 -DWF_N=2 -DWF_CI=5 -DWF_HI=7 -DWF_WI=9 -DWF_CO=6 -DWF_HO=5 -DWF_WO=7 -DWF_PH=0 -DWF_PW=0 -DWF_TH=2 -DWF_TW=2 -DWF_T4=8 -DWF_CI4=8 -DWF_CO4=8 -DWF_IN_NHWC=1 -DWF_OUT_NHWC=1 -DWF_FILT_NHWC=1 -DWF_BWD=1

#include "common/miopy_types.h"
#include "common/winograd_f2x3.h"
#include "common/winograd_f4x3.h"

#if MIOPY_DTYPE != 0
#error "the Winograd 3xTF32 kernels are for fp32 (MIOPY_DTYPE 0)"
#endif

#ifndef WF_M
#define WF_M 2
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
#define WF_TH (28 / WF_M)
#define WF_TW (28 / WF_M)
#define WF_T4 (32 * WF_TH * WF_TW)
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

#if WF_M == 2
#define WF_BT wino_f2x3_bt
#define WF_G wino_f2x3_g
#define WF_AT wino_f2x3_at
#elif WF_M == 4
#define WF_BT wino_f4x3_bt
#define WF_G wino_f4x3_g
#define WF_AT wino_f4x3_at
#else
#error "WF_M (output tile side) is 2 or 4"
#endif
#define WF_A (WF_M + 2)            /* input tile side */
#define WF_T ((i64)WF_N * WF_TH * WF_TW) /* real tiles; WF_T4 >= WF_T */

KERNEL void wf_in(const float* RESTRICT x, i64 x_off, float* RESTRICT v, i64 v_off)
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
        float d[WF_A][WF_A], vt[WF_A][WF_A];
#pragma unroll
        for(int i = 0; i < WF_A; ++i)
#pragma unroll
            for(int j = 0; j < WF_A; ++j)
            {
                const int ih = WF_M * th - WF_PH + i, iw = WF_M * tw - WF_PW + j;
                const bool ok = live && (unsigned)ih < (unsigned)WF_HI && (unsigned)iw < (unsigned)WF_WI;
                const i64 at = WF_IN_NHWC ? (((i64)n * WF_HI + ih) * WF_WI + iw) * WF_CI + c
                                          : (((i64)n * WF_CI + c) * WF_HI + ih) * WF_WI + iw;
                d[i][j] = ok ? x[x_off + at] : 0.0f;
            }
        wino_2d<WF_A, WF_A, WF_BT>(d, vt);
        float* out = v + v_off + (i64)c * WF_T4 + t;
#pragma unroll
        for(int xi = 0; xi < WF_A * WF_A; ++xi)
            out[xi * ((i64)WF_CI4 * WF_T4)] = vt[xi / WF_A][xi % WF_A];
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

KERNEL void wf_filter(const float* RESTRICT w, float* RESTRICT u, i64 u_off)
{
    const i64 total = (i64)WF_CI4 * WF_CO4;
    for(i64 e = GLOBAL_ID0; e < total; e += GLOBAL_SIZE0)
    {
        const int co = (int)(e % WF_CO4);
        const int ci = (int)(e / WF_CO4);
        const bool live = ci < WF_CI && co < WF_CO;
        float g[3][3], ut[WF_A][WF_A];
#pragma unroll
        for(int r = 0; r < 3; ++r)
#pragma unroll
            for(int s = 0; s < 3; ++s)
                g[r][s] = live ? w[filt_index(co, ci, r, s)] : 0.0f;
        wino_2d<3, WF_A, WF_G>(g, ut);
        float* out = u + u_off + (i64)ci * WF_CO4 + co;
#pragma unroll
        for(int xi = 0; xi < WF_A * WF_A; ++xi)
            out[xi * ((i64)WF_CI4 * WF_CO4)] = ut[xi / WF_A][xi % WF_A];
    }
}

KERNEL void wf_out(const float* RESTRICT m, i64 m_off, float* RESTRICT y)
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
        float s[WF_A][WF_A], o[WF_M][WF_M];
#pragma unroll
        for(int xi = 0; xi < WF_A * WF_A; ++xi)
            s[xi / WF_A][xi % WF_A] = src[xi * ((i64)WF_T4 * WF_CO4)];
        wino_2d<WF_A, WF_M, WF_AT>(s, o);
#pragma unroll
        for(int i = 0; i < WF_M; ++i)
#pragma unroll
            for(int j = 0; j < WF_M; ++j)
            {
                const int oh = WF_M * th + i, ow = WF_M * tw + j;
                if(oh < WF_HO && ow < WF_WO)
                {
                    const i64 at = WF_OUT_NHWC ? (((i64)n * WF_HO + oh) * WF_WO + ow) * WF_CO + co
                                               : (((i64)n * WF_CO + co) * WF_HO + oh) * WF_WO + ow;
                    y[at] = o[i][j];
                }
            }
    }
}
