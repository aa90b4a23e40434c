/* fp32 implicit-GEMM forward convolution on tensor cores with fp32 accuracy (3xTF32; solvers
   ConvIgemmFwdTf32x3 and ConvIgemmBwdTf32x3): fp32 in and out, packed NHWC x and y, filter
   packed K x R x S x C, groups = 1. Never plain TF32: every operand is split into a TF32 big
   and small part and three products are summed (common/mma_tf32x3.h).

   GEMM view: D[m][k] = sum_j A[m][j] * B[k][j] with m = (n, p, q) an output pixel (M = N*P*Q),
   k an output channel and j = (r, s, c) a filter tap (KD = R*S*C). A row m gathers the input
   pixels of output pixel m on the fly; B row k is filter k as it lies; D is y as it lies.

   A block computes a BM x BN tile of D. BK-float slices of A and B go global -> shared through a
   STAGES-deep cp.async pipeline (16-byte copies of 4 channels; padding, taps past KD and rows
   past M or K are zero-filled), swizzled so that ldmatrix reads are conflict-free. Warps are a
   WARPS_M x WARPS_N grid, each computing a (BM/WARPS_M) x (BN/WARPS_N) tile with mma.sync
   m16n8k8 TF32, three per product. The epilogue writes fp32 pairs straight from the
   accumulators. With TX_SPLIT_K > 1 the reduction is split over gridDim.y blocks, each writing
   its partial sums to slice blockIdx.y of `part` (TX_SPLIT_K x M x K floats), and
   tf32x3_splitk_sum adds them into y.

   With TX_OUT_NCHW = 1, y is packed NCHW instead (row m = (n, pq) of channel k goes to
   y[(n*K + k)*P*Q + pq]), written straight from the accumulators or by the split-K sum.

   The tensors are given as base pointer plus element offset (workspace regions of the NCHW
   and backward-data programs). Needs C % 4 == 0 and K % 4 == 0. */

// miopy-compile-test: -DMIOPY_DTYPE=0
// miopy-compile-test: -DMIOPY_DTYPE=0 -DTX_BM=64 -DTX_BN=64 -DTX_BK=16 -DTX_WARPS_M=2 -DTX_WARPS_N=2 -DTX_STAGES=4
// miopy-compile-test: -DMIOPY_DTYPE=0 -DTX_SPLIT_K=3 -DTX_BM=64 -DTX_BN=128 -DTX_BK=32 -DTX_WARPS_M=1 -DTX_WARPS_N=4 -DTX_STAGES=3
// miopy-compile-test: -DMIOPY_DTYPE=0 -DTX_BM=256 -DTX_BN=128 -DTX_BK=32 -DTX_WARPS_M=4 -DTX_WARPS_N=2 -DTX_STAGES=3
// miopy-compile-test: -DMIOPY_DTYPE=0 -DTX_OUT_NCHW=1
// miopy-compile-test: -DMIOPY_DTYPE=0 -DTX_OUT_NCHW=1 -DTX_SPLIT_K=2 -DTX_BM=64 -DTX_BN=64 -DTX_BK=32 -DTX_WARPS_M=2 -DTX_WARPS_N=2 -DTX_STAGES=3
// miopy-compile-test: -DMIOPY_DTYPE=0 -DMIOPY_EPI=1 -DMIOPY_EPI_BIAS=1 -DMIOPY_EPI_ACT=3 -DTX_OUT_NCHW=1 -DTX_SPLIT_K=2 -DTX_BM=64 -DTX_BN=64 -DTX_BK=32 -DTX_WARPS_M=2 -DTX_WARPS_N=2 -DTX_STAGES=3
// miopy-compile-test: -DMIOPY_DTYPE=0 -DMIOPY_EPI=1 -DMIOPY_EPI_BIAS=1 -DMIOPY_EPI_ACT=8
// miopy-compile-test: -DMIOPY_DTYPE=0 -DTX_N=3 -DTX_C=12 -DTX_H=9 -DTX_W=11 -DTX_K=20 -DTX_R=2 -DTX_S=3 -DTX_P=4 -DTX_Q=5 -DTX_PH=1 -DTX_PW=0 -DTX_SH=2 -DTX_SW=2 -DTX_DH=2 -DTX_DW=1

#include "common/mma_tf32x3.h"
#include "common/conv_epilogue.h"

#if MIOPY_DTYPE != 0
#error "the 3xTF32 kernels are for fp32 (MIOPY_DTYPE 0)"
#endif

/* Defaults only so that the file compiles on its own (the CUDA compile test); the solvers
   define every one. */
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
#define TX_WARPS_N 2
#define TX_STAGES 3
#endif
#ifndef TX_SPLIT_K
#define TX_SPLIT_K 1
#endif
#if defined(TX_OUT_NCHW) && TX_OUT_NCHW
#define TX_NCHW 1 /* y packed NCHW */
#else
#define TX_NCHW 0
#endif

