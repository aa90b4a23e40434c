/* Channel padding of packed row-major tensors (CUDA): dst[a][b][c] (rows_dst x MID_DST x C_DST)
   from src[a][b][c] (rows_src x MID_SRC x C_SRC), zero where a >= rows_src, b >= MID_SRC or
   c >= C_SRC. One routine pads (x: N*H*W x 1 x C -> C rounded up; a filter: K x R*S x C ->
   Kp x R*S x Cp, or K*R x S x C -> Kp*R x S' x C' with S rounded up too) and unpads (a padded
   result back to its real extents: every dst extent at most the src one).

   Elements are copied as raw bits (any data type; zero is all-zero bits). Each work item writes
   VEC consecutive channels of one (a, b); where VEC elements make 16 or 8 bytes it stores them
   at once (the caller makes C_DST a multiple of VEC and dst aligned to that). Grid-stride over
   every dst element; the extents but the rows are compile-time, so the index divisions are
   cheap. */
#ifndef MIOPY_CHANNEL_PAD_H
#define MIOPY_CHANNEL_PAD_H

#include "common/miopy_types.h"

template <class T, int MID_SRC, int MID_DST, int C_SRC, int C_DST, int VEC>
DEVICE_FN void pad_channels_rows(const T* RESTRICT src, T* RESTRICT dst, i64 rows_dst, i64 rows_src)
{
    static_assert(C_DST % VEC == 0, "whole vectors per row");
    constexpr int VECS = C_DST / VEC;
    constexpr int BYTES = VEC * (int)sizeof(T);
    const i64 total = rows_dst * MID_DST * VECS;
    for(i64 e = GLOBAL_ID0; e < total; e += GLOBAL_SIZE0)
    {
        const i64 ab = e / VECS;
        const int c0 = (int)(e - ab * VECS) * VEC;
        const i64 a = ab / MID_DST;
        const int b = (int)(ab - a * MID_DST);
        const bool in_src = a < rows_src && b < MID_SRC;
        const T* s = src + (a * MID_SRC + b) * C_SRC;
        union
        {
            T v[VEC];
            uint4 u4;
            uint2 u2;
        } out;
#pragma unroll
        for(int i = 0; i < VEC; ++i)
            out.v[i] = in_src && c0 + i < C_SRC ? s[c0 + i] : T(0);
        T* d = dst + ab * C_DST + c0;
        if(BYTES == 16)
            *reinterpret_cast<uint4*>(d) = out.u4;
        else if(BYTES == 8)
            *reinterpret_cast<uint2*>(d) = out.u2;
        else
#pragma unroll
            for(int i = 0; i < VEC; ++i)
                d[i] = out.v[i];
    }
}

#endif
