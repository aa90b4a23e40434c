/* Implicit-GEMM forward convolution on tensor cores for inputs of at most 4 channels
   (ConvIgemmPadC4FwdNhwc): fp16 or bf16 in, fp32 accumulation, x packed NHWC with exactly 4
   channels (the solver pads fewer with zeros), the filter packed K x R x S2 x 4 with S2 = S
   rounded up to even (the extra tap and channels zero), y packed NHWC, groups = 1.

   igemm_fwd.cu's GEMM (D[m][k] = sum_j A[m][j] * B[k][j], m an output pixel, k an output
   channel) with the reduction j = (r, s, c) over R x S2 x 4: one 16-byte chunk of a row of A is
   two neighbouring filter taps (s, s + 1) of 4 channels each, copied from x as two 8-byte
   cp.async (each zero-filled on its own: outside x, or the padding tap s + 1 = S). A 3-channel
   image then costs R*S2*4 = 224 reduction steps per pixel for a 7x7 filter, where padding the
   channels to 8 costs R*S*8 = 392. The filter rows (B) are contiguous in j as in igemm_fwd.cu;
   the main loop, fragments and epilogue are common/igemm_core.h's and igemm_fwd.cu's.

   No split of the reduction (it is short). Needs K % 8 == 0 (the solver pads K). */

// miopy-compile-test: -DMIOPY_DTYPE=1
// miopy-compile-test: -DMIOPY_DTYPE=2
// miopy-compile-test: -DMIOPY_DTYPE=1 -DIG_BM=64 -DIG_BN=64 -DIG_BK=32 -DIG_WARPS_M=2 -DIG_WARPS_N=2 -DIG_STAGES=4 -DIG_FRAG_BUFS=2
// miopy-compile-test: -DMIOPY_DTYPE=2 -DIG_N=3 -DIG_H=9 -DIG_W=11 -DIG_K=40 -DIG_R=2 -DIG_S=3 -DIG_S2=4 -DIG_P=4 -DIG_Q=5 -DIG_PH=1 -DIG_PW=0 -DIG_SH=2 -DIG_SW=2 -DIG_DH=2 -DIG_DW=1

#ifndef IG_BM
#define IG_BM 128
#define IG_BN 64
#define IG_BK 64
#define IG_WARPS_M 2
#define IG_WARPS_N 2
#define IG_STAGES 3
#endif
#ifndef IG_N /* the stem of ResNet-50 at batch 32; only so that the file compiles on its own */
#define IG_N 32
#define IG_H 224
#define IG_W 224
#define IG_K 64
#define IG_R 7
#define IG_S 7
#define IG_S2 8
#define IG_P 112
#define IG_Q 112
#define IG_PH 3
#define IG_PW 3
#define IG_SH 2
#define IG_SW 2
#define IG_DH 1
#define IG_DW 1
#endif
#ifndef IG_C
#define IG_C 4
#endif
#ifndef IG_FRAG_BUFS
#define IG_FRAG_BUFS 1
#endif
#ifndef IG_SPLIT_K
#define IG_SPLIT_K 1
#endif
#include "common/igemm_core.h"

#if MIOPY_DTYPE == 0
#error "the implicit-GEMM kernels are for fp16 and bf16 (MIOPY_DTYPE 1 or 2)"
#endif
static_assert(IG_C == 4 && IG_S2 % 2 == 0 && IG_S2 >= IG_S && IG_S2 <= IG_S + 1, "4 channels, S2 = S rounded up to even");
static_assert(IG_K % 8 == 0 && IG_SPLIT_K == 1, "K a multiple of 8, no split");
static_assert(IG_BK == 32 || IG_BK == 64, "BK is 32 or 64");

#define IG_THREADS (IG_WARPS_M * IG_WARPS_N * 32)
#define IG_WM (IG_BM / IG_WARPS_M)
#define IG_WN (IG_BN / IG_WARPS_N)
#define IG_MI (IG_WM / 16)
#define IG_NI (IG_WN / 8)
static_assert(IG_WM % 16 == 0 && IG_WN % 16 == 0, "warp tiles are multiples of 16");