#define TX_THREADS (TX_WARPS_M * TX_WARPS_N * 32)
#define TX_WM (TX_BM / TX_WARPS_M)
#define TX_WN (TX_BN / TX_WARPS_N)
#define TX_MI (TX_WM / 16)
#define TX_NI (TX_WN / 8)
#define TX_M (TX_N * TX_P * TX_Q)
#define TX_KD (TX_R * TX_S * TX_C)
#define TX_CH (TX_BK / 4) /* 16-byte chunks per tile row */
#define TX_A_ITERS (TX_BM * TX_CH / TX_THREADS)
#define TX_B_ITERS (TX_BN * TX_CH / TX_THREADS)
#define TX_ROW_STEP (TX_THREADS / TX_CH)
#define TX_STAGE_BYTES ((TX_BM + TX_BN) * TX_BK * 4)
#define TX_TILES_N ((TX_K + TX_BN - 1) / TX_BN)
#define TX_KT ((TX_KD + TX_BK - 1) / TX_BK)

static_assert(TX_C % 4 == 0 && TX_K % 4 == 0, "C and K must be multiples of 4");
static_assert(TX_BK == 16 || TX_BK == 32, "BK is 16 or 32 floats");
static_assert(TX_WM % 16 == 0 && TX_WN % 16 == 0, "warp tiles are multiples of 16");
static_assert(TX_BM * TX_CH % TX_THREADS == 0 && TX_BN * TX_CH % TX_THREADS == 0, "even loads");
static_assert(TX_STAGES * TX_STAGE_BYTES <= 227 * 1024, "at most 227 KB of shared memory per block");

KERNEL void __launch_bounds__(TX_THREADS)
    igemm_fwd_tf32x3(const float* RESTRICT x, i64 x_off, const float* RESTRICT w, i64 w_off, float* RESTRICT y,
                     i64 y_off, float* RESTRICT part, i64 part_off EPI_KERNEL_PARAMS)
{
    EPI_SETUP(y + y_off, 0, TX_K);
    extern __shared__ __align__(128) uint4 smem[]; /* TX_STAGES stages, given at launch */
    x += x_off;
    w += w_off;
    const int tid = threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    const int bid = blockIdx.x;
    const int m0 = (bid / TX_TILES_N) * TX_BM;
    const int n0 = (bid % TX_TILES_N) * TX_BN;
    const u32 smem_base = smem_addr(smem);
    const int kt0 = (int)((long long)blockIdx.y * TX_KT / TX_SPLIT_K);
    const int kt1 = (int)((long long)(blockIdx.y + 1) * TX_KT / TX_SPLIT_K);

    /* ---- what this thread copies: chunk column `col` of rows row0 + i * TX_ROW_STEP ---- */
    const int col = tid % TX_CH;
    const int row0 = tid / TX_CH;
    int a_img[TX_A_ITERS], a_ih[TX_A_ITERS], a_iw[TX_A_ITERS];
#pragma unroll
    for(int i = 0; i < TX_A_ITERS; ++i)
    {
        const int m = m0 + row0 + i * TX_ROW_STEP;
        const int n = m / (TX_P * TX_Q);
        const int pq = m - n * (TX_P * TX_Q);
        const int p = pq / TX_Q;
        const int q = pq - p * TX_Q;
        const bool ok = m < TX_M;
        a_img[i] = ok ? n * (TX_H * TX_W * TX_C) : 0;
        a_ih[i] = ok ? p * TX_SH - TX_PH : -(1 << 24);
        a_iw[i] = q * TX_SW - TX_PW;
    }

    auto load_tile = [&](int stage, int t) {
        const u32 a_dst = smem_base + stage * TX_STAGE_BYTES;
        const u32 b_dst = a_dst + TX_BM * TX_BK * 4;
        const int kk = (kt0 + t) * TX_BK + col * 4;
        const int rs = kk / TX_C;
        const int c = kk - rs * TX_C;
        const int r = rs / TX_S;
        const int s = rs - r * TX_S;
        const bool k_ok = kk < TX_KD;
#pragma unroll
        for(int i = 0; i < TX_A_ITERS; ++i)
        {
            const int ih = a_ih[i] + r * TX_DH;
            const int iw = a_iw[i] + s * TX_DW;
            const bool ok = k_ok && (unsigned)ih < (unsigned)TX_H && (unsigned)iw < (unsigned)TX_W;
            const float* src = x + (ok ? a_img[i] + (ih * TX_W + iw) * TX_C + c : 0);
            cp_async_16(a_dst + swizzle<TX_CH>(row0 + i * TX_ROW_STEP, col) * 16, src, ok);
        }
#pragma unroll
        for(int i = 0; i < TX_B_ITERS; ++i)
        {
            const int k = n0 + row0 + i * TX_ROW_STEP;
            const bool ok = k_ok && k < TX_K;
            const float* src = ok ? w + ((i64)k * TX_KD + kk) : w;
            cp_async_16(b_dst + swizzle<TX_CH>(row0 + i * TX_ROW_STEP, col) * 16, src, ok);
        }
    };

    const int wm0 = (warp / TX_WARPS_N) * TX_WM;
    const int wn0 = (warp % TX_WARPS_N) * TX_WN;
    float acc[TX_MI][TX_NI][4];
#pragma unroll
    for(int i = 0; i < TX_MI; ++i)
#pragma unroll
        for(int j = 0; j < TX_NI; ++j)
#pragma unroll
            for(int e = 0; e < 4; ++e)
                acc[i][j][e] = 0.0f;

    auto step = [&](int stage, int ks) {
        const u32 a_tile = smem_base + stage * TX_STAGE_BYTES;
        u32 ab[TX_MI][4], as[TX_MI][4], bb[TX_NI][2], bs[TX_NI][2];
        frags_a_tf32x3<TX_MI, TX_CH>(a_tile, wm0, ks, lane, ab, as);
        frags_b_tf32x3<TX_NI, TX_CH>(a_tile + TX_BM * TX_BK * 4, wn0, ks, lane, bb, bs);
        mma_tf32x3(acc, ab, as, bb, bs);
    };
    tf32x3_mainloop<TX_STAGES, TX_BK / 8>(kt1 - kt0, load_tile, step);

    /* ---- epilogue: fp32 pairs straight from the accumulators (row g and g + 8 of each m16
       block, columns 2t and 2t + 1 of each n8 block) ---- */
    const bool split = TX_SPLIT_K > 1;
    float* out = split ? part + part_off + (i64)blockIdx.y * TX_M * TX_K : y + y_off;
#pragma unroll
    for(int i = 0; i < TX_MI; ++i)
#pragma unroll
        for(int h = 0; h < 2; ++h)
        {
            const int row = m0 + wm0 + i * 16 + h * 8 + (lane >> 2);
            if(row >= TX_M)
                continue;
            const int img = row / (TX_P * TX_Q);
            float* plane = out + (i64)img * TX_K * (TX_P * TX_Q) + (row - img * (TX_P * TX_Q));
#pragma unroll
            for(int j = 0; j < TX_NI; ++j)
            {
                const int k = n0 + wn0 + j * 8 + (lane & 3) * 2;
                if(k >= TX_K)
                    continue;
#if MIOPY_EPI
                if(!split)
                {
                    const i64 at = TX_NCHW ? (i64)k * (TX_P * TX_Q) : (i64)row * TX_K + k;
                    const i64 next = TX_NCHW ? (i64)(TX_P * TX_Q) : 1;
                    EPI_VALUE(acc[i][j][2 * h], k, (TX_NCHW ? plane : out) + at);
                    EPI_VALUE(acc[i][j][2 * h + 1], k + 1, (TX_NCHW ? plane : out) + at + next);
                }
#endif
                if(TX_NCHW && !split)
                {
                    plane[(i64)k * (TX_P * TX_Q)] = acc[i][j][2 * h];
                    plane[(i64)(k + 1) * (TX_P * TX_Q)] = acc[i][j][2 * h + 1];
                }
                else
                    *reinterpret_cast<float2*>(out + (i64)row * TX_K + k) =
                        make_float2(acc[i][j][2 * h], acc[i][j][2 * h + 1]);
            }
        }
}

