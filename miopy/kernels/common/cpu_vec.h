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
/* fp16: PoCL's vload_half8 / vstore_half8_rte load and store a <8 x half> claiming 16-byte
   alignment, which an element-aligned global address need not have (a compiler may then emit an
   aligned move, which faults). Here the 16 bytes move as ushort8 (element alignment). Loads
   convert by integer operations on float8 (half8_bits_to_float8, common/miopy_types.h: a ReLU
   over 1.6 M fp16 values took 0.7-0.9 ms with it, 4.5-8.5 ms through vload_half8 of a private
   vector, under load; a one-move unaligned ushort8 load into vload_half8 of a private vector,
   which LLVM folds into vcvtph2ps, measured 4-5x slower than this in a ReLU too). Stores convert
   by vstore_half8_rte into a private vector (faster than the integer rounding) and store it as
   one unaligned 16-byte move of the miopy_ushort8_u type below, which LLVM folds into one
   vcvtps2ph to memory: vstore8 of a ushort8 had stored the eight halves one by one (8 extracts
   and 8 stores; fp16 ReLU forward 0.87-0.90 -> 0.47-0.53 ms of CPU a call, the fp16 channels-last
   within-channel LRN about a tenth of its time). bf16: element casts (PoCL's convert_uint8 /
   convert_ushort8 are slow). */
/* ushort8 at element (2-byte) alignment: an under-aligned typedef (clang lowers the alignment),
   so the compiler emits an unaligned move */
typedef ushort8 __attribute__((aligned(2))) miopy_ushort8_u;

DEVICE_FN float8 load_f8(const GLOBAL data_t* p, i64 off)
{
#if MIOPY_DTYPE == 0
    return vload8(0, p + off);
#elif MIOPY_DTYPE == 1
    return half8_bits_to_float8(vload8(0, (const GLOBAL ushort*)(p + off)));
#else
    const ushort8 h = vload8(0, p + off);
    const uint8 u = (uint8)((uint)h.s0, (uint)h.s1, (uint)h.s2, (uint)h.s3, (uint)h.s4, (uint)h.s5,
                            (uint)h.s6, (uint)h.s7);
    return as_float8(u << 16);
#endif
}

DEVICE_FN void store_f8(GLOBAL data_t* p, i64 off, float8 v)
{
#if MIOPY_DTYPE == 0
    vstore8(v, 0, p + off);
#elif MIOPY_DTYPE == 1 /* round to nearest even */
    ushort8 h;
    vstore_half8_rte(v, 0, (half*)&h);
    *(GLOBAL miopy_ushort8_u*)(p + off) = h;
#else
    const uint8 u = as_uint8(v);
    const uint8 rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    const int8 is_nan = ((u & 0x7f800000u) == 0x7f800000u) & ((u & 0x007fffffu) != 0u);
    const uint8 r = select(rounded, (uint8)0x7fc0u, as_uint8(is_nan));
    *(GLOBAL miopy_ushort8_u*)(p + off) = (ushort8)((ushort)r.s0, (ushort)r.s1, (ushort)r.s2, (ushort)r.s3,
                                                   (ushort)r.s4, (ushort)r.s5, (ushort)r.s6, (ushort)r.s7);
#endif
}

/* load_f8 for kernels whose work items loop over long runs (batch norm, layer and group norm):
   fp16 on x86 devices with F16C (PoCL defines __F16C__ for them) as one unaligned 16-byte move
   and one vcvtph2ps through clang's builtin, where load_f8's integer conversion takes about ten
   vector operations (most of a 16-bit batch norm's time); exact for every half (vcvtph2ps sets
   the quiet bit of a signalling NaN). Not in load_f8 itself: in kernels that PoCL vectorises
   across work items (ReLU) the builtin stopped that (8x slower), in the softmax rows 2x slower.
   Other types and devices: load_f8. */
#if MIOPY_DTYPE == 1 && defined(__F16C__)
typedef short miopy_v8hi __attribute__((vector_size(16)));
typedef float miopy_v8sf __attribute__((vector_size(32)));
typedef union
{
    ushort8 u;
    miopy_v8hi h;
} miopy_h8_bits;
typedef union
{
    miopy_v8sf v;
    float8 f;
} miopy_f8_bits;

DEVICE_FN float8 load_f8_loop(const GLOBAL data_t* p, i64 off)
{
    miopy_h8_bits h;
    h.u = *(const GLOBAL miopy_ushort8_u*)(p + off);
    miopy_f8_bits r;
    r.v = __builtin_ia32_vcvtph2ps256(h.h);
    return r.f;
}
#else
#define load_f8_loop load_f8
#endif

/* 2^t in float8 without PoCL's exp2 (~1 ns an element) or convert_* (slow there): t = n + f,
   |f| <= 1/2, 2^f by its Taylor series to f^7 (truncation < 6e-9; within ~1.2 ulp over the range),
   n added to the exponent through the 1.5 * 2^23 bias. No subnormal results: t below -126 gives
   about 2^-126 (-inf gives 0, NaN stays NaN). t <= 128. */
DEVICE_FN float8 exp2_f8_degree(float8 t, int degree)
{
    const float8 zero = select((float8)(1.0f), (float8)(0.0f), isinf(t) & (t < 0.0f));
    const float8 t0 = t;
    t = select(t, (float8)(-126.0f), t < -126.0f);
    const float8 big = t + 0x1.8p23f; /* n in the low bits */
    const float8 f = t - (big - 0x1.8p23f);
    float8 p = 1.3333558e-3f;
    if(degree > 5) /* a constant once inlined */
        p = (1.5252734e-5f * f + 1.5403530e-4f) * f + p;
    p = p * f + 9.6181291e-3f;
    p = p * f + 5.5504109e-2f;
    p = p * f + 2.4022651e-1f;
    p = p * f + 6.9314718e-1f;
    p = p * f + 1.0f;
    const float8 r = as_float8(as_int8(p) + ((as_int8(big) - 0x4b400000) << 23)) * zero;
    return select(r, t0, isnan(t0));
}

DEVICE_FN float8 exp2_f8(float8 t)
{
    return exp2_f8_degree(t, 7);
}

/* for results stored as fp16 or bf16 (their rounding: 4.9e-4, 3.9e-3): the series to f^5,
   relative error under 3e-6 */
DEVICE_FN float8 exp2_f8_16(float8 t)
{
    return exp2_f8_degree(t, 5);
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
