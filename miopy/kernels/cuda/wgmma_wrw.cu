/* Implicit-GEMM backward-weights convolution on Hopper's warpgroup MMA (ConvWgmmaWrwNhwc): fp16
   or bf16 in, fp32 accumulation, packed NHWC x and dy, dw packed K x R x S x C, groups = 1. Built
   for sm_90a only (wgmma); the solver is applicable on compute capability 9.0 alone.

   dw[k][r][s][c] = sum over (n, p, q) of dy[n][p][q][k] * x[n][p*SH - PH + r*DH][q*SW - PW + s*DW][c]

   GEMM view as in igemm_wrw.cu: D[m][t] = sum_j A[m][j] * B[j][t], m an output channel k (M = K),
   t = (r, s, c) a filter tap (dw's row as it lies, N = R*S*C), j = (n, p, q) an output pixel (the
   reduction, N*P*Q long). Both operands come in with the reduction index as their rows: A rows
   are dy's pixels (WG_BM channels contiguous), B rows the im2col gather of x (each 16-byte chunk
   8 channels of one tap). So both tiles lie MN-major in shared memory: k-tiles of 64 pixels,
   one 128-byte row per pixel for each 64 columns (8 KB blocks, 1024-byte aligned), the 16-byte
   chunk c of row r at chunk c ^ (r % 8), and the MMA takes both transposed (wgmma_mn: imm-trans-a
   = imm-trans-b = 1; common/wgmma_sm90.h's wgmma_desc_mn, leading offset 8 KB between 64-column
   blocks, stride offset 1 KB between 8-row groups, a 16-row k-slice 2 KB on).

   A block of (WG_BM / 64) x WG_WN warpgroups (at most 4, 128 threads each) computes a WG_BM x WG_BN
   tile of dw; warpgroup (i, j) owns rows 64 i .. 64 i + 63 and the WG_BN / WG_WN columns from
   j * WG_BN / WG_WN, one wgmma m64nNk16 (N = WG_BN / WG_WN) per 16-pixel slice. Every thread
   issues 16-byte cp.async copies (zero-filled past N*P*Q, past K or R*S*C and in the padding)
   into a WG_STAGES-deep ring; the main loop is wgmma_fwd.cu's (per k-tile t: wait for its
   copies, proxy fence, barrier, 4 MMAs and a commit, the copies of tile t + WG_STAGES - 2, then
   wait until only tile t's MMAs are pending). With WG_WS one more warpgroup alone copies and the
   MMA warpgroups meet it at per-stage mbarriers instead of a block barrier per k-tile
   (wrw_mainloop_ws).

   The reduction is long and dw small, so it splits over blockIdx.y (IG_SPLIT_K slices of the
   pixels), in clusters of WG_CLUSTER consecutive slices (2 to 8) that sum their tiles through
   distributed shared memory: with IG_CLUSTER one cluster holds every slice and writes dw; else
   each cluster (or, with WG_CLUSTER = 1, each slice) leaves fp32 partials in its workspace slice
   (WG_PARTS x K x R*S*C floats) and igemm_splitk_reduce sums them. The accumulators are m16n8
   fragments side by side (one 16 x WG_BN / WG_WN warp tile per warp), so common/igemm_core.h's
   cluster epilogue applies; the unsplit one rounds the tile through shared memory into 16-byte
   stores, a workspace slice takes the fp32 fragments as they are.

   Needs C % 8 == 0 and K % 8 == 0. */

// miopy-target: sm_90a
// miopy-compile-test: -DMIOPY_DTYPE=1
// miopy-compile-test: -DMIOPY_DTYPE=2 -DWG_BM=64 -DWG_BN=192 -DWG_WN=1 -DWG_STAGES=3 -DIG_SPLIT_K=6
// miopy-compile-test: -DMIOPY_DTYPE=1 -DWG_BM=128 -DWG_BN=192 -DWG_STAGES=5 -DWG_WS=1 -DIG_SPLIT_K=3 -DWG_ROT=1
// miopy-compile-test: -DMIOPY_DTYPE=2 -DWG_BM=256 -DWG_BN=128 -DWG_STAGES=4 -DIG_SPLIT_K=7 -DWG_FIX=1
// miopy-compile-test: -DMIOPY_DTYPE=1 -DWG_BM=128 -DWG_BN=192 -DWG_STAGES=4 -DWG_WS=2 -DIG_SPLIT_K=5 -DWG_FIX=1
// miopy-compile-test: -DMIOPY_DTYPE=2 -DMIOPY_EPI=1 -DWG_BM=256 -DWG_BN=128 -DWG_STAGES=4 -DIG_SPLIT_K=7 -DWG_FIX=1
// miopy-compile-test: -DMIOPY_DTYPE=1 -DMIOPY_EPI=1 -DWG_BM=64 -DWG_BN=192 -DWG_WN=1 -DWG_STAGES=3 -DIG_SPLIT_K=6
// miopy-compile-test: -DMIOPY_DTYPE=1 -DWG_BM=128 -DWG_BN=256 -DWG_WN=2 -DWG_STAGES=4 -DIG_SPLIT_K=4 -DIG_CLUSTER=1 -DIG_N=3 -DIG_C=24 -DIG_H=9 -DIG_W=11 -DIG_K=40 -DIG_R=2 -DIG_S=3 -DIG_P=4 -DIG_Q=5 -DIG_PH=1 -DIG_PW=0 -DIG_SH=2 -DIG_SW=2 -DIG_DH=2 -DIG_DW=1