/* Split-K: y = the sum of the TX_SPLIT_K partial outputs (NHWC order), 4 channels per thread. */
KERNEL void tf32x3_splitk_sum(const float* RESTRICT part, i64 part_off, float* RESTRICT y,
                              i64 y_off EPI_KERNEL_PARAMS)
{
    EPI_SETUP(y + y_off, 0, TX_K);
    const i64 total = (i64)TX_M * TX_K;
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
#if MIOPY_EPI
    {
        const int k = (int)(e % TX_K); /* v.x is channel k of row e / TX_K; v.w channel k + 3 */
        const i64 row = e / TX_K;
        const i64 img = row / (TX_P * TX_Q);
        const float* at = TX_NCHW ? y + y_off + (img * TX_K + k) * (TX_P * TX_Q) + (row - img * (TX_P * TX_Q))
                                  : y + y_off + e;
        const i64 next = TX_NCHW ? (i64)(TX_P * TX_Q) : 1;
        EPI_VALUE(v.x, k, at);
        EPI_VALUE(v.y, k + 1, at + next);
        EPI_VALUE(v.z, k + 2, at + 2 * next);
        EPI_VALUE(v.w, k + 3, at + 3 * next);
    }
#endif
#if TX_NCHW
    const i64 row = e / TX_K;
    const int k = (int)(e - row * TX_K);
    const i64 img = row / (TX_P * TX_Q);
    float* o = y + y_off + (img * TX_K + k) * (TX_P * TX_Q) + (row - img * (TX_P * TX_Q));
    o[0] = v.x;
    o[TX_P * TX_Q] = v.y;
    o[2 * TX_P * TX_Q] = v.z;
    o[3 * TX_P * TX_Q] = v.w;
#else
    *reinterpret_cast<float4*>(y + y_off + e) = v;
#endif
}
