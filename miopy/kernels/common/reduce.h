/* Reductions (see miopy/problem/reduce.py): op 0 add, 1 mul, 2 min, 3 max, 4 amax, 5 avg,
   6 norm1, 7 norm2; accumulated in acc_t (fp32; fp64 for fp64 data). y = alpha * r + beta * y
   (y read when read_y); with want_idx, idx gets the position of the chosen element (first
   occurrence wins; NaN wins when nanprop).

   reduce_rows: the reduced elements of each output are one contiguous run of L elements (the
   reduced dimensions innermost in memory, packed); a team of RED_TEAM work items reads the run
   coalesced, RED_GROUP / RED_TEAM outputs per work-group, local-memory tree to finish.
   reduce_generic: one work item per output, nested loops over up to 5 reduced dimensions in
   logical order (any strides); coalesced when the kept dimensions are innermost.
   The loops where one work item folds a long run alone (reduce_generic, reduce_cols_partial) add
   with compensation (Kahan) for add, avg, norm1 and norm2: their error then stays a few roundings
   of the result however long the run (a plain running sum of 400k fp32 squares drifts by 1e-4). */
#include "common/miopy_types.h"

#ifndef RED_TEAM
#define RED_TEAM 64
#endif
#ifndef RED_VEC
#define RED_VEC 1 /* > 1: compile the 16-byte vector kernels (see the end) */
#endif
#define RED_GROUP 256
#define RED_BLOCK 64 /* reduce_generic: elements summed apart before a compensated add */
#define RED_ROWS (RED_GROUP / RED_TEAM)

#ifdef __OPENCL_VERSION__
#define RED_NUM_GROUPS0 ((long)get_num_groups(0))
#define RED_SQRT sqrt
#else
#define RED_NUM_GROUPS0 ((long long)gridDim.x)
#if MIOPY_DTYPE == 3
#define RED_SQRT sqrt
#else
#define RED_SQRT sqrtf
#endif
#endif

#define RED_ISNAN(v) ((v) != (v))
#define RED_ABS(v) ((v) < 0 ? -(v) : (v))

DEVICE_FN acc_t red_init(int op)
{
    switch(op)
    {
    case 1: return (acc_t)1;
    case 2: return (acc_t)1 / (acc_t)0;  /* +inf */
    case 3: return -(acc_t)1 / (acc_t)0; /* -inf */
    default: return (acc_t)0;           /* add, avg, norms; amax of |x| */
    }
}

DEVICE_FN int red_compares(int op) { return op >= 2 && op <= 4; }

/* does candidate (v, i) replace the current (b, bi)? (min, max, amax: v already |x| for amax) */
DEVICE_FN int red_better(acc_t v, i64 i, acc_t b, i64 bi, int op, int nanprop)
{
    const int vn = RED_ISNAN(v), bn = RED_ISNAN(b);
    if(nanprop && (vn || bn))
        return vn && (!bn || i < bi);
    if(vn)
        return 0;
    if(bn)
        return 1;
    if(v == b)
        return i < bi;
    return op == 2 ? v < b : v > b;
}

/* fold one element x at position i into (acc, ai) */
DEVICE_FN void red_step(acc_t* acc, i64* ai, acc_t x, i64 i, int op, int nanprop)
{
    switch(op)
    {
    case 1: *acc *= x; break;
    case 2:
    case 3:
    case 4:
    {
        const acc_t v = op == 4 ? RED_ABS(x) : x;
        if(*ai < 0 ? (nanprop || !RED_ISNAN(v)) : red_better(v, i, *acc, *ai, op, nanprop))
        {
            *acc = v;
            *ai = i;
        }
        break;
    }
    case 6: *acc += RED_ABS(x); break;
    case 7: *acc += x * x; break;
    default: *acc += x; break;
    }
}

DEVICE_FN int red_additive(int op) { return op == 0 || op >= 5; }

/* what an additive op sums for element x */
DEVICE_FN acc_t red_term(acc_t x, int op) { return op == 6 ? RED_ABS(x) : op == 7 ? x * x : x; }

