/* Shared by the OpenCL (.cl) and CUDA (.cu) kernels: qualifiers, indexing and the storage types.
   Data are stored as fp32, fp16 or bf16 (MIOPY_DTYPE 0/1/2) and computed in fp32. */
#ifndef MIOPY_TYPES_H
#define MIOPY_TYPES_H

#ifndef MIOPY_DTYPE
#define MIOPY_DTYPE 0
#endif

#ifdef __OPENCL_VERSION__
#define KERNEL __kernel
#define GLOBAL __global
#define LOCAL __local
#define RESTRICT restrict
#define DEVICE_FN static inline
#define GLOBAL_ID0 ((long)get_global_id(0))
#define GLOBAL_SIZE0 ((long)get_global_size(0))
#define LOCAL_ID0 ((int)get_local_id(0))
#define LOCAL_ID1 ((int)get_local_id(1))
#define GROUP_ID0 ((int)get_group_id(0))
#define GROUP_ID1 ((int)get_group_id(1))
#define GROUP_ID2 ((int)get_group_id(2))
#define BARRIER() barrier(CLK_LOCAL_MEM_FENCE)
typedef long i64;
typedef ulong u64;
typedef uint u32;
typedef ushort u16;
#else /* CUDA */
#define KERNEL extern "C" __global__
#define GLOBAL
#define LOCAL __shared__
#define RESTRICT __restrict__
#define DEVICE_FN static __device__ __forceinline__
#define GLOBAL_ID0 ((long long)blockIdx.x * blockDim.x + threadIdx.x)
#define GLOBAL_SIZE0 ((long long)gridDim.x * blockDim.x)
#define LOCAL_ID0 ((int)threadIdx.x)
#define LOCAL_ID1 ((int)threadIdx.y)
#define GROUP_ID0 ((int)blockIdx.x)
#define GROUP_ID1 ((int)blockIdx.y)
#define GROUP_ID2 ((int)blockIdx.z)
#define BARRIER() __syncthreads()
#include <cuda_fp16.h>
typedef long long i64;
typedef unsigned long long u64;
typedef unsigned int u32;
typedef unsigned short u16;
#endif

/* data_t: the stored type; LOAD/STORE convert to and from fp32. */
#if MIOPY_DTYPE == 0
typedef float data_t;
#define LOAD(p, i) ((p)[i])
#define STORE(p, i, v) ((p)[i] = (v))
#elif MIOPY_DTYPE == 1
#ifdef __OPENCL_VERSION__
typedef half data_t;
/* fp16 <-> fp32 by integer operations, exact (round to nearest even on the way back), instead of
   vload_half / vstore_half_rte: PoCL calls those one element at a time, and its compiler then
   packs two identical conversion chains of one work item into a short vector, which stops it from
   vectorising across work items (5-10x slower kernels). LOAD therefore alternates between two
   different but equal conversions (__COUNTER__ parity), which it leaves alone. */
DEVICE_FN float half_bits_to_float_a(ushort h)
{
    const uint u = h, em = u & 0x7fffu;
    const uint normal = (em << 13) + 0x38000000u; /* rebias 15 -> 127 */
    /* subnormal m 2^-24 as (1 + m / 1024) 2^-14 - 2^-14 */
    const uint subnormal = as_uint(as_float(normal + 0x00800000u) - 0x1.0p-14f);
    const uint special = (em << 13) | 0x7f800000u; /* inf, NaN */
    uint r = select(normal, subnormal, (uint)(em < 0x400u));
    r = select(r, special, (uint)(em >= 0x7c00u));
    return as_float(r | ((u & 0x8000u) << 16));
}
DEVICE_FN float half_bits_to_float_b(ushort h)
{
    const uint u = h, em = u & 0x7fffu;
    const float subnormal = (float)(int)em * 0x1.0p-24f;
    const uint r = em < 0x400u ? as_uint(subnormal)
                   : em >= 0x7c00u ? (em << 13) | 0x7f800000u
                                   : (em << 13) + 0x38000000u;
    return as_float(r | ((u & 0x8000u) << 16));
}
DEVICE_FN ushort float_to_half_bits(float f)
{
    const uint u = as_uint(f), a = u & 0x7fffffffu;
    /* below 2^-14: adding 0.5 leaves the subnormal's mantissa, rounded, in the low bits */
    const uint subnormal = as_uint(as_float(a) + 0.5f) - 0x3f000000u;
    const uint normal = (a + 0xc8000fffu + ((a >> 13) & 1u)) >> 13; /* rebias, round */
    uint r = select(normal, subnormal, (uint)(a < 0x38800000u));
    r = select(r, 0x7c00u, (uint)(a >= 0x477ff000u)); /* overflow to inf */
    r = select(r, 0x7e00u, (uint)(a > 0x7f800000u));  /* NaN */
    return (ushort)(r | ((u >> 16) & 0x8000u));
}
/* eight at a time (load_f8, load_vec): element casts to uint8, the exponent rebiased by a multiply
   by 2^112 (which also normalises subnormals), inf / NaN given the full exponent; exact for all
   65536 inputs. PoCL's vload_half8 (through a private vector, to avoid its 16-byte alignment
   claim) ran 5-10x slower than this in a streaming kernel. */
DEVICE_FN float8 half8_bits_to_float8(ushort8 h)
{
    const uint8 u = (uint8)((uint)h.s0, (uint)h.s1, (uint)h.s2, (uint)h.s3, (uint)h.s4, (uint)h.s5, (uint)h.s6,
                            (uint)h.s7);
    const uint8 em = u & 0x7fffu;
    const uint8 mag = as_uint8(as_float8(em << 13) * 0x1.0p112f);
    const uint8 r = mag | select((uint8)(0u), (uint8)(0x7f800000u), em >= 0x7c00u);
    return as_float8(r | ((u & 0x8000u) << 16));
}
#define LOAD(p, i)                                                                                 \
    ((__COUNTER__ & 1) ? half_bits_to_float_a(((const GLOBAL ushort*)(p))[i])                      \
                       : half_bits_to_float_b(((const GLOBAL ushort*)(p))[i]))
#define STORE(p, i, v) (((GLOBAL ushort*)(p))[i] = float_to_half_bits(v))
#else
typedef __half data_t;
#define LOAD(p, i) __half2float((p)[i])
#define STORE(p, i, v) ((p)[i] = __float2half_rn(v))
#endif
#elif MIOPY_DTYPE == 3 /* fp64 (reductions); computed in double */
#ifdef __OPENCL_VERSION__
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif
typedef double data_t;
#define LOAD(p, i) ((p)[i])
#define STORE(p, i, v) ((p)[i] = (v))
#else
typedef u16 data_t;
DEVICE_FN float bf16_to_float(u16 v) {
#ifdef __OPENCL_VERSION__
    return as_float(((u32)v) << 16);
#else
    return __uint_as_float(((u32)v) << 16);
#endif
}
DEVICE_FN u16 float_to_bf16(float f) {
#ifdef __OPENCL_VERSION__
    u32 u = as_uint(f);
#else
    u32 u = __float_as_uint(f);
#endif
    if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) return (u16)0x7fc0; /* NaN */
    u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest even */
    return (u16)(u >> 16);
}
#define LOAD(p, i) bf16_to_float((p)[i])
#define STORE(p, i, v) ((p)[i] = float_to_bf16(v))
#endif

/* acc_t: what kernels compute and accumulate in (fp32; fp64 for fp64 data). */
#if MIOPY_DTYPE == 3
typedef double acc_t;
#else
typedef float acc_t;
#endif

#endif
