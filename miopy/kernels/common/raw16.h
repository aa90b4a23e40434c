/* CUDA: a raw 16-byte word of VEC stored elements (common/vec.h's vec_ld16) -> VEC fp32 values.
   Kernels keep loads raw until all of a batch are issued: 4 registers a load instead of VEC. */
#ifndef MIOPY_RAW16_H
#define MIOPY_RAW16_H
#include "common/vec.h"
#ifndef __OPENCL_VERSION__
/* The 16 raw bytes from element `off` of `p` (VEC elements of the stored type): one vector load
   where `va` says that address is 16-byte aligned, else 4-byte or 2-byte loads. */
DEVICE_FN uint4 raw16_ld(const data_t* p, i64 off, int va)
{
    if(va)
        return vec_ld16(p + off);
#if MIOPY_DTYPE == 0
    const u32* q = (const u32*)(p + off);
    return make_uint4(q[0], q[1], q[2], q[3]);
#else
    const u16* q = (const u16*)(p + off);
    return make_uint4((u32)q[0] | ((u32)q[1] << 16), (u32)q[2] | ((u32)q[3] << 16), (u32)q[4] | ((u32)q[5] << 16),
                      (u32)q[6] | ((u32)q[7] << 16));
#endif
}

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