/* acc += term with compensation comp; once acc is inf or NaN the compensation is dropped, so an
   inf stays inf (not inf - inf) and a NaN stays NaN */
DEVICE_FN void red_kahan(acc_t* acc, acc_t* comp, acc_t term)
{
    const acc_t yk = term - *comp;
    const acc_t t = *acc + yk;
    const acc_t c = (t - *acc) - yk;
    *comp = (t - t) == (acc_t)0 ? c : (acc_t)0;
    *acc = t;
}

/* fold element x at position i: compensated for additive ops, else red_step */
DEVICE_FN void red_fold(acc_t* acc, acc_t* comp, i64* ai, acc_t x, i64 i, int op, int nanprop)
{
    if(red_additive(op))
        red_kahan(acc, comp, red_term(x, op));
    else
        red_step(acc, ai, x, i, op, nanprop);
}

/* combine two partial results (a, ai) <- (b, bi) */
DEVICE_FN void red_merge(acc_t* a, i64* ai, acc_t b, i64 bi, int op, int nanprop)
{
    if(red_compares(op))
    {
        if(red_better(b, bi, *a, *ai, op, nanprop))
        {
            *a = b;
            *ai = bi;
        }
    }
    else if(op == 1)
        *a *= b;
    else
        *a += b;
}

DEVICE_FN void red_finish(GLOBAL data_t* y, GLOBAL int* idx, i64 yo, acc_t acc, i64 ai, int op, i64 count,
                          acc_t alpha, acc_t beta, int read_y, int want_idx)
{
    acc_t r = acc;
    if(op == 5)
        r = acc / (acc_t)count;
    else if(op == 7)
        r = RED_SQRT(acc);
    if(red_compares(op) && ai < 0) /* every element skipped (NaN without propagation) */
        ai = 0;
    const acc_t old = read_y ? (acc_t)LOAD(y, yo) : (acc_t)0;
    STORE(y, yo, read_y ? alpha * r + beta * old : alpha * r);
    if(want_idx)
        idx[yo] = (int)ai;
}

#define RED_KEPT_ARGS int k0, int k1, int k2, int k3, int k4
#define RED_STRIDES(t) i64 t##0, i64 t##1, i64 t##2, i64 t##3, i64 t##4
/* kept coordinates of output o (logical order, k4 innermost) -> offsets in x (xs) and y (ys) */
#define RED_KEPT_OFFSETS(o, xoff, yoff)                                         \
    i64 xoff = 0, yoff = 0;                                                     \
    {                                                                           \
        i64 r_ = (o), c_;                                                       \
        c_ = r_ % k4; r_ /= k4; xoff += c_ * xs4; yoff += c_ * ys4;             \
        c_ = r_ % k3; r_ /= k3; xoff += c_ * xs3; yoff += c_ * ys3;             \
        c_ = r_ % k2; r_ /= k2; xoff += c_ * xs2; yoff += c_ * ys2;             \
        c_ = r_ % k1; r_ /= k1; xoff += c_ * xs1; yoff += c_ * ys1;             \
        xoff += r_ * xs0; yoff += r_ * ys0;                                     \
    }

