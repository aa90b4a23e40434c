/* fp32 tensor reshapes around the 3xTF32 implicit-GEMM kernels for layers those cannot take as
   they are (solvers/conv/implicit_gemm_pad_tf32x3.py, implicit_gemm_phase_tf32x3.py):

   pad_nchw_to_nhwc_f32: src [ROWS_SRC][C_SRC][PLANE] (an NCHW tensor, or a filter K x C x R*S)
   to dst [rows_dst][PLANE][C_DST] (NHWC, or K x R*S x C) with zeros where a row or a channel is
   past src's: the transpose and the channel padding of the 3xTF32 solvers' inputs in one pass.
   One work item per (row, pixel): it reads C_SRC floats of consecutive planes (coalesced across
   the warp) and writes C_DST floats (16-byte stores where C_DST % 4 == 0). Defines PT_PLANE,
   PT_C_SRC, PT_C_DST; arguments src, dst, rows of dst, rows of src.

   phase_filter_f32: the filter of a strided backward-data convolution rearranged for its phase
   decomposition (implicit_gemm_phase_tf32x3.py): dst [CZ][RR][SS][K], filter row
   o = (ph * SW + pw) * C + c (o < SH*SW*C, zero rows after), tap (dr, ds) of dy channel k =
   w[k][c][r][s] with r = ph + PH - SH * (dr + D0) and s = pw + PW - SW * (ds + E0) where those
   lie inside the filter, else zero. Filter strides come as arguments (any layout).

   phase_scatter_f32: dx from the phase-decomposed result z [N][H2][W2][CZ]: dx[n][c][h][w] =
   z[n][h / SH][w / SW][((h % SH) * SW + w % SW) * C + c], one work item per dx element in dx's
   memory order (PS_NCHW 1: packed NCHW, else packed NHWC). */

// miopy-compile-test: -DMIOPY_DTYPE=0
// miopy-compile-test: -DMIOPY_DTYPE=0 -DPT_PLANE=49 -DPT_C_SRC=3 -DPT_C_DST=4 -DPF_K=64 -DPF_C=3 -DPF_R=7 -DPF_S=7 -DPF_SH=2 -DPF_SW=2 -DPF_PH=3 -DPF_PW=3 -DPF_D0=-1 -DPF_E0=-1 -DPF_RR=4 -DPF_SS=4 -DPF_CZ=12 -DPS_N=32 -DPS_NCHW=1
// miopy-compile-test: -DMIOPY_DTYPE=0 -DPT_PLANE=50176 -DPT_C_SRC=6 -DPT_C_DST=10 -DPS_NCHW=0 -DPS_C=5 -DPS_SH=3 -DPS_SW=1 -DPS_CZ=16 -DPS_H=10 -DPS_W=7 -DPS_H2=4 -DPS_W2=7

#include "common/miopy_types.h"

#if MIOPY_DTYPE != 0
#error "the 3xTF32 reshapes are for fp32 (MIOPY_DTYPE 0)"
#endif

/* Defaults only so that the file compiles on its own (the CUDA compile test). */
#ifndef PT_PLANE
#define PT_PLANE 50176
#endif
#ifndef PT_C_SRC
#define PT_C_SRC 3
#endif
#ifndef PT_C_DST
#define PT_C_DST 4
#endif