/* Tile defaults only so that the file compiles on its own (the solver defines them). */
#ifndef WG_BM
#define WG_BM 128
#endif
#ifndef WG_BN
#define WG_BN 256
#endif
#ifndef WG_WN
#define WG_WN 1 /* warpgroups side by side along N */
#endif
#ifndef WG_STAGES
#define WG_STAGES 4
#endif
/* The m16n8 view of the wgmma tiling for common/igemm_defines.h and the epilogues: WG_BM / 16
   warps down, WG_WN across, each a 16 x WG_BN / WG_WN warp tile; k-tiles of 64 pixels. */
#define IG_BM WG_BM
#define IG_BN WG_BN
#define IG_BK 64
#define IG_WARPS_M (WG_BM / 16)
#define IG_WARPS_N WG_WN
#define IG_STAGES WG_STAGES
#include "common/igemm_defines.h"
#include "common/igemm_core.h"
#include "common/wgmma_sm90.h"

#define WG_THREADS IG_THREADS
#define WG_NW (WG_BN / WG_WN) /* the wgmma's N: columns of one warpgroup */
#define WG_NPQ (IG_N * IG_P * IG_Q)
#define WG_RSC (IG_R * IG_S * IG_C)
#define WG_ACH (WG_BM / 8) /* 16-byte chunks of a pixel row of A (dy channels) */
#define WG_BCH (WG_BN / 8) /* of a pixel row of B (filter taps) */
#define WG_A_ITERS (64 * WG_ACH / WG_THREADS)
/* B: each thread keeps one chunk column (a tap and 8 channels) for every k-tile and copies rows
   b_row0 + i * WG_B_STEP of it; where WG_BCH does not divide the threads, those past the last
   whole set of columns copy nothing */
#define WG_B_STEP (WG_THREADS / WG_BCH)
#define WG_B_ITERS ((64 + WG_B_STEP - 1) / WG_B_STEP)
#define WG_A_BYTES (WG_BM * 128)
#define WG_STAGE_BYTES ((WG_BM + WG_BN) * 128)
#define WG_TILES_N ((WG_RSC + WG_BN - 1) / WG_BN)
#define WG_KT ((WG_NPQ + 63) / 64)
#define WG_ACC (WG_NW / 2) /* fp32 accumulators per thread */

static_assert(WG_BM == 64 || WG_BM == 128 || WG_BM == 256, "64-row warpgroups");
static_assert(WG_NW == 64 || WG_NW == 128 || WG_NW == 192 || WG_NW == 256, "wgmma widths");
static_assert(WG_BN % WG_WN == 0 && WG_THREADS <= 512, "at most four warpgroups");
static_assert(WG_STAGES >= 3 && WG_STAGES <= 8, "3 to 8 stages");
static_assert(64 * WG_ACH % WG_THREADS == 0 && WG_B_STEP >= 1, "even copies of A, every column of B");
static_assert(WG_THREADS % WG_ACH == 0, "a thread copies one column of A");

#ifndef WG_WS
#define WG_WS 0 /* 1: a producer warpgroup loads the ring, the MMA warpgroups only compute (mbarriers) */
#endif
#define WG_LOADERS 128 /* the producer warpgroup's threads */
#define WG_BLOCK_THREADS (WG_THREADS + (WG_WS ? WG_LOADERS : 0))

#ifndef WG_CLUSTER
#define WG_CLUSTER (IG_CLUSTER ? IG_SPLIT_K : 1) /* slices of a tile per thread-block cluster */
#endif
#define WG_PARTS (IG_SPLIT_K / WG_CLUSTER) /* cluster sums per tile, added up in the workspace */
static_assert(IG_SPLIT_K % WG_CLUSTER == 0 && WG_CLUSTER <= 8, "whole clusters of at most 8 slices");
static_assert(!IG_CLUSTER || WG_PARTS == 1, "IG_CLUSTER: one cluster holds every slice");
#if WG_CLUSTER > 1
#define WG_CLUSTER_DIMS __cluster_dims__(1, WG_CLUSTER, 1) /* consecutive slices of a tile */
#else
#define WG_CLUSTER_DIMS
#endif