KERNEL void reduce_rows(const GLOBAL data_t* RESTRICT x, GLOBAL data_t* RESTRICT y, GLOBAL int* RESTRICT idx,
                        i64 nout, i64 L, RED_KEPT_ARGS, RED_STRIDES(xs), RED_STRIDES(ys), int op, int nanprop,
                        int want_idx, acc_t alpha, acc_t beta, int read_y)
{
    LOCAL acc_t red_v[RED_GROUP];
    LOCAL i64 red_i[RED_GROUP];
    const int tid = LOCAL_ID0, lane = tid % RED_TEAM, team = tid / RED_TEAM;
    const i64 nblocks = (nout + RED_ROWS - 1) / RED_ROWS;
    for(i64 blk = GROUP_ID0; blk < nblocks; blk += RED_NUM_GROUPS0)
    {
        const i64 o = blk * RED_ROWS + team;
        const int live = o < nout;
        RED_KEPT_OFFSETS(live ? o : 0, xb, yo)
        acc_t acc = red_init(op);
        i64 ai = -1;
        if(live)
        {
            i64 j = lane;
            for(; j + 3 * RED_TEAM < L; j += 4 * RED_TEAM)
            {
                const acc_t v0 = LOAD(x, xb + j), v1 = LOAD(x, xb + j + RED_TEAM);
                const acc_t v2 = LOAD(x, xb + j + 2 * RED_TEAM), v3 = LOAD(x, xb + j + 3 * RED_TEAM);
                red_step(&acc, &ai, v0, j, op, nanprop);
                red_step(&acc, &ai, v1, j + RED_TEAM, op, nanprop);
                red_step(&acc, &ai, v2, j + 2 * RED_TEAM, op, nanprop);
                red_step(&acc, &ai, v3, j + 3 * RED_TEAM, op, nanprop);
            }
            for(; j < L; j += RED_TEAM)
                red_step(&acc, &ai, LOAD(x, xb + j), j, op, nanprop);
        }
        BARRIER();
        red_v[tid] = acc;
        red_i[tid] = ai < 0 ? (i64)1 << 62 : ai;
        BARRIER();
        for(int s = RED_TEAM / 2; s > 0; s >>= 1)
        {
            if(lane < s)
            {
                acc_t a = red_v[tid];
                i64 b = red_i[tid];
                red_merge(&a, &b, red_v[tid + s], red_i[tid + s], op, nanprop);
                red_v[tid] = a;
                red_i[tid] = b;
            }
            BARRIER();
        }
        if(live && lane == 0)
        {
            const i64 bi = red_i[tid];
            red_finish(y, idx, yo, red_v[tid], bi == (i64)1 << 62 ? -1 : bi, op, L, alpha, beta, read_y,
                       want_idx);
        }
    }
}

KERNEL void reduce_generic(const GLOBAL data_t* RESTRICT x, GLOBAL data_t* RESTRICT y, GLOBAL int* RESTRICT idx,
                           i64 nout, RED_KEPT_ARGS, RED_STRIDES(xs), RED_STRIDES(ys), int r0, int r1, int r2, int r3,
                           int r4, RED_STRIDES(rs), int op, int nanprop, int want_idx, acc_t alpha, acc_t beta,
                           int read_y)
{
    const i64 count = (i64)r0 * r1 * r2 * r3 * r4;
    for(i64 o = GLOBAL_ID0; o < nout; o += GLOBAL_SIZE0)
    {
        RED_KEPT_OFFSETS(o, xb, yo)
        acc_t acc = red_init(op), comp = (acc_t)0;
        i64 ai = -1, i = 0;
        for(int a = 0; a < r0; ++a)
            for(int b = 0; b < r1; ++b)
                for(int c = 0; c < r2; ++c)
                    for(int d = 0; d < r3; ++d)
                    {
                        const i64 base = xb + a * rs0 + b * rs1 + c * rs2 + d * rs3;
                        if(red_additive(op))
                        {
                            /* blocks of RED_BLOCK in two plain chains, each block added with
                               compensation: accurate, and no long dependency per element */
                            for(int e0 = 0; e0 < r4; e0 += RED_BLOCK)
                            {
                                const int e1 = e0 + RED_BLOCK < r4 ? e0 + RED_BLOCK : r4;
                                acc_t p0 = (acc_t)0, p1 = (acc_t)0;
                                int e = e0;
                                for(; e + 1 < e1; e += 2)
                                {
                                    p0 += red_term(LOAD(x, base + e * rs4), op);
                                    p1 += red_term(LOAD(x, base + (e + 1) * rs4), op);
                                }
                                if(e < e1)
                                    p0 += red_term(LOAD(x, base + e * rs4), op);
                                red_kahan(&acc, &comp, p0 + p1);
                            }
                            i += r4;
                        }
                        else
                            for(int e = 0; e < r4; ++e, ++i)
                                red_step(&acc, &ai, LOAD(x, base + e * rs4), i, op, nanprop);
                    }
        red_finish(y, idx, yo, acc, ai, op, count, alpha, beta, read_y, want_idx);
    }
}

