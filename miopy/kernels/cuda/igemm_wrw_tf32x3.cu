/* fp32 implicit-GEMM backward-weights convolution on tensor cores with fp32 accuracy (3xTF32;
   solver ConvIgemmWrwTf32x3): packed NHWC x and dy, dw packed K x R x S x C, groups = 1. Never
   plain TF32 (common/mma_tf32x3.h).

   GEMM view: D[k][n] = sum_j dy[j][k] * X[j][n] with k an output channel (M = K), n = (r, s, c)
   a filter tap (KD = R*S*C) and j = (n, p, q) an output pixel (the reduction, N*P*Q long): the
   im2col matrix X of x is gathered on the fly. Both operands lie with the reduction index
   outermost, so tiles are stored k-major in shared memory (rows j of BM or BN floats, padded by
   8 so that the fragment reads, float t of row g in a lane, hit 32 distinct banks) and
   fragments are read one float at a time. The reduction is split over gridDim.y blocks
   (TX_SPLIT_K): slice blockIdx.y writes its partial dw to the workspace and tf32x3_wrw_sum adds
   the slices into dw; without a split the block writes dw itself.

   With TX_BATCH > 1, gridDim.z runs that many independent GEMMs of the same shape: GEMM z reads
   x and dy from z times their sizes on and writes dw (or its slices of the partial sums, laid
   out [split][batch][K][KD]) from z * K * KD on.

   With TX_OUT_NCHW = 1, dw is packed K x C x R x S instead (tap n = (r, s, c) of filter k goes to
   dw[(k*C + c)*R*S + r*S + s]), written straight from the accumulators or by the sum.

   Needs C % 4 == 0 and K % 4 == 0. */

// miopy-compile-test: -DMIOPY_DTYPE=0
// miopy-compile-test: -DMIOPY_DTYPE=0 -DTX_BM=64 -DTX_BN=64 -DTX_BK=16 -DTX_WARPS_M=2 -DTX_WARPS_N=2 -DTX_STAGES=4 -DTX_SPLIT_K=16
// miopy-compile-test: -DMIOPY_DTYPE=0 -DTX_OUT_NCHW=1
// miopy-compile-test: -DMIOPY_DTYPE=0 -DTX_BATCH=16 -DTX_SPLIT_K=4 -DTX_BM=128 -DTX_BN=64 -DTX_BK=16 -DTX_WARPS_M=2 -DTX_WARPS_N=2 -DTX_STAGES=4
// miopy-compile-test: -DMIOPY_DTYPE=0 -DTX_OUT_NCHW=1 -DTX_SPLIT_K=1
// miopy-compile-test: -DMIOPY_DTYPE=0 -DTX_N=3 -DTX_C=12 -DTX_H=9 -DTX_W=11 -DTX_K=20 -DTX_R=2 -DTX_S=3 -DTX_P=4 -DTX_Q=5 -DTX_PH=1 -DTX_PW=0 -DTX_SH=2 -DTX_SW=2 -DTX_DH=2 -DTX_DW=1

#include "common/mma_tf32x3.h"

#if MIOPY_DTYPE != 0
#error "the 3xTF32 kernels are for fp32 (MIOPY_DTYPE 0)"
#endif

#ifndef TX_N
#define TX_N 32
#define TX_C 128
#define TX_H 28
#define TX_W 28
#define TX_K 128
#define TX_R 3
#define TX_S 3
#define TX_P 28
#define TX_Q 28
#define TX_PH 1
#define TX_PW 1
#define TX_SH 1
#define TX_SW 1
#define TX_DH 1
#define TX_DW 1
#endif
#ifndef TX_BM
#define TX_BM 128
#define TX_BN 128
#define TX_BK 32
#define TX_WARPS_M 2
#define TX_WARPS_N 4
#define TX_STAGES 3
#endif
#ifndef TX_SPLIT_K
#define TX_SPLIT_K 8
#endif
#ifndef TX_BATCH
#define TX_BATCH 1 /* independent GEMMs over gridDim.z (the Winograd solver's 16 positions) */
#endif
#if defined(TX_OUT_NCHW) && TX_OUT_NCHW
#define TX_NCHW 1 /* dw packed K x C x R x S */
#else
#define TX_NCHW 0
#endif

/* Element offset in dw of tap n = (r, s, c) of filter k. */
DEVICE_FN i64 dw_index(int k, int n)
{
    if(!TX_NCHW)
        return (i64)k * (TX_R * TX_S * TX_C) + n;
    const int rs = n / TX_C;
    return ((i64)k * TX_C + (n - rs * TX_C)) * (TX_R * TX_S) + rs;
}

