/* 1x1 convolutions (stride 1, no padding, packed NHWC, fp16 or bf16 in, fp32 accumulation) as
   GEMMs that stream the activations once through shared memory (Conv1x1StreamFwd / Bwd / Wrw).
   On NHWC data such a convolution is a product over the tensors as they lie, with rows
   m = (n, h, w), M = N*H*W:

     forward        y[M][K]  = x[M][C]  . w[K][C]^T      (gemm1x1_rows, G1_WT = 0)
     backward data  dx[M][C] = dy[M][K] . w[K][C]        (gemm1x1_rows, G1_WT = 1)
     weights        dw[K][C] = dy[M][K]^T . x[M][C]      (gemm1x1_wrw, then gemm1x1_wrw_sum)

   gemm1x1_rows: "in" is M x NI, "out" M x NO. A block keeps a G1_BNO-column slice of the whole
   filter (every reduction index) in shared memory and walks row tiles of G1_BM rows (persistent:
   tiles blockIdx.x, + gridDim.x, ...) through a G1_STAGES-deep cp.async pipeline; there is no
   reduction loop beyond one tile's NI channels. Each warp computes 16 * G1_FM rows, 64 columns at
   a time (mma.sync m16n8k16), rounds them to data_t in its own shared-memory tile and writes whole
   128-byte row segments with streaming 16-byte stores. Column block blockIdx.y. For small C and K
   (ResNet's 64 -> 64 and 64 <-> 256 layers) the product is a copy of x and y at memory speed.

   gemm1x1_wrw: a block owns a G1_TK x G1_TC tile of dw (blockIdx.y) and sums over its share of
   the rows (tiles of G1_BM rows, blockIdx.x + G1_SPLIT * i), reading dy and x once each through
   the cp.async pipeline (both tiles lie row-major, the reduction index m as rows: ldmatrix.trans
   gives both operands). With G1_SPLIT = 1 it writes dw; else fp32 partial tiles to the
   workspace (G1_SPLIT x K x C floats) that gemm1x1_wrw_sum adds into dw.

   Needs NI a multiple of 16 with NI / 8 = 4 or a multiple of 8 chunks, NO a multiple of G1_BNO
   (a multiple of 64); K and C multiples of G1_TK and G1_TC. Fragment loads: common/igemm_core.h. */

// miopy-compile-test: -DMIOPY_DTYPE=1
// miopy-compile-test: -DMIOPY_DTYPE=2 -DG1_M=1000 -DG1_NI=256 -DG1_NO=64 -DG1_WT=1 -DG1_BM=64 -DG1_FM=1 -DG1_BNO=64 -DG1_STAGES=3
// miopy-compile-test: -DMIOPY_DTYPE=1 -DG1_M=1000 -DG1_NI=256 -DG1_NO=128 -DG1_WT=0 -DG1_BM=128 -DG1_FM=1 -DG1_BNO=64 -DG1_KW=64 -DG1_STAGES=6
// miopy-compile-test: -DMIOPY_DTYPE=1 -DG1_K=256 -DG1_C=64 -DG1_M=999 -DG1_TK=128 -DG1_TC=64 -DG1_WK=2 -DG1_WC=2 -DG1_SPLIT=4
// miopy-compile-test: -DMIOPY_DTYPE=2 -DG1_K=64 -DG1_C=64 -DG1_M=99 -DG1_BM=32 -DG1_STAGES=4 -DG1_SPLIT=1

#ifndef G1_M
#define G1_M 1000
#endif
#ifndef G1_NI /* gemm1x1_rows: reduction (input channels of a row) and output columns */
#define G1_NI 64
#define G1_NO 256
#endif
#ifndef G1_WT /* 0: w is NO x NI (forward); 1: w is NI x NO (backward data) */
#define G1_WT 0
#endif
#ifndef G1_BM
#define G1_BM 128
#endif
#ifndef G1_FM /* m16 fragments of a warp in gemm1x1_rows */
#define G1_FM 2
#endif
#ifndef G1_BNO
#define G1_BNO G1_NO
#endif
#ifndef G1_KW /* channels of a row per pipeline step of gemm1x1_rows */
#define G1_KW G1_NI
#endif
#ifndef G1_STAGES
#define G1_STAGES 3
#endif
#ifndef G1_K /* gemm1x1_wrw: dw is K x C */
#define G1_K 64
#define G1_C 64
#endif
#ifndef G1_TK
#define G1_TK G1_K
#define G1_TC G1_C
#endif
#ifndef G1_WK /* warp grid of gemm1x1_wrw */
#define G1_WK 4
#define G1_WC 2
#endif
#ifndef G1_SPLIT
#define G1_SPLIT 132
#endif