/* reduce_cols_*: x seen as R rows of K contiguous kept elements (the reduced dimensions outermost,
   e.g. per-channel statistics of an NHWC tensor). Partial: work item (chunk s, column k) folds rows
   [s * chunk, (s + 1) * chunk) into the workspace (values, then int positions at pi_off); final:
   one work item per column merges the partials in row order and writes y (and idx). Consecutive
   work items take consecutive columns: every row is read coalesced. */
KERNEL void reduce_cols_partial(const GLOBAL data_t* RESTRICT x, GLOBAL acc_t* RESTRICT pv, GLOBAL int* RESTRICT pi,
                                i64 pi_off, i64 R, i64 K, i64 chunk, int op, int nanprop)
{
    const i64 S = (R + chunk - 1) / chunk;
    for(i64 t = GLOBAL_ID0; t < S * K; t += GLOBAL_SIZE0)
    {
        const i64 s = t / K, k = t - s * K;
        const i64 r0 = s * chunk, r1 = r0 + chunk < R ? r0 + chunk : R;
        acc_t acc = red_init(op), comp = (acc_t)0;
        i64 ai = -1;
        for(i64 r = r0; r < r1; ++r)
            red_fold(&acc, &comp, &ai, LOAD(x, r * K + k), r, op, nanprop);
        pv[t] = acc;
        pi[pi_off + t] = (int)ai;
    }
}

KERNEL void reduce_cols_final(const GLOBAL acc_t* RESTRICT pv, const GLOBAL int* RESTRICT pi, i64 pi_off,
                              GLOBAL data_t* RESTRICT y, GLOBAL int* RESTRICT idx, i64 R, i64 K, i64 S, int op,
                              int nanprop, int want_idx, acc_t alpha, acc_t beta, int read_y)
{
    const i64 none = (i64)1 << 62;
    for(i64 k = GLOBAL_ID0; k < K; k += GLOBAL_SIZE0)
    {
        acc_t acc = pv[k];
        i64 ai = pi[pi_off + k] < 0 ? none : (i64)pi[pi_off + k];
        for(i64 s = 1; s < S; ++s)
        {
            const int j = pi[pi_off + s * K + k];
            red_merge(&acc, &ai, pv[s * K + k], j < 0 ? none : (i64)j, op, nanprop);
        }
        red_finish(y, idx, k, acc, ai == none ? -1 : ai, op, R, alpha, beta, read_y, want_idx);
    }
}

/* reduce_cols_partial_cpu: reduce_cols_partial for CPU OpenCL devices (PoCL), K a multiple of 8.
   Work item s folds rows [s * chunk, (s + 1) * chunk) whole, row after row (x read in order),
   keeping its K running values in its own slice of the workspace (pv; the positions, or the
   compensations of additive ops, at pi): float8 vectors throughout (common/cpu_vec.h), the
   slices stay in cache. Same partials and ties as reduce_cols_partial. */
#if defined(__OPENCL_VERSION__) && MIOPY_DTYPE != 3
#include "common/cpu_vec.h"

