/* A batched transpose through shared memory (layout_tile.cu, layout_tile_out.cu): `batches`
   matrices of rows x cols, each packed row-major, to cols x rows (NCHW [N][C][HW] <-> NHWC
   [N][HW][C]; a KCRS filter [K][C][RS] <-> KRSC [K][RS][C]). Data move as raw bits of the
   stored type (4 bytes for fp32, 2 for fp16 / bf16).

   A block of 32 x 8 threads moves one TT_TILE x TT_TILE tile (64 x 64): grid x covers the
   columns, y the rows, z the batches. With TP_LD2 (cols even) each thread reads element pairs
   along a row, so a warp reads 128 contiguous bytes of 16-bit data; with TP_ST2 (rows even) it
   writes pairs along an output row the same way; without them, single elements (a 7x7 image's
   49 pixels). The shared tile's rows are padded by TT_PAD elements (pairs stay aligned; at most
   2-way bank conflicts on the gather for 16-bit data).

   The caller defines TT_STORE(dst, i, bits, channel) for each element written (bits: the stored
   value; channel: the source column, which is the output channel of an NHWC -> NCHW transpose)
   or leaves the plain store; TT_STORE2(dst, i, lo, hi, channel) stores a pair. What they use
   beyond that comes in through TT_PARAM (transpose_tile's extra parameters) and TT_ARG. */
#ifndef MIOPY_TRANSPOSE_TILE_H
#define MIOPY_TRANSPOSE_TILE_H

#include "common/miopy_types.h"

#ifndef TP_LD2
#define TP_LD2 0
#endif
#ifndef TP_ST2
#define TP_ST2 0
#endif

#define TT_TILE 64
#define TT_PAD 2

#if MIOPY_DTYPE == 0 || MIOPY_DTYPE == 3
typedef u32 tt_bits_t;
typedef u64 tt_pair_t;
#define TT_BITS 32
#else
typedef u16 tt_bits_t;
typedef u32 tt_pair_t;
#define TT_BITS 16
#endif

#ifndef TT_PARAM /* extra parameters of transpose_tile that TT_STORE uses (and their arguments) */
#define TT_PARAM
#define TT_ARG
#endif
#ifndef TT_STORE
#define TT_STORE(dst, i, bits, channel) ((dst)[i] = (bits))
#endif
#ifndef TT_STORE2
#define TT_STORE2(dst, i, lo, hi, channel)                                                           \
    (*reinterpret_cast<tt_pair_t*>((dst) + (i)) = (tt_pair_t)(lo) | ((tt_pair_t)(hi) << TT_BITS))
#endif

/* The tile of this block: src (batch blockIdx.z) rows r0.. and cols c0.. to dst. */
DEVICE_FN void transpose_tile(const tt_bits_t* RESTRICT src, tt_bits_t* RESTRICT dst, int rows, int cols TT_PARAM)
{
    __shared__ __align__(16) tt_bits_t tile[TT_TILE][TT_TILE + TT_PAD];
    const i64 batch = (i64)blockIdx.z * rows * cols;
    const tt_bits_t* s = src + batch;
    tt_bits_t* d = dst + batch;
    const int c0 = blockIdx.x * TT_TILE, r0 = blockIdx.y * TT_TILE;
    const int tx = threadIdx.x, ty = threadIdx.y;
#pragma unroll
    for(int k = 0; k < TT_TILE; k += 8)
    {
        const int r = r0 + ty + k;
        if(r >= rows)
            break;
#if TP_LD2
        const int c = c0 + 2 * tx;
        if(c < cols)
            *reinterpret_cast<tt_pair_t*>(&tile[ty + k][2 * tx]) =
                *reinterpret_cast<const tt_pair_t*>(s + (i64)r * cols + c);
#else
#pragma unroll
        for(int j = 0; j < TT_TILE; j += 32)
        {
            const int c = c0 + tx + j;
            if(c < cols)
                tile[ty + k][tx + j] = s[(i64)r * cols + c];
        }
#endif
    }
    __syncthreads();
#pragma unroll
    for(int k = 0; k < TT_TILE; k += 8)
    {
        const int c = c0 + ty + k; /* the output row: a source column */
        if(c >= cols)
            break;
#if TP_ST2
        const int r = r0 + 2 * tx;
        if(r < rows)
            TT_STORE2(d, (i64)c * rows + r, tile[2 * tx][ty + k], tile[2 * tx + 1][ty + k], c);
#else
#pragma unroll
        for(int j = 0; j < TT_TILE; j += 32)
        {
            const int r = r0 + tx + j;
            if(r < rows)
                TT_STORE(d, (i64)c * rows + r, tile[tx + j][ty + k], c);
        }
#endif
    }
}

#endif
