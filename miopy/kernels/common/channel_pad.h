/* Channel padding of packed row-major tensors (CUDA): dst[a][b][c] (rows_dst x MID x C_DST) from
   src[a][b][c] (rows_src x MID x C_SRC), zero where a >= rows_src or c >= C_SRC. One routine
   pads (x: N*H*W x 1 x C -> C rounded up; a filter: K x R*S x C -> Kp x R*S x Cp) and unpads
   (a padded result back to its real channels: rows_dst <= rows_src, C_DST <= C_SRC).

   Elements are copied as raw bits (any data type; zero is all-zero bits). Each work item writes
   VEC consecutive channels of one (a, b); with VEC elements making 16 bytes it stores them at
   once (the caller makes C_DST a multiple of VEC and dst 16-byte aligned). Grid-stride over
   every dst element; MID, C_SRC and C_DST are compile-time so the index divisions are cheap. */
#ifndef MIOPY_CHANNEL_PAD_H
#define MIOPY_CHANNEL_PAD_H

#include "common/miopy_types.h"

template <class T, int MID, int C_SRC, int C_DST, int VEC>
DEVICE_FN void pad_channels_rows(const T* RESTRICT src, T* RESTRICT dst, i64 rows_dst, i64 rows_src)
{
    static_assert(C_DST % VEC == 0, "whole vectors per row");
    constexpr int VECS = C_DST / VEC;
    constexpr bool WIDE = VEC * sizeof(T) == 16;
    const i64 total = rows_dst * MID * VECS;
    for(i64 e = GLOBAL_ID0; e < total; e += GLOBAL_SIZE0)
    {
        const i64 ab = e / VECS;
        const int c0 = (int)(e - ab * VECS) * VEC;
        const bool row_ok = ab < rows_src * MID;
        const T* s = src + ab * C_SRC;
        union
        {
            T v[VEC];
            uint4 u;
        } out;
#pragma unroll
        for(int i = 0; i < VEC; ++i)
            out.v[i] = row_ok && c0 + i < C_SRC ? s[c0 + i] : T(0);
        T* d = dst + ab * C_DST + c0;
        if(WIDE)
            *reinterpret_cast<uint4*>(d) = out.u;
        else
#pragma unroll
            for(int i = 0; i < VEC; ++i)
                d[i] = out.v[i];
    }
}

#endif
