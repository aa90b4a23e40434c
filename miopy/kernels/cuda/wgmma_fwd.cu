/* Implicit-GEMM forward convolution on Hopper's warpgroup MMA (ConvWgmmFwdNhwc): fp16 or bf16
   in, fp32 accumulation, packed NHWC x and y, filter packed K x R x S x C, groups = 1. Built for
   sm_90a only (wgmma); the solver is applicable on compute capability 9.0 alone.

   GEMM view as in igemm_fwd.cu: D[m][k] = sum_j A[m][j] * B[k][j], m = (n, p, q) an output pixel
   (M = N*P*Q), k an output channel, j = (r, s, c) a filter tap (KD = R*S*C); A rows are gathered
   from x on the fly (im2col while loading), B rows are the filter as it lies, D is y as it lies.

   A block of WG_BM / 64 warpgroups (1 to 4; 128 threads each) computes a WG_BM x WG_BN tile of D; each
   warpgroup owns 64 rows and all WG_BN columns, one wgmma m64nWG_BNk16 per 16-wide k-slice
   (three warpgroups, WG_BM = 192, only with WG_WS: a tile count that fits a wave where 128 or 256
   rows leave SMs idle).
   64-wide k-tiles (one 128-byte swizzled row per tile row, common/wgmma_sm90.h) of A and B go
   global -> shared by cp.async (16 bytes = 8 channels, zero-filled for padding, taps past KD and
   rows past M) into a WG_STAGES-deep ring in dynamic shared memory. Per k-tile t: wait for its
   copies, proxy fence, barrier; issue its 4 wgmma and commit; issue the copies of tile
   t + WG_STAGES - 2 into the stage tile t - 2 used; wait until only tile t's MMAs are pending.
   The barrier of step t comes after every warpgroup saw tile t - 2's MMAs finish, so that stage
   is free: WG_STAGES - 2 tiles of copies are in flight while the MMAs run.

   Epilogue: the accumulators are m16n8 fragments side by side (one 16 x WG_BN warp tile per
   warp), so common/igemm_core.h's epilogues apply: rounded to data_t through shared memory with
   16-byte stores; with IG_SPLIT_K > 1 fp32 partial sums to the workspace (then
   igemm_splitk_reduce), or with IG_CLUSTER the slices of a tile as one thread-block cluster
   summing through distributed shared memory straight into y. The warp-specialized kernel (WG_WS)
   splits only in a cluster: its consumers place their fp32 tile, then every thread of the block
   takes part in igemm_core.h's cluster_sum_tile.

   Stream-K (WG_SK > 0, warp-specialized only): WG_SK blocks, each an even run of the tiles'
   k-tiles laid end to end (tile-major), as segments of one tile each; see the WG_SK define and
   the kernel's stream-K branch. WG_MINB: the blocks per SM the registers are bounded for.

   Needs C % 8 == 0 and K % 8 == 0. */

// miopy-target: sm_90a
// miopy-compile-test: -DMIOPY_DTYPE=1
// miopy-compile-test: -DMIOPY_DTYPE=2
// miopy-compile-test: -DMIOPY_DTYPE=1 -DWG_BM=64 -DWG_BN=64 -DWG_STAGES=4
// miopy-compile-test: -DMIOPY_DTYPE=2 -DWG_BM=256 -DWG_BN=128 -DWG_STAGES=4 -DIG_SPLIT_K=2 -DIG_CLUSTER=1
// miopy-compile-test: -DMIOPY_DTYPE=1 -DWG_BM=256 -DWG_BN=64 -DWG_STAGES=5 -DWG_B_MN=1
// miopy-compile-test: -DMIOPY_DTYPE=2 -DWG_BM=128 -DWG_BN=256 -DWG_STAGES=4
// miopy-compile-test: -DMIOPY_DTYPE=1 -DWG_BM=128 -DWG_BN=128 -DWG_STAGES=5 -DIG_SPLIT_K=3
// miopy-compile-test: -DMIOPY_DTYPE=2 -DWG_BM=128 -DWG_BN=128 -DWG_STAGES=4 -DIG_SPLIT_K=2 -DIG_CLUSTER=1
// miopy-compile-test: -DMIOPY_DTYPE=1 -DWG_B_MN=1 -DWG_BM=128 -DWG_BN=256 -DWG_STAGES=4
// miopy-compile-test: -DMIOPY_DTYPE=2 -DWG_B_MN=1 -DWG_BM=64 -DWG_BN=64 -DWG_STAGES=3 -DIG_SPLIT_K=2 -DIG_CLUSTER=1 -DIG_PH=-1 -DIG_PW=-1 -DIG_DH=-1 -DIG_DW=-1
// miopy-compile-test: -DMIOPY_DTYPE=1 -DWG_WS=1 -DWG_BM=128 -DWG_BN=128 -DWG_STAGES=5
// miopy-compile-test: -DMIOPY_DTYPE=1 -DWG_WS=1 -DWG_SWAP=1 -DWG_BM=256 -DWG_BN=128 -DWG_STAGES=4
// miopy-compile-test: -DMIOPY_DTYPE=2 -DWG_WS=2 -DWG_SWAP=1 -DWG_BM=256 -DWG_BN=64 -DWG_STAGES=5 -DWG_B_MN=1
// miopy-compile-test: -DMIOPY_DTYPE=1 -DMIOPY_EPI=1 -DMIOPY_EPI_BIAS=1 -DWG_WS=1 -DWG_SWAP=1 -DWG_BM=128 -DWG_BN=64 -DWG_STAGES=4
// miopy-compile-test: -DMIOPY_DTYPE=1 -DWG_WS=1 -DWG_SWAP=1 -DWG_TAP_MASK=1 -DWG_BM=256 -DWG_BN=128 -DWG_STAGES=4 -DIG_C=128 -DIG_K=128
// miopy-compile-test: -DMIOPY_DTYPE=2 -DWG_WS=2 -DWG_SWAP=1 -DWG_TAP_MASK=1 -DWG_B_MN=1 -DWG_BM=128 -DWG_BN=64 -DWG_STAGES=4 -DIG_C=64 -DIG_K=72 -DIG_PH=-1 -DIG_PW=-1 -DIG_DH=-1 -DIG_DW=-1
// miopy-compile-test: -DMIOPY_DTYPE=2 -DWG_WS=1 -DWG_BM=128 -DWG_BN=256 -DWG_STAGES=4
// miopy-compile-test: -DMIOPY_DTYPE=2 -DWG_WS=1 -DWG_BM=256 -DWG_BN=128 -DWG_STAGES=4
// miopy-compile-test: -DMIOPY_DTYPE=1 -DWG_WS=1 -DWG_BM=64 -DWG_BN=256 -DWG_STAGES=3 -DWG_B_MN=1
// miopy-compile-test: -DMIOPY_DTYPE=2 -DWG_WS=1 -DWG_BM=192 -DWG_BN=128 -DWG_STAGES=4 -DWG_B_MN=1
// miopy-compile-test: -DMIOPY_DTYPE=1 -DWG_WS=2 -DWG_BM=192 -DWG_BN=128 -DWG_STAGES=5
// miopy-compile-test: -DMIOPY_DTYPE=1 -DWG_WS=1 -DWG_BM=192 -DWG_BN=64 -DWG_STAGES=5 -DIG_SPLIT_K=2 -DIG_CLUSTER=1
// miopy-compile-test: -DMIOPY_DTYPE=1 -DWG_WS=1 -DWG_BM=128 -DWG_BN=128 -DWG_STAGES=4 -DWG_SK=132
// miopy-compile-test: -DMIOPY_DTYPE=2 -DWG_WS=2 -DWG_BM=128 -DWG_BN=256 -DWG_STAGES=3 -DWG_SK=132 -DWG_B_MN=1
// miopy-compile-test: -DMIOPY_DTYPE=2 -DWG_WS=1 -DWG_BM=128 -DWG_BN=256 -DWG_STAGES=3 -DWG_B_MN=1 -DIG_C=40 -DIG_K=72 -DIG_PH=-1 -DIG_PW=-1 -DIG_DH=-1 -DIG_DW=-1
// miopy-compile-test: -DMIOPY_DTYPE=1 -DMIOPY_EPI=1 -DMIOPY_EPI_BIAS=1 -DMIOPY_EPI_ACT=3 -DWG_WS=1 -DWG_BM=128 -DWG_BN=128 -DWG_STAGES=4 -DWG_SK=132
// miopy-compile-test: -DMIOPY_DTYPE=2 -DMIOPY_EPI=1 -DMIOPY_EPI_BIAS=1 -DMIOPY_EPI_ACT=7 -DWG_WS=1 -DWG_BM=192 -DWG_BN=64 -DWG_STAGES=5 -DIG_SPLIT_K=2 -DIG_CLUSTER=1
// miopy-compile-test: -DMIOPY_DTYPE=1 -DMIOPY_EPI=1 -DMIOPY_EPI_BIAS=1 -DWG_BM=128 -DWG_BN=128 -DWG_STAGES=5 -DIG_SPLIT_K=3
// miopy-compile-test: -DMIOPY_DTYPE=1 -DIG_N=3 -DIG_C=24 -DIG_H=9 -DIG_W=11 -DIG_K=40 -DIG_R=2 -DIG_S=3 -DIG_P=4 -DIG_Q=5 -DIG_PH=1 -DIG_PW=0 -DIG_SH=2 -DIG_SW=2 -DIG_DH=2 -DIG_DW=1