#define WG_TILES_ALL (((IG_K + WG_BM - 1) / WG_BM) * WG_TILES_N) /* dw tiles */
#ifndef WG_ROT
#define WG_ROT 0
#endif

#ifndef WG_FIX
/* 1: the IG_SPLIT_K slices of a tile sum each other's fp32 partials inside this kernel (no
   igemm_splitk_reduce launch): see fix_sum */
#define WG_FIX 0
#endif
#if WG_FIX
static_assert(WG_CLUSTER == 1 && IG_SPLIT_K > 1 && IG_SPLIT_K <= 32, "WG_FIX: 2 to 32 slices, no clusters");
#define WG_TILES WG_TILES_ALL
#define WG_FIX_F4 (WG_BM * WG_BN / 4) /* float4 of one slice's partial tile */
/* the flags (a u64 per writing and reading slice of each tile) ahead of the partials, 256-byte
   aligned */
#define WG_FIX_FLAG_BYTES (((long long)WG_TILES * IG_SPLIT_K * IG_SPLIT_K * 8 + 255) / 256 * 256)
#define WG_FIX_MAGIC 0xc2b2ae3d27d4eb4full

DEVICE_FN u64 wrw_ld_acquire(const u64* p)
{
    u64 v;
    asm volatile("ld.acquire.gpu.global.u64 %0, [%1];\n" : "=l"(v) : "l"(p) : "memory");
    return v;
}
DEVICE_FN void wrw_st_release(u64* p, u64 v)
{
    asm volatile("st.release.gpu.global.u64 [%0], %1;\n" ::"l"(p), "l"(v) : "memory");
}

/* Split-K summed in the kernel ("fixup"): slice `part` of tile `tile` (the grid's blocks in
   tile-major order, the IG_SPLIT_K slices of a tile consecutive) leaves its fp32 fragments in
   its slot of the workspace (float4 j of MMA thread t at j * WG_THREADS + t: coalesced), then
   signals every slice of the tile through its own flag for that reader (flag [writer][reader]:
   WG_FIX_MAGIC ^ its index, stored with release). It then waits for the flags addressed to
   it, clears them (it is their only reader; so no launch leaves a signal behind and whatever
   the workspace held matches one with odds of about 2^-64: no clearing first), and sums its
   1 / IG_SPLIT_K share of the tile over the slices in slice order (deterministic), rounds it
   and stores it into dw. A tile's slices wait only on each other: blocks are dispatched in
   order, so once one of them runs the rest follow as earlier tiles finish (IG_SPLIT_K <= 32 is
   far below the resident blocks of a device). */
DEVICE_FN void fix_sum(const float (&acc)[WG_ACC], int tile, int part, int m0, int n0, float* RESTRICT ws,
                       data_t* RESTRICT dw EPI_PARAM)
{
    constexpr int P = IG_SPLIT_K;
    const int tid = threadIdx.x;
    u64* flags = reinterpret_cast<u64*>(ws) + (i64)tile * P * P;
    float4* slots = reinterpret_cast<float4*>(reinterpret_cast<char*>(ws) + WG_FIX_FLAG_BYTES) + (i64)tile * P * WG_FIX_F4;
    if(tid < WG_THREADS)
    {
        float4* mine = slots + (i64)part * WG_FIX_F4;
#pragma unroll
        for(int j = 0; j < WG_ACC / 4; ++j)
            __stcg(mine + j * WG_THREADS + tid, make_float4(acc[4 * j], acc[4 * j + 1], acc[4 * j + 2], acc[4 * j + 3]));
    }
    __threadfence();
    __syncthreads();
    const u64 key = WG_FIX_MAGIC ^ ((u64)tile * P * P);
    if(tid < P)
    {
        wrw_st_release(flags + part * P + tid, key ^ (u64)(part * P + tid));
        u64* mine = flags + tid * P + part;
        while(wrw_ld_acquire(mine) != (key ^ (u64)(tid * P + part)))
            ;
        *mine = 0ull;
        __threadfence();
    }
    __syncthreads();
    const int e0 = (int)((long long)part * WG_FIX_F4 / P);
    const int e1 = (int)((long long)(part + 1) * WG_FIX_F4 / P);
    for(int e = e0 + tid; e < e1; e += WG_BLOCK_THREADS)
    {
        float4 s = __ldcg(slots + e);
#pragma unroll 8
        for(int p = 1; p < P; ++p)
        {
            const float4 v = __ldcg(slots + (i64)p * WG_FIX_F4 + e);
            s.x += v.x, s.y += v.y, s.z += v.z, s.w += v.w;
        }
        /* float4 e: fragment j of MMA thread t, rows row and row + 8, columns col and col + 1 */
        const int j = e / WG_THREADS;
        const int t = e - j * WG_THREADS;
        const int lane = t & 31;
        const int wg = t >> 7;
        const int wg_m = wg / WG_WN;
        const int row = m0 + wg_m * 64 + ((t >> 5) & 3) * 16 + (lane >> 2);
        const int col = n0 + (wg - wg_m * WG_WN) * WG_NW + j * 8 + (lane & 3) * 2;
        if(col >= WG_RSC)
            continue;
#if MIOPY_EPI
        if(row < IG_K)
            EPI_F32X2(s.x, s.y, dw + (i64)row * WG_RSC + col);
        if(row + 8 < IG_K)
            EPI_F32X2(s.z, s.w, dw + (i64)(row + 8) * WG_RSC + col);
#endif
        if(row < IG_K)
            *reinterpret_cast<u32*>(dw + (i64)row * WG_RSC + col) = pack2(s.x, s.y);
        if(row + 8 < IG_K)
            *reinterpret_cast<u32*>(dw + (i64)(row + 8) * WG_RSC + col) = pack2(s.z, s.w);
    }
}
#endif

