/* Tensor operations: c = op(alpha1 * a, alpha2 * b) + beta * c (op: 0 add, 1 mul, 2 min, 3 max;
   miopenTensorOp_t), b broadcast; set (op 4: y = value) and scale (op 5: y = value * y).
   Computed in fp32. c is read only when read_c is set (beta != 0).

   tensorop_packed: a and c dense with the same strides (one flat array). b's element for flat
   index i is ((i / b_inner) % b_mid): b varies over one run of c's memory-order dimensions (b_mid
   elements, packed), constant inside b_inner (b_inner = 1, b_mid = n: b is like c; b_mid = 1: b is
   one value). b_kind: 0 b like c (vector loads), 1 b constant over each vector (b_inner a multiple
   of VEC), 3 b's run innermost (b_inner 1, b_mid a multiple of VEC: a vector load at i % b_mid,
   e.g. a bias in NHWC), 2 any. 16-byte vectors, grid-stride, scalar tail.
   tensorop_strided: any lens and strides (logical N,C,D,H,W; b's strides 0 where it broadcasts).
   tensor_set_packed / tensor_set_strided: set and scale. */
#include "common/vec.h"

#ifdef TENSOROP_OP
#define TOP TENSOROP_OP
#else
#define TOP op
#endif

DEVICE_FN float tensor_binop(float a, float b, int op)
{
    switch(op)
    {
    case 0: return a + b;
    case 1: return a * b;
    case 2: return F_MIN(a, b);
    default: return F_MAX(a, b);
    }
}

DEVICE_FN i64 tensorop_bidx(i64 i, i64 inner, i64 mid)
{
    if(i < 4294967296LL && inner < 4294967296LL && mid < 4294967296LL)
        return (i64)(((u32)i / (u32)inner) % (u32)mid);
    return (i / inner) % mid;
}

KERNEL void tensorop_packed(const GLOBAL data_t* RESTRICT a, const GLOBAL data_t* RESTRICT b,
                            GLOBAL data_t* RESTRICT c, i64 n, i64 b_inner, i64 b_mid, int b_kind, int op,
                            float alpha1, float alpha2, float beta, int read_c)
{
    i64 start = 0;
    if(ALIGNED16(a) && ALIGNED16(c) && ((b_kind != 0 && b_kind != 3) || ALIGNED16(b)))
    {
        const i64 nvec = n / VEC;
        for(i64 v = GLOBAL_ID0; v < nvec; v += GLOBAL_SIZE0)
        {
            const i64 i0 = v * VEC;
            float av[VEC], bv[VEC], cv[VEC];
            load_vec(a, i0, av);
            if(b_kind == 0)
                load_vec(b, i0, bv);
            else if(b_kind == 3)
                load_vec(b, (i64)((u64)i0 % (u64)b_mid), bv);
            else if(b_kind == 1)
            {
                const float bs = LOAD(b, tensorop_bidx(i0, b_inner, b_mid));
                UNROLL
                for(int k = 0; k < VEC; ++k)
                    bv[k] = bs;
            }
            else
            {
                UNROLL
                for(int k = 0; k < VEC; ++k)
                    bv[k] = LOAD(b, tensorop_bidx(i0 + k, b_inner, b_mid));
            }
            if(read_c)
                load_vec(c, i0, cv);
            UNROLL
            for(int k = 0; k < VEC; ++k)
            {
                const float r = tensor_binop(alpha1 * av[k], alpha2 * bv[k], TOP);
                cv[k] = read_c ? r + beta * cv[k] : r;
            }
            store_vec(c, i0, cv);
        }
        start = nvec * VEC;
    }
    for(i64 i = start + GLOBAL_ID0; i < n; i += GLOBAL_SIZE0)
    {
        const float r = tensor_binop(alpha1 * LOAD(a, i), alpha2 * LOAD(b, tensorop_bidx(i, b_inner, b_mid)), TOP);
        STORE(c, i, read_c ? r + beta * LOAD(c, i) : r);
    }
}

#define TENSOROP_SHAPE_ARGS int N, int C, int D, int H, int W
#define TENSOROP_STRIDES(t) i64 t##n, i64 t##c, i64 t##d, i64 t##h, i64 t##w
#define TENSOROP_OFFSET(t) (n * t##n + k_ * t##c + d * t##d + h * t##h + w * t##w)
#define TENSOROP_DECOMPOSE                    \
    i64 r = i;                                \
    const i64 w = r % W; r /= W;              \
    const i64 h = r % H; r /= H;              \
    const i64 d = r % D; r /= D;              \
    const i64 k_ = r % C;                     \
    const i64 n = r / C;

