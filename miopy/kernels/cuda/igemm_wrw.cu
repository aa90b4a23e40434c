/* Implicit-GEMM backward-weights convolution on tensor cores (ConvIgemmWrwNhwc): fp16 or bf16
   in, fp32 accumulation, packed NHWC x and dy, dw packed K x R x S x C; with IG_G groups, each
   group's blocks a run of the grid working on its slice of channels (its dw rows are contiguous).

   dw[k][r][s][c] = sum over (n, p, q) of dy[n][p][q][k] * x[n][p*SH - PH + r*DH][q*SW - PW + s*DW][c]

   GEMM view: M = K (rows of dw), N = R*S*C (a dw row as it lies), reduction over the N*P*Q
   output pixels in tiles of BK pixels. Both operands lie k-major in shared memory (rows are
   pixels): the A tile is BK pixels x BM channels of dy (contiguous in dy), the B tile BK pixels x
   BN filter taps gathered from x (each thread's 16-byte column is one (r, s, 8 channels) for the
   whole block; zero outside x). Fragments come through ldmatrix.trans.

   The reduction is long (100k pixels at 56x56, batch 32) and the output small, so it splits over
   blockIdx.y (IG_SPLIT_K slices): fp32 partials go to the workspace (IG_SPLIT_K x K x R*S*C
   floats) and igemm_wrw_splitk_reduce sums them into dw in its data type; a split of 2 to 8 with
   IG_CLUSTER makes the slices of a tile one cluster that sums in distributed shared memory.

   Needs C % 8 == 0 and K % 8 == 0. */

// miopy-compile-test: -DMIOPY_DTYPE=1
// miopy-compile-test: -DMIOPY_DTYPE=2
// miopy-compile-test: -DMIOPY_DTYPE=1 -DIG_SPLIT_K=1 -DIG_BM=32 -DIG_BN=64 -DIG_BK=32 -DIG_WARPS_M=1 -DIG_WARPS_N=2 -DIG_STAGES=4 -DIG_FRAG_BUFS=2
// miopy-compile-test: -DMIOPY_DTYPE=2 -DIG_SPLIT_K=48 -DIG_BM=128 -DIG_BN=128 -DIG_BK=64 -DIG_WARPS_M=2 -DIG_WARPS_N=2 -DIG_STAGES=3
// miopy-compile-test: -DMIOPY_DTYPE=2 -DIG_SPLIT_K=6 -DIG_CLUSTER=1 -DIG_BM=128 -DIG_BN=64 -DIG_BK=32 -DIG_WARPS_M=4 -DIG_WARPS_N=1 -DIG_STAGES=4 -DIG_FRAG_BUFS=2
// miopy-compile-test: -DMIOPY_DTYPE=2 -DIG_G=4 -DIG_SPLIT_K=2 -DIG_N=2 -DIG_C=16 -DIG_H=9 -DIG_W=7 -DIG_K=24 -DIG_R=3 -DIG_S=3 -DIG_P=9 -DIG_Q=7 -DIG_PH=1 -DIG_PW=1 -DIG_SH=1 -DIG_SW=1 -DIG_DH=1 -DIG_DW=1
// miopy-compile-test: -DMIOPY_DTYPE=1 -DIG_G=3 -DIG_SPLIT_K=2 -DIG_CLUSTER=1 -DIG_N=2 -DIG_C=16 -DIG_H=9 -DIG_W=7 -DIG_K=24 -DIG_R=3 -DIG_S=3 -DIG_P=9 -DIG_Q=7 -DIG_PH=1 -DIG_PW=1 -DIG_SH=1 -DIG_SW=1 -DIG_DH=1 -DIG_DW=1
// miopy-compile-test: -DMIOPY_DTYPE=2 -DMIOPY_EPI=1 -DIG_SPLIT_K=6 -DIG_CLUSTER=1 -DIG_BM=128 -DIG_BN=64 -DIG_BK=32 -DIG_WARPS_M=4 -DIG_WARPS_N=1 -DIG_STAGES=4 -DIG_FRAG_BUFS=2
// miopy-compile-test: -DMIOPY_DTYPE=1 -DMIOPY_EPI=1 -DIG_SPLIT_K=8 -DIG_BM=128 -DIG_BN=128 -DIG_BK=64 -DIG_WARPS_M=2 -DIG_WARPS_N=2 -DIG_STAGES=3
// miopy-compile-test: -DMIOPY_DTYPE=1 -DIG_N=3 -DIG_C=24 -DIG_H=9 -DIG_W=11 -DIG_K=40 -DIG_R=2 -DIG_S=3 -DIG_P=4 -DIG_Q=5 -DIG_PH=1 -DIG_PW=0 -DIG_SH=2 -DIG_SW=2 -DIG_DH=2 -DIG_DW=1

