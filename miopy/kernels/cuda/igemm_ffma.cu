/* fp32 implicit-GEMM convolution on the CUDA cores (plain FFMA, true fp32, no tensor cores):
   solvers ConvIgemmFfmaFwd, ConvIgemmFfmaBwd and ConvIgemmFfmaWrw
   (solvers/conv/implicit_gemm_ffma.py). One kernel for the three directions, FF_DIR 0/1/2:

     forward          rows m = (n, p, q) output pixels, columns = output channels k,
                      reduction j = (c, r, s) filter taps gathered from x on the fly
     backward data    rows m = (n, h, w) input pixels, columns = input channels c,
                      reduction j = (k, r, s): dy[n][k][(h + ph - r*dh) / sh][(w + pw - s*dw) / sw]
                      where the division is exact and in range, else zero (no zero-inserted dy)
     backward weights rows = output channels k, columns (c, r, s) filter taps,
                      reduction j = (n, p, q) over the batch and the output pixels

   Every tensor is addressed through its strides (FF_XS*, FF_WS*, FF_YS*: NCHW, NHWC or mixed);
   with FF_CFAST the taps run channel-fastest (r, s, c), the order of a channels-last tensor,
   else (c, r, s). Groups are the grid's z (FF_G groups, FF_C and FF_K per group).

   A block computes a BM x BN tile of the GEMM with (BM/TM) x (BN/TN) threads, each a TM x TN
   register block of outer products (TM, TN of 4 or 8: the thread's rows are TM/4 runs of 4,
   BM/(TM/4) apart, read from shared memory as float4s; likewise its columns). Each BK-deep slice
   of A (BK x BM) and B (BK x BN) is gathered from global memory into registers while the
   previous slice is multiplied out of shared memory, then stored into the other of two shared
   buffers (one barrier per slice). FF_A_MFAST / FF_B_NFAST say along which axis neighbouring
   threads load (the one contiguous in memory); FF_OUT_MFAST along which axis they lie in the
   output tile.

   With FF_SPLIT > 1 the reduction is split over the grid's y: each slice writes its partial
   GEMM tile into part[g][slice][row][col] and igemm_ffma_sum adds the slices in order
   (deterministic) into the output. Needs every tensor under 2^31 elements (int indices). */

// miopy-compile-test: -DMIOPY_DTYPE=0
// miopy-compile-test: -DMIOPY_DTYPE=0 -DFF_DIR=1 -DFF_SH=2 -DFF_SW=2 -DFF_H=18 -DFF_W=18 -DFF_BM=64 -DFF_BN=32 -DFF_TM=8 -DFF_TN=4 -DFF_BK=16 -DFF_A_MFAST=1
// miopy-compile-test: -DMIOPY_DTYPE=0 -DFF_DIR=2 -DFF_SPLIT=4 -DFF_CFAST=1 -DFF_BM=32 -DFF_BN=64 -DFF_TM=4 -DFF_TN=4 -DFF_B_NFAST=1

#include "common/miopy_types.h"

#if MIOPY_DTYPE != 0
#error "the FFMA implicit GEMM is fp32 (MIOPY_DTYPE 0)"
#endif

/* Defaults only so that the file compiles on its own (the CUDA compile test): a 3x3 layer, packed
   NCHW; the solvers define every one. */
#ifndef FF_N
#define FF_N 2
#define FF_C 16
#define FF_H 9
#define FF_W 9
#define FF_K 24
#define FF_R 3
#define FF_S 3
#define FF_P 9
#define FF_Q 9
#define FF_PH 1
#define FF_PW 1
#define FF_SH 1
#define FF_SW 1
#define FF_DH 1
#define FF_DW 1
#endif
#ifndef FF_G
#define FF_G 1
#endif
#ifndef FF_XSN
#define FF_XSN (FF_G * FF_C * FF_H * FF_W)
#define FF_XSC (FF_H * FF_W)
#define FF_XSH FF_W
#define FF_XSW 1
#define FF_WSK (FF_C * FF_R * FF_S)
#define FF_WSC (FF_R * FF_S)
#define FF_WSR FF_S
#define FF_WSS 1
#define FF_YSN (FF_G * FF_K * FF_P * FF_Q)
#define FF_YSC (FF_P * FF_Q)
#define FF_YSH FF_Q
#define FF_YSW 1
#endif
#ifndef FF_DIR
#define FF_DIR 0
#endif
#ifndef FF_BM
#define FF_BM 128
#endif
#ifndef FF_BN
#define FF_BN 128
#endif
#ifndef FF_BK
#define FF_BK 8
#endif
#ifndef FF_TM
#define FF_TM 8
#endif
#ifndef FF_TN
#define FF_TN 8
#endif
#ifndef FF_SPLIT
#define FF_SPLIT 1
#endif
#ifndef FF_CFAST
#define FF_CFAST 0
#endif
#ifndef FF_A_MFAST
#define FF_A_MFAST 0
#endif
#ifndef FF_B_NFAST
#define FF_B_NFAST 0
#endif
#ifndef FF_OUT_MFAST
#define FF_OUT_MFAST 0
#endif

