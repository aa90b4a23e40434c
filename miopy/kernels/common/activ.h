/* Activation forward and backward (MIOpen's miopenActivationMode_t, ACTIV_MODE 0-9), computed in
   fp32. alpha, beta, gamma and the mode are run-time arguments; defining ACTIV_MODE compiles one
   mode in (the mode argument is then ignored): what a GPU wants, while a CPU compiler's time is
   better saved.

   *_packed: every tensor is dense with the same strides, so the data are one flat array; each work
   item handles ACTIV_UNROLL vectors of VEC elements with 16-byte loads and stores (see below).
   ACTIV_EXACT (set by the solver when the grid covers the elements exactly: n a multiple of
   VEC * ACTIV_LOCAL * ACTIV_UNROLL, as every ResNet-50 activation at batch 32) drops the bounds
   checks and the scalar tail.
   *_strided: any lens and strides (logical N,C,D,H,W order; D = 1 for 2-D), one element per step. */
#include "common/vec.h"

#ifdef ACTIV_MODE
#define MODE ACTIV_MODE
#else
#define MODE mode
#endif

/* which tensors the gradient of the mode reads */
#define ACTIV_BWD_Y (MODE == 1 || MODE == 2 || MODE == 6 || MODE == 9)
#define ACTIV_BWD_X (MODE >= 3)
#define ACTIV_BWD_DY (MODE != 6)

DEVICE_FN float activ_fwd(float x, int mode, float a, float b, float g)
{
    switch(mode)
    {
    case 0: return x;
    case 1: return 1.0f / (1.0f + F_EXP(-x));
    case 2: return b * F_TANH(a * x);
    case 3: return x > 0.0f ? x : 0.0f;
    case 4: return x > 0.0f ? x + F_LOG1P(F_EXP(-x)) : F_LOG1P(F_EXP(x));
    case 5: return F_ABS(x);
    case 6: return (a + b * x) <= 0.0f ? 0.0f : F_POW(a + b * x, g);
    case 7: return F_MIN(a, F_MAX(0.0f, x));
    case 8: return x > 0.0f ? x : a * x;
    default: return x > 0.0f ? x : a * F_EXPM1(x);
    }
}

DEVICE_FN float activ_bwd(float x, float y, float dy, int mode, float a, float b, float g)
{
    switch(mode)
    {
    case 0: return dy;
    case 1: return dy * y * (1.0f - y);
    case 2: return b == 0.0f ? 0.0f : dy * a * (b - y * y / b);
    case 3: return x > 0.0f ? dy : 0.0f;
    case 4: return dy * F_EXP(F_MIN(x, 50.0f)) / (F_EXP(F_MIN(x, 50.0f)) + 1.0f);
    case 5: return x > 0.0f ? dy : -dy;
    case 6: return (a + b * x) <= 0.0f ? 0.0f : g * b * y / (a + b * x); /* dy unused, as in MIOpen */
    case 7: return (x > 0.0f && x < a) ? dy : 0.0f;
    case 8: return x > 0.0f ? dy : dy * a;
    default: return x > 0.0f ? dy : dy * (y + a);
    }
}

/* ACTIV_IDX32: the element count fits 32 bits, so the index arithmetic can too */
#ifndef ACTIV_IDX32
#define ACTIV_IDX32 0
#endif
#if ACTIV_IDX32
typedef u32 aidx_t;
#else
typedef i64 aidx_t;
#endif
/* Packed kernels: the grid covers the data (no grid-stride loop). Work-group g owns
   ACTIV_LOCAL * ACTIV_UNROLL consecutive vectors; item l of it takes vectors
   g*ACTIV_LOCAL*ACTIV_UNROLL + j*ACTIV_LOCAL + l (j < ACTIV_UNROLL), so each load instruction of a
   group is one contiguous run. Full groups skip the bounds checks. The n % VEC trailing elements
   go to the first work items. Unaligned base pointers (CUDA) take a scalar grid-stride path. */
#ifndef ACTIV_LOCAL
#define ACTIV_LOCAL 128
#endif
#ifndef ACTIV_UNROLL
#define ACTIV_UNROLL 1
#endif
#ifndef ACTIV_EXACT
#define ACTIV_EXACT 0
#endif
#define ACTIV_TILE (ACTIV_LOCAL * ACTIV_UNROLL)