/* This kernel's tile defaults, only so that the file compiles on its own (the CUDA compile test;
   the solver always defines them); the shape's are in common/igemm_defines.h. */
#ifndef IG_BM
#define IG_BM 64
#define IG_BN 128
#define IG_BK 32
#define IG_WARPS_M 2
#define IG_WARPS_N 2
#define IG_STAGES 4
#endif
#ifndef IG_SPLIT_K
#define IG_SPLIT_K 16
#endif
#include "common/igemm_defines.h"
#include "common/igemm_core.h"

#define IG_ACH (IG_BM / 8) /* A tile: BK pixel rows of BM channels of dy */
#define IG_BCH (IG_BN / 8) /* B tile: BK pixel rows of BN filter taps (r, s, c) */
#define IG_A_ITERS (IG_BK * IG_ACH / IG_THREADS)
#define IG_B_ITERS (IG_BK * IG_BCH / IG_THREADS)
#define IG_A_STEP (IG_THREADS / IG_ACH)
#define IG_B_STEP (IG_THREADS / IG_BCH)
#define IG_A_BYTES (IG_BM * IG_BK * 2)
#define IG_STAGE_BYTES ((IG_BM + IG_BN) * IG_BK * 2)
#define IG_NPQ (IG_N * IG_P * IG_Q)
#define IG_RSC (IG_R * IG_S * IG_C)
#define IG_KT ((IG_NPQ + IG_BK - 1) / IG_BK)
#define IG_TILES_N ((IG_RSC + IG_BN - 1) / IG_BN)

static_assert(IG_BK * IG_ACH % IG_THREADS == 0 && IG_BK * IG_BCH % IG_THREADS == 0, "even loads");
static_assert(IG_STAGES * IG_STAGE_BYTES <= 227 * 1024, "at most 227 KB of shared memory per block");

#if IG_CLUSTER
static_assert(IGEMM_CLUSTER_BYTES(IG_BM, IG_BN) <= 227 * 1024, "the cluster's partial tile fits");
#define IG_CLUSTER_DIMS __cluster_dims__(1, IG_SPLIT_K, 1) /* a tile's slices */
#else
#define IG_CLUSTER_DIMS
#endif

