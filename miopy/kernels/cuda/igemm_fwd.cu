/* Implicit-GEMM forward convolution on tensor cores (ConvIgemmFwdNhwc): fp16 or bf16 in,
   fp32 accumulation, packed NHWC x and y, filter packed K x R x S x C (NHWC order); with IG_G
   groups, each group's blocks a run of the grid working on its slice of channels.

   GEMM view: D[m][k] = sum_j A[m][j] * B[k][j] with m = (n, p, q) an output pixel (M = N*P*Q),
   k an output channel and j = (r, s, c) a filter tap (KD = R*S*C). Both A and B are contiguous
   in j (A row m gathers the input pixels of output pixel m on the fly; B row k is filter k as it
   lies), and D is y as it lies (NHWC: row m holds the K channels of pixel m).

   A block computes a BM x BN tile of D. BK-wide slices of A and B go global -> shared through a
   STAGES-deep cp.async pipeline in dynamic shared memory (common/igemm_core.h's main loop; the
   launch gives IG_SMEM_CHUNKS * 16 bytes) (16-byte copies of 8 channels; padding, taps past KD
   and rows past M are zero-filled), swizzled (common/mma_sm80.h) so ldmatrix reads are
   conflict-free.
   Warps are a WARPS_M x WARPS_N grid, each computing a (BM/WARPS_M) x (BN/WARPS_N) tile with
   mma.sync m16n8k16. The epilogue rounds the fp32 tile to data_t through shared memory and
   writes it with 16-byte stores, whole rows of the tile at a time. With IG_SPLIT_K > 1 the
   reduction is split over gridDim.y blocks, each writing fp32 partial sums to the workspace
   (IG_SPLIT_K x M x K floats), and igemm_splitk_reduce sums them into y; with IG_CLUSTER the
   IG_SPLIT_K blocks of a tile are one thread-block cluster (sm_90) and sum their partial tiles
   through distributed shared memory straight into y (common/igemm_core.h).

   Needs C % 8 == 0 and K % 8 == 0 (16-byte chunks never straddle a tap or the end of a row). */

