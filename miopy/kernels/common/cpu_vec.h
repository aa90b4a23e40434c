/* OpenCL CPU devices (PoCL): eight elements at a time in explicit float8 vectors.

   PoCL vectorises a kernel across work items only when the body has no inner loop and the
   compiler does not first pack scalar work into short vectors of its own (two fp16 loads of one
   element each already stop it); kernels that walk a row, a window or a column in an inner loop
   run scalar. Kernels for the CPU therefore give each work item a run of elements and compute on
   float8 values, whose math builtins (exp, log2, exp2, fmax...) PoCL vectorises.
   load_f8/store_f8 convert the stored type (fp32, fp16, bf16) to and from float8; offsets need
   element alignment only. Not for fp64 data (MIOPY_DTYPE 3). */
#ifndef MIOPY_CPU_VEC_H
#define MIOPY_CPU_VEC_H
#include "common/miopy_types.h"

#if defined(__OPENCL_VERSION__) && MIOPY_DTYPE != 3
DEVICE_FN float8 load_f8(const GLOBAL data_t* p, i64 off)
{
#if MIOPY_DTYPE == 0
    return vload8(0, p + off);
#elif MIOPY_DTYPE == 1 /* PoCL's vload_half8 faults on addresses not 16-byte aligned */
    if((((ulong)(p + off)) & 15) == 0)
        return vload_half8(0, p + off);
    const uint8 u = convert_uint8(vload8(0, (const GLOBAL ushort*)(p + off)));
    const uint8 em = u & 0x7fffu, sign = (u & 0x8000u) << 16;
    const uint8 normal = (em << 13) + 0x38000000u; /* rebias 15 -> 127 */
    /* subnormal m * 2^-24 as (1 + m / 1024) * 2^-14 - 2^-14, exact */
    const uint8 subnormal = as_uint8(as_float8(normal + 0x00800000u) - 0x1.0p-14f);
    const uint8 special = (em << 13) | 0x7f800000u; /* inf, NaN */
    uint8 r = select(normal, subnormal, as_uint8(em < 0x400u));
    r = select(r, special, as_uint8(em >= 0x7c00u));
    return as_float8(r | sign);
#else
    return as_float8(convert_uint8(vload8(0, p + off)) << 16);
#endif
}

DEVICE_FN void store_f8(GLOBAL data_t* p, i64 off, float8 v)
{
#if MIOPY_DTYPE == 0
    vstore8(v, 0, p + off);
#elif MIOPY_DTYPE == 1 /* round to nearest even, as vstore_half_rte (alignment: see load_f8) */
    if((((ulong)(p + off)) & 15) == 0)
    {
        vstore_half8_rte(v, 0, p + off);
        return;
    }
    const uint8 u = as_uint8(v), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    /* below 2^-14: adding 0.5 leaves the subnormal's mantissa, rounded, in the low bits */
    const uint8 subnormal = as_uint8(as_float8(a) + 0.5f) - 0x3f000000u;
    const uint8 normal = (a + 0xc8000fffu + ((a >> 13) & 1u)) >> 13; /* rebias, round */
    uint8 r = select(normal, subnormal, as_uint8(a < 0x38800000u));
    r = select(r, (uint8)0x7c00u, as_uint8(a >= 0x477ff000u)); /* overflow to inf */
    r = select(r, (uint8)0x7e00u, as_uint8(a > 0x7f800000u));  /* NaN */
    r |= sign;
    /* element casts: PoCL's convert_ushort8 is slow */
    vstore8((ushort8)((ushort)r.s0, (ushort)r.s1, (ushort)r.s2, (ushort)r.s3, (ushort)r.s4, (ushort)r.s5,
                      (ushort)r.s6, (ushort)r.s7),
            0, (GLOBAL ushort*)(p + off));
#else
    const uint8 u = as_uint8(v);
    const uint8 rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    const uint8 nan = (uint8)0x7fc0u;
    const int8 is_nan = ((u & 0x7f800000u) == 0x7f800000u) & ((u & 0x007fffffu) != 0u);
    vstore8(convert_ushort8(select(rounded, nan, as_uint8(is_nan))), 0, p + off);
#endif
}

/* 2^t in float8 without PoCL's exp2 (~1 ns an element) or convert_* (slow there): t = n + f,
   |f| <= 1/2, 2^f by its Taylor series to f^7 (truncation < 6e-9; within ~1.2 ulp over the range),
   n added to the exponent through the 1.5 * 2^23 bias. No subnormal results: t below -126 gives
   about 2^-126 (-inf gives 0, NaN stays NaN). t <= 128. */
DEVICE_FN float8 exp2_f8(float8 t)
{
    const float8 zero = select((float8)(1.0f), (float8)(0.0f), isinf(t) & (t < 0.0f));
    const float8 t0 = t;
    t = select(t, (float8)(-126.0f), t < -126.0f);
    const float8 big = t + 0x1.8p23f; /* n in the low bits */
    const float8 f = t - (big - 0x1.8p23f);
    float8 p = 1.5252734e-5f;
    p = p * f + 1.5403530e-4f;
    p = p * f + 1.3333558e-3f;
    p = p * f + 9.6181291e-3f;
    p = p * f + 5.5504109e-2f;
    p = p * f + 2.4022651e-1f;
    p = p * f + 6.9314718e-1f;
    p = p * f + 1.0f;
    const float8 r = as_float8(as_int8(p) + ((as_int8(big) - 0x4b400000) << 23)) * zero;
    return select(r, t0, isnan(t0));
}

DEVICE_FN float hmax8(float8 v)
{
    const float4 a = fmax(v.lo, v.hi);
    const float2 b = fmax(a.lo, a.hi);
    return fmax(b.x, b.y);
}

DEVICE_FN float hsum8(float8 v)
{
    const float4 a = v.lo + v.hi;
    const float2 b = a.lo + a.hi;
    return b.x + b.y;
}
#endif

#endif
