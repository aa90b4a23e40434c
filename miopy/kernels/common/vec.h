/* 16-byte vector access: VEC elements at once (4 fp32, or 8 fp16 / bf16), converted to and from
   fp32. ``off`` is the element offset of the first element; on CUDA the address must be 16-byte
   aligned (ALIGNED16 checks a base pointer; offsets stay aligned when they are multiples of VEC).
   On OpenCL element alignment is enough. */
#ifndef MIOPY_VEC_H
#define MIOPY_VEC_H
#include "common/miopy_types.h"

#if MIOPY_DTYPE == 0
#define VEC 4
#else
#define VEC 8
#endif

#ifdef __OPENCL_VERSION__
#define ALIGNED16(p) 1
#define UNROLL
#define F_EXP exp
#define F_EXPM1 expm1
#define F_LOG1P log1p
#define F_TANH tanh
#define F_POW pow
#define F_ABS fabs
#define F_MIN fmin
#define F_MAX fmax

DEVICE_FN void load_vec(const GLOBAL data_t* p, i64 off, float* v)
{
#if MIOPY_DTYPE == 0
    const float4 t = vload4(0, p + off);
    v[0] = t.s0; v[1] = t.s1; v[2] = t.s2; v[3] = t.s3;
#elif MIOPY_DTYPE == 1 /* integer conversion (common/miopy_types.h); PoCL's vload_half8 is slow */
    const float8 t = half8_bits_to_float8(vload8(0, (const GLOBAL ushort*)(p + off)));
    v[0] = t.s0; v[1] = t.s1; v[2] = t.s2; v[3] = t.s3;
    v[4] = t.s4; v[5] = t.s5; v[6] = t.s6; v[7] = t.s7;
#else
    const ushort8 t = vload8(0, p + off);
    v[0] = bf16_to_float(t.s0); v[1] = bf16_to_float(t.s1);
    v[2] = bf16_to_float(t.s2); v[3] = bf16_to_float(t.s3);
    v[4] = bf16_to_float(t.s4); v[5] = bf16_to_float(t.s5);
    v[6] = bf16_to_float(t.s6); v[7] = bf16_to_float(t.s7);
#endif
}

DEVICE_FN void store_vec(GLOBAL data_t* p, i64 off, const float* v)
{
#if MIOPY_DTYPE == 0
    vstore4((float4)(v[0], v[1], v[2], v[3]), 0, p + off);
#elif MIOPY_DTYPE == 1 /* as load_vec */
    ushort8 h;
    vstore_half8_rte((float8)(v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]), 0, (half*)&h);
    vstore8(h, 0, (GLOBAL ushort*)(p + off));
#else
    vstore8((ushort8)(float_to_bf16(v[0]), float_to_bf16(v[1]), float_to_bf16(v[2]),
                      float_to_bf16(v[3]), float_to_bf16(v[4]), float_to_bf16(v[5]),
                      float_to_bf16(v[6]), float_to_bf16(v[7])),
            0, p + off);
#endif
}

#else /* CUDA */
#define ALIGNED16(p) ((((u64)(p)) & 15ull) == 0)
#define UNROLL _Pragma("unroll")
#define F_EXP expf
#define F_EXPM1 expm1f
#define F_LOG1P log1pf
#define F_TANH tanhf
#define F_POW powf
#define F_ABS fabsf
#define F_MIN fminf
#define F_MAX fmaxf

/* The cache hints of the 16-byte accesses (PTX ISA 7.4, sm_80 and later for the L2 prefetch
   sizes), chosen per kernel by defining them:
   VEC_LD_HINT 0 ld.global.nc (__ldg, the default), 1 ld.global.cs (__ldcs: evict first),
               2 ld.global.nc.L1::no_allocate.L2::256B, 3 ld.global.nc.L2::256B, 4 a plain load;
   VEC_ST_HINT 0 a plain store (the default), 1 st.global.cs (__stcs: evict first),
               2 st.global.L1::no_allocate. */
#ifndef VEC_LD_HINT
#define VEC_LD_HINT 0
#endif
#ifndef VEC_ST_HINT
#define VEC_ST_HINT 0
#endif

DEVICE_FN uint4 vec_ld16(const void* p)
{
#if VEC_LD_HINT == 1
    return __ldcs((const uint4*)p);
#elif VEC_LD_HINT == 2 || VEC_LD_HINT == 3
    uint4 t;
#if VEC_LD_HINT == 2
    asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(t.x), "=r"(t.y), "=r"(t.z), "=r"(t.w)
        : "l"(p));
#else
    asm("ld.global.nc.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(t.x), "=r"(t.y), "=r"(t.z), "=r"(t.w)
        : "l"(p));
#endif
    return t;
#elif VEC_LD_HINT == 4
    return *(const uint4*)p;
#else
    return __ldg((const uint4*)p);
#endif
}

DEVICE_FN void vec_st16(void* p, uint4 v)
{
#if VEC_ST_HINT == 1
    __stcs((uint4*)p, v);
#elif VEC_ST_HINT == 2
    asm volatile("st.global.L1::no_allocate.v4.u32 [%0], {%1, %2, %3, %4};"
                 :
                 : "l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
                 : "memory");
#else
    *(uint4*)p = v;
#endif
}

DEVICE_FN void load_vec(const data_t* p, i64 off, float* v)
{
    const uint4 t = vec_ld16(p + off);
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

DEVICE_FN void store_vec(data_t* p, i64 off, const float* v)
{
#if MIOPY_DTYPE == 0
    vec_st16(p + off, make_uint4(__float_as_uint(v[0]), __float_as_uint(v[1]), __float_as_uint(v[2]),
                                 __float_as_uint(v[3])));
#else
    u32 w[4];
    UNROLL
    for(int k = 0; k < 4; ++k)
    {
#if MIOPY_DTYPE == 1
        w[k] = (u32)__half_as_ushort(__float2half_rn(v[2 * k])) |
               ((u32)__half_as_ushort(__float2half_rn(v[2 * k + 1])) << 16);
#else
        w[k] = (u32)float_to_bf16(v[2 * k]) | ((u32)float_to_bf16(v[2 * k + 1]) << 16);
#endif
    }
    vec_st16(p + off, make_uint4(w[0], w[1], w[2], w[3]));
#endif
}
#endif

#endif