#if WG_CLUSTER > 1 && WG_PARTS > 1
/* The sum over the cluster's WG_CLUSTER blocks of their fp32 tiles into `part` (the workspace
   slice of this cluster): cluster_store_tile's scheme (each block leaves its tile in its own
   shared memory; block `rank` sums rows rank, rank + WG_CLUSTER, ...) with fp32 stores. Every
   thread of every block of the cluster calls it. */
template <class RowOff>
DEVICE_FN void cluster_sum_to_part(uint4* smem, const float (&acc)[1][IG_NI][4], int wm0, int wn0, int lane, int tid,
                                   int cols_left, float* RESTRICT part, RowOff& row_off)
{
    constexpr int PITCH = WG_BN + 4; /* floats */
    constexpr int RC = WG_BN / 8;
    constexpr int MY_ROWS = (WG_BM + WG_CLUSTER - 1) / WG_CLUSTER;
    float* tile = reinterpret_cast<float*>(smem);
#pragma unroll
    for(int j = 0; j < IG_NI; ++j)
    {
        const int row = wm0 + (lane >> 2);
        const int col = wn0 + j * 8 + (lane & 3) * 2;
        *reinterpret_cast<float2*>(tile + row * PITCH + col) = make_float2(acc[0][j][0], acc[0][j][1]);
        *reinterpret_cast<float2*>(tile + (row + 8) * PITCH + col) = make_float2(acc[0][j][2], acc[0][j][3]);
    }
    cluster_sync();
    const int rank = (int)cluster_rank();
    const u32 tile_addr = smem_addr(smem);
    for(int e = tid; e < MY_ROWS * RC; e += WG_THREADS)
    {
        const int row = rank + (e / RC) * WG_CLUSTER;
        const int ch = e % RC;
        if(row >= WG_BM || ch * 8 >= cols_left)
            continue;
        const int off = row_off(row);
        if(off < 0)
            continue;
        const u32 addr = tile_addr + (u32)((row * PITCH + ch * 8) * 4);
        float4 lo = make_float4(0.f, 0.f, 0.f, 0.f), hi = lo;
#pragma unroll
        for(int s = 0; s < WG_CLUSTER; ++s)
        {
            const u32 a = cluster_map(addr, (u32)s);
            const float4 l = cluster_ld4(a), h = cluster_ld4(a + 16);
            lo.x += l.x, lo.y += l.y, lo.z += l.z, lo.w += l.w;
            hi.x += h.x, hi.y += h.y, hi.z += h.z, hi.w += h.w;
        }
        float4* dst = reinterpret_cast<float4*>(part + off + ch * 8);
        dst[0] = lo;
        dst[1] = hi;
    }
    cluster_sync(); /* no block leaves (freeing its tile) while another still reads it */
}
#endif

/* The main loop of one dw tile (rows from m0, columns from n0) over the pixel k-tiles
   [kt0, kt0 + nkt): acc (this thread's fragment of its warpgroup's 64 x WG_NW tile) += the
   MMAs of those k-tiles. Every thread of the block calls it; it returns with the ring idle
   (every copy landed, every MMA retired, a barrier after), so the caller may reuse it. */