/* Tile defaults only so that the file compiles on its own (the solver defines them). */
#ifndef WG_BM
#define WG_BM 128
#endif
#ifndef WG_BN
#define WG_BN 128
#endif
#ifndef WG_STAGES
#define WG_STAGES 4
#endif
#ifndef WG_B_MN
#define WG_B_MN 0 /* 1: backward data, B read N-major from the filter as it lies */
#endif
#ifndef WG_SK
/* > 0: stream-K over WG_SK blocks (warp-specialized only): the output tiles' k-tiles laid end to
   end and cut into WG_SK even runs, one per block; a tile cut between blocks is summed by the
   block that holds its first k-tile from the others' fp32 partials in the workspace, each
   signalled by a 64-bit flag there: WG_SK_MAGIC ^ the block, cleared again by the block that
   consumed it. So no launch leaves a signal behind, and whatever else the workspace held
   matches a block's 64-bit signal with odds of about 2^-64: the flags need no clearing first */
#define WG_SK 0
#endif
#ifndef WG_FAST_LOAD
/* Backward data where a k-tile is 64 channels of one tap (dy's channels a multiple of 64): the
   tap and channel block are found once per k-tile, not per copy, and each filter copy's source
   is a per-thread base plus one offset per k-tile. The producer's loop on the 7x7 ResNet layer
   (128 x 128, ws 2): 321 -> 170 SASS instructions per k-tile, 164 -> 140 registers; H200, fp16,
   L2 flushed: 30.7 -> 23.7 us (scripts/bench_wgmma.py, 2026-11-23). Checking the A rows' bounds
   once per tap too (a mask) was slower in both directions (backward 7x7 25.3 us, forward 28x28
   22.2 against 20.5), so the A copies keep their per-copy checks, and the forward kernel its
   general copies. */
#define WG_FAST_LOAD (WG_B_MN && IG_C % 64 == 0)
#endif
#ifndef WG_TAP_MASK
/* 1 (with WG_SWAP, where a k-tile is 64 channels of one tap: C % 64 == 0, at most 32 taps):
   each A row's in-image taps as a bit mask and its pixel's element offset, found once per output
   tile, so that an A copy is a bit test, an add and the copy. The producer warpgroup issues
   every copy of the block: 265 SASS instructions per k-tile of a 256 x 128 block with the
   general copies, 166 with these (NVRTC 13, sm_90a); ncu on 112x112 K128 with the general ones
   finds the MMA warps waiting on full stages about half their cycles. */
#define WG_TAP_MASK 0
#endif
#ifndef WG_MINB
#define WG_MINB 1 /* blocks per SM the registers must allow (__launch_bounds__) */
#endif
#ifndef WG_WS
/* 1: a producer warpgroup loads, the others only multiply (mbarriers); 2: the same, with each
   stage's full barrier completed by the copies themselves (cp.async.mbarrier.arrive.noinc) */
