/* Implicit-GEMM backward-data convolution on tensor cores (ConvIgemmBwdNhwc): fp16 or bf16 in,
   fp32 accumulation, packed NHWC dy and dx, filter packed K x R x S x C; with IG_G groups, each
   group's blocks a run of the grid working on its slice of channels.

   dx[n][h][w][c] = sum over k, r, s of dy[n][p][q][k] * w[k][r][s][c], where
   h = p * SH - PH + r * DH and w = q * SW - PW + s * DW. For a stride > 1 the dx pixels split
   into SH x SW phases by (h + PH) % SH and (w + PW) % SW; within one phase the filter rows that
   reach a pixel are r = r0, r0 + RSTEP, ... (RSTEP = SH / gcd(SH, DH)), the same for every
   pixel, and p = (h + PH - r * DH) / SH is exact. So each phase is one dense GEMM with no
   zero-inserted input: blockIdx.y is the phase, M = its dx pixels, N = C, and the reduction is
   (tap of the phase, k) with k fastest, in tiles of BK channels of one tap (KBT tiles per tap).
   A row m gathers dy on the fly (16-byte chunks of 8 channels, zero outside dy); B is the filter
   as it lies, rows k (the reduction) and C contiguous, read with ldmatrix.trans.

   With IG_SPLIT_K > 1 the reduction splits over blockIdx.z, fp32 partials go to the workspace
   (IG_SPLIT_K x N*H*W x C floats, laid out as dx) and igemm_bwd_splitk_reduce sums them into dx; with IG_CLUSTER
   the slices of a tile are one cluster and sum in distributed shared memory straight into dx.

   Needs C % 8 == 0 and K % 8 == 0. */

// miopy-compile-test: -DMIOPY_DTYPE=1
// miopy-compile-test: -DMIOPY_DTYPE=2
// miopy-compile-test: -DMIOPY_DTYPE=1 -DIG_BM=64 -DIG_BN=32 -DIG_BK=32 -DIG_WARPS_M=2 -DIG_WARPS_N=1 -DIG_STAGES=4 -DIG_FRAG_BUFS=2
// miopy-compile-test: -DMIOPY_DTYPE=2 -DIG_SPLIT_K=3 -DIG_BM=64 -DIG_BN=128 -DIG_BK=64 -DIG_WARPS_M=2 -DIG_WARPS_N=2 -DIG_STAGES=3
// miopy-compile-test: -DMIOPY_DTYPE=1 -DIG_SPLIT_K=4 -DIG_CLUSTER=1 -DIG_BM=64 -DIG_BN=64 -DIG_BK=64 -DIG_WARPS_M=2 -DIG_WARPS_N=2 -DIG_STAGES=3
// miopy-compile-test: -DMIOPY_DTYPE=2 -DIG_G=4 -DIG_SPLIT_K=2 -DIG_N=2 -DIG_C=16 -DIG_H=9 -DIG_W=7 -DIG_K=24 -DIG_R=3 -DIG_S=3 -DIG_P=9 -DIG_Q=7 -DIG_PH=1 -DIG_PW=1 -DIG_SH=1 -DIG_SW=1 -DIG_DH=1 -DIG_DW=1
// miopy-compile-test: -DMIOPY_DTYPE=2 -DMIOPY_EPI=1 -DIG_SPLIT_K=4 -DIG_CLUSTER=1 -DIG_BM=64 -DIG_BN=64 -DIG_BK=64 -DIG_WARPS_M=2 -DIG_WARPS_N=2 -DIG_STAGES=3
// miopy-compile-test: -DMIOPY_DTYPE=1 -DMIOPY_EPI=1 -DIG_SPLIT_K=3 -DIG_BM=64 -DIG_BN=128 -DIG_BK=64 -DIG_WARPS_M=2 -DIG_WARPS_N=2 -DIG_STAGES=3
// miopy-compile-test: -DMIOPY_DTYPE=1 -DIG_N=3 -DIG_C=24 -DIG_H=9 -DIG_W=11 -DIG_K=40 -DIG_R=3 -DIG_S=3 -DIG_P=4 -DIG_Q=5 -DIG_PH=1 -DIG_PW=0 -DIG_SH=2 -DIG_SW=2 -DIG_DH=2 -DIG_DW=1 -DIG_RSTEP=1 -DIG_SSTEP=2

/* This kernel's tile defaults, only so that the file compiles on its own (the CUDA compile test;
   the solver always defines them); the shape's are in common/igemm_defines.h. */
#ifndef IG_RSTEP
#define IG_RSTEP 1 /* SH / gcd(SH, DH) */
#define IG_SSTEP 1
#endif
#ifndef IG_BM
#define IG_BM 128
#define IG_BN 64
#define IG_BK 64
#define IG_WARPS_M 2
#define IG_WARPS_N 2
#define IG_STAGES 3
#endif
#include "common/igemm_defines.h"
#include "common/igemm_core.h"