#if FF_DIR == 0
#define FF_GM (FF_N * FF_P * FF_Q)
#define FF_GN FF_K
#define FF_GK (FF_C * FF_R * FF_S)
#elif FF_DIR == 1
#define FF_GM (FF_N * FF_H * FF_W)
#define FF_GN FF_C
#define FF_GK (FF_K * FF_R * FF_S)
#else
#define FF_GM FF_K
#define FF_GN (FF_C * FF_R * FF_S)
#define FF_GK (FF_N * FF_P * FF_Q)
#endif

#define FF_T ((FF_BM / FF_TM) * (FF_BN / FF_TN)) /* threads */
#define FF_KT ((FF_GK + FF_BK - 1) / FF_BK)      /* reduction slices */
#define FF_TILES_N ((FF_GN + FF_BN - 1) / FF_BN)
#define FF_LA (FF_BM * FF_BK / FF_T) /* A elements each thread loads per slice */
#define FF_LB (FF_BN * FF_BK / FF_T)
#define FF_AP (FF_BM + 4) /* shared row pitches (floats): 16-byte aligned, fewer store conflicts */
#define FF_BP (FF_BN + 4)
#define FF_RUN_M (FF_BM / (FF_TM / 4)) /* distance between a thread's runs of 4 rows */
#define FF_RUN_N (FF_BN / (FF_TN / 4))
#define FF_FAR (1 << 28) /* a coordinate no tap brings into range */

static_assert(FF_TM % 4 == 0 && FF_TN % 4 == 0 && FF_TM <= 8 && FF_TN <= 8, "TM and TN are 4 or 8");
static_assert(FF_BM % FF_TM == 0 && FF_BN % FF_TN == 0, "whole thread blocks");
static_assert((FF_BM * FF_BK) % FF_T == 0 && (FF_BN * FF_BK) % FF_T == 0, "even loads");
static_assert(FF_SPLIT >= 1, "split");

/* What a GEMM row (A) or column (B) keeps for the gather: a base offset and two coordinates. */
struct FfLine
{
    int base, h, w;
};

/* Tap j of ch channels into (channel, r, s) in the reduction's order. */
DEVICE_FN void ff_tap(int j, int ch, int& c, int& r, int& s)
{
#if FF_CFAST != 0
    const int rs = j / ch;
    c = j - rs * ch;
    r = rs / FF_S;
    s = rs - r * FF_S;
#else
    const int cr = j / FF_S;
    s = j - cr * FF_S;
    c = cr / FF_R;
    r = cr - c * FF_R;
#endif
}

/* (image, row, column) of a pixel index over an h x w image. */
DEVICE_FN void ff_pixel(int m, int h, int w, int& img, int& y, int& x)
{
    img = m / (h * w);
    const int yx = m - img * (h * w);
    y = yx / w;
    x = yx - y * w;
}

