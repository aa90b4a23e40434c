/* Tensor-core building blocks for CUDA kernels (sm_80 and later, sm_90 included): cp.async
   copies into shared memory with zero-fill, the XOR swizzle of 16-byte chunks, ldmatrix and
   mma.sync m16n8k16 (fp16 or bf16 in, fp32 accumulate). CUDA only; no OpenCL counterpart.

   Tiles in shared memory are rows of ROW_CHUNKS 16-byte chunks (8 halves each), with the chunk
   index XORed by bits of the row so that the 8 rows an ldmatrix phase reads, and the rows a warp
   of cp.async writes, land in different banks. */
#ifndef MIOPY_MMA_SM80_H
#define MIOPY_MMA_SM80_H

#include "common/miopy_types.h"

#if MIOPY_DTYPE == 2
#include <cuda_bf16.h>
#define MMA_TYPE "bf16"
#else
#define MMA_TYPE "f16"
#endif

/* Offset in 16-byte units of chunk `chunk` of row `row` in a tile of ROW_CHUNKS (4 or a multiple
   of 8) per row. 8 or more chunks (128 bytes or more): the low 3 bits of the chunk XOR row % 8.
   4 chunks (64 bytes, two rows per 128-byte line): XOR with (row / 2) % 4. Either way any 8
   consecutive rows at one logical chunk hit 8 distinct 16-byte bank groups. */
template <int ROW_CHUNKS>
DEVICE_FN int swizzle(int row, int chunk)
{
    static_assert(ROW_CHUNKS == 4 || ROW_CHUNKS % 8 == 0, "rows of 4 or a multiple of 8 chunks");
    if(ROW_CHUNKS % 8 == 0)
        return row * ROW_CHUNKS + (chunk ^ (row & 7));
    return row * 4 + (chunk ^ ((row >> 1) & 3));
}

DEVICE_FN u32 smem_addr(const void* p) { return (u32)__cvta_generic_to_shared(p); }

/* 16 bytes global -> shared, through L2 only; src_bytes = 0 writes 16 zero bytes (no read). */
DEVICE_FN void cp_async_16(u32 dst, const void* src, bool valid)
{
    const int src_bytes = valid ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}
DEVICE_FN void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
DEVICE_FN void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

/* Four 8x8 matrices of 16-bit elements; lane i gives the row address of matrix i / 8. */
DEVICE_FN void ldmatrix_x4(u32 addr, u32& r0, u32& r1, u32& r2, u32& r3)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr));
}

/* The same, transposed: lane i gets the column-wise elements (tiles stored k-major, e.g. an
   operand whose rows are the reduction index). */
DEVICE_FN void ldmatrix_x4_trans(u32 addr, u32& r0, u32& r1, u32& r2, u32& r3)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr));
}

/* D (16x8, fp32) += A (16x16, row) * B (16x8, col). */
DEVICE_FN void mma_16816(float* d, const u32* a, const u32* b)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." MMA_TYPE "." MMA_TYPE ".f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

/* Two fp32 values rounded to two adjacent 16-bit elements (round to nearest even; one cvt
   instruction for both, NaN stays NaN). */
DEVICE_FN u32 pack2(float lo, float hi)
{
#if MIOPY_DTYPE == 2
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<u32*>(&h);
#else
    __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<u32*>(&h);
#endif
}

#endif
