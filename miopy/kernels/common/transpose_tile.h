/* A batched transpose through shared memory (layout_tile.cu, layout_tile_out.cu): `batches`
   matrices of rows x cols, each packed row-major, to cols x rows (NCHW [N][C][HW] <-> NHWC
   [N][HW][C]; a KCRS filter [K][C][RS] <-> KRSC [K][RS][C]). Data move as raw bits of the
   stored type (4 bytes for fp32, 2 for fp16 / bf16).

   A block of 256 threads (32 x 8) moves one TT_TILE x TT_TILE tile (64 x 64): grid x covers the
   columns, y the rows, z the batches. Each thread reads TP_LDV consecutive elements of a source
   row per access (8: 16 bytes of 16-bit data, where cols is a multiple of 8; 2 where it is
   even; else 1) and writes TP_STV consecutive elements of an output row (the same rule on
   rows), so a warp reads and writes whole 128-byte lines wherever the sizes allow; a 7x7
   image's 49 pixels take single elements on that side only. The shared tile's rows are padded
   by TT_PAD elements: for 16-bit data the element-pair stores of the read phase are free of bank
   conflicts, the gathers of the write phase at most 2-way.

   The caller defines TT_STORE(dst, i, bits, channel) for each element written through an
   epilogue (bits: the stored value; channel: the source column, which is the output channel of
   an NHWC -> NCHW transpose), or leaves the plain vector stores. What it uses beyond that comes
   in through TT_PARAM (transpose_tile's extra parameters) and TT_ARG. Pointers, the batch
   stride and the row lengths must keep each access aligned to its size (the solvers' tensors
   and workspace parts are 256-byte aligned). */
#ifndef MIOPY_TRANSPOSE_TILE_H
#define MIOPY_TRANSPOSE_TILE_H

#include "common/miopy_types.h"

#ifndef TP_LDV
#define TP_LDV 1
#endif
#ifndef TP_STV
#define TP_STV 1
#endif
#if(TP_LDV != 1 && TP_LDV != 2 && TP_LDV != 8) || (TP_STV != 1 && TP_STV != 2 && TP_STV != 8)
#error "TP_LDV, TP_STV: 1, 2 or 8 elements per access"
#endif

#define TT_TILE 64
#define TT_PAD 2
#define TT_THREADS 256

#if MIOPY_DTYPE == 0 || MIOPY_DTYPE == 3
typedef u32 tt_bits_t;
#define TT_BITS 32
#else
typedef u16 tt_bits_t;
#define TT_BITS 16
#endif

/* V consecutive elements as one access (16-bit: 2, 4 or 16 bytes; 32-bit: 4, 8 or 2 x 16). */
template <int V>
struct alignas(V * sizeof(tt_bits_t) < 16 ? V * sizeof(tt_bits_t) : 16) tt_vec
{
    tt_bits_t e[V];
};

#ifndef TT_PARAM /* extra parameters of transpose_tile that TT_STORE uses (and their arguments) */
#define TT_PARAM
#define TT_ARG
#endif

/* The tile of this block: src (batch blockIdx.z) rows r0.. and cols c0.. to dst. */
DEVICE_FN void transpose_tile(const tt_bits_t* RESTRICT src, tt_bits_t* RESTRICT dst, int rows, int cols TT_PARAM)
{
    __shared__ __align__(16) tt_bits_t tile[TT_TILE][TT_TILE + TT_PAD];
    const i64 batch = (i64)blockIdx.z * rows * cols;
    const tt_bits_t* s = src + batch;
    tt_bits_t* d = dst + batch;
    const int c0 = blockIdx.x * TT_TILE, r0 = blockIdx.y * TT_TILE;
    const int tid = threadIdx.y * 32 + threadIdx.x;
    {
        constexpr int per_row = TT_TILE / TP_LDV, row_step = TT_THREADS / per_row;
        const int tc = (tid % per_row) * TP_LDV, c = c0 + tc;
#pragma unroll
        for(int kk = 0; kk < TT_TILE; kk += row_step)
        {
            const int k = kk + tid / per_row, r = r0 + k;
            if(r >= rows || c >= cols)
                break;
            const tt_vec<TP_LDV> v = *reinterpret_cast<const tt_vec<TP_LDV>*>(s + (i64)r * cols + c);
#if TP_LDV == 1
            tile[k][tc] = v.e[0];
#else
#pragma unroll
            for(int i = 0; i < TP_LDV; i += 2) /* element pairs: aligned, since TT_TILE + TT_PAD is even */
            {
                tt_vec<2> pair;
                pair.e[0] = v.e[i];
                pair.e[1] = v.e[i + 1];
                *reinterpret_cast<tt_vec<2>*>(&tile[k][tc + i]) = pair;
            }
#endif
        }
    }
    __syncthreads();
    {
        constexpr int per_row = TT_TILE / TP_STV, row_step = TT_THREADS / per_row;
        const int tr = (tid % per_row) * TP_STV, r = r0 + tr;
#pragma unroll
        for(int kk = 0; kk < TT_TILE; kk += row_step)
        {
            const int k = kk + tid / per_row, c = c0 + k; /* the output row: a source column */
            if(c >= cols || r >= rows)
                break;
            tt_vec<TP_STV> v;
#pragma unroll
            for(int i = 0; i < TP_STV; ++i)
                v.e[i] = tile[tr + i][k];
#ifdef TT_STORE
#pragma unroll
            for(int i = 0; i < TP_STV; ++i)
                TT_STORE(d, (i64)c * rows + r + i, v.e[i], c);
#else
            *reinterpret_cast<tt_vec<TP_STV>*>(d + (i64)c * rows + r) = v;
#endif
        }
    }
}

#endif