#if FF_DIR == 0 /* ---- forward: A = x gathered, B = w, out = y ------------------------------- */
DEVICE_FN FfLine ff_a_line(int m, int g)
{
    int img, p, q;
    ff_pixel(m, FF_P, FF_Q, img, p, q);
    const bool ok = m < FF_GM;
    return {img * FF_XSN + g * FF_C * FF_XSC, ok ? p * FF_SH - FF_PH : -FF_FAR, q * FF_SW - FF_PW};
}
DEVICE_FN float ff_a_load(const float* RESTRICT x, const FfLine& l, int j)
{
    int c, r, s;
    ff_tap(j, FF_C, c, r, s);
    const int ih = l.h + r * FF_DH, iw = l.w + s * FF_DW;
    const bool ok = j < FF_GK && (unsigned)ih < (unsigned)FF_H && (unsigned)iw < (unsigned)FF_W;
    return ok ? x[l.base + c * FF_XSC + ih * FF_XSH + iw * FF_XSW] : 0.0f;
}
DEVICE_FN FfLine ff_b_line(int k, int g)
{
    return {(g * FF_K + k) * FF_WSK, k < FF_K ? 0 : -1, 0};
}
DEVICE_FN float ff_b_load(const float* RESTRICT w, const FfLine& l, int j)
{
    int c, r, s;
    ff_tap(j, FF_C, c, r, s);
    const bool ok = j < FF_GK && l.h >= 0;
    return ok ? w[l.base + c * FF_WSC + r * FF_WSR + s * FF_WSS] : 0.0f;
}
DEVICE_FN int ff_out_row(int m)
{
    int img, p, q;
    ff_pixel(m, FF_P, FF_Q, img, p, q);
    return img * FF_YSN + p * FF_YSH + q * FF_YSW;
}
DEVICE_FN int ff_out_col(int k, int g) { return (g * FF_K + k) * FF_YSC; }

#elif FF_DIR == 1 /* ---- backward data: A = dy gathered, B = w, out = dx ---------------------- */
DEVICE_FN FfLine ff_a_line(int m, int g)
{
    int img, h, w;
    ff_pixel(m, FF_H, FF_W, img, h, w);
    const bool ok = m < FF_GM;
    return {img * FF_YSN + g * FF_K * FF_YSC, ok ? h + FF_PH : -FF_FAR, w + FF_PW};
}
DEVICE_FN float ff_a_load(const float* RESTRICT dy, const FfLine& l, int j)
{
    int k, r, s;
    ff_tap(j, FF_K, k, r, s);
    const int th = l.h - r * FF_DH, tw = l.w - s * FF_DW;
    const int p = th / FF_SH, q = tw / FF_SW;
    const bool ok = j < FF_GK && th >= 0 && tw >= 0 && p * FF_SH == th && q * FF_SW == tw && p < FF_P && q < FF_Q;
    return ok ? dy[l.base + k * FF_YSC + p * FF_YSH + q * FF_YSW] : 0.0f;
}
DEVICE_FN FfLine ff_b_line(int c, int g)
{
    return {g * FF_K * FF_WSK + c * FF_WSC, c < FF_C ? 0 : -1, 0};
}
DEVICE_FN float ff_b_load(const float* RESTRICT w, const FfLine& l, int j)
{
    int k, r, s;
    ff_tap(j, FF_K, k, r, s);
    const bool ok = j < FF_GK && l.h >= 0;
    return ok ? w[l.base + k * FF_WSK + r * FF_WSR + s * FF_WSS] : 0.0f;
}
DEVICE_FN int ff_out_row(int m)
{
    int img, h, w;
    ff_pixel(m, FF_H, FF_W, img, h, w);
    return img * FF_XSN + h * FF_XSH + w * FF_XSW;
}
DEVICE_FN int ff_out_col(int c, int g) { return (g * FF_C + c) * FF_XSC; }