#include "common/igemm_core.h"

DEVICE_FN void st_global_cs(void* p, uint4 v)
{
    asm volatile("st.global.cs.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z),
                 "r"(v.w)
                 : "memory");
}

/* ---- gemm1x1_rows ------------------------------------------------------------------------------
   The ring holds steps of G1_BM rows x G1_KW channels: a row tile is NI / G1_KW steps (one where
   G1_KW = NI), so that a wide reduction (256 channels) still keeps several small copies in flight
   rather than one large one. Steps of one tile accumulate into the same fragments (then the
   block is one 64-column chunk wide); the last writes the tile out. */
#define R_WARPS (G1_BM / (16 * G1_FM))
#define R_THREADS (R_WARPS * 32)
#define R_KC (G1_NI / G1_KW)                        /* steps of a row tile */
#define R_CH (G1_KW / 8)                            /* 16-byte chunks of a step's row */
#define R_WRC (G1_WT ? G1_BNO / 8 : G1_NI / 8)      /* chunks of a filter row in shared memory */
#define R_W_CHUNKS (G1_BNO * G1_NI / 8)
#define R_A_CHUNKS (G1_BM * R_CH)
#define R_PITCH 72                                  /* elements of an output staging row */
#define R_OUT_CHUNKS (16 * G1_FM * R_PITCH / 8)     /* one warp's staging tile */
#define R_TILES ((G1_M + G1_BM - 1) / G1_BM)

KERNEL void __launch_bounds__(R_THREADS) gemm1x1_rows(const data_t* RESTRICT in, const data_t* RESTRICT w,
                                                      data_t* RESTRICT out)
{
    static_assert(G1_NI % G1_KW == 0 && G1_KW % 16 == 0 && (R_CH == 4 || R_CH % 8 == 0), "steps of the rows");
    static_assert(G1_NI / 8 == 4 || (G1_NI / 8) % 8 == 0, "NI: 32 or a multiple of 64");
    static_assert(G1_BNO % 64 == 0 && G1_NO % G1_BNO == 0, "column blocks of 64-column chunks");
    static_assert(R_KC == 1 || G1_BNO == 64, "a tile of several steps is one chunk wide");
    static_assert(R_A_CHUNKS % R_THREADS == 0, "every thread copies as many chunks");
    extern __shared__ uint4 smem[];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int n0 = blockIdx.y * G1_BNO;
    const u32 w_tile = smem_addr(smem);
    const u32 a_base = w_tile + R_W_CHUNKS * 16;
    uint4* stage_out = smem + R_W_CHUNKS + G1_STAGES * R_A_CHUNKS + warp * R_OUT_CHUNKS;

    /* the filter slice, in the first commit group */
    for(int e = tid; e < R_W_CHUNKS; e += R_THREADS)
    {
        const int row = e / R_WRC, ch = e - row * R_WRC;
        const data_t* src = G1_WT ? w + (i64)row * G1_NO + n0 + ch * 8 : w + (i64)(n0 + row) * G1_NI + ch * 8;
        cp_async_16(w_tile + swizzle<R_WRC>(row, ch) * 16, src, true);
    }
    /* step s: row tile blockIdx.x + (s / R_KC) * gridDim.x, channels (s % R_KC) * G1_KW on */
    auto load_a = [&](int stage, int step) {
        const int tile = (int)blockIdx.x + (step / R_KC) * (int)gridDim.x;
        if(tile >= R_TILES)
            return;
        const int c0 = (step % R_KC) * G1_KW;
        const u32 base = a_base + stage * (R_A_CHUNKS * 16);
#pragma unroll
        for(int i = 0; i < R_A_CHUNKS / R_THREADS; ++i)
        {
            const int e = tid + i * R_THREADS;
            const int row = e / R_CH, ch = e - row * R_CH;
            const int m = tile * G1_BM + row;
            const bool ok = m < G1_M;
            cp_async_16(base + swizzle<R_CH>(row, ch) * 16, in + (i64)(ok ? m : 0) * G1_NI + c0 + ch * 8, ok);
        }
    };
#pragma unroll
    for(int s = 0; s < G1_STAGES - 1; ++s)
    {
        load_a(s, s);
        cp_async_commit();
    }
    const int wm0 = warp * 16 * G1_FM;
    u32* st = reinterpret_cast<u32*>(stage_out);
    float acc[G1_FM][8][4];
    for(int step = 0;; ++step)
    {
        const int tile = (int)blockIdx.x + (step / R_KC) * (int)gridDim.x;
        if(tile >= R_TILES)
            break;
        const int kc = step % R_KC;
        cp_async_wait<G1_STAGES - 2>();
        __syncthreads(); /* step `step` is in; every warp is done with the stage refilled next */
        load_a((step + G1_STAGES - 1) % G1_STAGES, step + G1_STAGES - 1);
        cp_async_commit();
        const u32 a_tile = a_base + (step % G1_STAGES) * (R_A_CHUNKS * 16);
        const int m_tile = tile * G1_BM + wm0;
#pragma unroll 1
        for(int nc = 0; nc < G1_BNO / 64; ++nc)
        {
            if(kc == 0)
                zero_acc(acc);
#pragma unroll
            for(int ks = 0; ks < G1_KW / 16; ++ks)
            {
                u32 af[G1_FM][4], bf[8][2];
                frags_a_mmajor<G1_FM, R_CH>(a_tile, wm0, ks, lane, af);
#if G1_WT
                frags_b_kmajor<8, R_WRC>(w_tile, nc * 64, kc * (G1_KW / 16) + ks, lane, bf);
#else
                frags_b_nmajor<8, R_WRC>(w_tile, nc * 64, kc * (G1_KW / 16) + ks, lane, bf);
#endif
#pragma unroll
                for(int f = 0; f < G1_FM; ++f)
#pragma unroll
                    for(int j = 0; j < 8; ++j)
                        mma_16816(acc[f][j], af[f], bf[j]);
            }
            if(kc != R_KC - 1)
                continue;
#pragma unroll
            for(int f = 0; f < G1_FM; ++f)
#pragma unroll
                for(int j = 0; j < 8; ++j)
                {
                    const int row = f * 16 + (lane >> 2), col = j * 8 + (lane & 3) * 2;
                    st[(row * R_PITCH + col) / 2] = pack2(acc[f][j][0], acc[f][j][1]);
                    st[((row + 8) * R_PITCH + col) / 2] = pack2(acc[f][j][2], acc[f][j][3]);
                }
            __syncwarp();
#pragma unroll
            for(int e = lane; e < 16 * G1_FM * 8; e += 32)
            {
                const int row = e >> 3, ch = e & 7;
                const int m = m_tile + row;
                if(m < G1_M)
                    st_global_cs(out + (i64)m * G1_NO + n0 + nc * 64 + ch * 8, stage_out[row * (R_PITCH / 8) + ch]);
            }
            __syncwarp();
        }
    }
}

