/* The kernels that write the result of the NCHW tensor-core implicit-GEMM solvers
   (solvers/conv/igemm_nchw.py) from the NHWC result the GEMM left in the workspace:

   transpose_tile_out: transpose_tile (common/transpose_tile.h), [N][HW][K] -> NCHW [N][K][HW]
   (forward y, backward data dx) or the KRSC filter gradient [K][RS][C] -> KCRS [K][C][RS].
   Grid: (ceil(cols / 64) * 32, ceil(rows / 64) * 8, batches) of (32, 8, 1); TP_LDV elements per
   read (8 where cols is a multiple of 8, 2 where even, else 1), TP_STV per write (the same on
   rows).

   transpose_narrow_out: the same for at most 8 channels (cols), one work item per pixel of every
   batch (`total` = batches * rows), which reads its channels and writes one element to each
   channel's plane (a warp writes 32 adjacent ones per plane). Grid: total in blocks of 256.

   copy_out: a result already in its final order (a 1x1 filter: KRSC is KCRS), element by
   element, channel i % channels. Grid: total in blocks of 256.

   They make every write of the output, so they carry the solvers' fused epilogue
   (common/conv_epilogue.h; solvers/conv/epilogue.py): built with MIOPY_EPI, each element becomes
   act(alpha * v + bias[channel]) + beta * out, the channel being K of an activation (the bias
   applies to forward only). Without it the bits are moved as they are. */

// miopy-compile-test: -DTP_LDV=1 -DTP_STV=1
// miopy-compile-test: -DTP_LDV=8 -DTP_STV=2
// miopy-compile-test: -DTP_LDV=2 -DTP_STV=8
// miopy-compile-test: -DTP_LDV=8 -DTP_STV=8 -DMIOPY_EPI=1 -DMIOPY_EPI_BIAS=1 -DMIOPY_EPI_ACT=3
// miopy-compile-test: -DTP_LDV=2 -DTP_STV=1 -DMIOPY_EPI=1 -DMIOPY_EPI_ACT=8

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
#define TT_PARAM EPI_PARAM
#define TT_ARG EPI_ARG
#define OUT_STORE(dst, i, bits, channel) TT_STORE(dst, i, bits, channel)
#else
#define OUT_STORE(dst, i, bits, channel) ((dst)[i] = (bits))
#endif

#include "common/transpose_tile.h"

KERNEL void __launch_bounds__(256) transpose_tile_out(const tt_bits_t* RESTRICT src, tt_bits_t* RESTRICT dst,
                                                      int rows, int cols EPI_KERNEL_PARAMS)
{
    EPI_SETUP(reinterpret_cast<const data_t*>(dst), 0, 0);
    transpose_tile(src, dst, rows, cols TT_ARG);
}

KERNEL void __launch_bounds__(256) transpose_narrow_out(const tt_bits_t* RESTRICT src, tt_bits_t* RESTRICT dst,
                                                        int rows, int cols, i64 total EPI_KERNEL_PARAMS)
{
    EPI_SETUP(reinterpret_cast<const data_t*>(dst), 0, 0);
    const i64 e = GLOBAL_ID0;
    if(e >= total)
        return;
    const i64 batch = e / rows;
    const tt_bits_t* s = src + e * cols;
    tt_bits_t* d = dst + batch * rows * cols + (e - batch * rows);
    for(int c = 0; c < cols; ++c)
        OUT_STORE(d, (i64)c * rows, s[c], c);
}

KERNEL void __launch_bounds__(256) copy_out(const tt_bits_t* RESTRICT src, tt_bits_t* RESTRICT dst, i64 total,
                                            int channels EPI_KERNEL_PARAMS)
{
    EPI_SETUP(reinterpret_cast<const data_t*>(dst), 0, 0);
    const i64 i = GLOBAL_ID0;
    if(i < total)
        OUT_STORE(dst, i, src[i], (int)(i % channels));
}