KERNEL void reduce_cols_partial_cpu(const GLOBAL data_t* RESTRICT x, GLOBAL float* RESTRICT pv,
                                    GLOBAL int* RESTRICT pi, i64 pi_off, i64 R, i64 K, i64 chunk, int op,
                                    int nanprop)
{
    const i64 S = (R + chunk - 1) / chunk;
    const i64 s = GLOBAL_ID0;
    if(s >= S)
        return;
    const i64 r0 = s * chunk, r1 = r0 + chunk < R ? r0 + chunk : R;
    GLOBAL float* acc = pv + s * K;
    GLOBAL int* aux = pi + pi_off + s * K; /* positions; compensations (as bits) when additive */
    const int additive = red_additive(op);
    const float8 init = (float8)(op == 1 ? 1.0f : op == 2 ? INFINITY : op >= 3 && op <= 4 ? -INFINITY : 0.0f);
    for(i64 k = 0; k < K; k += 8)
    {
        vstore8(init, 0, acc + k);
        vstore8(additive ? (int8)(0) : (int8)(-1), 0, aux + k);
    }
    for(i64 r = r0; r < r1; ++r)
    {
        const GLOBAL data_t* row = x + r * K;
        if(additive)
            for(i64 k = 0; k < K; k += 8)
            {
                const float8 v = load_f8(row, k);
                const float8 term = op == 6 ? fabs(v) : op == 7 ? v * v : v;
                const float8 a = vload8(0, acc + k), comp = as_float8(vload8(0, aux + k));
                const float8 yk = term - comp;
                const float8 t = a + yk;
                const float8 c = (t - a) - yk;
                vstore8(t, 0, acc + k);
                /* the compensation is dropped once the sum is inf or NaN */
                vstore8(as_int8(select((float8)(0.0f), c, (t - t) == 0.0f)), 0, aux + k);
            }
        else if(op == 1)
            for(i64 k = 0; k < K; k += 8)
                vstore8(vload8(0, acc + k) * load_f8(row, k), 0, acc + k);
        else
            for(i64 k = 0; k < K; k += 8)
            {
                float8 v = load_f8(row, k);
                v = op == 4 ? fabs(v) : v;
                const float8 a = vload8(0, acc + k);
                const int8 ai = vload8(0, aux + k);
                const int8 open = (op == 2 ? v < a : v > a) | (ai < 0);
                /* with NaN propagation the first NaN wins and stays; without, NaNs are skipped */
                const int8 take = nanprop ? ~isnan(a) & (isnan(v) | open) : ~isnan(v) & open;
                vstore8(select(a, v, take), 0, acc + k);
                vstore8(select(ai, (int8)((int)r), take), 0, aux + k);
            }
    }
    if(additive) /* the final pass reads no positions for additive ops; clear them all the same */
        for(i64 k = 0; k < K; k += 8)
            vstore8((int8)(-1), 0, aux + k);
}

/* reduce_rows_cpu: reduce_rows for CPU OpenCL devices (PoCL): one work item per output, its run
   of L elements in float8 vectors and a scalar tail. Additive ops sum blocks of 64 elements in a
   vector and add each block with compensation; compares keep a value and a position per lane,
   merged at the end by red_merge (the lowest position wins ties, NaN rules as red_step). */
#define RED_CPU_BLOCK 64
KERNEL void reduce_rows_cpu(const GLOBAL data_t* RESTRICT x, GLOBAL data_t* RESTRICT y, GLOBAL int* RESTRICT idx,
                            i64 nout, i64 L, RED_KEPT_ARGS, RED_STRIDES(xs), RED_STRIDES(ys), int op, int nanprop,
                            int want_idx, float alpha, float beta, int read_y)
{
    const i64 o = GLOBAL_ID0;
    if(o >= nout)
        return;
    RED_KEPT_OFFSETS(o, xb, yo)
    const GLOBAL data_t* run = x + xb;
    const i64 L8 = L & ~(i64)7;
    float acc = red_init(op), comp = 0.0f;
    i64 ai = -1;
    if(red_additive(op))
    {
        for(i64 e0 = 0; e0 < L8; e0 += RED_CPU_BLOCK)
        {
            const i64 e1 = e0 + RED_CPU_BLOCK < L8 ? e0 + RED_CPU_BLOCK : L8;
            float8 p = (float8)(0.0f);
            for(i64 e = e0; e < e1; e += 8)
            {
                const float8 v = load_f8(run, e);
                p += op == 6 ? fabs(v) : op == 7 ? v * v : v;
            }
            red_kahan(&acc, &comp, hsum8(p));
        }
        for(i64 e = L8; e < L; ++e)
            red_kahan(&acc, &comp, red_term(LOAD(run, e), op));
    }
    else if(op == 1)
    {
        float8 p = (float8)(1.0f);
        for(i64 e = 0; e < L8; e += 8)
            p *= load_f8(run, e);
        const float4 q = p.lo * p.hi;
        acc = q.x * q.y * q.z * q.w;
        for(i64 e = L8; e < L; ++e)
            acc *= LOAD(run, e);
    }
    else
    {
        float8 a = (float8)(acc);
        int8 ia = (int8)(-1);
        const int8 lane = (int8)(0, 1, 2, 3, 4, 5, 6, 7);
        for(i64 e = 0; e < L8; e += 8)
        {
            float8 v = load_f8(run, e);
            v = op == 4 ? fabs(v) : v;
            const int8 open = (op == 2 ? v < a : v > a) | (ia < 0);
            const int8 take = nanprop ? ~isnan(a) & (isnan(v) | open) : ~isnan(v) & open;
            a = select(a, v, take);
            ia = select(ia, lane + (int)e, take);
        }
        const float av[8] = {a.s0, a.s1, a.s2, a.s3, a.s4, a.s5, a.s6, a.s7};
        const int iv[8] = {ia.s0, ia.s1, ia.s2, ia.s3, ia.s4, ia.s5, ia.s6, ia.s7};
        const i64 none = (i64)1 << 62;
        i64 bi = none;
        for(int j = 0; j < 8; ++j)
            red_merge(&acc, &bi, av[j], iv[j] < 0 ? none : (i64)iv[j], op, nanprop);
        ai = bi == none ? -1 : bi;
        for(i64 e = L8; e < L; ++e)
            red_step(&acc, &ai, LOAD(run, e), e, op, nanprop);
    }
    red_finish(y, idx, yo, acc, ai, op, L, alpha, beta, read_y, want_idx);
}
#endif