KERNEL void __launch_bounds__(IG_THREADS) IG_CLUSTER_DIMS
    igemm_wrw(const data_t* RESTRICT x, const data_t* RESTRICT dy, data_t* RESTRICT dw, float* RESTRICT ws EPI_KERNEL_PARAMS)
{
    extern __shared__ __align__(128) uint4 smem[];
    const int tid = threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    IG_GROUP_OF_BLOCK(g, bid);
    x += g * IG_C; /* this group's channels of x and dy, its run of dw rows */
    dy += g * IG_K;
    dw += (i64)g * IG_K * IG_RSC;
    EPI_SETUP(dw, 0, IG_RSC);
    const int m0 = (bid / IG_TILES_N) * IG_BM;
    const int n0 = (bid % IG_TILES_N) * IG_BN;
    const int kt0 = (int)((long long)blockIdx.y * IG_KT / IG_SPLIT_K);
    const int nkt = (int)((long long)(blockIdx.y + 1) * IG_KT / IG_SPLIT_K) - kt0;

    /* A: this thread's 8 dy channels, rows arow0 + it * A_STEP of each pixel tile */
    const int acol = tid % IG_ACH;
    const int arow0 = tid / IG_ACH;
    const int k_a = m0 + acol * 8;
    const bool k_ok = k_a < IG_K;
    /* B: this thread's filter tap (r, s) and 8 channels from c, for every pixel tile */
    const int bcol = tid % IG_BCH;
    const int brow0 = tid / IG_BCH;
    const int tap = n0 + bcol * 8;
    const int rs = tap / IG_C;
    const int c = tap - rs * IG_C;
    const int r = rs / IG_S;
    const int s = rs - r * IG_S;
    const bool tap_ok = tap < IG_RSC;
    const int h_off = r * IG_DH - IG_PH;
    const int w_off = s * IG_DW - IG_PW;

    const u32 smem_base = smem_addr(smem);
    auto load_tile = [&](int stage, int t) {
        const int pix0 = (kt0 + t) * IG_BK;
        const u32 a_dst = smem_base + stage * IG_STAGE_BYTES;
        const u32 b_dst = a_dst + IG_A_BYTES;
#pragma unroll
        for(int it = 0; it < IG_A_ITERS; ++it)
        {
            const int row = arow0 + it * IG_A_STEP;
            const int m = pix0 + row;
            const bool ok = k_ok && m < IG_NPQ;
            const data_t* src = dy + (ok ? (i64)m * IG_YK + k_a : 0);
            cp_async_16(a_dst + swizzle<IG_ACH>(row, acol) * 16, src, ok);
        }
#pragma unroll
        for(int it = 0; it < IG_B_ITERS; ++it)
        {
            const int row = brow0 + it * IG_B_STEP;
            const int m = pix0 + row;
            const int n = m / (IG_P * IG_Q);
            const int pq = m - n * (IG_P * IG_Q);
            const int p = pq / IG_Q;
            const int ih = p * IG_SH + h_off;
            const int iw = (pq - p * IG_Q) * IG_SW + w_off;
            const bool ok = tap_ok && m < IG_NPQ && (unsigned)ih < (unsigned)IG_H && (unsigned)iw < (unsigned)IG_W;
            const data_t* src = x + (ok ? (i64)((n * IG_H + ih) * IG_W + iw) * IG_XC + c : 0);
            cp_async_16(b_dst + swizzle<IG_BCH>(row, bcol) * 16, src, ok);
        }
    };

    const int wm0 = (warp / IG_WARPS_N) * IG_WM;
    const int wn0 = (warp % IG_WARPS_N) * IG_WN;
    auto load_frags = [&](int stage, int ks, u32(&af)[IG_MI][4], u32(&bf)[IG_NI][2]) {
        const u32 a_tile = smem_base + stage * IG_STAGE_BYTES;
        frags_a_kmajor<IG_MI, IG_ACH>(a_tile, wm0, ks, lane, af);
        frags_b_kmajor<IG_NI, IG_BCH>(a_tile + IG_A_BYTES, wn0, ks, lane, bf);
    };

    float acc[IG_MI][IG_NI][4];
    zero_acc(acc);
    mma_mainloop<IG_STAGES, IG_BK / 16, IG_FRAG_BUFS>(nkt, load_tile, load_frags, acc);

    /* ---- epilogue: row r of the tile is dw row m0 + r ---- */
    auto row_off = [&](int row) -> int { return m0 + row < IG_K ? (m0 + row) * IG_RSC + n0 : -1; };
#if IG_CLUSTER
    cluster_store_tile<IG_BM, IG_BN, IG_THREADS, IG_MI, IG_NI, IG_SPLIT_K>(smem, acc, wm0, wn0, lane, tid,
                                                                         IG_RSC - n0, dw, row_off EPI_ARG);
#else
    store_tile<IG_BM, IG_BN, IG_THREADS, IG_MI, IG_NI, (IG_SPLIT_K > 1)>(
        smem, acc, wm0, wn0, lane, tid, IG_RSC - n0, dw, ws + (i64)blockIdx.y * IG_G * IG_K * IG_RSC + (i64)g * IG_K * IG_RSC,
        row_off EPI_ARG);
#endif
}

/* Split-K: dw = the sum of the IG_SPLIT_K fp32 partial results, 8 taps per thread. */
KERNEL void igemm_wrw_splitk_reduce(const float* RESTRICT ws, data_t* RESTRICT dw EPI_KERNEL_PARAMS)
{
    EPI_SETUP(dw, 0, IG_RSC);
    splitk_sum<IG_SPLIT_K>(ws, dw, (i64)IG_G * IG_K * IG_RSC EPI_ARG);
}