DEVICE_FN void wrw_mainloop(const data_t* RESTRICT x, const data_t* RESTRICT dy, u32 base, int m0, int n0, int kt0,
                            int nkt, int rot, float (&acc)[WG_ACC])
{
    const int tid = threadIdx.x;
    const int wg = tid >> 7;
    const int wg_m = wg / WG_WN;
    const int wg_n = wg - wg_m * WG_WN;

    /* A: this thread's 8 dy channels (one chunk column for every row it copies) */
    const int a_ch = tid % WG_ACH;
    const int a_row0 = tid / WG_ACH;
    const int a_k = m0 + a_ch * 8;
    const bool a_k_ok = a_k < IG_K;

    /* B: this thread's filter tap (r, s) and 8 channels from c, the same for every k-tile */
    const int b_ch = tid % WG_BCH;
    const int b_row0 = tid / WG_BCH;
    const int tap = n0 + b_ch * 8;
    const int b_rs = tap / IG_C;
    const int b_c = tap - b_rs * IG_C;
    const int b_r = b_rs / IG_S;
    const int h_off = b_r * IG_DH - IG_PH;
    const int w_off = (b_rs - b_r * IG_S) * IG_DW - IG_PW;
    const bool b_ok = tap < WG_RSC;
    const bool b_idle = WG_B_STEP * WG_BCH < WG_THREADS && b_row0 >= WG_B_STEP;
    const data_t* xc = x + b_c;

    auto load_tile = [&](u32 stage_addr, int t) { /* pixel k-tile kt0 + (t + rot) % nkt */
        const int pix0 = (kt0 + (t + rot < nkt ? t + rot : t + rot - nkt)) * 64;
#pragma unroll
        for(int i = 0; i < WG_A_ITERS; ++i)
        {
            const int row = a_row0 + i * (WG_THREADS / WG_ACH);
            const int m = pix0 + row;
            const bool ok = a_k_ok && m < WG_NPQ;
            const data_t* src = dy + (ok ? (i64)m * IG_K + a_k : 0);
            const u32 dst = (u32)((a_ch >> 3) * 8192 + row * 128 + (((a_ch & 7) ^ (row & 7)) << 4));
            cp_async_16(stage_addr + dst, src, ok);
        }
#pragma unroll
        for(int i = 0; i < WG_B_ITERS; ++i)
        {
            const int row = b_row0 + i * WG_B_STEP;
            if(WG_B_STEP * WG_B_ITERS > 64 && row >= 64)
                break;
            if(b_idle)
                break;
            const int m = pix0 + row;
            const int n = m / (IG_P * IG_Q);
            const int pq = m - n * (IG_P * IG_Q);
            const int p = pq / IG_Q;
            const int ih = p * IG_SH + h_off;
            const int iw = (pq - p * IG_Q) * IG_SW + w_off;
            const bool ok = b_ok && m < WG_NPQ && (unsigned)ih < (unsigned)IG_H && (unsigned)iw < (unsigned)IG_W;
            const data_t* src = ok ? xc + ((n * IG_H + ih) * IG_W + iw) * IG_C : x;
            const u32 dst = (u32)((b_ch >> 3) * 8192 + row * 128 + (((b_ch & 7) ^ (row & 7)) << 4));
            cp_async_16(stage_addr + WG_A_BYTES + dst, src, ok);
        }
    };

    /* this warpgroup's 64 rows of A (one 8 KB block) and WG_NW columns of B */
    const u32 a_off = (u32)(wg_m * 8192);
    const u32 b_off = (u32)(WG_A_BYTES + wg_n * (WG_NW / 64) * 8192);
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
        const u64 da = wgmma_desc_mn(stage + a_off);
        const u64 db = wgmma_desc_mn(stage + b_off);
        wgmma_fence();
#pragma unroll
        for(int ks = 0; ks < 4; ++ks) /* 16-pixel slices: 16 rows of 128 bytes, 2048 bytes on */
            wgmma_mn<WG_NW>(acc, da + 128 * ks, db + 128 * ks);
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
}

#if WG_WS
/* ---- warp-specialised main loop (WG_WS) ----
   The block's last warpgroup (WG_LOADERS threads) only copies: k-tile t into stage t % WG_STAGES
   once the MMAs that read that stage's previous k-tile are done (its `empty` barrier), then
   cp.async.mbarrier.arrive on the stage's `full` barrier (completes when every loader's copies
   of the tile have landed). The MMA warpgroups wait on `full`, make the copies visible to the
   async proxy, issue their MMAs, and once the previous k-tile's MMAs are retired release its
   stage (one arrival per warp). No block-wide barrier inside the loop: the warpgroups and the
   loads run WG_STAGES - 1 k-tiles apart at most. The 2 WG_STAGES barriers (8 bytes each) lie at
   `bars`, past everything the epilogue uses. */
/* loaders per pixel row: WG_WS = 1 two (each row of a k-tile in one pass), WG_WS = 2 eight (a
   warp's copy covers 4 whole 128-byte lines instead of 32 bytes of 16 rows; 4 passes of 16 rows) */
#define WG_LPR (WG_WS == 2 ? 8 : WG_LOADERS / 64)
#define WG_LPASS (64 * WG_LPR / WG_LOADERS) /* passes over the k-tile's rows */
#define WG_ACOLS (WG_ACH / WG_LPR) /* chunk columns of A per loader */
#define WG_BCOLS (WG_BCH / WG_LPR) /* of B */
static_assert(WG_ACH % WG_LPR == 0 && WG_BCH % WG_LPR == 0, "whole chunk columns per loader");

