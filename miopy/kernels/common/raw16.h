/* CUDA: a raw 16-byte word of VEC stored elements (common/vec.h's vec_ld16) -> VEC fp32 values.
   Kernels keep loads raw until all of a batch are issued: 4 registers a load instead of VEC. */
#ifndef MIOPY_RAW16_H
#define MIOPY_RAW16_H
#include "common/vec.h"
#ifndef __OPENCL_VERSION__
DEVICE_FN void raw16_unpack(uint4 t, float* v)
{
#if MIOPY_DTYPE == 0
    v[0] = __uint_as_float(t.x); v[1] = __uint_as_float(t.y);
    v[2] = __uint_as_float(t.z); v[3] = __uint_as_float(t.w);
#else
    const u32 w[4] = {t.x, t.y, t.z, t.w};
    UNROLL
    for(int k = 0; k < 4; ++k)
    {
#if MIOPY_DTYPE == 1
        v[2 * k] = __half2float(__ushort_as_half((unsigned short)(w[k] & 0xffffu)));
        v[2 * k + 1] = __half2float(__ushort_as_half((unsigned short)(w[k] >> 16)));
#else
        v[2 * k] = __uint_as_float(w[k] << 16);
        v[2 * k + 1] = __uint_as_float(w[k] & 0xffff0000u);
#endif
    }
#endif
}
#endif
#endif