/* ACTIV_RAW with ReLU compiled in, 16-bit data, CUDA: the packed kernels work on the bits, two
   values per 32-bit word, with no conversion to fp32 and back. x > 0 holds exactly for the bit
   patterns 1 .. +infinity (NaN, -0 and negatives fail, as in fp32), so
   relu(x) = x & mask(x) and relu'(x) dy = dy & mask(x). */
#ifndef ACTIV_RAW
#define ACTIV_RAW 0
#endif
#if ACTIV_RAW && defined(ACTIV_MODE) && !defined(__OPENCL_VERSION__) && MIOPY_DTYPE != 0
#if ACTIV_MODE == 3
#define ACTIV_RELU_BITS 1
#endif
#endif
#ifndef ACTIV_RELU_BITS
#define ACTIV_RELU_BITS 0
#endif
#if ACTIV_RELU_BITS
#if MIOPY_DTYPE == 1
#define ACTIV_INF_BITS 0x7c00u
#else
#define ACTIV_INF_BITS 0x7f80u
#endif
/* 0xffff in each 16-bit half holding a value > 0. ACTIV_RAW 1: one packed comparison
   (set.gt.u32.f16x2, or .bf16x2 from sm_90: IEEE x > 0, so NaN and -0 give 0); ACTIV_RAW 2 (and
   bf16 before sm_90): integer operations on the bits, the same result in about four times the
   instructions. */
DEVICE_FN u32 relu_mask2(u32 w)
{
    u32 m;
#if ACTIV_RAW == 1 && MIOPY_DTYPE == 1
    asm("set.gt.u32.f16x2 %0, %1, %2;" : "=r"(m) : "r"(w), "r"(0u));
#elif ACTIV_RAW == 1 && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm("set.gt.u32.bf16x2 %0, %1, %2;" : "=r"(m) : "r"(w), "r"(0u));
#else
    const u32 lo = (w & 0xffffu) - 1u;
    const u32 hi = (w >> 16) - 1u;
    m = (lo < ACTIV_INF_BITS ? 0xffffu : 0u) | (hi < ACTIV_INF_BITS ? 0xffff0000u : 0u);
#endif
    return m;
}
DEVICE_FN uint4 relu_and4(uint4 m, uint4 v)
{
    return make_uint4(v.x & relu_mask2(m.x), v.y & relu_mask2(m.y), v.z & relu_mask2(m.z),
                      v.w & relu_mask2(m.w));
}
#endif

KERNEL void activ_fwd_packed(const GLOBAL data_t* RESTRICT x, GLOBAL data_t* RESTRICT y, i64 n, int mode,
                             float a, float b, float g)
{
    if(ALIGNED16(x) && ALIGNED16(y))
    {
        const aidx_t nvec = (aidx_t)(n / VEC);
        const aidx_t first = (aidx_t)GROUP_ID0 * ACTIV_TILE + (aidx_t)LOCAL_ID0;
#if ACTIV_EXACT
        const int full = 1;
#else
        const int full = first - (aidx_t)LOCAL_ID0 + ACTIV_TILE <= nvec;
#endif
#if ACTIV_RELU_BITS
        uint4 r[ACTIV_UNROLL];
        UNROLL
        for(int j = 0; j < ACTIV_UNROLL; ++j)
            if(full || first + j * ACTIV_LOCAL < nvec)
                r[j] = vec_ld16(x + (i64)(first + j * ACTIV_LOCAL) * VEC);
        UNROLL
        for(int j = 0; j < ACTIV_UNROLL; ++j)
            if(full || first + j * ACTIV_LOCAL < nvec)
                vec_st16(y + (i64)(first + j * ACTIV_LOCAL) * VEC, relu_and4(r[j], r[j]));
#else
        float v[ACTIV_UNROLL][VEC];
        UNROLL
        for(int j = 0; j < ACTIV_UNROLL; ++j)
            if(full || first + j * ACTIV_LOCAL < nvec)
                load_vec(x, (i64)(first + j * ACTIV_LOCAL) * VEC, v[j]);
        UNROLL
        for(int j = 0; j < ACTIV_UNROLL; ++j)
        {
            UNROLL
            for(int k = 0; k < VEC; ++k)
                v[j][k] = activ_fwd(v[j][k], MODE, a, b, g);
            if(full || first + j * ACTIV_LOCAL < nvec)
                store_vec(y, (i64)(first + j * ACTIV_LOCAL) * VEC, v[j]);
        }
#endif
#if !ACTIV_EXACT
        const i64 t = (i64)nvec * VEC + GLOBAL_ID0;
        if(t < n)
            STORE(y, t, activ_fwd(LOAD(x, t), MODE, a, b, g));
#endif
        return;
    }
    for(i64 i = GLOBAL_ID0; i < n; i += GLOBAL_SIZE0)
        STORE(y, i, activ_fwd(LOAD(x, i), MODE, a, b, g));
}