#else /* ---- backward weights: A = dy (k x pixels), B = x gathered (pixels x taps), out = dw ---- */
DEVICE_FN FfLine ff_a_line(int k, int g)
{
    return {(g * FF_K + k) * FF_YSC, k < FF_K ? 0 : -1, 0};
}
DEVICE_FN float ff_a_load(const float* RESTRICT dy, const FfLine& l, int j)
{
    int img, p, q;
    ff_pixel(j, FF_P, FF_Q, img, p, q);
    const bool ok = j < FF_GK && l.h >= 0;
    return ok ? dy[l.base + img * FF_YSN + p * FF_YSH + q * FF_YSW] : 0.0f;
}
DEVICE_FN FfLine ff_b_line(int n, int g)
{
    int c, r, s;
    ff_tap(n, FF_C, c, r, s);
    const bool ok = n < FF_GN;
    return {(g * FF_C + c) * FF_XSC, ok ? r * FF_DH - FF_PH : -FF_FAR, s * FF_DW - FF_PW};
}
DEVICE_FN float ff_b_load(const float* RESTRICT x, const FfLine& l, int j)
{
    int img, p, q;
    ff_pixel(j, FF_P, FF_Q, img, p, q);
    const int ih = p * FF_SH + l.h, iw = q * FF_SW + l.w;
    const bool ok = j < FF_GK && (unsigned)ih < (unsigned)FF_H && (unsigned)iw < (unsigned)FF_W;
    return ok ? x[l.base + img * FF_XSN + ih * FF_XSH + iw * FF_XSW] : 0.0f;
}
DEVICE_FN int ff_out_row(int k) { return k * FF_WSK; }
DEVICE_FN int ff_out_col(int n, int g)
{
    int c, r, s;
    ff_tap(n, FF_C, c, r, s);
    return g * FF_K * FF_WSK + c * FF_WSC + r * FF_WSR + s * FF_WSS;
}
#endif

/* Load i of a thread in a LINES x BK tile: its line (row or column) and its reduction index. */
template <int LINES, bool LINE_FAST>
DEVICE_FN void ff_pos(int tid, int i, int& line, int& jj)
{
    if(LINE_FAST)
    {
        if(FF_T % LINES == 0)
            line = tid % LINES, jj = tid / LINES + i * (FF_T / LINES);
        else
            line = (tid + i * FF_T) % LINES, jj = (tid + i * FF_T) / LINES;
    }
    else
    {
        if(FF_T % FF_BK == 0)
            jj = tid % FF_BK, line = tid / FF_BK + i * (FF_T / FF_BK);
        else
            jj = (tid + i * FF_T) % FF_BK, line = (tid + i * FF_T) / FF_BK;
    }
}