/* ---- gemm1x1_wrw -------------------------------------------------------------------------------- */
#define W_THREADS (G1_WK * G1_WC * 32)
#define W_MI (G1_TK / G1_WK / 16)      /* m16 fragments (rows of dw) of a warp */
#define W_NI (G1_TC / G1_WC / 8)       /* n8 fragments (columns of dw) of a warp */
#define W_KCH (G1_TK / 8)
#define W_CCH (G1_TC / 8)
#define W_STAGE_CHUNKS (G1_BM * (W_KCH + W_CCH))
#define W_TILES ((G1_M + G1_BM - 1) / G1_BM)

KERNEL void __launch_bounds__(W_THREADS) gemm1x1_wrw(const data_t* RESTRICT x, const data_t* RESTRICT dy,
                                                     data_t* RESTRICT dw, float* RESTRICT ws)
{
    static_assert(G1_K % G1_TK == 0 && G1_C % G1_TC == 0, "whole dw tiles");
    static_assert(W_MI >= 1 && W_NI >= 2 && W_NI % 2 == 0 && G1_BM % 16 == 0, "warp tiles");
    static_assert((W_KCH == 4 || W_KCH % 8 == 0) && (W_CCH == 4 || W_CCH % 8 == 0), "swizzled rows");
    extern __shared__ uint4 smem[];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    constexpr int TILES_C = G1_C / G1_TC;
    const int k0 = (blockIdx.y / TILES_C) * G1_TK, c0 = (blockIdx.y % TILES_C) * G1_TC;
    const int wk0 = (warp / G1_WC) * (G1_TK / G1_WK), wc0 = (warp % G1_WC) * (G1_TC / G1_WC);
    const u32 base = smem_addr(smem);

    auto load = [&](int stage, int tile) {
        const u32 dyt = base + stage * (W_STAGE_CHUNKS * 16);
        const u32 xt = dyt + G1_BM * W_KCH * 16;
        for(int e = tid; e < W_STAGE_CHUNKS; e += W_THREADS)
        {
            const bool is_dy = e < G1_BM * W_KCH;
            const int f = is_dy ? e : e - G1_BM * W_KCH;
            const int rc = is_dy ? W_KCH : W_CCH;
            const int row = f / rc, ch = f - row * rc;
            const int m = tile * G1_BM + row;
            const bool ok = m < G1_M;
            const i64 r = ok ? m : 0;
            if(is_dy)
                cp_async_16(dyt + swizzle<W_KCH>(row, ch) * 16, dy + r * G1_K + k0 + ch * 8, ok);
            else
                cp_async_16(xt + swizzle<W_CCH>(row, ch) * 16, x + r * G1_C + c0 + ch * 8, ok);
        }
    };
    float acc[W_MI][W_NI][4];
    zero_acc(acc);
    int tile = blockIdx.x;
#pragma unroll
    for(int s = 0; s < G1_STAGES - 1; ++s)
    {
        const int t = tile + s * G1_SPLIT;
        if(t < W_TILES)
            load(s, t);
        cp_async_commit();
    }
    for(int it = 0; tile < W_TILES; ++it, tile += G1_SPLIT)
    {
        cp_async_wait<G1_STAGES - 2>();
        __syncthreads();
        {
            const int t = tile + (G1_STAGES - 1) * G1_SPLIT;
            if(t < W_TILES)
                load((it + G1_STAGES - 1) % G1_STAGES, t);
            cp_async_commit();
        }
        const u32 dyt = base + (it % G1_STAGES) * (W_STAGE_CHUNKS * 16);
        const u32 xt = dyt + G1_BM * W_KCH * 16;
#pragma unroll
        for(int ks = 0; ks < G1_BM / 16; ++ks)
        {
            u32 af[W_MI][4], bf[W_NI][2];
            frags_a_kmajor<W_MI, W_KCH>(dyt, wk0, ks, lane, af);
            frags_b_kmajor<W_NI, W_CCH>(xt, wc0, ks, lane, bf);
#pragma unroll
            for(int i = 0; i < W_MI; ++i)
#pragma unroll
                for(int j = 0; j < W_NI; ++j)
                    mma_16816(acc[i][j], af[i], bf[j]);
        }
    }
#pragma unroll
    for(int i = 0; i < W_MI; ++i)
#pragma unroll
        for(int j = 0; j < W_NI; ++j)
        {
            const int k = k0 + wk0 + i * 16 + (lane >> 2);
            const int c = c0 + wc0 + j * 8 + (lane & 3) * 2;
#if G1_SPLIT == 1
            *reinterpret_cast<u32*>(dw + (i64)k * G1_C + c) = pack2(acc[i][j][0], acc[i][j][1]);
            *reinterpret_cast<u32*>(dw + (i64)(k + 8) * G1_C + c) = pack2(acc[i][j][2], acc[i][j][3]);
#else
            float* part = ws + (i64)blockIdx.x * G1_K * G1_C;
            *reinterpret_cast<float2*>(part + (i64)k * G1_C + c) = make_float2(acc[i][j][0], acc[i][j][1]);
            *reinterpret_cast<float2*>(part + (i64)(k + 8) * G1_C + c) = make_float2(acc[i][j][2], acc[i][j][3]);
#endif
        }
}