KERNEL void activ_bwd_packed(const GLOBAL data_t* RESTRICT x, const GLOBAL data_t* RESTRICT y,
                             const GLOBAL data_t* RESTRICT dy, GLOBAL data_t* RESTRICT dx, i64 n, int mode,
                             float a, float b, float g)
{
    /* only the tensors the mode reads need the check (constants once ACTIV_MODE is defined) */
    if((!ACTIV_BWD_X || ALIGNED16(x)) && (!ACTIV_BWD_Y || ALIGNED16(y)) && (!ACTIV_BWD_DY || ALIGNED16(dy)) &&
       ALIGNED16(dx))
    {
        const aidx_t nvec = (aidx_t)(n / VEC);
        const aidx_t first = (aidx_t)GROUP_ID0 * ACTIV_TILE + (aidx_t)LOCAL_ID0;
#if ACTIV_EXACT
        const int full = 1;
#else
        const int full = first - (aidx_t)LOCAL_ID0 + ACTIV_TILE <= nvec;
#endif
#if ACTIV_RELU_BITS
        uint4 rx[ACTIV_UNROLL], rg[ACTIV_UNROLL];
        UNROLL
        for(int j = 0; j < ACTIV_UNROLL; ++j)
            if(full || first + j * ACTIV_LOCAL < nvec)
            {
                const i64 off = (i64)(first + j * ACTIV_LOCAL) * VEC;
                rx[j] = vec_ld16(x + off);
                rg[j] = vec_ld16(dy + off);
            }
        UNROLL
        for(int j = 0; j < ACTIV_UNROLL; ++j)
            if(full || first + j * ACTIV_LOCAL < nvec)
                vec_st16(dx + (i64)(first + j * ACTIV_LOCAL) * VEC, relu_and4(rx[j], rg[j]));
#else
        float xv[ACTIV_UNROLL][VEC], yv[ACTIV_UNROLL][VEC], gv[ACTIV_UNROLL][VEC];
        UNROLL
        for(int j = 0; j < ACTIV_UNROLL; ++j)
        {
            UNROLL
            for(int k = 0; k < VEC; ++k)
                xv[j][k] = yv[j][k] = gv[j][k] = 0.0f;
            if(full || first + j * ACTIV_LOCAL < nvec)
            {
                const i64 off = (i64)(first + j * ACTIV_LOCAL) * VEC;
                if(ACTIV_BWD_X)
                    load_vec(x, off, xv[j]);
                if(ACTIV_BWD_Y)
                    load_vec(y, off, yv[j]);
                if(ACTIV_BWD_DY)
                    load_vec(dy, off, gv[j]);
            }
        }
        UNROLL
        for(int j = 0; j < ACTIV_UNROLL; ++j)
        {
            UNROLL
            for(int k = 0; k < VEC; ++k)
                gv[j][k] = activ_bwd(xv[j][k], yv[j][k], gv[j][k], MODE, a, b, g);
            if(full || first + j * ACTIV_LOCAL < nvec)
                store_vec(dx, (i64)(first + j * ACTIV_LOCAL) * VEC, gv[j]);
        }
#endif
#if !ACTIV_EXACT
        const i64 t = (i64)nvec * VEC + GLOBAL_ID0;
        if(t < n)
        {
            const float xs = ACTIV_BWD_X ? LOAD(x, t) : 0.0f;
            const float ys = ACTIV_BWD_Y ? LOAD(y, t) : 0.0f;
            const float gs = ACTIV_BWD_DY ? LOAD(dy, t) : 0.0f;
            STORE(dx, t, activ_bwd(xs, ys, gs, MODE, a, b, g));
        }
#endif
        return;
    }
    for(i64 i = GLOBAL_ID0; i < n; i += GLOBAL_SIZE0)
    {
        const float xs = ACTIV_BWD_X ? LOAD(x, i) : 0.0f;
        const float ys = ACTIV_BWD_Y ? LOAD(y, i) : 0.0f;
        const float gs = ACTIV_BWD_DY ? LOAD(dy, i) : 0.0f;
        STORE(dx, i, activ_bwd(xs, ys, gs, MODE, a, b, g));
    }
}