#define TX_THREADS (TX_WARPS_M * TX_WARPS_N * 32)
#define TX_WM (TX_BM / TX_WARPS_M)
#define TX_WN (TX_BN / TX_WARPS_N)
#define TX_MI (TX_WM / 16)
#define TX_NI (TX_WN / 8)
#define TX_J (TX_N * TX_P * TX_Q) /* the reduction */
#define TX_KD (TX_R * TX_S * TX_C)
#define TX_A_PITCH (TX_BM + 8) /* floats per shared row */
#define TX_B_PITCH (TX_BN + 8)
#define TX_A_CH (TX_BM / 4)
#define TX_B_CH (TX_BN / 4)
#define TX_A_ITERS (TX_BK * TX_A_CH / TX_THREADS)
#define TX_B_ITERS (TX_BK * TX_B_CH / TX_THREADS)
#define TX_STAGE_FLOATS (TX_BK * (TX_A_PITCH + TX_B_PITCH))
#define TX_TILES_N ((TX_KD + TX_BN - 1) / TX_BN)
#define TX_JT ((TX_J + TX_BK - 1) / TX_BK)

static_assert(TX_C % 4 == 0 && TX_K % 4 == 0, "C and K must be multiples of 4");
static_assert(TX_BK == 16 || TX_BK == 32, "BK is 16 or 32 floats");
static_assert(TX_WM % 16 == 0 && TX_WN % 16 == 0, "warp tiles are multiples of 16");
static_assert(TX_BK * TX_A_CH % TX_THREADS == 0 && TX_BK * TX_B_CH % TX_THREADS == 0, "even loads");
static_assert(TX_THREADS % TX_A_CH == 0 && TX_THREADS % TX_B_CH == 0, "fixed columns per thread");
static_assert(TX_STAGES * TX_STAGE_FLOATS * 4 <= 227 * 1024, "at most 227 KB of shared memory per block");
static_assert(TX_BATCH == 1 || !TX_NCHW, "batched GEMMs write K x R x S x C");

