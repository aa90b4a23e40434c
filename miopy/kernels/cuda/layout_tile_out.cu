/* transpose_tile_out: transpose_tile (common/transpose_tile.h) writing a convolution's result:
   the NCHW tensor-core implicit-GEMM solvers (solvers/conv/igemm_nchw.py) run it on the NHWC
   result the GEMM left in the workspace, [N][HW][K] -> NCHW [N][K][HW] (forward y, backward
   data dx), or the KRSC filter gradient [K][RS][C] -> KCRS [K][C][RS].

   It makes every write of the output, so it carries the solvers' fused epilogue
   (common/conv_epilogue.h; solvers/conv/epilogue.py): built with MIOPY_EPI, each element becomes
   act(alpha * v + bias[channel]) + beta * out, the channel being the source column (K of an
   activation; the bias applies to forward only). Without it the bits are moved as they are.

   Grid: (ceil(cols / 64) * 32, ceil(rows / 64) * 8, batches) of (32, 8, 1). TP_VEC 2 where rows
   and cols are both even (element pairs), else 1. */

// miopy-compile-test: -DTP_VEC=1
// miopy-compile-test: -DTP_VEC=2
// miopy-compile-test: -DTP_VEC=2 -DMIOPY_EPI=1 -DMIOPY_EPI_BIAS=1 -DMIOPY_EPI_ACT=3

#include "common/miopy_types.h"
#include "common/mma_sm80.h" /* pack2, which conv_epilogue.h's 16-byte helpers use */
#include "common/conv_epilogue.h"

#if MIOPY_EPI
/* the element `bits` of `channel` written at dst[i] through the epilogue, in fp32 */
DEVICE_FN void tt_epi_store(data_t* dst, i64 i, u32 bits, int channel, const EpiArgs& ep)
{
#if MIOPY_DTYPE == 0
    float v = __uint_as_float(bits);
#else
    const u16 b16 = (u16)bits;
    float v = LOAD(reinterpret_cast<const data_t*>(&b16), 0);
#endif
    EPI_VALUE(v, channel, dst + i);
    STORE(dst, i, v);
}
#define TT_STORE(dst, i, bits, channel) tt_epi_store(reinterpret_cast<data_t*>(dst), i, bits, channel, ep)
#define TT_STORE2(dst, i, lo, hi, channel) \
    (TT_STORE(dst, i, lo, channel), TT_STORE(dst, (i) + 1, hi, channel))
#define TT_PARAM EPI_PARAM
#define TT_ARG EPI_ARG
#endif

#include "common/transpose_tile.h"

KERNEL void __launch_bounds__(256) transpose_tile_out(const tt_bits_t* RESTRICT src, tt_bits_t* RESTRICT dst,
                                                      int rows, int cols EPI_KERNEL_PARAMS)
{
    EPI_SETUP(reinterpret_cast<const data_t*>(dst), 0, 0);
    transpose_tile(src, dst, rows, cols TT_ARG);
}