/* ---- 16-byte vector variants (RED_VEC > 1: fp32 / fp16 / bf16 data) ----------------------------
   reduce_rows_vec: reduce_rows reading VEC elements at once (L and the kept x strides multiples of
   VEC; scalar loads when x is not 16-byte aligned).
   reduce_cols_vec_partial: reduce_cols_partial with VEC columns per work item (K a multiple of
   VEC) and RED_UNROLL rows loaded ahead; reduce_cols_tree_final merges the S partials of each
   column with a work-group of (RED_FX columns, RED_FY partial rows) and a local tree (the merge
   keeps the first occurrence, so the order of the tree does not change a chosen index). */
#if RED_VEC > 1
#include "common/vec.h"
#define RED_UNROLL (32 / VEC) /* rows loaded ahead: 32 values */
#ifndef RED_VALUES_OP
#define RED_VALUES_OP 0 /* CUDA: min (2), max (3) or amax (4) without positions (see below) */
#endif
#if defined(__OPENCL_VERSION__) || MIOPY_DTYPE == 3
#undef RED_VALUES_OP
#define RED_VALUES_OP 0
#endif
#define RED_FX 8   /* reduce_cols_tree_final: columns per work-group (a 32-byte sector each) */
#define RED_FY 128 /* and partial rows merged at once */