KERNEL void __launch_bounds__(TX_THREADS)
    igemm_wrw_tf32x3(const float* RESTRICT x, i64 x_off, const float* RESTRICT dy, i64 dy_off, float* RESTRICT dw,
                     i64 dw_off, float* RESTRICT part, i64 part_off)
{
    extern __shared__ __align__(128) float fsmem[]; /* TX_STAGES stages, given at launch */
    x += x_off + (i64)blockIdx.z * ((i64)TX_N * TX_H * TX_W * TX_C);
    dy += dy_off + (i64)blockIdx.z * ((i64)TX_J * TX_K);
    const int tid = threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    const int bid = blockIdx.x;
    const int m0 = (bid / TX_TILES_N) * TX_BM; /* output channels */
    const int n0 = (bid % TX_TILES_N) * TX_BN; /* filter taps */
    const u32 smem_base = smem_addr(fsmem);
    const int jt0 = (int)((long long)blockIdx.y * TX_JT / TX_SPLIT_K);
    const int jt1 = (int)((long long)(blockIdx.y + 1) * TX_JT / TX_SPLIT_K);

    /* A (dy): chunk column a_col of rows a_row0 + i * (TX_THREADS / TX_A_CH) */
    const int a_col = tid % TX_A_CH, a_row0 = tid / TX_A_CH;
    const bool a_ok = m0 + a_col * 4 < TX_K;
    /* B (x, im2col): chunk column b_col, the tap (r, s, c..c+3) fixed for this thread */
    const int b_col = tid % TX_B_CH, b_row0 = tid / TX_B_CH;
    const int tap = n0 + b_col * 4;
    const bool b_ok = tap < TX_KD;
    const int rs = tap / TX_C;
    const int b_c = tap - rs * TX_C;
    const int b_r = rs / TX_S;
    const int b_dh = b_r * TX_DH - TX_PH;
    const int b_dw = (rs - b_r * TX_S) * TX_DW - TX_PW;

    auto load_tile = [&](int stage, int t) {
        const u32 a_dst = smem_base + stage * (TX_STAGE_FLOATS * 4);
        const u32 b_dst = a_dst + TX_BK * TX_A_PITCH * 4;
        const int j0 = (jt0 + t) * TX_BK;
#pragma unroll
        for(int i = 0; i < TX_A_ITERS; ++i)
        {
            const int row = a_row0 + i * (TX_THREADS / TX_A_CH);
            const int j = j0 + row;
            const bool ok = a_ok && j < TX_J;
            const float* src = dy + (ok ? (i64)j * TX_K + m0 + a_col * 4 : 0);
            cp_async_16(a_dst + (row * TX_A_PITCH + a_col * 4) * 4, src, ok);
        }
#pragma unroll
        for(int i = 0; i < TX_B_ITERS; ++i)
        {
            const int row = b_row0 + i * (TX_THREADS / TX_B_CH);
            const int j = j0 + row;
            const int n = j / (TX_P * TX_Q);
            const int pq = j - n * (TX_P * TX_Q);
            const int p = pq / TX_Q;
            const int ih = p * TX_SH + b_dh;
            const int iw = (pq - p * TX_Q) * TX_SW + b_dw;
            const bool ok = b_ok && j < TX_J && (unsigned)ih < (unsigned)TX_H && (unsigned)iw < (unsigned)TX_W;
            const float* src = x + (ok ? ((i64)(n * TX_H + ih) * TX_W + iw) * TX_C + b_c : 0);
            cp_async_16(b_dst + (row * TX_B_PITCH + b_col * 4) * 4, src, ok);
        }
    };

    const int wm0 = (warp / TX_WARPS_N) * TX_WM;
    const int wn0 = (warp % TX_WARPS_N) * TX_WN;
    const int g = lane >> 2, tq = lane & 3;
    float acc[TX_MI][TX_NI][4];
#pragma unroll
    for(int i = 0; i < TX_MI; ++i)
#pragma unroll
        for(int j = 0; j < TX_NI; ++j)
#pragma unroll
            for(int e = 0; e < 4; ++e)
                acc[i][j][e] = 0.0f;

    auto step = [&](int stage, int ks) {
        const float* a_tile = fsmem + stage * TX_STAGE_FLOATS + (ks * 8 + tq) * TX_A_PITCH + wm0 + g;
        const float* b_tile = fsmem + stage * TX_STAGE_FLOATS + TX_BK * TX_A_PITCH + (ks * 8 + tq) * TX_B_PITCH + wn0 + g;
        u32 ab[TX_MI][4], as[TX_MI][4], bb[TX_NI][2], bs[TX_NI][2];
#pragma unroll
        for(int i = 0; i < TX_MI; ++i)
        {
            /* a0: (m g, k t), a1: (m g + 8, k t), a2: (m g, k t + 4), a3: (m g + 8, k t + 4) */
            tf32_split(__float_as_uint(a_tile[i * 16]), ab[i][0], as[i][0]);
            tf32_split(__float_as_uint(a_tile[i * 16 + 8]), ab[i][1], as[i][1]);
            tf32_split(__float_as_uint(a_tile[4 * TX_A_PITCH + i * 16]), ab[i][2], as[i][2]);
            tf32_split(__float_as_uint(a_tile[4 * TX_A_PITCH + i * 16 + 8]), ab[i][3], as[i][3]);
        }
#pragma unroll
        for(int j = 0; j < TX_NI; ++j)
        {
            /* b0: (k t, n g), b1: (k t + 4, n g) */
            tf32_split(__float_as_uint(b_tile[j * 8]), bb[j][0], bs[j][0]);
            tf32_split(__float_as_uint(b_tile[4 * TX_B_PITCH + j * 8]), bb[j][1], bs[j][1]);
        }
        mma_tf32x3(acc, ab, as, bb, bs);
    };
    tf32x3_mainloop<TX_STAGES, TX_BK / 8>(jt1 - jt0, load_tile, step);

    float* out = TX_SPLIT_K > 1 ? part + part_off + ((i64)blockIdx.y * TX_BATCH + blockIdx.z) * TX_K * TX_KD
                                : dw + dw_off + (i64)blockIdx.z * TX_K * TX_KD;
#pragma unroll
    for(int i = 0; i < TX_MI; ++i)
#pragma unroll
        for(int h = 0; h < 2; ++h)
        {
            const int k = m0 + wm0 + i * 16 + h * 8 + g;
            if(k >= TX_K)
                continue;
#pragma unroll
            for(int j = 0; j < TX_NI; ++j)
            {
                const int n = n0 + wn0 + j * 8 + tq * 2;
                if(n >= TX_KD)
                    continue;
                if(TX_NCHW && TX_SPLIT_K == 1)
                {
                    const i64 at = dw_index(k, n); /* n and n + 1: channels c and c + 1 of one tap */
                    out[at] = acc[i][j][2 * h];
                    out[at + TX_R * TX_S] = acc[i][j][2 * h + 1];
                }
                else
                    *reinterpret_cast<float2*>(out + (i64)k * TX_KD + n) =
                        make_float2(acc[i][j][2 * h], acc[i][j][2 * h + 1]);
            }
        }
}

/* dw = the sum of the TX_SPLIT_K partial filters (K x R x S x C order; TX_BATCH of them), 4
   values per thread. */
KERNEL void tf32x3_wrw_sum(const float* RESTRICT part, i64 part_off, float* RESTRICT dw, i64 dw_off)
{
    const i64 total = (i64)TX_BATCH * TX_K * TX_KD;
    const i64 e = ((i64)blockIdx.x * blockDim.x + threadIdx.x) * 4;
    if(e >= total)
        return;
    const float4* p = reinterpret_cast<const float4*>(part + part_off + e);
    float4 v = p[0];
#pragma unroll 4
    for(int s = 1; s < TX_SPLIT_K; ++s)
    {
        const float4 u = p[s * (total / 4)];
        v.x += u.x, v.y += u.y, v.z += u.z, v.w += u.w;
    }
#if TX_NCHW
    const int k = (int)(e / TX_KD);
    const i64 at = dw_index(k, (int)(e - (i64)k * TX_KD)); /* 4 channels of one tap */
    float* o = dw + dw_off + at;
    o[0] = v.x;
    o[TX_R * TX_S] = v.y;
    o[2 * TX_R * TX_S] = v.z;
    o[3 * TX_R * TX_S] = v.w;
#else
    *reinterpret_cast<float4*>(dw + dw_off + e) = v;
#endif
}
