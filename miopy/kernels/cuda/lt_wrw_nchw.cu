/* The data movement around GemmLtWrw1x1Nchw's cuBLASLt products (fp32 only).

   permute_rows_f32: src holds n blocks of c rows of p values ([N][C][P], NCHW); dst (from
   dst_off) gets them as [C][N][P], so that (image, position) is one index of stride 1.

   batch_sum_f32: out[i] = sum over s < count of src[src_off + s * total + i]: the fp32 partial
   results of a batched product (one per image or per reduction slice) summed into one.

   Both move four values per thread where the sizes and pointers allow 16-byte accesses. */
#include "common/miopy_types.h"

DEVICE_FN bool aligned16(const void* p)
{
    return (reinterpret_cast<u64>(p) & 15) == 0;
}

KERNEL void permute_rows_f32(const float* RESTRICT src, float* RESTRICT dst, i64 dst_off, int n, int c, int p)
{
    dst += dst_off;
    const i64 step = GLOBAL_SIZE0;
    if((p & 3) == 0 && aligned16(src) && aligned16(dst))
    {
        const unsigned q = (unsigned)p >> 2;
        const i64 total = (i64)n * c * q;
        const float4* s4 = reinterpret_cast<const float4*>(src);
        float4* d4 = reinterpret_cast<float4*>(dst);
        for(i64 i = GLOBAL_ID0; i < total; i += step)
        {
            const i64 row = i / q;
            const i64 j = i - row * q;
            const i64 ni = row / c;
            const i64 ci = row - ni * c;
            d4[(ci * n + ni) * q + j] = s4[i];
        }
        return;
    }
    const i64 total = (i64)n * c * p;
    for(i64 i = GLOBAL_ID0; i < total; i += step)
    {
        const i64 row = i / p;
        const i64 j = i - row * p;
        const i64 ni = row / c;
        const i64 ci = row - ni * c;
        dst[(ci * n + ni) * p + j] = src[i];
    }
}

KERNEL void batch_sum_f32(const float* RESTRICT src, i64 src_off, float* RESTRICT out, i64 total, int count)
{
    src += src_off;
    const i64 step = GLOBAL_SIZE0;
    if((total & 3) == 0 && aligned16(out) && aligned16(src))
    {
        const i64 quads = total >> 2;
        const float4* s4 = reinterpret_cast<const float4*>(src);
        for(i64 q = GLOBAL_ID0; q < quads; q += step)
        {
            float4 acc = s4[q];
            for(int s = 1; s < count; ++s)
            {
                const float4 v = s4[s * quads + q];
                acc.x += v.x, acc.y += v.y, acc.z += v.z, acc.w += v.w;
            }
            reinterpret_cast<float4*>(out)[q] = acc;
        }
        return;
    }
    for(i64 i = GLOBAL_ID0; i < total; i += step)
    {
        float acc = src[i];
        for(int s = 1; s < count; ++s)
            acc += src[s * total + i];
        out[i] = acc;
    }
}