#define ACTIV_SHAPE_ARGS int N, int C, int D, int H, int W
#define ACTIV_STRIDES(t) i64 t##n, i64 t##c, i64 t##d, i64 t##h, i64 t##w
#define ACTIV_OFFSET(t) (n * t##n + c * t##c + d * t##d + h * t##h + w * t##w)
#define ACTIV_DECOMPOSE                                   \
    aidx_t r = i;                                         \
    const i64 w = (i64)(r % (aidx_t)W); r /= (aidx_t)W;   \
    const i64 h = (i64)(r % (aidx_t)H); r /= (aidx_t)H;   \
    const i64 d = (i64)(r % (aidx_t)D); r /= (aidx_t)D;   \
    const i64 c = (i64)(r % (aidx_t)C);                   \
    const i64 n = (i64)(r / (aidx_t)C);

KERNEL void activ_fwd_strided(const GLOBAL data_t* RESTRICT x, GLOBAL data_t* RESTRICT y, ACTIV_SHAPE_ARGS,
                              ACTIV_STRIDES(x), ACTIV_STRIDES(y), int mode, float a, float b, float g)
{
    const aidx_t total = (aidx_t)N * C * D * H * W;
    for(aidx_t i = (aidx_t)GLOBAL_ID0; i < total; i += (aidx_t)GLOBAL_SIZE0)
    {
        ACTIV_DECOMPOSE
        STORE(y, ACTIV_OFFSET(y), activ_fwd(LOAD(x, ACTIV_OFFSET(x)), MODE, a, b, g));
    }
}

KERNEL void activ_bwd_strided(const GLOBAL data_t* RESTRICT x, const GLOBAL data_t* RESTRICT y,
                              const GLOBAL data_t* RESTRICT dy, GLOBAL data_t* RESTRICT dx,
                              ACTIV_SHAPE_ARGS, ACTIV_STRIDES(x), ACTIV_STRIDES(y), ACTIV_STRIDES(g),
                              ACTIV_STRIDES(o), int mode, float a, float b, float g)
{
    const aidx_t total = (aidx_t)N * C * D * H * W;
    for(aidx_t i = (aidx_t)GLOBAL_ID0; i < total; i += (aidx_t)GLOBAL_SIZE0)
    {
        ACTIV_DECOMPOSE
        const float xs = ACTIV_BWD_X ? LOAD(x, ACTIV_OFFSET(x)) : 0.0f;
        const float ys = ACTIV_BWD_Y ? LOAD(y, ACTIV_OFFSET(y)) : 0.0f;
        const float gs = ACTIV_BWD_DY ? LOAD(dy, ACTIV_OFFSET(g)) : 0.0f;
        STORE(dx, ACTIV_OFFSET(o), activ_bwd(xs, ys, gs, MODE, a, b, g));
    }
}

/* activ_{fwd,bwd}_cpu: the packed kernels for CPU OpenCL devices (PoCL). A work item takes a run
   of ACTIV_CPU_RUN elements of the flat data (the last one what is left) and computes float8
   vectors (common/cpu_vec.h) in a loop chosen once by mode, then a scalar tail. The GPU-shaped
   packed kernels computed one scalar activ_fwd at a time behind a switch, which PoCL could not
   vectorise (fp32 logistic took 17x the time of a copy, fp16 57x). Exponentials go through
   exp2_f8 (about 1 ulp); tanh(z) = sign(z) (1 - e) / (1 + e) with e = 2^(-2|z| log2 e)
   (absolute error about 1e-7); softrelu, power take PoCL's float8 log1p / pow. */
#if defined(__OPENCL_VERSION__) && MIOPY_DTYPE != 3
#include "common/cpu_vec.h"
#define ACTIV_CPU_RUN 64
#define ACTIV_LOG2E 1.4426950408889634f

/* e^v, v above 88 taken as 88 (2^127: more would overflow exp2_f8's exponent); NaN stays NaN */
DEVICE_FN float8 activ_exp8(float8 v)
{
    const float8 t = v * ACTIV_LOG2E;
    return exp2_f8(select(fmin(t, 127.0f), t, isnan(t)));
}

DEVICE_FN float8 activ_tanh8(float8 z)
{
    const float8 e = exp2_f8(-2.0f * ACTIV_LOG2E * fabs(z));
    return copysign((1.0f - e) / (1.0f + e), z);
}