KERNEL void __launch_bounds__(FF_T)
    igemm_ffma(const float* RESTRICT a_src, const float* RESTRICT b_src, float* RESTRICT out, float* RESTRICT part)
{
    extern __shared__ __align__(16) float ff_smem[]; /* A: [2][BK][AP], then B: [2][BK][BP] */
    float* const a_sh = ff_smem;
    float* const b_sh = ff_smem + 2 * FF_BK * FF_AP;
    const int tid = threadIdx.x;
    const int z = blockIdx.y; /* slice of the reduction */
    const int g = blockIdx.z; /* group */
    const int m0 = (blockIdx.x / FF_TILES_N) * FF_BM;
    const int n0 = (blockIdx.x % FF_TILES_N) * FF_BN;
    const int kt0 = (int)((long long)z * FF_KT / FF_SPLIT);
    const int kt1 = (int)((long long)(z + 1) * FF_KT / FF_SPLIT);

    FfLine a_line[FF_LA], b_line[FF_LB];
#pragma unroll
    for(int i = 0; i < FF_LA; ++i)
    {
        int line, jj;
        ff_pos<FF_BM, FF_A_MFAST>(tid, i, line, jj);
        a_line[i] = ff_a_line(m0 + line, g);
    }
#pragma unroll
    for(int i = 0; i < FF_LB; ++i)
    {
        int line, jj;
        ff_pos<FF_BN, FF_B_NFAST>(tid, i, line, jj);
        b_line[i] = ff_b_line(n0 + line, g);
    }

    float a_reg[FF_LA], b_reg[FF_LB];
    auto fetch = [&](int kt) {
        const int j0 = kt * FF_BK;
#pragma unroll
        for(int i = 0; i < FF_LA; ++i)
        {
            int line, jj;
            ff_pos<FF_BM, FF_A_MFAST>(tid, i, line, jj);
            a_reg[i] = ff_a_load(a_src, a_line[i], j0 + jj);
        }
#pragma unroll
        for(int i = 0; i < FF_LB; ++i)
        {
            int line, jj;
            ff_pos<FF_BN, FF_B_NFAST>(tid, i, line, jj);
            b_reg[i] = ff_b_load(b_src, b_line[i], j0 + jj);
        }
    };
    auto stash = [&](int buf) {
#pragma unroll
        for(int i = 0; i < FF_LA; ++i)
        {
            int line, jj;
            ff_pos<FF_BM, FF_A_MFAST>(tid, i, line, jj);
            a_sh[(buf * FF_BK + jj) * FF_AP + line] = a_reg[i];
        }
#pragma unroll
        for(int i = 0; i < FF_LB; ++i)
        {
            int line, jj;
            ff_pos<FF_BN, FF_B_NFAST>(tid, i, line, jj);
            b_sh[(buf * FF_BK + jj) * FF_BP + line] = b_reg[i];
        }
    };

#if FF_OUT_MFAST != 0
    const int ty = tid % (FF_BM / FF_TM), tx = tid / (FF_BM / FF_TM);
#else
    const int tx = tid % (FF_BN / FF_TN), ty = tid / (FF_BN / FF_TN);
#endif
    float acc[FF_TM][FF_TN];
#pragma unroll
    for(int i = 0; i < FF_TM; ++i)
#pragma unroll
        for(int j = 0; j < FF_TN; ++j)
            acc[i][j] = 0.0f;

    fetch(kt0);
    stash(0);
    __syncthreads();
    for(int kt = kt0; kt < kt1; ++kt)
    {
        const int buf = (kt - kt0) & 1;
        const bool more = kt + 1 < kt1;
        if(more)
            fetch(kt + 1); /* global loads in flight during the products below */
        const float* as = a_sh + buf * FF_BK * FF_AP + ty * 4;
        const float* bs = b_sh + buf * FF_BK * FF_BP + tx * 4;
#pragma unroll
        for(int kk = 0; kk < FF_BK; ++kk)
        {
            float a[FF_TM], b[FF_TN];
#pragma unroll
            for(int u = 0; u < FF_TM / 4; ++u)
            {
                const float4 v = *reinterpret_cast<const float4*>(as + kk * FF_AP + u * FF_RUN_M);
                a[4 * u] = v.x, a[4 * u + 1] = v.y, a[4 * u + 2] = v.z, a[4 * u + 3] = v.w;
            }
#pragma unroll
            for(int u = 0; u < FF_TN / 4; ++u)
            {
                const float4 v = *reinterpret_cast<const float4*>(bs + kk * FF_BP + u * FF_RUN_N);
                b[4 * u] = v.x, b[4 * u + 1] = v.y, b[4 * u + 2] = v.z, b[4 * u + 3] = v.w;
            }
#pragma unroll
            for(int i = 0; i < FF_TM; ++i)
#pragma unroll
                for(int j = 0; j < FF_TN; ++j)
                    acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        if(more)
            stash(buf ^ 1); /* the other buffer: last read before the previous barrier */
        __syncthreads();
    }

    /* ---- epilogue: straight from the registers (or into this slice's partial tile) ---- */
#pragma unroll
    for(int i = 0; i < FF_TM; ++i)
    {
        const int row = m0 + (i / 4) * FF_RUN_M + ty * 4 + (i % 4);
        if(row >= FF_GM)
            continue;
#if FF_SPLIT > 1
        float* dst = part + ((i64)(g * FF_SPLIT + z) * FF_GM + row) * FF_GN;
#else
        float* dst = out + ff_out_row(row);
#endif
#pragma unroll
        for(int j = 0; j < FF_TN; ++j)
        {
            const int col = n0 + (j / 4) * FF_RUN_N + tx * 4 + (j % 4);
            if(col >= FF_GN)
                continue;
#if FF_SPLIT > 1
            dst[col] = acc[i][j];
#else
            dst[ff_out_col(col, g)] = acc[i][j];
#endif
        }
    }
}

/* Split reduction: each output the sum of its FF_SPLIT partials, in slice order. */
KERNEL void igemm_ffma_sum(const float* RESTRICT part, float* RESTRICT out)
{
    const i64 e = GLOBAL_ID0;
    const i64 per_group = (i64)FF_GM * FF_GN;
    if(e >= per_group * FF_G)
        return;
    const int g = (int)(e / per_group);
    const int rc = (int)(e - g * per_group);
    const int row = rc / FF_GN;
    const int col = rc - row * FF_GN;
    const float* p = part + (i64)g * FF_SPLIT * per_group + rc;
    float v = p[0];
#pragma unroll 4
    for(int s = 1; s < FF_SPLIT; ++s)
        v += p[s * per_group];
    out[ff_out_row(row) + ff_out_col(col, g)] = v;
}