#define IG_ACH (IG_BK / 8) /* A tile: BM rows of BK channels of dy */
#define IG_BCH (IG_BN / 8) /* B tile: BK rows (k) of BN channels of dx */
#define IG_A_ITERS (IG_BM * IG_ACH / IG_THREADS)
#define IG_B_ITERS (IG_BK * IG_BCH / IG_THREADS)
#define IG_A_STEP (IG_THREADS / IG_ACH)
#define IG_B_STEP (IG_THREADS / IG_BCH)
#define IG_A_BYTES (IG_BM * IG_BK * 2)
#define IG_STAGE_BYTES ((IG_BM + IG_BN) * IG_BK * 2)
#define IG_KBT ((IG_K + IG_BK - 1) / IG_BK) /* reduction tiles per filter tap */
#define IG_TILES_N ((IG_C + IG_BN - 1) / IG_BN)
#define IG_NPIX (IG_N * IG_H * IG_W)

static_assert(IG_BM * IG_ACH % IG_THREADS == 0 && IG_BK * IG_BCH % IG_THREADS == 0, "even loads");
static_assert(IG_STAGES * IG_STAGE_BYTES <= 227 * 1024, "at most 227 KB of shared memory per block");

#if IG_CLUSTER
static_assert(IGEMM_CLUSTER_BYTES(IG_BM, IG_BN) <= 227 * 1024, "the cluster's partial tile fits");
#define IG_CLUSTER_DIMS __cluster_dims__(1, 1, IG_SPLIT_K) /* a tile's slices */
#else
#define IG_CLUSTER_DIMS
#endif