#define WG_WS 0
#endif
#ifndef WG_SWAP
/* 1 (warp-specialized, unsplit, WG_BM 128 or 256): the operands swapped, D^T = B A^T. The
   WG_BN / 64 consumer warpgroups each own 64 output channels and all WG_BM pixels: one wgmma
   m64n{WG_BM}k16 per k-slice with the filter tile as A and the pixel tile as B (the ring as
   without the swap). A 256 x 128 tile is then two warpgroups of m64n256 (80 bytes of shared
   memory read per 128 MMA cycles, against 96 per 128 for four of m64n128) and 256 x 64 one
   (against 128 x 64's two of m64n64, 128 bytes per cycle: the whole shared-memory bandwidth).
   The epilogue stores the transposed fragments with stmatrix .trans into the staging tile. */
#define WG_SWAP 0
#endif
/* The m16n8 view of the wgmma tiling for common/igemm_defines.h and the epilogues: a column of
   WG_BM / 16 warps, each a 16 x WG_BN warp tile, k-tiles of 64 (WG_SWAP: WG_BN / 16 consumer
   warps; only their count matters there). */
#define IG_BM WG_BM
#define IG_BN WG_BN
#define IG_BK 64
#if WG_SWAP
#define IG_WARPS_M (WG_BN / 16)
#else
#define IG_WARPS_M (WG_BM / 16)
#endif
#define IG_WARPS_N 1
#define IG_STAGES WG_STAGES
#include "common/igemm_defines.h"
#include "common/igemm_core.h"
#include "common/wgmma_sm90.h"

#define WG_M (IG_N * IG_P * IG_Q)
#define WG_KD (IG_R * IG_S * IG_C)
#if WG_WS
#define WG_THREADS (IG_THREADS + 128) /* the consumers and one producer warpgroup (warps 0-3) */
#define WG_LOADERS 128
#define WG_LAG (WG_STAGES - 2) /* k-tiles of copies in flight before the producer signals one */
#else
#define WG_THREADS IG_THREADS
#define WG_LOADERS IG_THREADS
#endif
#define WG_ROW_STEP (WG_LOADERS / 8)          /* tile rows one pass of the loaders copies */
#define WG_A_ITERS (WG_BM / WG_ROW_STEP)
#define WG_B_ITERS (WG_BN / WG_ROW_STEP)
#define WG_A_BYTES (WG_BM * 128)
#define WG_STAGE_BYTES ((WG_BM + WG_BN) * 128)
#define WG_TILES_N ((IG_K + WG_BN - 1) / WG_BN)
#define WG_KT ((WG_KD + 63) / 64)
#if WG_SWAP
#define WG_ACC (WG_BM / 2) /* fp32 accumulators per thread */
#else
#define WG_ACC (WG_BN / 2) /* fp32 accumulators per thread */
#endif
#define WG_EPI_BYTES (WG_BM * (WG_BN + 8) * 2 + WG_BM * 4)
#define WG_RING_OR_EPI_BYTES \
    (WG_STAGES * WG_STAGE_BYTES > WG_EPI_BYTES ? WG_STAGES * WG_STAGE_BYTES : WG_EPI_BYTES)
#define WG_B_RC (WG_BN / 8)   /* 16-byte chunks per row of an N-major B tile */
#define WG_TILES ((WG_M + WG_BM - 1) / WG_BM * WG_TILES_N)
#define WG_UNITS ((long long)WG_TILES * WG_KT) /* stream-K: (tile, k-tile) steps, tile-major */
#define WG_SK_FLAGS ((2 * WG_SK + 63) / 64 * 64) /* 4-byte words of the flags before the partials */
#define WG_SK_MAGIC 0x9e3779b97f4a7c15ull
/* stream-K's rounded output tile (rows of WG_BN + 8 elements) after the ring and the mbarriers */
#define WG_SK_EPI_OFF (WG_RING_OR_EPI_BYTES + 256)

static_assert(WG_BM == 64 || WG_BM == 128 || WG_BM == 192 || WG_BM == 256, "one to four warpgroups of 64 rows");
static_assert(WG_BM != 192 || WG_WS, "three consumer warpgroups only with the producer warpgroup (even copies)");
static_assert(WG_BN == 64 || WG_BN == 128 || WG_BN == 256, "wgmma widths");
static_assert(WG_STAGES >= 3 && WG_STAGES <= 8, "3 to 8 stages");
static_assert(WG_BN % WG_ROW_STEP == 0, "even copies of B");
static_assert(!WG_FAST_LOAD || (WG_B_MN && IG_C % 64 == 0), "the fast copies: backward data, k-tiles of one tap");
static_assert(!WG_SWAP || (WG_WS && !WG_SK && IG_SPLIT_K == 1 && (WG_BM == 128 || WG_BM == 256)),
              "the swapped operands: warp-specialized, unsplit, 128 or 256 pixels");
static_assert(!WG_TAP_MASK || (WG_SWAP && IG_C % 64 == 0 && IG_R * IG_S <= 32),
              "the tap-mask copies: swapped operands, k-tiles of one tap, at most 32 taps");

#if IG_CLUSTER
#define WG_CLUSTER_DIMS __cluster_dims__(1, IG_SPLIT_K, 1) /* a tile's slices */
#else
#define WG_CLUSTER_DIMS
#endif

#if WG_SK && (!WG_WS || IG_SPLIT_K > 1 || IG_CLUSTER)
#error "stream-K needs the warp-specialized kernel and no split"
#endif

#if WG_WS && IG_SPLIT_K > 1 && !IG_CLUSTER
#error "the warp-specialized kernel splits the reduction only inside a cluster"
#endif

DEVICE_FN void mbar_init(u32 addr, u32 count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(addr), "r"(count) : "memory");
}
/* Arrives (release, CTA scope) on the mbarrier at `addr`. */
DEVICE_FN void mbar_arrive(u32 addr)
{
    asm volatile("{\n.reg .b64 state;\nmbarrier.arrive.shared::cta.b64 state, [%0];\n}\n" ::"r"(addr) : "memory");
}
/* Arrives on the mbarrier at `addr` once every cp.async this thread issued so far has landed
   (the arrival is one of the barrier's expected count: noinc). */
DEVICE_FN void cp_async_mbar_arrive(u32 addr)
{
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(addr) : "memory");
}
/* Waits (acquire) until the phase of parity `parity` of the mbarrier at `addr` has completed. */
DEVICE_FN void mbar_wait(u32 addr, u32 parity)
{
    asm volatile("{\n.reg .pred done;\nWG_WAIT:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
                 "@!done bra WG_WAIT;\n}\n" ::"r"(addr),
                 "r"(parity)
                 : "memory");
}