KERNEL void reduce_rows_vec(const GLOBAL data_t* RESTRICT x, GLOBAL data_t* RESTRICT y, GLOBAL int* RESTRICT idx,
                            i64 nout, i64 L, RED_KEPT_ARGS, RED_STRIDES(xs), RED_STRIDES(ys), int op,
                            int nanprop, int want_idx, acc_t alpha, acc_t beta, int read_y)
{
    LOCAL acc_t red_v[RED_GROUP];
    LOCAL i64 red_i[RED_GROUP];
    const int tid = LOCAL_ID0, lane = tid % RED_TEAM, team = tid / RED_TEAM;
    const i64 nblocks = (nout + RED_ROWS - 1) / RED_ROWS;
    const int va = ALIGNED16(x);
    const i64 nv = L / VEC;
    for(i64 blk = GROUP_ID0; blk < nblocks; blk += RED_NUM_GROUPS0)
    {
        const i64 o = blk * RED_ROWS + team;
        const int live = o < nout;
        RED_KEPT_OFFSETS(live ? o : 0, xb, yo)
        acc_t acc = red_init(op);
        i64 ai = -1;
        if(live)
        {
            i64 jv = lane;
            for(; jv + 3 * RED_TEAM < nv; jv += 4 * RED_TEAM) /* four 16-byte loads in flight */
            {
                float v[4][VEC];
                UNROLL
                for(int u = 0; u < 4; ++u)
                {
                    if(va)
                        load_vec(x, xb + (jv + u * RED_TEAM) * VEC, v[u]);
                    else
                        for(int e = 0; e < VEC; ++e)
                            v[u][e] = LOAD(x, xb + (jv + u * RED_TEAM) * VEC + e);
                }
                UNROLL
                for(int u = 0; u < 4; ++u)
                    for(int e = 0; e < VEC; ++e)
                        red_step(&acc, &ai, v[u][e], (jv + u * RED_TEAM) * VEC + e, op, nanprop);
            }
            for(; jv < nv; jv += RED_TEAM)
            {
                float v0[VEC];
                if(va)
                    load_vec(x, xb + jv * VEC, v0);
                else
                    for(int e = 0; e < VEC; ++e)
                        v0[e] = LOAD(x, xb + jv * VEC + e);
                for(int e = 0; e < VEC; ++e)
                    red_step(&acc, &ai, v0[e], jv * VEC + e, op, nanprop);
            }
        }
#if !defined(__OPENCL_VERSION__) && RED_TEAM <= 32
        /* a team within a warp: butterfly merges through shuffles, no local memory or barrier (the
           merge is symmetric: ties go to the lower position, so every lane ends the same) */
        ai = ai < 0 ? (i64)1 << 62 : ai;
        UNROLL
        for(int sft = RED_TEAM / 2; sft > 0; sft >>= 1)
        {
            const acc_t b = __shfl_xor_sync(0xffffffffu, acc, sft);
            const i64 bi = __shfl_xor_sync(0xffffffffu, (long long)ai, sft);
            red_merge(&acc, &ai, b, bi, op, nanprop);
        }
        if(live && lane == 0)
            red_finish(y, idx, yo, acc, ai == (i64)1 << 62 ? -1 : ai, op, L, alpha, beta, read_y, want_idx);
        continue;
#endif
        BARRIER();
        red_v[tid] = acc;
        red_i[tid] = ai < 0 ? (i64)1 << 62 : ai;
        BARRIER();
        for(int s = RED_TEAM / 2; s > 0; s >>= 1)
        {
            if(lane < s)
            {
                acc_t a = red_v[tid];
                i64 b = red_i[tid];
                red_merge(&a, &b, red_v[tid + s], red_i[tid + s], op, nanprop);
                red_v[tid] = a;
                red_i[tid] = b;
            }
            BARRIER();
        }
        if(live && lane == 0)
        {
            const i64 bi = red_i[tid];
            red_finish(y, idx, yo, red_v[tid], bi == (i64)1 << 62 ? -1 : bi, op, L, alpha, beta, read_y,
                       want_idx);
        }
    }
}