DEVICE_FN void wrw_mbar_init(u32 bar, u32 count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
DEVICE_FN void wrw_mbar_arrive(u32 bar)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
/* arrives on `bar` once every earlier cp.async of this thread has completed (no pending count) */
DEVICE_FN void wrw_mbar_arrive_cp_async(u32 bar)
{
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
/* until the phase of `bar` with parity `parity` has completed */
DEVICE_FN void wrw_mbar_wait(u32 bar, u32 parity)
{
    asm volatile("{\n"
                 ".reg .pred done;\n"
                 "WRW_WAIT:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
                 "@done bra.uni WRW_DONE;\n"
                 "bra.uni WRW_WAIT;\n"
                 "WRW_DONE:\n"
                 "}\n" ::"r"(bar),
                 "r"(parity)
                 : "memory");
}

DEVICE_FN void wrw_mainloop_ws(const data_t* RESTRICT x, const data_t* RESTRICT dy, u32 base, u32 bars, int m0,
                               int n0, int kt0, int nkt, int rot, float (&acc)[WG_ACC])
{
    const int tid = threadIdx.x;
    const u32 full0 = bars, empty0 = bars + 8 * WG_STAGES;
    if(tid == 0)
    {
#pragma unroll
        for(int s = 0; s < WG_STAGES; ++s)
        {
            wrw_mbar_init(full0 + 8 * s, WG_LOADERS);
            wrw_mbar_init(empty0 + 8 * s, WG_THREADS / 32);
        }
    }
    __syncthreads();
    if(tid >= WG_THREADS)
    {
        /* ---- the loaders: WG_LPR threads per pixel row, each the chunk columns sub, sub +
           WG_LPR, ... of A and of B in rows row0, row0 + WG_LOADERS / WG_LPR, ...; a row's
           (n, p, q) is decoded once per k-tile, each B column's tap offsets once per block ---- */
        const int lt = tid - WG_THREADS;
        const int row0 = lt / WG_LPR;
        const int sub = lt - row0 * WG_LPR;
        int b_dh[WG_BCOLS], b_dw[WG_BCOLS], b_off[WG_BCOLS];
        bool b_ok[WG_BCOLS];
#pragma unroll
        for(int i = 0; i < WG_BCOLS; ++i)
        {
            const int tap = n0 + (sub + i * WG_LPR) * 8;
            const int rs = tap / IG_C;
            const int r = rs / IG_S;
            b_dh[i] = r * IG_DH - IG_PH;
            b_dw[i] = (rs - r * IG_S) * IG_DW - IG_PW;
            b_off[i] = (b_dh[i] * IG_W + b_dw[i]) * IG_C + (tap - rs * IG_C);
            b_ok[i] = tap < WG_RSC;
        }
        int stage = 0;
        u32 round = 0; /* how many times the ring has wrapped */
        for(int t = 0; t < nkt; ++t)
        {
            if(round > 0)
                wrw_mbar_wait(empty0 + 8 * stage, (round - 1) & 1);
            const u32 stage_addr = base + stage * WG_STAGE_BYTES;
#pragma unroll
            for(int pass = 0; pass < WG_LPASS; ++pass)
            {
                const int row = row0 + pass * (WG_LOADERS / WG_LPR);
                const u32 row_dst = (u32)(row * 128);
                const int row_sw = row & 7;
                const int m = (kt0 + (t + rot < nkt ? t + rot : t + rot - nkt)) * 64 + row;
                const bool m_ok = m < WG_NPQ;
                const data_t* a_src = dy + (i64)m * IG_K + m0;
#pragma unroll
                for(int i = 0; i < WG_ACOLS; ++i)
                {
                    const int ch = sub + i * WG_LPR;
                    const bool ok = m_ok && m0 + ch * 8 < IG_K;
                    const u32 dst = (u32)((ch >> 3) * 8192) + row_dst + (u32)(((ch & 7) ^ row_sw) << 4);
                    cp_async_16(stage_addr + dst, ok ? a_src + ch * 8 : dy, ok);
                }
                const int n = m / (IG_P * IG_Q);
                const int pq = m - n * (IG_P * IG_Q);
                const int p = pq / IG_Q;
                const int ih0 = p * IG_SH;
                const int iw0 = (pq - p * IG_Q) * IG_SW;
                const data_t* b_src = x + (i64)((n * IG_H + ih0) * IG_W + iw0) * IG_C;
#pragma unroll
                for(int i = 0; i < WG_BCOLS; ++i)
                {
                    const int ch = sub + i * WG_LPR;
                    const bool ok = b_ok[i] && m_ok && (unsigned)(ih0 + b_dh[i]) < (unsigned)IG_H &&
                                    (unsigned)(iw0 + b_dw[i]) < (unsigned)IG_W;
                    const u32 dst = (u32)((ch >> 3) * 8192) + row_dst + (u32)(((ch & 7) ^ row_sw) << 4);
                    cp_async_16(stage_addr + WG_A_BYTES + dst, ok ? b_src + b_off[i] : x, ok);
                }
            }
            wrw_mbar_arrive_cp_async(full0 + 8 * stage);
            if(++stage == WG_STAGES)
                stage = 0, ++round;
        }
        cp_async_wait<0>();
    }
    else
    {
        /* ---- the MMA warpgroups ---- */
        const int wg = tid >> 7;
        const int wg_m = wg / WG_WN;
        const int wg_n = wg - wg_m * WG_WN;
        const u32 a_off = (u32)(wg_m * 8192);
        const u32 b_off = (u32)(WG_A_BYTES + wg_n * (WG_NW / 64) * 8192);
        const bool lead = (tid & 31) == 0;
        int stage = 0, prev = WG_STAGES - 1;
        u32 round = 0;
        for(int t = 0; t < nkt; ++t)
        {
            wrw_mbar_wait(full0 + 8 * stage, round & 1);
            fence_proxy_async(); /* the loaders' copies, seen through the barrier, to the async proxy */
            const u32 st = base + stage * WG_STAGE_BYTES;
            const u64 da = wgmma_desc_mn(st + a_off);
            const u64 db = wgmma_desc_mn(st + b_off);
            wgmma_fence();
#pragma unroll
            for(int ks = 0; ks < 4; ++ks)
                wgmma_mn<WG_NW>(acc, da + 128 * ks, db + 128 * ks);
            wgmma_commit();
            wgmma_wait<1>(); /* this warpgroup's MMAs of k-tile t - 1 are retired */
            wgmma_fence_regs(acc);
            if(t > 0 && lead)
                wrw_mbar_arrive(empty0 + 8 * prev);
            prev = stage;
            if(++stage == WG_STAGES)
                stage = 0, ++round;
        }
        wgmma_wait<0>();
        wgmma_fence_regs(acc);
    }
    __syncthreads(); /* the ring is free for the epilogue */
}
#endif

/* The block's tile rounded to data_t through shared memory (the ring, idle), then 16-byte row
   chunks into dw (WG_BN / 8 per row need not divide the threads). row_off(r): dw's element
   offset of tile row r at the tile's first column, or -1 past K; columns at or past cols_left
   do not exist. Ends with a barrier, so the ring may be refilled. */
template <class RowOff>
DEVICE_FN void store_rounded(uint4* smem, const float (&frag)[1][IG_NI][4], int wm0, int wn0, int lane, int tid,
                             int cols_left, data_t* RESTRICT dw, RowOff& row_off EPI_PARAM)
{
    constexpr int PITCH = WG_BN + 8;
    u32* ctile = reinterpret_cast<u32*>(smem);
    const int row = wm0 + (lane >> 2);
    const bool mma_thread = !WG_WS || tid < WG_THREADS; /* a WG_WS loader only meets the barriers */
    if(mma_thread)
    {
#pragma unroll
        for(int j = 0; j < IG_NI; ++j)
        {
            const int cc = wn0 + j * 8 + (lane & 3) * 2;
            ctile[(row * PITCH + cc) / 2] = pack2(frag[0][j][0], frag[0][j][1]);
            ctile[((row + 8) * PITCH + cc) / 2] = pack2(frag[0][j][2], frag[0][j][3]);
        }
    }
    __syncthreads();
    for(int e = mma_thread ? tid : WG_BM * WG_BCH; e < WG_BM * WG_BCH; e += WG_THREADS)
    {
        const int r = e / WG_BCH;
        const int ch = e - r * WG_BCH;
        const int off = row_off(r);
        if(off >= 0 && ch * 8 < cols_left)
            EPI_STORE8(dw + off + ch * 8, smem[(r * PITCH) / 8 + ch]);
    }
    __syncthreads();
}

static_assert(!WG_WS || WG_CLUSTER == 1, "WG_WS: no clusters");

KERNEL void __launch_bounds__(WG_BLOCK_THREADS, 1) WG_CLUSTER_DIMS
    wgmma_wrw(const data_t* RESTRICT x, const data_t* RESTRICT dy, data_t* RESTRICT dw, float* RESTRICT ws EPI_KERNEL_PARAMS)
{
    EPI_SETUP(dw, 0, WG_RSC);
    /* WG_STAGES * WG_STAGE_BYTES (or the epilogue's tile) + 1024, given at launch; the ring starts
       at the first 1024-byte boundary (the swizzle's period) */
    extern __shared__ __align__(1024) uint4 smem_raw[];
    const u32 raw_base = smem_addr(smem_raw);
    const u32 base = (raw_base + 1023u) & ~1023u;
    [[maybe_unused]] uint4* smem = smem_raw + (base - raw_base) / 16;

    const int tid = threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    const int wg = warp >> 2;
    const int wg_m = wg / WG_WN;
    const int wg_n = wg - wg_m * WG_WN;
#if WG_FIX
    /* a 1-D grid, the slices of a tile consecutive (fix_sum) */
    const int bid = blockIdx.x / IG_SPLIT_K;
    const int part = blockIdx.x - bid * IG_SPLIT_K;
#else
    const int bid = blockIdx.x;
    const int part = blockIdx.y;
#endif
    const int m0 = (bid / WG_TILES_N) * WG_BM;
    const int n0 = (bid % WG_TILES_N) * WG_BN;
    /* split-K: this block reduces pixel k-tiles [kt0, kt1) (slice `part` of IG_SPLIT_K) */
    const int kt0 = (int)((long long)part * WG_KT / IG_SPLIT_K);
    const int kt1 = (int)((long long)(part + 1) * WG_KT / IG_SPLIT_K);
    /* WG_ROT: the tiles start their slice at spread k-tiles (then wrap around), so that the
       blocks sharing an A or a B tile do not all read the same pixels at once */
    const int rot = WG_ROT ? (int)((long long)bid * (kt1 - kt0) / WG_TILES_ALL) : 0;

    float acc[WG_ACC];
#pragma unroll
    for(int i = 0; i < WG_ACC; ++i)
        acc[i] = 0.0f;
#if WG_WS
    /* the barriers past the ring and the epilogue's tile */
    constexpr int ring = WG_STAGES * WG_STAGE_BYTES, tile_bytes = WG_BM * (WG_BN + 8) * 2;
    wrw_mainloop_ws(x, dy, base, base + (ring > tile_bytes ? ring : tile_bytes), m0, n0, kt0, kt1 - kt0, rot, acc);
#else
    wrw_mainloop(x, dy, base, m0, n0, kt0, kt1 - kt0, rot, acc);
#endif

    /* ---- epilogue: this warp's 16 x WG_NW tile as m16n8 fragments; tile row r is dw row m0 + r ---- */
    [[maybe_unused]] const float(&frag)[1][IG_NI][4] = *reinterpret_cast<const float(*)[1][IG_NI][4]>(acc);
    [[maybe_unused]] const int wm0 = wg_m * 64 + (warp & 3) * 16;
    [[maybe_unused]] const int wn0 = wg_n * WG_NW;
    [[maybe_unused]] auto row_off = [&](int row) -> int { return m0 + row < IG_K ? (m0 + row) * WG_RSC + n0 : -1; };
#if WG_FIX
    fix_sum(acc, bid, part, m0, n0, ws, dw EPI_ARG);
#elif IG_CLUSTER
    cluster_store_tile<WG_BM, WG_BN, WG_THREADS, 1, IG_NI, IG_SPLIT_K>(smem, frag, wm0, wn0, lane, tid, WG_RSC - n0,
                                                                      dw, row_off EPI_ARG);
#elif WG_PARTS > 1 && WG_CLUSTER > 1
    /* this cluster's sum into its workspace slice */
    cluster_sum_to_part(smem, frag, wm0, wn0, lane, tid, WG_RSC - n0,
                        ws + (i64)(blockIdx.y / WG_CLUSTER) * IG_K * WG_RSC, row_off);
#elif IG_SPLIT_K > 1
    /* fp32 partials of this slice straight from the fragments */
    float* slot = ws + (i64)part * IG_K * WG_RSC;
#pragma unroll
    for(int h = 0; h < 2 && (!WG_WS || tid < WG_THREADS); ++h)
    {
        const int off = row_off(wm0 + h * 8 + (lane >> 2));
        if(off < 0)
            continue;
#pragma unroll
        for(int j = 0; j < IG_NI; ++j)
        {
            const int col = wn0 + j * 8 + (lane & 3) * 2;
            if(col < WG_RSC - n0)
                *reinterpret_cast<float2*>(slot + off + col) = make_float2(frag[0][j][2 * h], frag[0][j][2 * h + 1]);
        }
    }
#else
    store_rounded(smem, frag, wm0, wn0, lane, tid, WG_RSC - n0, dw, row_off EPI_ARG);
#endif
}

/* Split-K through the workspace: dw = the sum of the WG_PARTS fp32 partial results, 8 taps per
   thread. */
KERNEL void igemm_splitk_reduce(const float* RESTRICT ws, data_t* RESTRICT dw EPI_KERNEL_PARAMS)
{
    EPI_SETUP(dw, 0, WG_RSC);
    splitk_sum<WG_PARTS>(ws, dw, (i64)IG_K * WG_RSC EPI_ARG);
}
