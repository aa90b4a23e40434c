/* tensorop_packed_au (CUDA): tensorop_packed's binary ops over dense a and c for b like c
   (b_kind 0) or b's run innermost (b_kind 3: b_mid a multiple of VEC, e.g. a bias in NHWC), with
   TOP_AU 16-byte vectors of each operand in flight per work item: work-group g takes the
   TOP_AU * blockDim.x vectors from g * TOP_AU * blockDim.x (no grid-stride loop: the host gives
   one work-group per chunk), all loads issued before any arithmetic, kept as raw 16-byte words.
   Tensors not 16-byte aligned and the elements past the last whole vector take a scalar loop.
   Included after common/tensorop.h (tensor_binop, TOP). The host keeps n below 2^31 * VEC. */
#ifndef MIOPY_TENSOROP_AU_H
#define MIOPY_TENSOROP_AU_H
#include "common/raw16.h"
#ifndef TOP_AU
#define TOP_AU 2
#endif

KERNEL void tensorop_packed_au(const data_t* RESTRICT a, const data_t* RESTRICT b, data_t* RESTRICT c, i64 n,
                               i64 b_mid, int b_kind, int op, float alpha1, float alpha2, float beta, int read_c)
{
    const i64 nvec = n / VEC;
    const int bs = (int)blockDim.x;
    const i64 v0 = (i64)blockIdx.x * TOP_AU * bs + threadIdx.x;
    if(!(ALIGNED16(a) && ALIGNED16(b) && ALIGNED16(c)))
    {
        for(int u = 0; u < TOP_AU; ++u)
        {
            const i64 v = v0 + (i64)u * bs;
            for(int e = 0; e < VEC && v < nvec; ++e)
            {
                const i64 i = v * VEC + e;
                const i64 bi = b_kind == 0 ? i : i % b_mid;
                const float r = tensor_binop(alpha1 * LOAD(a, i), alpha2 * LOAD(b, bi), TOP);
                STORE(c, i, read_c ? r + beta * LOAD(c, i) : r);
            }
        }
    }
    else
    {
        uint4 ra[TOP_AU], rb[TOP_AU], rc[TOP_AU];
        UNROLL
        for(int u = 0; u < TOP_AU; ++u)
        {
            const i64 v = v0 + (i64)u * bs;
            if(v < nvec)
            {
                ra[u] = vec_ld16(a + v * VEC);
                rb[u] = vec_ld16(b + (b_kind == 0 ? v * VEC : (v * VEC) % b_mid));
                if(read_c)
                    rc[u] = vec_ld16(c + v * VEC);
            }
        }
        UNROLL
        for(int u = 0; u < TOP_AU; ++u)
        {
            const i64 v = v0 + (i64)u * bs;
            if(v < nvec)
            {
                float av[VEC], bv[VEC], cv[VEC];
                raw16_unpack(ra[u], av);
                raw16_unpack(rb[u], bv);
                if(read_c)
                    raw16_unpack(rc[u], cv);
                UNROLL
                for(int k = 0; k < VEC; ++k)
                {
                    const float r = tensor_binop(alpha1 * av[k], alpha2 * bv[k], TOP);
                    cv[k] = read_c ? r + beta * cv[k] : r;
                }
                store_vec(c, v * VEC, cv);
            }
        }
    }
    if(blockIdx.x == 0) /* the tail past the last whole vector */
        for(i64 i = nvec * VEC + threadIdx.x; i < n; i += bs)
        {
            const i64 bi = b_kind == 0 ? i : i % b_mid;
            const float r = tensor_binop(alpha1 * LOAD(a, i), alpha2 * LOAD(b, bi), TOP);
            STORE(c, i, read_c ? r + beta * LOAD(c, i) : r);
        }
}
#endif
