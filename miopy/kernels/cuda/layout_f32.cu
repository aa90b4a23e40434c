/* fp32 layout changes around the NHWC-only 3xTF32 implicit-GEMM kernels
   (solvers/conv/implicit_gemm_tf32x3.py):

   transpose_f32: `batches` matrices of rows x cols, each packed row-major, to cols x rows
   (NCHW [N][C][HW] -> NHWC [N][HW][C] and back). Blocks of 32 x 8 threads move 32 x 32 tiles
   through shared memory (rows padded by one float: conflict-free both ways); grid x covers the
   columns, y the rows, z the batches.

   filter_repack_f32: a filter of any strides to packed [O][R][S][I] (the GEMM's B operand),
   where output channel o and input channel i are the filter's dimension 0 and 1 (forward) or
   1 and 0 (backward data, with the taps flipped: FLIP). */

// miopy-compile-test: -DMIOPY_DTYPE=0

#include "common/miopy_types.h"

KERNEL void transpose_f32(const float* RESTRICT src, i64 src_off, float* RESTRICT dst, i64 dst_off, int rows,
                          int cols)
{
    __shared__ float tile[32][33];
    const i64 batch = (i64)blockIdx.z * rows * cols;
    const float* s = src + src_off + batch;
    float* d = dst + dst_off + batch;
    const int c0 = blockIdx.x * 32, r0 = blockIdx.y * 32;
    const int tx = threadIdx.x, ty = threadIdx.y;
#pragma unroll
    for(int k = 0; k < 32; k += 8)
    {
        const int r = r0 + ty + k, c = c0 + tx;
        if(r < rows && c < cols)
            tile[ty + k][tx] = s[(i64)r * cols + c];
    }
    __syncthreads();
#pragma unroll
    for(int k = 0; k < 32; k += 8)
    {
        const int c = c0 + ty + k, r = r0 + tx;
        if(r < rows && c < cols)
            d[(i64)c * rows + r] = tile[tx][ty + k];
    }
}

KERNEL void filter_repack_f32(const float* RESTRICT src, float* RESTRICT dst, i64 dst_off, int o_n, int i_n,
                              int r_n, int s_n, i64 o_stride, i64 i_stride, i64 r_stride, i64 s_stride, int flip)
{
    const i64 e = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if(e >= (i64)o_n * r_n * s_n * i_n)
        return;
    const int i = (int)(e % i_n);
    const i64 rest = e / i_n;
    const int s = (int)(rest % s_n);
    const int r = (int)(rest / s_n % r_n);
    const int o = (int)(rest / ((i64)s_n * r_n));
    const int rr = flip ? r_n - 1 - r : r;
    const int ss = flip ? s_n - 1 - s : s;
    dst[dst_off + e] = src[o * o_stride + i * i_stride + rr * r_stride + ss * s_stride];
}