#define ACTIV_CPU_RANGE                          \
    const i64 i0 = (i64)GLOBAL_ID0 * ACTIV_CPU_RUN; \
    if(i0 >= n)                                  \
        return;                                  \
    const i64 end = i0 + ACTIV_CPU_RUN < n ? i0 + ACTIV_CPU_RUN : n, end8 = i0 + (end - i0) / 8 * 8;

#define ACTIV_FWD_LOOP(EXPR)                    \
    for(i64 i = i0; i < end8; i += 8)            \
    {                                            \
        const float8 v = load_f8(x, i);          \
        store_f8(y, i, EXPR);                    \
    }                                            \
    break;

KERNEL void activ_fwd_cpu(const GLOBAL data_t* RESTRICT x, GLOBAL data_t* RESTRICT y, i64 n, int mode, float a,
                          float b, float g)
{
    ACTIV_CPU_RANGE
    const float8 zero = (float8)(0.0f);
    switch(mode)
    {
    case 0: ACTIV_FWD_LOOP(v)
    case 1: ACTIV_FWD_LOOP(1.0f / (1.0f + activ_exp8(-v)))
    case 2: ACTIV_FWD_LOOP(b * activ_tanh8(a * v))
    case 3: ACTIV_FWD_LOOP(select(zero, v, v > 0.0f))
    case 4: ACTIV_FWD_LOOP(fmax(v, zero) + log1p(activ_exp8(-fabs(v))))
    case 5: ACTIV_FWD_LOOP(fabs(v))
    case 6: ACTIV_FWD_LOOP(select(pow(a + b * v, (float8)(g)), zero, a + b * v <= 0.0f))
    case 7: ACTIV_FWD_LOOP(fmin((float8)(a), fmax(zero, v)))
    case 8: ACTIV_FWD_LOOP(select(a * v, v, v > 0.0f))
    default: ACTIV_FWD_LOOP(select(a * (activ_exp8(v) - 1.0f), v, v > 0.0f))
    }
    for(i64 i = end8; i < end; ++i)
        STORE(y, i, activ_fwd(LOAD(x, i), mode, a, b, g));
}

/* the gradient reads only what the mode needs (the others may be any buffer) */
#define ACTIV_BWD_LOOP(LX, LY, LG, EXPR)                                                  \
    for(i64 i = i0; i < end8; i += 8)                                                     \
    {                                                                                     \
        const float8 xv = (LX) ? load_f8(x, i) : zero, yv = (LY) ? load_f8(y, i) : zero; \
        const float8 gv = (LG) ? load_f8(dy, i) : zero;                                   \
        store_f8(dx, i, EXPR);                                                            \
    }                                                                                     \
    break;

KERNEL void activ_bwd_cpu(const GLOBAL data_t* RESTRICT x, const GLOBAL data_t* RESTRICT y,
                          const GLOBAL data_t* RESTRICT dy, GLOBAL data_t* RESTRICT dx, i64 n, int mode, float a,
                          float b, float g)
{
    ACTIV_CPU_RANGE
    const float8 zero = (float8)(0.0f);
    switch(mode)
    {
    case 0: ACTIV_BWD_LOOP(0, 0, 1, gv)
    case 1: ACTIV_BWD_LOOP(0, 1, 1, gv * yv * (1.0f - yv))
    case 2: ACTIV_BWD_LOOP(0, 1, 1, b == 0.0f ? zero : gv * a * (b - yv * yv / b))
    case 3: ACTIV_BWD_LOOP(1, 0, 1, select(zero, gv, xv > 0.0f))
    case 4: ACTIV_BWD_LOOP(1, 0, 1, gv * (1.0f - 1.0f / (activ_exp8(fmin(xv, 50.0f)) + 1.0f)))
    case 5: ACTIV_BWD_LOOP(1, 0, 1, select(-gv, gv, xv > 0.0f))
    case 6: ACTIV_BWD_LOOP(1, 1, 0, select(g * b * yv / (a + b * xv), zero, a + b * xv <= 0.0f))
    case 7: ACTIV_BWD_LOOP(1, 0, 1, select(zero, gv, (xv > 0.0f) & (xv < a)))
    case 8: ACTIV_BWD_LOOP(1, 0, 1, select(gv * a, gv, xv > 0.0f))
    default: ACTIV_BWD_LOOP(1, 1, 1, select(gv * (yv + a), gv, xv > 0.0f))
    }
    for(i64 i = end8; i < end; ++i)
        STORE(dx, i, activ_bwd(LOAD(x, i), LOAD(y, i), LOAD(dy, i), mode, a, b, g));
}
#endif
