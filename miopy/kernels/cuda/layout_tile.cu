/* transpose_tile_in: `batches` row-major matrices of rows x cols to cols x rows, through shared
   memory, as raw bits of the stored type (common/transpose_tile.h). The NCHW tensor-core
   implicit-GEMM solvers (solvers/conv/igemm_nchw.py) run it on their read tensors: NCHW x or dy
   [N][C][HW] -> NHWC [N][HW][C], and the KCRS filter [K][C][RS] -> KRSC [K][RS][C].

   Grid: (ceil(cols / 64) * 32, ceil(rows / 64) * 8, batches) of (32, 8, 1). TP_LDV elements per
   read (8 where cols is a multiple of 8, 2 where even, else 1), TP_STV per write (the same on
   rows). Matrices of at most 8 rows (channels) take transpose_narrow_in instead. */

// miopy-compile-test: -DTP_LDV=1 -DTP_STV=1
// miopy-compile-test: -DTP_LDV=8 -DTP_STV=8
// miopy-compile-test: -DTP_LDV=1 -DTP_STV=8
// miopy-compile-test: -DTP_LDV=2 -DTP_STV=2

#include "common/transpose_tile.h"

KERNEL void __launch_bounds__(256) transpose_tile_in(const tt_bits_t* RESTRICT src, tt_bits_t* RESTRICT dst,
                                                     int rows, int cols)
{
    transpose_tile(src, dst, rows, cols TT_ARG);
}

/* transpose_narrow_in: the same for matrices of few rows (an image of 3 channels: a 64-row tile
   would leave most of its threads idle): one work item per column of every batch (`total` =
   batches * cols), reading its `rows` elements (a warp reads 32 adjacent ones per row) and
   writing them contiguously. Grid: total work items in blocks of 256. */
KERNEL void __launch_bounds__(256) transpose_narrow_in(const tt_bits_t* RESTRICT src, tt_bits_t* RESTRICT dst,
                                                       int rows, int cols, i64 total)
{
    const i64 e = GLOBAL_ID0;
    if(e >= total)
        return;
    const i64 batch = e / cols;
    const tt_bits_t* s = src + batch * rows * cols + (e - batch * cols);
    tt_bits_t* d = dst + e * rows;
    for(int r = 0; r < rows; ++r)
        d[r] = s[(i64)r * cols];
}