/* Stream-K's signals between blocks (GPU scope): a flag read with acquire, set with release. */
DEVICE_FN u64 ld_acquire_gpu(const u64* p)
{
    u64 v;
    asm volatile("ld.acquire.gpu.global.u64 %0, [%1];\n" : "=l"(v) : "l"(p) : "memory");
    return v;
}
DEVICE_FN void st_release_gpu(u64* p, u64 v)
{
    asm volatile("st.release.gpu.global.u64 [%0], %1;\n" ::"l"(p), "l"(v) : "memory");
}
/* A barrier of the consumer warpgroups alone (named barrier 1; the producer never joins). */
/* the warp-specialized pipelines' barriers, after the ring and the epilogue tile: full[s] (the
   producer's threads arrive once a stage's copies are in) and empty[s] (every consumer thread
   arrives once its MMAs reading it are done) */
DEVICE_FN u32 bars_of(u32 base) { return base + WG_RING_OR_EPI_BYTES; }
DEVICE_FN u32 wg_init_bars(u32 base, int tid)
{
    const u32 bars = bars_of(base);
    if(tid == 0)
    {
        for(int s = 0; s < WG_STAGES; ++s)
        {
            mbar_init(bars + 8 * s, WG_LOADERS);
            mbar_init(bars + 8 * (WG_STAGES + s), IG_THREADS);
        }
    }
    return bars;
}

DEVICE_FN void consumers_sync() { asm volatile("bar.sync 1, %0;\n" ::"n"(IG_THREADS) : "memory"); }