KERNEL void pad_nchw_to_nhwc_f32(const float* RESTRICT src, float* RESTRICT dst, i64 rows_dst, i64 rows_src)
{
    const i64 total = rows_dst * PT_PLANE;
    for(i64 e = GLOBAL_ID0; e < total; e += GLOBAL_SIZE0)
    {
        const i64 a = e / PT_PLANE;
        const int p = (int)(e - a * PT_PLANE);
        const bool in_src = a < rows_src;
        const float* s = src + a * (PT_C_SRC * (i64)PT_PLANE) + p;
        float* d = dst + e * PT_C_DST;
        if(PT_C_DST % 4 == 0)
        {
#pragma unroll 4
            for(int c = 0; c < PT_C_DST; c += 4)
            {
                float4 v;
                v.x = in_src && c < PT_C_SRC ? s[(i64)c * PT_PLANE] : 0.0f;
                v.y = in_src && c + 1 < PT_C_SRC ? s[(i64)(c + 1) * PT_PLANE] : 0.0f;
                v.z = in_src && c + 2 < PT_C_SRC ? s[(i64)(c + 2) * PT_PLANE] : 0.0f;
                v.w = in_src && c + 3 < PT_C_SRC ? s[(i64)(c + 3) * PT_PLANE] : 0.0f;
                *reinterpret_cast<float4*>(d + c) = v;
            }
        }
        else
        {
#pragma unroll 4
            for(int c = 0; c < PT_C_DST; ++c)
                d[c] = in_src && c < PT_C_SRC ? s[(i64)c * PT_PLANE] : 0.0f;
        }
    }
}

#ifndef PF_K
#define PF_K 64
#define PF_C 3
#define PF_R 7
#define PF_S 7
#define PF_SH 2
#define PF_SW 2
#define PF_PH 3
#define PF_PW 3
#define PF_D0 (-1)
#define PF_E0 (-1)
#define PF_RR 4
#define PF_SS 4
#define PF_CZ 12
#endif

KERNEL void phase_filter_f32(const float* RESTRICT w, float* RESTRICT dst, i64 dst_off, i64 sk, i64 sc, i64 sr, i64 ss)
{
    const int total = PF_CZ * PF_RR * PF_SS * PF_K;
    const int e = (int)GLOBAL_ID0;
    if(e >= total)
        return;
    const int k = e % PF_K;
    const int tap = e / PF_K;
    const int ds = tap % PF_SS;
    const int dr = tap / PF_SS % PF_RR;
    const int o = tap / (PF_SS * PF_RR);
    const int c = o % PF_C;
    const int pw = o / PF_C % PF_SW;
    const int ph = o / (PF_C * PF_SW);
    const int r = ph + PF_PH - PF_SH * (dr + PF_D0);
    const int s = pw + PF_PW - PF_SW * (ds + PF_E0);
    const bool ok = o < PF_SH * PF_SW * PF_C && r >= 0 && r < PF_R && s >= 0 && s < PF_S;
    dst[dst_off + e] = ok ? w[k * sk + c * sc + r * sr + s * ss] : 0.0f;
}

#ifndef PS_N
#define PS_N 32
#endif
#ifndef PS_C
#define PS_C 3
#define PS_H 224
#define PS_W 224
#define PS_SH 2
#define PS_SW 2
#define PS_H2 112
#define PS_W2 112
#define PS_CZ 12
#endif
#ifndef PS_NCHW
#define PS_NCHW 1
#endif

KERNEL void phase_scatter_f32(const float* RESTRICT z, i64 z_off, float* RESTRICT dx)
{
    const i64 total = (i64)PS_N * PS_C * PS_H * PS_W;
    for(i64 e = GLOBAL_ID0; e < total; e += GLOBAL_SIZE0)
    {
        int c, h, w;
        i64 n;
        if(PS_NCHW)
        {
            w = (int)(e % PS_W);
            const i64 t = e / PS_W;
            h = (int)(t % PS_H);
            const i64 u = t / PS_H;
            c = (int)(u % PS_C);
            n = u / PS_C;
        }
        else
        {
            c = (int)(e % PS_C);
            const i64 t = e / PS_C;
            w = (int)(t % PS_W);
            const i64 u = t / PS_W;
            h = (int)(u % PS_H);
            n = u / PS_H;
        }
        const int h2 = h / PS_SH, w2 = w / PS_SW;
        const int o = ((h - h2 * PS_SH) * PS_SW + (w - w2 * PS_SW)) * PS_C + c;
        dx[e] = z[z_off + ((n * PS_H2 + h2) * PS_W2 + w2) * PS_CZ + o];
    }
}
