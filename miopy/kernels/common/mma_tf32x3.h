/* fp32 GEMM on tensor cores with fp32 accuracy (3xTF32), for CUDA kernels on sm_80 and later.

   Each fp32 operand a is split into two TF32 numbers, big = tf32(a) and small = tf32(a - big)
   (a - big is exact in fp32), so a = big + small to about 22 significant bits. A product is
   then big_a * big_b + big_a * small_b + small_a * big_b (small_a * small_b, below 2^-22 of the
   product, is dropped): three mma.sync m16n8k8 TF32 instructions, the two small terms first,
   summed into a fresh fragment per k-step that fp32 adds then carry into the accumulator.

   Fragments come from shared-memory tiles whose rows hold the reduction index contiguously
   (16-byte chunks of 4 floats, swizzled by common/mma_sm80.h's swizzle<RC>): ldmatrix of b16
   8x8 matrices reads 8 rows of 4 floats, lane l getting float l % 4 of row l / 4, which is the
   layout of the m16n8k8 TF32 A and B fragments. One k-step is 8 floats (2 chunks). */
#ifndef MIOPY_MMA_TF32X3_H
#define MIOPY_MMA_TF32X3_H

#include "common/mma_sm80.h"

/* a -> big (tf32, round to nearest, ties away) and small = tf32(a - big). */
DEVICE_FN void tf32_split(u32 a, u32& big, u32& small)
{
    u32 hi, lo;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(hi) : "f"(__uint_as_float(a)));
    const float rest = __uint_as_float(a) - __uint_as_float(hi);
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(lo) : "f"(rest));
    big = hi;
    small = lo;
}

/* D (16x8, fp32) += A (16x8, row, tf32) * B (8x8, col, tf32). */
DEVICE_FN void mma_1688_tf32(float* d, const u32* a, const u32* b)
{
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

/* A fragments (big and small) of k-step `ks` of the warp's MI m16 row blocks from an m-major
   tile (rows m, RC chunks of the reduction): matrices 0..3 are rows 0-7 / 8-15 of the block at
   the step's first chunk, then the same at its second (a0..a3 of m16n8k8). */
template <int MI, int RC>
DEVICE_FN void frags_a_tf32x3(u32 tile, int wm0, int ks, int lane, u32 (&big)[MI][4], u32 (&small)[MI][4])
{
    const int row = wm0 + (lane & 15), chunk = ks * 2 + (lane >> 4);
#pragma unroll
    for(int i = 0; i < MI; ++i)
    {
        u32 r[4];
        ldmatrix_x4(tile + swizzle<RC>(row + i * 16, chunk) * 16, r[0], r[1], r[2], r[3]);
#pragma unroll
        for(int e = 0; e < 4; ++e)
            tf32_split(r[e], big[i][e], small[i][e]);
    }
}

/* B fragments (big and small) of k-step `ks` of the warp's NI n8 column blocks from an n-major
   tile (rows n, RC chunks of the reduction): one ldmatrix gives b0, b1 of two n8 blocks. */
template <int NI, int RC>
DEVICE_FN void frags_b_tf32x3(u32 tile, int wn0, int ks, int lane, u32 (&big)[NI][2], u32 (&small)[NI][2])
{
    const int row = wn0 + (lane & 7) + ((lane >> 4) << 3), chunk = ks * 2 + ((lane >> 3) & 1);
#pragma unroll
    for(int j = 0; j < NI / 2; ++j)
    {
        u32 r[4];
        ldmatrix_x4(tile + swizzle<RC>(row + j * 16, chunk) * 16, r[0], r[1], r[2], r[3]);
        tf32_split(r[0], big[2 * j][0], small[2 * j][0]);
        tf32_split(r[1], big[2 * j][1], small[2 * j][1]);
        tf32_split(r[2], big[2 * j + 1][0], small[2 * j + 1][0]);
        tf32_split(r[3], big[2 * j + 1][1], small[2 * j + 1][1]);
    }
}

/* acc += A * B over one k-step, 3xTF32. The three products of each 16 x 8 block are summed by
   the tensor core into a fresh fragment that starts at zero, then added to the accumulator with
   ordinary fp32 adds (rounded to nearest): the tensor core's own fp32 accumulation drops the low
   bits of each sum (measured on the H200: summing whole reductions in the MMA accumulator gave
   13x the error of an FFMA loop, growing linearly with the reduction length), so it only ever
   sums 24 products here. */
template <int MI, int NI>
DEVICE_FN void mma_tf32x3(float (&acc)[MI][NI][4], const u32 (&ab)[MI][4], const u32 (&as)[MI][4],
                          const u32 (&bb)[NI][2], const u32 (&bs)[NI][2])
{
#pragma unroll
    for(int i = 0; i < MI; ++i)
#pragma unroll
        for(int j = 0; j < NI; ++j)
        {
            float t[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            mma_1688_tf32(t, as[i], bb[j]);
            mma_1688_tf32(t, ab[i], bs[j]);
            mma_1688_tf32(t, ab[i], bb[j]);
#pragma unroll
            for(int e = 0; e < 4; ++e)
                acc[i][j][e] += t[e];
        }
}

/* The main loop over `nkt` reduction tiles through a STAGES-deep cp.async pipeline:
   load_tile(stage, t) issues the copies of tile t into a stage, step(stage, ks) runs k-step ks
   of a landed stage. Ends with every copy landed and every warp past its last shared-memory
   read (the caller may reuse it). */
template <int STAGES, int KSTEPS, class LoadTile, class Step>
DEVICE_FN void tf32x3_mainloop(int nkt, LoadTile& load_tile, Step& step)
{
    static_assert(STAGES >= 2, "pipeline depth");
#pragma unroll
    for(int s = 0; s < STAGES - 1; ++s)
    {
        if(s < nkt)
            load_tile(s, s);
        cp_async_commit();
    }
    int read_stage = 0;
    int write_stage = STAGES - 1;
    for(int t = 0; t < nkt; ++t)
    {
        cp_async_wait<STAGES - 2>();
        __syncthreads(); /* tile t is in; every warp is done with the stage refilled next */
        if(t + STAGES - 1 < nkt)
            load_tile(write_stage, t + STAGES - 1);
        cp_async_commit();
        write_stage = write_stage == STAGES - 1 ? 0 : write_stage + 1;
#pragma unroll
        for(int ks = 0; ks < KSTEPS; ++ks)
            step(read_stage, ks);
        read_stage = read_stage == STAGES - 1 ? 0 : read_stage + 1;
    }
    cp_async_wait<0>();
    __syncthreads();
}

#endif