/* dw = the sum of the G1_SPLIT fp32 partials (hundreds where the rows are split over every
   multiprocessor): a block of 256 threads sums 16 columns of 4 values, 16 threads per column
   each over every 16th partial, then through shared memory. */
#define S_COLS 16
#define S_PARTS 16
KERNEL void __launch_bounds__(S_COLS * S_PARTS) gemm1x1_wrw_sum(const float* RESTRICT ws, data_t* RESTRICT dw)
{
    static_assert((G1_K * G1_C) % (4 * S_COLS) == 0, "whole blocks of columns");
    __shared__ float4 part_sums[S_PARTS][S_COLS];
    const int col = threadIdx.x % S_COLS, part = threadIdx.x / S_COLS;
    const i64 e = ((i64)blockIdx.x * S_COLS + col) * 4;
    float4 s = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll 4
    for(int g = part; g < G1_SPLIT; g += S_PARTS)
    {
        const float4 v = *reinterpret_cast<const float4*>(ws + (i64)g * (G1_K * G1_C) + e);
        s.x += v.x, s.y += v.y, s.z += v.z, s.w += v.w;
    }
    part_sums[part][col] = s;
    __syncthreads();
    if(part == 0)
    {
#pragma unroll
        for(int q = 1; q < S_PARTS; ++q)
        {
            const float4 v = part_sums[q][col];
            s.x += v.x, s.y += v.y, s.z += v.z, s.w += v.w;
        }
        *reinterpret_cast<uint2*>(dw + e) = make_uint2(pack2(s.x, s.y), pack2(s.z, s.w));
    }
}