#define IG_M (IG_N * IG_P * IG_Q)
#define IG_PAIRS (IG_S2 / 2)              /* 16-byte chunks per filter row */
#define IG_KD (IG_R * IG_S2 * 4)          /* reduction length (a multiple of 8) */
#define IG_CH (IG_BK / 8)                 /* 16-byte chunks per tile row */
#define IG_A_ITERS (IG_BM * IG_CH / IG_THREADS)
#define IG_B_ITERS (IG_BN * IG_CH / IG_THREADS)
#define IG_ROW_STEP (IG_THREADS / IG_CH)
#define IG_STAGE_CHUNKS ((IG_BM + IG_BN) * IG_CH)
#define IG_PITCH (IG_BN + 8)
#define IG_TILES_N ((IG_K + IG_BN - 1) / IG_BN)
#define IG_KT ((IG_KD + IG_BK - 1) / IG_BK)

static_assert(IG_BM * IG_CH % IG_THREADS == 0 && IG_BN * IG_CH % IG_THREADS == 0, "even loads");
static_assert(IG_STAGES * IG_STAGE_CHUNKS * 16 <= 227 * 1024, "at most 227 KB of shared memory per block");

/* 8 bytes global -> shared (through L1); valid = false writes 8 zero bytes (no read). */
DEVICE_FN void cp_async_8(u32 dst, const void* src, bool valid)
{
    const int src_bytes = valid ? 8 : 0;
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}

KERNEL void __launch_bounds__(IG_THREADS) igemm_fwd_c4(const data_t* RESTRICT x, const data_t* RESTRICT w,
                                                       data_t* RESTRICT y, float* RESTRICT ws)
{
    extern __shared__ __align__(128) uint4 smem[];
    const int tid = threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    const int m0 = (blockIdx.x / IG_TILES_N) * IG_BM;
    const int n0 = (blockIdx.x % IG_TILES_N) * IG_BN;
    const u32 smem_base = smem_addr(smem);

    const int col = tid % IG_CH;
    const int row0 = tid / IG_CH;
    int a_img[IG_A_ITERS];
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
        a_img[i] = ok ? n * (IG_H * IG_W * 4) : 0;
        a_ih[i] = ok ? p * IG_SH - IG_PH : -(1 << 24);
        a_iw[i] = q * IG_SW - IG_PW;
    }

    auto load_tile = [&](int stage, int t) {
        const u32 a_dst = smem_base + stage * (IG_STAGE_CHUNKS * 16);
        const u32 b_dst = a_dst + IG_BM * IG_CH * 16;
        const int kk = t * IG_BK + col * 8;
        const int chunk = kk >> 3;
        const int r = chunk / IG_PAIRS;
        const int s = (chunk - r * IG_PAIRS) * 2;
        const bool k_ok = kk < IG_KD;
        const bool second = s + 1 < IG_S; /* the padding tap S reads nothing */
#pragma unroll
        for(int i = 0; i < IG_A_ITERS; ++i)
        {
            const int ih = a_ih[i] + r * IG_DH;
            const int iw = a_iw[i] + s * IG_DW;
            const bool h_ok = k_ok && (unsigned)ih < (unsigned)IG_H;
            const bool ok0 = h_ok && (unsigned)iw < (unsigned)IG_W;
            const bool ok1 = h_ok && second && (unsigned)(iw + IG_DW) < (unsigned)IG_W;
            const u32 dst = a_dst + swizzle<IG_CH>(row0 + i * IG_ROW_STEP, col) * 16;
            cp_async_8(dst, x + (ok0 ? a_img[i] + (ih * IG_W + iw) * 4 : 0), ok0);
            cp_async_8(dst + 8, x + (ok1 ? a_img[i] + (ih * IG_W + iw + IG_DW) * 4 : 0), ok1);
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
    mma_mainloop<IG_STAGES, IG_BK / 16, IG_FRAG_BUFS>(IG_KT, load_tile, load_frags, acc);

    /* ---- epilogue: fp32 -> data_t through shared memory, then 16-byte rows of y ---- */
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
            *reinterpret_cast<uint4*>(y + ((i64)m * IG_K + k)) = smem[(row * IG_PITCH) / 8 + ch];
    }
}