// miopy-compile-test: -DMIOPY_DTYPE=1
// miopy-compile-test: -DMIOPY_DTYPE=2
// miopy-compile-test: -DMIOPY_DTYPE=1 -DIG_BM=64 -DIG_BN=64 -DIG_BK=64 -DIG_WARPS_M=2 -DIG_WARPS_N=2 -DIG_STAGES=2
// miopy-compile-test: -DMIOPY_DTYPE=1 -DIG_FRAG_BUFS=2
// miopy-compile-test: -DMIOPY_DTYPE=2 -DIG_SPLIT_K=3 -DIG_FRAG_BUFS=2 -DIG_BM=64 -DIG_BN=64 -DIG_BK=64 -DIG_WARPS_M=2 -DIG_WARPS_N=2 -DIG_STAGES=3
// miopy-compile-test: -DMIOPY_DTYPE=1 -DIG_SPLIT_K=3 -DIG_CLUSTER=1 -DIG_BM=64 -DIG_BN=64 -DIG_BK=64 -DIG_WARPS_M=2 -DIG_WARPS_N=2 -DIG_STAGES=3
// miopy-compile-test: -DMIOPY_DTYPE=2 -DIG_SPLIT_K=8 -DIG_CLUSTER=1 -DIG_BM=256 -DIG_BN=128 -DIG_BK=32 -DIG_WARPS_M=4 -DIG_WARPS_N=2 -DIG_STAGES=3
// miopy-compile-test: -DMIOPY_DTYPE=2 -DIG_BM=256 -DIG_BN=128 -DIG_BK=64 -DIG_WARPS_M=4 -DIG_WARPS_N=2 -DIG_STAGES=4
// miopy-compile-test: -DMIOPY_DTYPE=2 -DIG_G=4 -DIG_SPLIT_K=2 -DIG_N=2 -DIG_C=16 -DIG_H=9 -DIG_W=7 -DIG_K=24 -DIG_R=3 -DIG_S=3 -DIG_P=9 -DIG_Q=7 -DIG_PH=1 -DIG_PW=1 -DIG_SH=1 -DIG_SW=1 -DIG_DH=1 -DIG_DW=1
// miopy-compile-test: -DMIOPY_DTYPE=1 -DIG_G=2 -DIG_N=2 -DIG_C=16 -DIG_H=9 -DIG_W=7 -DIG_K=24 -DIG_R=3 -DIG_S=3 -DIG_P=9 -DIG_Q=7 -DIG_PH=1 -DIG_PW=1 -DIG_SH=1 -DIG_SW=1 -DIG_DH=1 -DIG_DW=1 -DIG_SPLIT_K=2 -DIG_CLUSTER=1 -DIG_BM=64 -DIG_BN=64 -DIG_BK=64 -DIG_WARPS_M=2 -DIG_WARPS_N=2 -DIG_STAGES=3
// miopy-compile-test: -DMIOPY_DTYPE=1 -DMIOPY_EPI=1 -DMIOPY_EPI_BIAS=1 -DMIOPY_EPI_ACT=3 -DIG_SPLIT_K=2 -DIG_CLUSTER=1 -DIG_BM=64 -DIG_BN=64 -DIG_BK=64 -DIG_WARPS_M=2 -DIG_WARPS_N=2 -DIG_STAGES=3
// miopy-compile-test: -DMIOPY_DTYPE=2 -DMIOPY_EPI=1 -DMIOPY_EPI_ACT=8 -DIG_SPLIT_K=2 -DIG_G=2 -DIG_N=2 -DIG_C=16 -DIG_H=9 -DIG_W=7 -DIG_K=24 -DIG_R=3 -DIG_S=3 -DIG_P=9 -DIG_Q=7 -DIG_PH=1 -DIG_PW=1 -DIG_SH=1 -DIG_SW=1 -DIG_DH=1 -DIG_DW=1
// miopy-compile-test: -DMIOPY_DTYPE=1 -DIG_N=3 -DIG_C=24 -DIG_H=9 -DIG_W=11 -DIG_K=40 -DIG_R=2 -DIG_S=3 -DIG_P=4 -DIG_Q=5 -DIG_PH=1 -DIG_PW=0 -DIG_SH=2 -DIG_SW=2 -DIG_DH=2 -DIG_DW=1

/* This kernel's tile defaults, only so that the file compiles on its own (the CUDA compile test;
   the solver always defines them); the shape's are in common/igemm_defines.h. */
#ifndef IG_BM
#define IG_BM 128
#define IG_BN 64
#define IG_BK 32
#define IG_WARPS_M 2
#define IG_WARPS_N 2
#define IG_STAGES 3
#endif
#include "common/igemm_defines.h"
#include "common/igemm_core.h"

#define IG_M (IG_N * IG_P * IG_Q)
#define IG_KD (IG_R * IG_S * IG_C)
#define IG_CH (IG_BK / 8)                  /* 16-byte chunks per tile row */
#define IG_A_ITERS (IG_BM * IG_CH / IG_THREADS)
#define IG_B_ITERS (IG_BN * IG_CH / IG_THREADS)
#define IG_ROW_STEP (IG_THREADS / IG_CH)   /* tile rows one pass of the block loads */
#define IG_STAGE_CHUNKS ((IG_BM + IG_BN) * IG_CH)
#define IG_PITCH (IG_BN + 8)               /* epilogue tile row, in elements */
#define IG_PIPE_CHUNKS (IG_STAGES * IG_STAGE_CHUNKS)
#define IG_EPI_CHUNKS (IG_BM * IG_PITCH / 8)
#define IG_OUT_CHUNKS (IG_CLUSTER ? IGEMM_CLUSTER_BYTES(IG_BM, IG_BN) / 16 : IG_EPI_CHUNKS)
#define IG_SMEM_CHUNKS (IG_PIPE_CHUNKS > IG_OUT_CHUNKS ? IG_PIPE_CHUNKS : IG_OUT_CHUNKS)
#define IG_TILES_N ((IG_K + IG_BN - 1) / IG_BN)
#define IG_KT ((IG_KD + IG_BK - 1) / IG_BK)

static_assert(IG_BM * IG_CH % IG_THREADS == 0 && IG_BN * IG_CH % IG_THREADS == 0, "even loads");
static_assert(IG_SMEM_CHUNKS * 16 <= 227 * 1024, "at most 227 KB of shared memory per block");