KERNEL void __launch_bounds__(IG_THREADS) IG_CLUSTER_DIMS
    igemm_bwd(const data_t* RESTRICT dy, const data_t* RESTRICT w, data_t* RESTRICT dx, float* RESTRICT ws EPI_KERNEL_PARAMS)
{
    extern __shared__ __align__(128) uint4 smem[];
    const int tid = threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    IG_GROUP_OF_BLOCK(g, bid);
    dy += g * IG_K; /* this group's channels of dy and dx, its run of filter rows */
    w += (i64)g * IG_K * IG_R * IG_S * IG_C;
    dx += g * IG_C;
    EPI_SETUP(dx, g * IG_C, IG_XC);
    const int m0 = (bid / IG_TILES_N) * IG_BM;
    const int n0 = (bid % IG_TILES_N) * IG_BN;

    /* ---- the phase: its first dx row / column, its size, and the filter taps that reach it ---- */
    const int th = blockIdx.y / IG_SW, tw = blockIdx.y - (blockIdx.y / IG_SW) * IG_SW;
    const int h0 = ((th - IG_PH) % IG_SH + IG_SH) % IG_SH;
    const int w0 = ((tw - IG_PW) % IG_SW + IG_SW) % IG_SW;
    const int hph = h0 < IG_H ? (IG_H - h0 + IG_SH - 1) / IG_SH : 0;
    const int wph = w0 < IG_W ? (IG_W - w0 + IG_SW - 1) / IG_SW : 0;
    const int pix = hph * wph;
    if(m0 >= IG_N * pix)
        return; /* the whole block lies past this phase's pixels */
    int r0 = -1, s0 = -1;
#pragma unroll
    for(int r = (IG_R < IG_RSTEP ? IG_R : IG_RSTEP) - 1; r >= 0; --r)
        if((r * IG_DH) % IG_SH == th)
            r0 = r;
#pragma unroll
    for(int s = (IG_S < IG_SSTEP ? IG_S : IG_SSTEP) - 1; s >= 0; --s)
        if((s * IG_DW) % IG_SW == tw)
            s0 = s;
    const int nr = r0 < 0 ? 0 : (IG_R - r0 + IG_RSTEP - 1) / IG_RSTEP;
    const int ns = s0 < 0 ? 0 : (IG_S - s0 + IG_SSTEP - 1) / IG_SSTEP;
    const int kt_all = nr * ns * IG_KBT;
    const int kt0 = (int)((long long)blockIdx.z * kt_all / IG_SPLIT_K);
    const int nkt = (int)((long long)(blockIdx.z + 1) * kt_all / IG_SPLIT_K) - kt0;

    /* ---- A rows this thread copies: its phase pixel (n, i, j) -> dx (h0 + i*SH, w0 + j*SW) ---- */
    const int acol = tid % IG_ACH;
    const int arow0 = tid / IG_ACH;
    int a_img[IG_A_ITERS], a_i[IG_A_ITERS], a_j[IG_A_ITERS];
#pragma unroll
    for(int it = 0; it < IG_A_ITERS; ++it)
    {
        const int m = m0 + arow0 + it * IG_A_STEP;
        const int n = m / pix;
        const int rem = m - n * pix;
        const int i = rem / wph;
        const bool ok = n < IG_N;
        a_img[it] = ok ? n * (IG_P * IG_Q * IG_YK) : 0;
        a_i[it] = ok ? i : -(1 << 24);
        a_j[it] = rem - i * wph;
    }
    const int bcol = tid % IG_BCH;
    const int brow0 = tid / IG_BCH;
    const int c_b = n0 + bcol * 8;
    const bool c_ok = c_b < IG_C;

    const u32 smem_base = smem_addr(smem);
    auto load_tile = [&](int stage, int t) {
        const int kt = kt0 + t;
        const int tap = kt / IG_KBT;
        const int kb = (kt - tap * IG_KBT) * IG_BK;
        const int ir = tap / ns;
        const int r = r0 + ir * IG_RSTEP;
        const int s = s0 + (tap - ir * ns) * IG_SSTEP;
        const int dp = (h0 + IG_PH - r * IG_DH) / IG_SH; /* exact: p = i + dp */
        const int dq = (w0 + IG_PW - s * IG_DW) / IG_SW;
        const u32 a_dst = smem_base + stage * IG_STAGE_BYTES;
        const u32 b_dst = a_dst + IG_A_BYTES;
        const int k = kb + acol * 8;
        const bool k_ok = k < IG_K;
#pragma unroll
        for(int it = 0; it < IG_A_ITERS; ++it)
        {
            const int p = a_i[it] + dp;
            const int q = a_j[it] + dq;
            const bool ok = k_ok && (unsigned)p < (unsigned)IG_P && (unsigned)q < (unsigned)IG_Q;
            const data_t* src = dy + (ok ? a_img[it] + (p * IG_Q + q) * IG_YK + k : 0);
            cp_async_16(a_dst + swizzle<IG_ACH>(arow0 + it * IG_A_STEP, acol) * 16, src, ok);
        }
#pragma unroll
        for(int it = 0; it < IG_B_ITERS; ++it)
        {
            const int row = brow0 + it * IG_B_STEP;
            const int kk = kb + row;
            const bool ok = c_ok && kk < IG_K;
            const data_t* src = w + (ok ? ((kk * IG_R + r) * IG_S + s) * IG_C + c_b : 0);
            cp_async_16(b_dst + swizzle<IG_BCH>(row, bcol) * 16, src, ok);
        }
    };

    const int wm0 = (warp / IG_WARPS_N) * IG_WM;
    const int wn0 = (warp % IG_WARPS_N) * IG_WN;
    auto load_frags = [&](int stage, int ks, u32(&af)[IG_MI][4], u32(&bf)[IG_NI][2]) {
        const u32 a_tile = smem_base + stage * IG_STAGE_BYTES;
        frags_a_mmajor<IG_MI, IG_ACH>(a_tile, wm0, ks, lane, af);
        frags_b_kmajor<IG_NI, IG_BCH>(a_tile + IG_A_BYTES, wn0, ks, lane, bf);
    };

    float acc[IG_MI][IG_NI][4];
    zero_acc(acc);
    mma_mainloop<IG_STAGES, IG_BK / 16, IG_FRAG_BUFS>(nkt, load_tile, load_frags, acc);

    /* ---- epilogue: row r of the tile is dx pixel (n, h0 + i*SH, w0 + j*SW) ---- */
    auto row_off = [&](int row) -> int {
        const int m = m0 + row;
        const int n = m / pix;
        if(n >= IG_N)
            return -1;
        const int rem = m - n * pix;
        const int i = rem / wph;
        const int h = h0 + i * IG_SH;
        const int x = w0 + (rem - i * wph) * IG_SW;
        return ((n * IG_H + h) * IG_W + x) * IG_XC + n0;
    };
#if IG_CLUSTER
    cluster_store_tile<IG_BM, IG_BN, IG_THREADS, IG_MI, IG_NI, IG_SPLIT_K>(smem, acc, wm0, wn0, lane, tid,
                                                                         IG_C - n0, dx, row_off EPI_ARG);
#else
    store_tile<IG_BM, IG_BN, IG_THREADS, IG_MI, IG_NI, (IG_SPLIT_K > 1)>(
        smem, acc, wm0, wn0, lane, tid, IG_C - n0, dx, ws + (i64)blockIdx.z * IG_NPIX * IG_XC + g * IG_C, row_off EPI_ARG);
#endif
}

/* Split-K: dx = the sum of the IG_SPLIT_K fp32 partial results, 8 channels per thread. */
KERNEL void igemm_bwd_splitk_reduce(const float* RESTRICT ws, data_t* RESTRICT dx EPI_KERNEL_PARAMS)
{
    EPI_SETUP(dx, 0, IG_XC);
    splitk_sum<IG_SPLIT_K>(ws, dx, (i64)IG_NPIX * IG_XC EPI_ARG);
}