KERNEL void tensorop_strided(const GLOBAL data_t* RESTRICT a, const GLOBAL data_t* RESTRICT b,
                             GLOBAL data_t* RESTRICT c, TENSOROP_SHAPE_ARGS, TENSOROP_STRIDES(a),
                             TENSOROP_STRIDES(b), TENSOROP_STRIDES(c), int op, float alpha1, float alpha2,
                             float beta, int read_c)
{
    const i64 total = (i64)N * C * D * H * W;
    for(i64 i = GLOBAL_ID0; i < total; i += GLOBAL_SIZE0)
    {
        TENSOROP_DECOMPOSE
        const i64 co = TENSOROP_OFFSET(c);
        const float v = tensor_binop(alpha1 * LOAD(a, TENSOROP_OFFSET(a)), alpha2 * LOAD(b, TENSOROP_OFFSET(b)), TOP);
        STORE(c, co, read_c ? v + beta * LOAD(c, co) : v);
    }
}

/* op 4: set, op 5: scale */
KERNEL void tensor_set_packed(GLOBAL data_t* RESTRICT y, i64 n, int op, float value)
{
    i64 start = 0;
    if(ALIGNED16(y))
    {
        const i64 nvec = n / VEC;
        for(i64 v = GLOBAL_ID0; v < nvec; v += GLOBAL_SIZE0)
        {
            float yv[VEC];
            if(TOP == 5)
                load_vec(y, v * VEC, yv);
            UNROLL
            for(int k = 0; k < VEC; ++k)
                yv[k] = TOP == 5 ? value * yv[k] : value;
            store_vec(y, v * VEC, yv);
        }
        start = nvec * VEC;
    }
    for(i64 i = start + GLOBAL_ID0; i < n; i += GLOBAL_SIZE0)
        STORE(y, i, TOP == 5 ? value * LOAD(y, i) : value);
}

KERNEL void tensor_set_strided(GLOBAL data_t* RESTRICT y, TENSOROP_SHAPE_ARGS, TENSOROP_STRIDES(y), int op,
                               float value)
{
    const i64 total = (i64)N * C * D * H * W;
    for(i64 i = GLOBAL_ID0; i < total; i += GLOBAL_SIZE0)
    {
        TENSOROP_DECOMPOSE
        const i64 o = TENSOROP_OFFSET(y);
        STORE(y, o, TOP == 5 ? value * LOAD(y, o) : value);
    }
}

/* tensorop_packed_cpu: tensorop_packed for CPU OpenCL devices (PoCL): a work item takes a run of
   TOP_RUN elements in float8 vectors (common/cpu_vec.h) and a scalar tail. b_kind as there, for
   8-element vectors: 0 b like c, 1 b constant over each vector (b_inner a multiple of 8), 3 b's
   run innermost (b_inner 1, b_mid a multiple of 8), 2 any (gathered). Same arguments. */
#if defined(__OPENCL_VERSION__) && MIOPY_DTYPE != 3
#include "common/cpu_vec.h"
#define TOP_RUN 64

KERNEL void tensorop_packed_cpu(const GLOBAL data_t* RESTRICT a, const GLOBAL data_t* RESTRICT b,
                                GLOBAL data_t* RESTRICT c, i64 n, i64 b_inner, i64 b_mid, int b_kind, int op,
                                float alpha1, float alpha2, float beta, int read_c)
{
    const i64 i0 = GLOBAL_ID0 * TOP_RUN;
    if(i0 >= n)
        return;
    const i64 i1 = i0 + TOP_RUN < n ? i0 + TOP_RUN : n;
    i64 i = i0;
    for(; i + 8 <= i1; i += 8)
    {
        const float8 av = alpha1 * load_f8(a, i);
        float8 bv;
        if(b_kind == 0)
            bv = load_f8(b, i);
        else if(b_kind == 1)
            bv = (float8)(LOAD(b, tensorop_bidx(i, b_inner, b_mid)));
        else if(b_kind == 3)
            bv = load_f8(b, (i64)((u64)i % (u64)b_mid));
        else
        {
            float g[8];
            for(int k = 0; k < 8; ++k)
                g[k] = LOAD(b, tensorop_bidx(i + k, b_inner, b_mid));
            bv = vload8(0, g);
        }
        bv *= alpha2;
        float8 r;
        switch(TOP)
        {
        case 0: r = av + bv; break;
        case 1: r = av * bv; break;
        case 2: r = fmin(av, bv); break;
        default: r = fmax(av, bv); break;
        }
        if(read_c)
            r += beta * load_f8(c, i);
        store_f8(c, i, r);
    }
    for(; i < i1; ++i)
    {
        const float r = tensor_binop(alpha1 * LOAD(a, i), alpha2 * LOAD(b, tensorop_bidx(i, b_inner, b_mid)), TOP);
        STORE(c, i, read_c ? r + beta * LOAD(c, i) : r);
    }
}
#endif