#if IG_CLUSTER
#define IG_CLUSTER_DIMS __cluster_dims__(1, IG_SPLIT_K, 1) /* a tile's slices */
#else
#define IG_CLUSTER_DIMS
#endif

KERNEL void __launch_bounds__(IG_THREADS) IG_CLUSTER_DIMS
    igemm_fwd(const data_t* RESTRICT x, const data_t* RESTRICT w, data_t* RESTRICT y, float* RESTRICT ws EPI_KERNEL_PARAMS)
{
    extern __shared__ __align__(128) uint4 smem[]; /* IG_SMEM_CHUNKS, given at launch */
    const int tid = threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    IG_GROUP_OF_BLOCK(g, bid);
    x += g * IG_C; /* this group's channels of x and y, its run of filter rows */
    w += (i64)g * IG_K * IG_KD;
    y += g * IG_K;
    EPI_SETUP(y, g * IG_K, IG_YK);
    const int m0 = (bid / IG_TILES_N) * IG_BM;
    const int n0 = (bid % IG_TILES_N) * IG_BN;
    const u32 smem_base = smem_addr(smem);
    /* split-K: this block reduces k-tiles [kt0, kt1) (blockIdx.y of IG_SPLIT_K) */
    const int kt0 = (int)((long long)blockIdx.y * IG_KT / IG_SPLIT_K);
    const int kt1 = (int)((long long)(blockIdx.y + 1) * IG_KT / IG_SPLIT_K);
    const int nkt = kt1 - kt0;

    /* ---- what this thread copies: chunk column `col` of rows row0 + i * IG_ROW_STEP ---- */
    const int col = tid % IG_CH;
    const int row0 = tid / IG_CH;
    int a_img[IG_A_ITERS]; /* element offset of the row's image (x has < 2^31 elements) */
    int a_ih[IG_A_ITERS], a_iw[IG_A_ITERS];
#pragma unroll
    for(int i = 0; i < IG_A_ITERS; ++i)
    {
        const int m = m0 + row0 + i * IG_ROW_STEP;
        const int n = m / (IG_P * IG_Q);
        const int pq = m - n * (IG_P * IG_Q);
        const int p = pq / IG_Q;
        const int q = pq - p * IG_Q;
        const bool ok = m < IG_M;
        a_img[i] = ok ? n * (IG_H * IG_W * IG_XC) : 0;
        a_ih[i] = ok ? p * IG_SH - IG_PH : -(1 << 24);
        a_iw[i] = q * IG_SW - IG_PW;
    }

    auto load_tile = [&](int stage, int t) { /* k-tile kt0 + t */
        const u32 a_dst = smem_base + stage * (IG_STAGE_CHUNKS * 16);
        const u32 b_dst = a_dst + IG_BM * IG_CH * 16;
        const int kk = (kt0 + t) * IG_BK + col * 8;
        const int rs = kk / IG_C;
        const int c = kk - rs * IG_C;
        const int r = rs / IG_S;
        const int s = rs - r * IG_S;
        const bool k_ok = kk < IG_KD;
#pragma unroll
        for(int i = 0; i < IG_A_ITERS; ++i)
        {
            const int ih = a_ih[i] + r * IG_DH;
            const int iw = a_iw[i] + s * IG_DW;
            const bool ok = k_ok && (unsigned)ih < (unsigned)IG_H && (unsigned)iw < (unsigned)IG_W;
            const data_t* src = x + (ok ? a_img[i] + (ih * IG_W + iw) * IG_XC + c : 0);
            cp_async_16(a_dst + swizzle<IG_CH>(row0 + i * IG_ROW_STEP, col) * 16, src, ok);
        }
#pragma unroll
        for(int i = 0; i < IG_B_ITERS; ++i)
        {
            const int k = n0 + row0 + i * IG_ROW_STEP;
            const bool ok = k_ok && k < IG_K;
            const data_t* src = ok ? w + ((i64)k * IG_KD + kk) : w;
            cp_async_16(b_dst + swizzle<IG_CH>(row0 + i * IG_ROW_STEP, col) * 16, src, ok);
        }
    };

    const int wm0 = (warp / IG_WARPS_N) * IG_WM;
    const int wn0 = (warp % IG_WARPS_N) * IG_WN;
    auto load_frags = [&](int stage, int ks, u32(&af)[IG_MI][4], u32(&bf)[IG_NI][2]) {
        const u32 a_tile = smem_base + stage * (IG_STAGE_CHUNKS * 16);
        frags_a_mmajor<IG_MI, IG_CH>(a_tile, wm0, ks, lane, af);
        frags_b_nmajor<IG_NI, IG_CH>(a_tile + IG_BM * IG_CH * 16, wn0, ks, lane, bf);
    };

    float acc[IG_MI][IG_NI][4];
    zero_acc(acc);
    mma_mainloop<IG_STAGES, IG_BK / 16, IG_FRAG_BUFS>(nkt, load_tile, load_frags, acc);

#if IG_CLUSTER
    /* ---- cluster split-K: the slices sum through distributed shared memory into y ---- */
    auto row_off = [&](int row) -> int { return m0 + row < IG_M ? (m0 + row) * IG_YK + n0 : -1; };
    cluster_store_tile<IG_BM, IG_BN, IG_THREADS, IG_MI, IG_NI, IG_SPLIT_K>(smem, acc, wm0, wn0, lane, tid,
                                                                         IG_K - n0, y, row_off EPI_ARG);
#elif IG_SPLIT_K > 1
    /* ---- split-K epilogue: fp32 partial sums to the workspace, slice blockIdx.y ---- */
    float* part = ws + (i64)blockIdx.y * IG_M * IG_YK + g * IG_K; /* laid out as y */
#pragma unroll
    for(int i = 0; i < IG_MI; ++i)
#pragma unroll
        for(int j = 0; j < IG_NI; ++j)
        {
            const int row = m0 + wm0 + i * 16 + (lane >> 2);
            const int k = n0 + wn0 + j * 8 + (lane & 3) * 2;
            if(k < IG_K)
            {
                if(row < IG_M)
                    *reinterpret_cast<float2*>(part + (i64)row * IG_YK + k) = make_float2(acc[i][j][0], acc[i][j][1]);
                if(row + 8 < IG_M)
                    *reinterpret_cast<float2*>(part + (i64)(row + 8) * IG_YK + k) =
                        make_float2(acc[i][j][2], acc[i][j][3]);
            }
        }
#else
    /* ---- epilogue: fp32 -> data_t into shared memory (the main loop is done with it), then
       16-byte rows out ---- */
    u32* ctile = reinterpret_cast<u32*>(smem);
#pragma unroll
    for(int i = 0; i < IG_MI; ++i)
#pragma unroll
        for(int j = 0; j < IG_NI; ++j)
        {
            const int row = wm0 + i * 16 + (lane >> 2);
            const int cc = wn0 + j * 8 + (lane & 3) * 2;
            ctile[(row * IG_PITCH + cc) / 2] = pack2(acc[i][j][0], acc[i][j][1]);
            ctile[((row + 8) * IG_PITCH + cc) / 2] = pack2(acc[i][j][2], acc[i][j][3]);
        }
    __syncthreads();
    constexpr int ROW_CHUNKS = IG_BN / 8;
#pragma unroll
    for(int e = tid; e < IG_BM * ROW_CHUNKS; e += IG_THREADS)
    {
        const int row = e / ROW_CHUNKS;
        const int ch = e - row * ROW_CHUNKS;
        const int m = m0 + row;
        const int k = n0 + ch * 8;
        if(m < IG_M && k < IG_K)
            EPI_STORE8(y + ((i64)m * IG_YK + k), smem[(row * IG_PITCH) / 8 + ch]);
    }
#endif
}

/* Split-K: y = the sum of the IG_SPLIT_K fp32 partial outputs, 8 channels per thread. */
KERNEL void igemm_splitk_reduce(const float* RESTRICT ws, data_t* RESTRICT y EPI_KERNEL_PARAMS)
{
    EPI_SETUP(y, 0, IG_YK);
    splitk_sum<IG_SPLIT_K>(ws, y, (i64)IG_M * IG_YK EPI_ARG);
}