KERNEL void __launch_bounds__(WG_THREADS, WG_MINB) WG_CLUSTER_DIMS
    wgmma_fwd(const data_t* RESTRICT x, const data_t* RESTRICT w, data_t* RESTRICT y, float* RESTRICT ws EPI_KERNEL_PARAMS)
{
    EPI_SETUP(y, 0, IG_K);
    /* WG_STAGES * WG_STAGE_BYTES (or the epilogue's tile) + 1024, given at launch; the ring starts
       at the first 1024-byte boundary (the swizzle's period) */
    extern __shared__ __align__(1024) uint4 smem_raw[];
    const u32 raw_base = smem_addr(smem_raw);
    const u32 base = (raw_base + 1023u) & ~1023u;
    uint4* smem = smem_raw + (base - raw_base) / 16;

    const int tid = threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    const int bid = blockIdx.x;
    /* the output tile and the k-tiles [kt0, kt0 + nkt) this block reduces: with split-K the
       IG_SPLIT_K slices of blockIdx.y; with stream-K (WG_SK) each of this block's segments in turn */
    int m0 = (bid / WG_TILES_N) * WG_BM;
    int n0 = (bid % WG_TILES_N) * WG_BN;
    int kt0 = (int)((long long)blockIdx.y * WG_KT / IG_SPLIT_K);
    int nkt = (int)((long long)(blockIdx.y + 1) * WG_KT / IG_SPLIT_K) - kt0;

    /* ---- what this thread copies: chunk `col` of rows row0 + i * WG_ROW_STEP, which lies at
       chunk col ^ (row0 % 8) of its row (WG_ROW_STEP is a multiple of 8) ---- */
    const int col = tid & 7;
    const int row0 = tid >> 3;
    const u32 dst0 = (u32)(row0 * 128 + ((col ^ (row0 & 7)) << 4));
    int a_img[WG_A_ITERS]; /* element offset of the row's image (x has < 2^31 elements) */
    int a_ih[WG_A_ITERS], a_iw[WG_A_ITERS];
#if WG_TAP_MASK
    int a_off[WG_A_ITERS];  /* element offset of the row's tap (0, 0), channel 0 (where in range) */
    u32 a_mask[WG_A_ITERS]; /* bit r * S + s: tap (r, s) lies inside the image */
#endif
    auto decode_rows = [&]() { /* the im2col rows of tile row m0 this thread copies */
#pragma unroll
        for(int i = 0; i < WG_A_ITERS; ++i)
        {
            const int m = m0 + row0 + i * WG_ROW_STEP;
            const int n = m / (IG_P * IG_Q);
            const int pq = m - n * (IG_P * IG_Q);
            const int p = pq / IG_Q;
            const int q = pq - p * IG_Q;
            const bool ok = m < WG_M;
            a_img[i] = ok ? n * (IG_H * IG_W * IG_C) : 0;
            a_ih[i] = ok ? p * IG_SH - IG_PH : -(1 << 24);
            a_iw[i] = q * IG_SW - IG_PW;
#if WG_TAP_MASK
            a_off[i] = ok ? a_img[i] + (a_ih[i] * IG_W + a_iw[i]) * IG_C : 0;
            u32 mask = 0;
#pragma unroll
            for(int r = 0; r < IG_R; ++r)
#pragma unroll
                for(int s = 0; s < IG_S; ++s)
                {
                    const int ih = a_ih[i] + r * IG_DH;
                    const int iw = a_iw[i] + s * IG_DW;
                    if((unsigned)ih < (unsigned)IG_H && (unsigned)iw < (unsigned)IG_W)
                        mask |= 1u << (r * IG_S + s);
                }
            a_mask[i] = mask;
#endif
        }
    };
#if !WG_SK
    decode_rows();
#endif

#if WG_FAST_LOAD
    /* B N-major: this thread copies chunk b_ch of rows b_row + i * WG_B_RPI of each k-tile */
    constexpr int WG_B_RPI = WG_LOADERS / WG_B_RC;
    const int b_row = tid / WG_B_RC;
    const int b_ch = tid - b_row * WG_B_RC;
#endif
    auto load_tile = [&](u32 stage_addr, int t) { /* k-tile kt0 + t */
#if WG_FAST_LOAD
        /* k-tile kt0 + t: channels cb .. cb + 63 of tap rs */
        constexpr int TILES_PER_TAP = IG_C / 64;
        const int rs = (kt0 + t) / TILES_PER_TAP;
        const int cb = (kt0 + t - rs * TILES_PER_TAP) * 64;
        const int r = rs / IG_S;
        const int s = rs - r * IG_S;
        const int c = cb + col * 8;
#if WG_TAP_MASK
        const int delta = (r * IG_DH * IG_W + s * IG_DW) * IG_C + c;
#pragma unroll
        for(int i = 0; i < WG_A_ITERS; ++i)
        {
            const bool ok = (a_mask[i] >> rs) & 1u;
            cp_async_16(stage_addr + dst0 + i * (WG_ROW_STEP * 128), x + (ok ? a_off[i] + delta : 0), ok);
        }
#else
#pragma unroll
        for(int i = 0; i < WG_A_ITERS; ++i)
        {
            const int ih = a_ih[i] + r * IG_DH;
            const int iw = a_iw[i] + s * IG_DW;
            const bool ok = (unsigned)ih < (unsigned)IG_H && (unsigned)iw < (unsigned)IG_W;
            const data_t* src = x + (ok ? a_img[i] + (ih * IG_W + iw) * IG_C + c : 0);
            cp_async_16(stage_addr + dst0 + i * (WG_ROW_STEP * 128), src, ok);
        }
#endif
        /* B N-major: row j of the k-tile is filter row (k = cb + j, tap rs), columns n0 .. */
        {
            const bool ok = IG_K % WG_BN == 0 || n0 + b_ch * 8 < IG_K;
            const data_t* src0 = ok ? w + ((i64)((cb + b_row) * (IG_R * IG_S) + rs) * IG_K + n0 + b_ch * 8) : w;
            const i64 step = ok ? (i64)WG_B_RPI * (IG_R * IG_S) * IG_K : 0;
#pragma unroll
            for(int i = 0; i < WG_B_ITERS; ++i)
            {
                const int row = b_row + i * WG_B_RPI;
                const u32 dst = (u32)((b_ch >> 3) * 8192 + row * 128 + (((b_ch & 7) ^ (row & 7)) << 4));
                cp_async_16(stage_addr + WG_A_BYTES + dst, src0 + i * step, ok);
            }
        }
#elif WG_TAP_MASK
        /* forward, k-tile kt0 + t: channels cb .. cb + 63 of tap rs; B rows are whole filter rows */
        constexpr int TILES_PER_TAP = IG_C / 64;
        const int rs = (kt0 + t) / TILES_PER_TAP;
        const int cb = (kt0 + t - rs * TILES_PER_TAP) * 64;
        const int r = rs / IG_S;
        const int s = rs - r * IG_S;
        const int delta = (r * IG_DH * IG_W + s * IG_DW) * IG_C + cb + col * 8;
#pragma unroll
        for(int i = 0; i < WG_A_ITERS; ++i)
        {
            const bool ok = (a_mask[i] >> rs) & 1u;
            cp_async_16(stage_addr + dst0 + i * (WG_ROW_STEP * 128), x + (ok ? a_off[i] + delta : 0), ok);
        }
        const int kk = (kt0 + t) * 64 + col * 8;
#pragma unroll
        for(int i = 0; i < WG_B_ITERS; ++i)
        {
            const int k = n0 + row0 + i * WG_ROW_STEP;
            const bool ok = IG_K % WG_BN == 0 || k < IG_K;
            const data_t* src = w + (ok ? k * WG_KD + kk : 0); /* the filter has < 2^31 elements */
            cp_async_16(stage_addr + WG_A_BYTES + dst0 + i * (WG_ROW_STEP * 128), src, ok);
        }
#else
        const int kk = (kt0 + t) * 64 + col * 8;
        const int rs = kk / IG_C;
        const int c = kk - rs * IG_C;
        const int r = rs / IG_S;
        const int s = rs - r * IG_S;
        const bool k_ok = kk < WG_KD;
#pragma unroll
        for(int i = 0; i < WG_A_ITERS; ++i)
        {
            const int ih = a_ih[i] + r * IG_DH;
            const int iw = a_iw[i] + s * IG_DW;
            const bool ok = k_ok && (unsigned)ih < (unsigned)IG_H && (unsigned)iw < (unsigned)IG_W;
            const data_t* src = x + (ok ? a_img[i] + (ih * IG_W + iw) * IG_C + c : 0);
            cp_async_16(stage_addr + dst0 + i * (WG_ROW_STEP * 128), src, ok);
        }
#if WG_B_MN
        /* B N-major: row j of the k-tile holds filter (k = j's channel, tap j's r, s) at
           columns n0 .. n0 + WG_BN, 64 columns per 8 KB block */
#pragma unroll
        for(int i = 0; i < WG_B_ITERS; ++i)
        {
            const int e = tid + i * WG_LOADERS;
            const int row = e / WG_B_RC;
            const int ch = e - row * WG_B_RC;
            const int j = (kt0 + t) * 64 + row;
            const int jrs = j / IG_C;
            const int jc = j - jrs * IG_C;
            const bool ok = j < WG_KD && n0 + ch * 8 < IG_K;
            const data_t* src = ok ? w + (((i64)jc * (IG_R * IG_S) + jrs) * IG_K + n0 + ch * 8) : w;
            const u32 dst = (u32)((ch >> 3) * 8192 + row * 128 + (((ch & 7) ^ (row & 7)) << 4));
            cp_async_16(stage_addr + WG_A_BYTES + dst, src, ok);
        }
#else
#pragma unroll
        for(int i = 0; i < WG_B_ITERS; ++i)
        {
            const int k = n0 + row0 + i * WG_ROW_STEP;
            const bool ok = k_ok && k < IG_K;
            const data_t* src = ok ? w + ((i64)k * WG_KD + kk) : w;
            cp_async_16(stage_addr + WG_A_BYTES + dst0 + i * (WG_ROW_STEP * 128), src, ok);
        }
#endif
#endif /* WG_FAST_LOAD */
    };

    float acc[WG_ACC];
#pragma unroll
    for(int i = 0; i < WG_ACC; ++i)
        acc[i] = 0.0f;
#if WG_WS
    /* producer step: the block's g-th k-tile (k-tile t of its tile) into stage `stage` once the
       consumers freed it; stage g - WG_LAG signalled full once this thread's copies of it have
       landed (WG_WS 2: the copies of k-tile g signal its stage themselves, no wait here) */
    auto produce = [&](int& stage, u32& round, int g, int t) {
        if(g >= WG_STAGES)
            mbar_wait(bars_of(base) + 8 * (WG_STAGES + stage), (round - 1) & 1);
        load_tile(base + stage * WG_STAGE_BYTES, t);
#if WG_WS == 2
        cp_async_mbar_arrive(bars_of(base) + 8 * stage);
#else
        cp_async_commit();
        if(g >= WG_LAG)
        {
            cp_async_wait<WG_LAG>();
            fence_proxy_async();
            mbar_arrive(bars_of(base) + 8 * ((g - WG_LAG) % WG_STAGES));
        }
#endif
        if(++stage == WG_STAGES)
            stage = 0, ++round;
    };
    /* after the block's g k-tiles: the last WG_LAG stages signalled full (WG_WS 1) */
    auto drain = [&](int g) {
#if WG_WS != 2
        cp_async_wait<0>();
        fence_proxy_async();
        for(int t = g > WG_LAG ? g - WG_LAG : 0; t < g; ++t)
            mbar_arrive(bars_of(base) + 8 * (t % WG_STAGES));
#else
        (void)g;
#endif
    };
#endif
#if WG_SK
    /* ---- stream-K: this block's run [u_begin, u_end) of the (tile, k-tile) steps, as
       segments of one tile each: the first may start inside a tile (its partial sum goes to the
       workspace, slot blockIdx.x, then flag blockIdx.x is set), the middle ones are whole tiles
       (stored), the last may end inside a tile whose first k-tile it holds: that block adds the
       partials of the blocks after it that cover the rest of the tile (each such block's first
       segment), then stores. Waits are only on later blocks' first segments, which wait on
       nothing: no deadlock while the grid fits the device (WG_SK <= resident blocks). ---- */
    const u32 bars = wg_init_bars(base, tid);
    __syncthreads();
    auto first_unit = [](int b) -> long long { return (long long)b * WG_UNITS / WG_SK; };
    const long long u_begin = first_unit(bid);
    const long long u_end = first_unit(bid + 1);
    /* the segment from step u: its tile, into m0 / n0 / kt0 / nkt */
    auto segment = [&](long long u) -> int {
        const int tile = (int)(u / WG_KT);
        kt0 = (int)(u - (long long)tile * WG_KT);
        const long long left = u_end - u;
        nkt = left < WG_KT - kt0 ? (int)left : WG_KT - kt0;
        m0 = (tile / WG_TILES_N) * WG_BM;
        n0 = (tile % WG_TILES_N) * WG_BN;
        return tile;
    };
    if(warp < 4)
    {
        int stage = 0;
        u32 round = 0;
        int g = 0; /* k-tiles loaded by this block so far */
        for(long long u = u_begin; u < u_end; u += nkt)
        {
            segment(u);
            decode_rows();
            for(int t = 0; t < nkt; ++t, ++g)
                produce(stage, round, g, t);
        }
        drain(g);
    }
    else
    {
        const u32 a_rows = (u32)(((warp >> 2) - 1) * 64 * 128);
        const int ct = tid - 128; /* consumer thread */
        const int row = (warp - 4) * 16 + (lane >> 2);
        u64* flags = reinterpret_cast<u64*>(ws);
        float* slots = ws + WG_SK_FLAGS;
        int stage = 0;
        u32 round = 0;
        int g = 0; /* k-tiles multiplied by this block so far */
        for(long long u = u_begin; u < u_end; u += nkt)
        {
            const int tile = segment(u);
#pragma unroll
            for(int i = 0; i < WG_ACC; ++i)
                acc[i] = 0.0f;
            for(int t = 0; t < nkt; ++t, ++g)
            {
                mbar_wait(bars + 8 * stage, round & 1);
#if WG_WS == 2
                fence_proxy_async();
#endif
                const u32 st = base + stage * WG_STAGE_BYTES;
                const u64 da = wgmma_desc(st + a_rows);
                wgmma_fence();
#if WG_B_MN
                const u64 db = wgmma_desc_mn(st + WG_A_BYTES);
#pragma unroll
                for(int ks = 0; ks < 4; ++ks)
                    wgmma_n<WG_BN, 1>(acc, da + 2 * ks, db + 128 * ks);
#else
                const u64 db = wgmma_desc(st + WG_A_BYTES);
#pragma unroll
                for(int ks = 0; ks < 4; ++ks)
                    wgmma_n<WG_BN, 0>(acc, da + 2 * ks, db + 2 * ks);
#endif
                wgmma_commit();
                wgmma_wait<1>(); /* the previous k-tile's MMAs are done: its stage is free */
                wgmma_fence_regs(acc);
                if(g > 0)
                    mbar_arrive(bars + 8 * (WG_STAGES + (stage == 0 ? WG_STAGES - 1 : stage - 1)));
                if(++stage == WG_STAGES)
                    stage = 0, ++round;
            }
            wgmma_wait<0>();
            wgmma_fence_regs(acc);
            if(kt0 > 0)
            {
                /* a later part of the tile: the fp32 fragments to this block's slot, in the
                   consumers' order (float4 j of thread ct at j * IG_THREADS + ct), then the flag */
                float4* slot = reinterpret_cast<float4*>(slots + (long long)bid * (WG_BM * WG_BN));
#pragma unroll
                for(int j = 0; j < WG_ACC / 4; ++j)
                    __stcg(slot + j * IG_THREADS + ct, make_float4(acc[4 * j], acc[4 * j + 1], acc[4 * j + 2], acc[4 * j + 3]));
                __threadfence();
                consumers_sync();
                if(ct == 0)
                    st_release_gpu(flags + bid, WG_SK_MAGIC ^ (u64)bid);
                continue;
            }
            if(nkt < WG_KT)
            {
                /* the tile's first part, the block's last segment: add the later parts */
                const long long tile_end = (long long)(tile + 1) * WG_KT;
                for(int b = bid + 1; b < WG_SK && first_unit(b) < tile_end; ++b)
                {
                    if(first_unit(b + 1) == first_unit(b))
                        continue; /* an empty run (more blocks than steps) */
                    while(ld_acquire_gpu(flags + b) != (WG_SK_MAGIC ^ (u64)b))
                        ;
                    const float4* slot = reinterpret_cast<const float4*>(slots + (long long)b * (WG_BM * WG_BN));
#pragma unroll
                    for(int j = 0; j < WG_ACC / 4; ++j)
                    {
                        const float4 v = __ldcg(slot + j * IG_THREADS + ct);
                        acc[4 * j] += v.x;
                        acc[4 * j + 1] += v.y;
                        acc[4 * j + 2] += v.z;
                        acc[4 * j + 3] += v.w;
                    }
                }
            }
            if(nkt < WG_KT)
            {
                /* every consumer has read the partials: the flags back to zero for the next launch */
                consumers_sync();
                const long long tile_end = (long long)(tile + 1) * WG_KT;
                for(int b = bid + 1 + ct; b < WG_SK && first_unit(b) < tile_end; b += IG_THREADS)
                    flags[b] = 0ull;
            }
            /* the tile's sum, rounded into the staging tile, then 16-byte row chunks to y */
            {
                constexpr int PITCH = WG_BN + 8;
                u32* ctile = reinterpret_cast<u32*>(reinterpret_cast<char*>(smem) + WG_SK_EPI_OFF);
#pragma unroll
                for(int j = 0; j < IG_NI; ++j)
                {
                    const int cc = j * 8 + (lane & 3) * 2;
                    ctile[(row * PITCH + cc) / 2] = pack2(acc[4 * j], acc[4 * j + 1]);
                    ctile[((row + 8) * PITCH + cc) / 2] = pack2(acc[4 * j + 2], acc[4 * j + 3]);
                }
                consumers_sync();
                constexpr int RC = WG_BN / 8;
                const uint4* staged = reinterpret_cast<const uint4*>(ctile);
                for(int e = ct; e < WG_BM * RC; e += IG_THREADS)
                {
                    const int r = e / RC;
                    const int ch = e - r * RC;
                    const int m = m0 + r;
                    const int k = n0 + ch * 8;
                    if(m < WG_M && k < IG_K)
                        EPI_STORE8(y + ((i64)m * IG_K + k), staged[(r * PITCH) / 8 + ch]);
                }
                consumers_sync(); /* the staging tile is free for the next segment */
            }
        }
    }
#elif WG_WS
    /* ---- warp-specialized: full[s] (the producer's 128 threads arrive once a stage's copies
       are in) and empty[s] (every consumer thread arrives once its MMAs reading it are done)
       after the ring and the epilogue tile ---- */
    const u32 bars = wg_init_bars(base, tid);
    __syncthreads();
    if(warp < 4)
    {
        /* producer: tile t into stage t % WG_STAGES once the consumers freed it; stage
           t - WG_LAG signalled full once this thread's copies of it have landed (WG_WS 2: the
           copies of tile t signal its stage themselves, no wait here) */
        int stage = 0;
        u32 round = 0;
        for(int t = 0; t < nkt; ++t)
            produce(stage, round, t, t);
        drain(nkt);
    }
    else
    {
        /* consumers: warpgroup warp / 4 - 1 owns 64 rows (WG_SWAP: 64 channels, cw) */
        const int cw = (warp >> 2) - 1;
        const u32 a_rows = (u32)(cw * 64 * 128);
        (void)a_rows;
        int stage = 0;
        u32 round = 0;
        for(int t = 0; t < nkt; ++t)
        {
            mbar_wait(bars + 8 * stage, round & 1);
#if WG_WS == 2
            fence_proxy_async(); /* the copies (generic proxy) seen here, before wgmma reads them */
#endif
            const u32 st = base + stage * WG_STAGE_BYTES;
            wgmma_fence();
#if WG_SWAP
            /* A: this warpgroup's 64 filter rows (channels), B: the WG_BM pixel rows */
            const u64 db = wgmma_desc(st);
#if WG_B_MN
            const u64 da = wgmma_desc_mn(st + WG_A_BYTES + cw * 8192);
#pragma unroll
            for(int ks = 0; ks < 4; ++ks)
                wgmma_n<WG_BM, 0, 1>(acc, da + 128 * ks, db + 2 * ks);
#else
            const u64 da = wgmma_desc(st + WG_A_BYTES + cw * (64 * 128));
#pragma unroll
            for(int ks = 0; ks < 4; ++ks)
                wgmma_n<WG_BM, 0>(acc, da + 2 * ks, db + 2 * ks);
#endif
#else
            const u64 da = wgmma_desc(st + a_rows);
#if WG_B_MN
            const u64 db = wgmma_desc_mn(st + WG_A_BYTES);
#pragma unroll
            for(int ks = 0; ks < 4; ++ks)
                wgmma_n<WG_BN, 1>(acc, da + 2 * ks, db + 128 * ks);
#else
            const u64 db = wgmma_desc(st + WG_A_BYTES);
#pragma unroll
            for(int ks = 0; ks < 4; ++ks)
                wgmma_n<WG_BN, 0>(acc, da + 2 * ks, db + 2 * ks);
#endif
#endif
            wgmma_commit();
            wgmma_wait<1>(); /* tile t - 1's MMAs are done: its stage is free */
            wgmma_fence_regs(acc);
            if(t > 0)
                mbar_arrive(bars + 8 * (WG_STAGES + (stage == 0 ? WG_STAGES - 1 : stage - 1)));
            if(++stage == WG_STAGES)
                stage = 0, ++round;
        }
        wgmma_wait<0>();
        wgmma_fence_regs(acc);
    }
    __syncthreads(); /* every copy landed, every MMA done: the ring is free for the epilogue */

#if IG_CLUSTER
    /* ---- epilogue of a cluster split: the consumers' fp32 fragments into this block's tile,
       then every thread of the block sums a share of the rows over the cluster's tiles ---- */
    {
        constexpr int PITCH = WG_BN + 4;
        float* tile = reinterpret_cast<float*>(smem);
        if(warp >= 4)
        {
            const int row = (warp - 4) * 16 + (lane >> 2);
#pragma unroll
            for(int j = 0; j < IG_NI; ++j)
            {
                const int cc = j * 8 + (lane & 3) * 2;
                *reinterpret_cast<float2*>(tile + row * PITCH + cc) = make_float2(acc[4 * j], acc[4 * j + 1]);
                *reinterpret_cast<float2*>(tile + (row + 8) * PITCH + cc) =
                    make_float2(acc[4 * j + 2], acc[4 * j + 3]);
            }
        }
        auto row_off = [&](int row) -> int { return m0 + row < WG_M ? (m0 + row) * IG_K + n0 : -1; };
        cluster_sum_tile<WG_BM, WG_BN, WG_THREADS, IG_SPLIT_K>(smem, tid, IG_K - n0, y, row_off EPI_ARG);
    }
#else
    /* ---- epilogue: the consumers' fragments rounded into shared memory, then every thread
       stores 16-byte row chunks ---- */
    {
        constexpr int PITCH = WG_BN + 8;
#if WG_SWAP
        if(warp >= 4)
        {
            /* acc[4 j + 2 h + e]: channel 16 (warp - 4) + lane / 4 + 8 h, pixel 8 j + 2 (lane % 4) + e;
               matrices (j, h = 0), (j, 1), (j + 1, 0), (j + 1, 1) stored transposed, pixel rows of
               8 channels (16 bytes; rows 2 PITCH bytes apart: 16 bytes mod 128, no conflicts) */
            const int q = lane >> 3;
            const int ch = (warp - 4) * 16 + (q & 1) * 8;
#pragma unroll
            for(int j = 0; j < WG_BM / 8; j += 2)
            {
                const int pix = (j + (q >> 1)) * 8 + (lane & 7);
                stmatrix_x4_trans(base + (u32)((pix * PITCH + ch) * 2), pack2(acc[4 * j], acc[4 * j + 1]),
                                  pack2(acc[4 * j + 2], acc[4 * j + 3]), pack2(acc[4 * j + 4], acc[4 * j + 5]),
                                  pack2(acc[4 * j + 6], acc[4 * j + 7]));
            }
        }
#else
        u32* ctile = reinterpret_cast<u32*>(smem);
        if(warp >= 4)
        {
            const int row = (warp - 4) * 16 + (lane >> 2);
#pragma unroll
            for(int j = 0; j < IG_NI; ++j)
            {
                const int cc = j * 8 + (lane & 3) * 2;
                ctile[(row * PITCH + cc) / 2] = pack2(acc[4 * j], acc[4 * j + 1]);
                ctile[((row + 8) * PITCH + cc) / 2] = pack2(acc[4 * j + 2], acc[4 * j + 3]);
            }
        }
#endif
        __syncthreads();
        constexpr int RC = WG_BN / 8;
        for(int e = tid; e < WG_BM * RC; e += WG_THREADS)
        {
            const int row = e / RC;
            const int ch = e - row * RC;
            const int m = m0 + row;
            const int k = n0 + ch * 8;
            if(m < WG_M && k < IG_K)
                EPI_STORE8(y + ((i64)m * IG_K + k), smem[(row * PITCH) / 8 + ch]);
        }
    }
#endif /* IG_CLUSTER */
#else
    /* this warpgroup's 64 rows of A */
    const u32 a_rows = (u32)((warp >> 2) * 64 * 128);

#pragma unroll
    for(int s = 0; s < WG_STAGES - 2; ++s)
    {
        if(s < nkt)
            load_tile(base + s * WG_STAGE_BYTES, s);
        cp_async_commit();
    }
    int read_stage = 0;
    int write_stage = WG_STAGES - 2;
    for(int t = 0; t < nkt; ++t)
    {
        cp_async_wait<WG_STAGES - 3>(); /* this thread's copies of tile t are in */
        fence_proxy_async();
        __syncthreads(); /* everyone's are; every warpgroup is done with tile t - 2 */
        const u32 stage = base + read_stage * WG_STAGE_BYTES;
        const u64 da = wgmma_desc(stage + a_rows);
        wgmma_fence();
#if WG_B_MN
        const u64 db = wgmma_desc_mn(stage + WG_A_BYTES);
#pragma unroll
        for(int ks = 0; ks < 4; ++ks) /* A: 32 bytes = 2 descriptor units; B: 16 rows, 2048 bytes */
            wgmma_n<WG_BN, 1>(acc, da + 2 * ks, db + 128 * ks);
#else
        const u64 db = wgmma_desc(stage + WG_A_BYTES);
#pragma unroll
        for(int ks = 0; ks < 4; ++ks) /* 16-wide k-slices: 32 bytes = 2 descriptor units */
            wgmma_n<WG_BN, 0>(acc, da + 2 * ks, db + 2 * ks);
#endif
        wgmma_commit();
        if(t + WG_STAGES - 2 < nkt)
            load_tile(base + write_stage * WG_STAGE_BYTES, t + WG_STAGES - 2);
        cp_async_commit();
        write_stage = write_stage == WG_STAGES - 1 ? 0 : write_stage + 1;
        read_stage = read_stage == WG_STAGES - 1 ? 0 : read_stage + 1;
        wgmma_wait<1>();
        wgmma_fence_regs(acc);
    }
    wgmma_wait<0>();
    wgmma_fence_regs(acc);
    cp_async_wait<0>();
    __syncthreads(); /* the ring is free for the epilogue */

    /* ---- epilogue: this warp's 16 x WG_BN tile as m16n8 fragments ---- */
    const float(&frag)[1][IG_NI][4] = *reinterpret_cast<const float(*)[1][IG_NI][4]>(acc);
    const int wm0 = warp * 16;
    auto row_off = [&](int row) -> int { return m0 + row < WG_M ? (m0 + row) * IG_K + n0 : -1; };
#if IG_CLUSTER
    cluster_store_tile<WG_BM, WG_BN, IG_THREADS, 1, IG_NI, IG_SPLIT_K>(smem, frag, wm0, 0, lane, tid, IG_K - n0, y,
                                                                      row_off EPI_ARG);
#else
    float* part = IG_SPLIT_K > 1 ? ws + (i64)blockIdx.y * WG_M * IG_K : nullptr;
    store_tile<WG_BM, WG_BN, IG_THREADS, 1, IG_NI, (IG_SPLIT_K > 1)>(smem, frag, wm0, 0, lane, tid, IG_K - n0, y,
                                                                   part, row_off EPI_ARG);
#endif
#endif /* WG_WS */
}

/* Split-K: y = the sum of the IG_SPLIT_K fp32 partial outputs, 8 channels per thread. */
KERNEL void igemm_splitk_reduce(const float* RESTRICT ws, data_t* RESTRICT y EPI_KERNEL_PARAMS)
{
    EPI_SETUP(y, 0, IG_K);
    splitk_sum<IG_SPLIT_K>(ws, y, (i64)WG_M * IG_K EPI_ARG);
}