KERNEL void reduce_cols_vec_partial(const GLOBAL data_t* RESTRICT x, GLOBAL acc_t* RESTRICT pv,
                                    GLOBAL int* RESTRICT pi, i64 pi_off, i64 R, i64 K, i64 chunk, int op,
                                    int nanprop)
{
    const i64 S = (R + chunk - 1) / chunk, KV = K / VEC;
    const int va = ALIGNED16(x);
    for(i64 t = GLOBAL_ID0; t < S * KV; t += GLOBAL_SIZE0)
    {
        const i64 s = t / KV, k = (t - s * KV) * VEC;
        const i64 r0 = s * chunk, r1 = r0 + chunk < R ? r0 + chunk : R;
        acc_t acc[VEC], comp[VEC];
        i64 ai[VEC];
        UNROLL
        for(int e = 0; e < VEC; ++e)
        {
            acc[e] = red_init(op);
            comp[e] = (acc_t)0;
            ai[e] = -1;
        }
#if RED_VALUES_OP
        /* RED_VALUES_OP (no indices asked; CUDA): the values alone, an fminf / fmaxf an element
           (they skip NaN, as red_step without nanprop; with nanprop a NaN seen makes the result
           NaN, as red_step's). The position written is the chunk's first row where an element
           counted (-1 where none did): the final merge compares the same values as before. */
        int seen[VEC];
        UNROLL
        for(int e = 0; e < VEC; ++e)
            seen[e] = 0;
#endif
        for(i64 r = r0; r < r1; r += RED_UNROLL)
        {
            float v[RED_UNROLL][VEC];
            UNROLL
            for(int u = 0; u < RED_UNROLL; ++u)
            {
                if(r + u < r1 && va)
                    load_vec(x, (r + u) * K + k, v[u]);
                else if(r + u < r1)
                    UNROLL
                    for(int e = 0; e < VEC; ++e)
                        v[u][e] = LOAD(x, (r + u) * K + k + e);
            }
#if RED_VALUES_OP
            UNROLL
            for(int u = 0; u < RED_UNROLL; ++u)
                if(r + u < r1)
                    UNROLL
                    for(int e = 0; e < VEC; ++e)
                    {
                        const float xv = RED_VALUES_OP == 4 ? fabsf(v[u][e]) : v[u][e];
                        seen[e] |= xv == xv ? 1 : 2; /* 2: a NaN */
                        acc[e] = RED_VALUES_OP == 2 ? fminf(acc[e], xv) : fmaxf(acc[e], xv);
                    }
#else
            UNROLL
            for(int u = 0; u < RED_UNROLL; ++u)
                if(r + u < r1)
                    UNROLL
                    for(int e = 0; e < VEC; ++e)
                        red_fold(&acc[e], &comp[e], &ai[e], v[u][e], r + u, op, nanprop);
#endif
        }
#if RED_VALUES_OP
        UNROLL
        for(int e = 0; e < VEC; ++e)
        {
            if(nanprop && (seen[e] & 2))
                acc[e] = __int_as_float(0x7fc00000);
            ai[e] = (seen[e] & 1) || (nanprop && (seen[e] & 2)) ? r0 : -1;
        }
#endif
        UNROLL
        for(int e = 0; e < VEC; ++e)
        {
            pv[s * K + k + e] = acc[e];
            pi[pi_off + s * K + k + e] = (int)ai[e];
        }
    }
}

KERNEL void reduce_cols_tree_final(const GLOBAL acc_t* RESTRICT pv, const GLOBAL int* RESTRICT pi, i64 pi_off,
                                   GLOBAL data_t* RESTRICT y, GLOBAL int* RESTRICT idx, i64 R, i64 K, i64 S,
                                   int op, int nanprop, int want_idx, acc_t alpha, acc_t beta, int read_y)
{
    LOCAL acc_t tv[RED_FY * RED_FX];
    LOCAL i64 ti[RED_FY * RED_FX];
    const i64 none = (i64)1 << 62;
    const int lx = LOCAL_ID0, ly = LOCAL_ID1;
    const i64 k = (i64)GROUP_ID0 * RED_FX + lx;
    acc_t acc = red_init(op);
    i64 ai = none;
    if(k < K)
        for(i64 s = ly; s < S; s += RED_FY)
        {
            const int j = pi[pi_off + s * K + k];
            red_merge(&acc, &ai, pv[s * K + k], j < 0 ? none : (i64)j, op, nanprop);
        }
    tv[ly * RED_FX + lx] = acc;
    ti[ly * RED_FX + lx] = ai;
    BARRIER();
    for(int h = RED_FY / 2; h > 0; h >>= 1)
    {
        if(ly < h)
        {
            acc_t a = tv[ly * RED_FX + lx];
            i64 b = ti[ly * RED_FX + lx];
            red_merge(&a, &b, tv[(ly + h) * RED_FX + lx], ti[(ly + h) * RED_FX + lx], op, nanprop);
            tv[ly * RED_FX + lx] = a;
            ti[ly * RED_FX + lx] = b;
        }
        BARRIER();
    }
    if(ly == 0 && k < K)
        red_finish(y, idx, k, tv[lx], ti[lx] == none ? -1 : ti[lx], op, R, alpha, beta, read_y, want_idx);
}
#endif
