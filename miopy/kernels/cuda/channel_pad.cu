/* pad_channels: a packed tensor with its channels (and rows) padded with zeros, or a padded
   tensor cut back to its real channels (common/channel_pad.h). The implicit-GEMM solvers for
   channel counts that are not multiples of 8 (solvers/conv/igemm_padded.py) run it on x, the
   filter, dy and the padded results. Data are moved as raw bits: any data type.

   Defines: CP_MID (middle extent of src; CP_MID_DST of dst, the same unless given), CP_C_SRC,
   CP_C_DST, CP_VEC (channels per work item: 16 or 8 bytes' worth where C_DST allows, else 1).
   Arguments: src, dst, rows of dst, rows of src. */

// miopy-compile-test: -DCP_MID=49 -DCP_C_SRC=3 -DCP_C_DST=8 -DCP_VEC=8
// miopy-compile-test: -DCP_MID=1 -DCP_C_SRC=8 -DCP_C_DST=3 -DCP_VEC=1
// miopy-compile-test: -DMIOPY_DTYPE=1 -DCP_MID=7 -DCP_MID_DST=8 -DCP_C_SRC=3 -DCP_C_DST=4 -DCP_VEC=4
// miopy-compile-test: -DMIOPY_DTYPE=0 -DCP_MID=9 -DCP_C_SRC=5 -DCP_C_DST=8 -DCP_VEC=4

#ifndef CP_MID
#define CP_MID 1
#define CP_C_SRC 3
#define CP_C_DST 8
#endif
#ifndef CP_MID_DST
#define CP_MID_DST CP_MID
#endif
#ifndef CP_VEC
#define CP_VEC 1
#endif
#include "common/channel_pad.h"

#if MIOPY_DTYPE == 0
typedef u32 cp_bits_t;
#elif MIOPY_DTYPE == 3
typedef u64 cp_bits_t;
#else
typedef u16 cp_bits_t;
#endif

KERNEL void pad_channels(const data_t* RESTRICT src, data_t* RESTRICT dst, i64 rows_dst, i64 rows_src)
{
    pad_channels_rows<cp_bits_t, CP_MID, CP_MID_DST, CP_C_SRC, CP_C_DST, CP_VEC>(
        reinterpret_cast<const cp_bits_t*>(src), reinterpret_cast<cp_bits_t*>(dst), rows_dst, rows_src);
}
