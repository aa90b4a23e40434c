/* Softmax forward and backward (see miopy/problem/softmax.py), computed in fp32.

   *_rows: every group is SMAX_TEAM-strided over one contiguous row of L elements (instance mode
   on a packed tensor, channel mode where C is innermost or H = W = 1). A work-group of
   SMAX_GROUP threads takes SMAX_GROUP / SMAX_TEAM rows; each thread reads chunks of VEC elements
   (16-byte vectors when vec_ok), keeping SMAX_PER chunks in registers so that the data are read
   once and written once (SMAX_PER 0: read twice, the second time from cache). Team reductions use
   warp shuffles on CUDA (teams of up to 32), local memory otherwise. Forward reduces the maximum and
   the sum of exp(x - max) in one online pass.
   *_cols: channel mode with C strided by inner (NCHW): one work item per (n, position), reading
   along C; consecutive work items read consecutive addresses.
   *_strided: any strides, one work item per group (the fallback). */
#include "common/vec.h"

#ifndef SMAX_TEAM
#define SMAX_TEAM 32
#endif
#ifndef SMAX_PER
#define SMAX_PER 0
#endif
#define SMAX_GROUP 256
#define SMAX_ROWS (SMAX_GROUP / SMAX_TEAM)

#ifdef __OPENCL_VERSION__
#define SMAX_LPTR __local
#define SMAX_NEG_INF (-INFINITY)
#define SMAX_LOGF log
#define NUM_GROUPS0 ((long)get_num_groups(0))
#else
#define SMAX_LPTR
#define SMAX_NEG_INF (-__int_as_float(0x7f800000))
#define SMAX_LOGF logf
#define NUM_GROUPS0 ((long long)gridDim.x)
#endif

/* CUDA keeps the cached chunks in registers only when the chunk loops unroll (else the cache
   lives in local memory): unrolled explicitly where the count is a constant */
#if SMAX_PER > 0
#define SMAX_UNROLL UNROLL
#define SMAX_NPER SMAX_PER
#define SMAX_SLOT(k) (k)
#define SMAX_SLOTS SMAX_PER
#else
#define SMAX_UNROLL
#define SMAX_NPER per
#define SMAX_SLOT(k) 0
#define SMAX_SLOTS 1
#endif

/* op 0: max, 1: sum over the team; every thread of the work-group must call it */
DEVICE_FN float smax_team(float v, int op, SMAX_LPTR float* red, int tid, int lane)
{
#if !defined(__OPENCL_VERSION__) && SMAX_TEAM <= 32
    UNROLL
    for(int o = SMAX_TEAM / 2; o > 0; o >>= 1)
    {
        const float w = __shfl_xor_sync(0xffffffffu, v, o);
        v = op == 0 ? fmaxf(v, w) : v + w;
    }
    return v;
#else
    BARRIER();
    red[tid] = v;
    BARRIER();
    for(int s = SMAX_TEAM / 2; s > 0; s >>= 1)
    {
        if(lane < s)
        {
            const float w = red[tid + s];
            red[tid] = op == 0 ? F_MAX(red[tid], w) : red[tid] + w;
        }
        BARRIER();
    }
    return red[tid - lane];
#endif
}

DEVICE_FN int smax_count(int c, int L)
{
    const int r = L - c * VEC;
    return r <= 0 ? 0 : (r < VEC ? r : VEC);
}

DEVICE_FN void smax_load(const GLOBAL data_t* p, i64 base, int c, int n, int vec_ok, float* v)
{
    if(n == VEC && vec_ok)
        load_vec(p, base + (i64)c * VEC, v);
    else
        for(int j = 0; j < VEC; ++j)
            v[j] = j < n ? LOAD(p, base + (i64)c * VEC + j) : 0.0f;
}

DEVICE_FN void smax_store(GLOBAL data_t* p, i64 base, int c, int n, int vec_ok, const float* v)
{
    if(n == VEC && vec_ok)
        store_vec(p, base + (i64)c * VEC, v);
    else
        for(int j = 0; j < VEC; ++j) /* a constant count: v's indices stay constant (registers) */
            if(j < n)
                STORE(p, base + (i64)c * VEC + j, v[j]);
}

/* online (max, sum of exp(v - max)) update with one value */
#define SMAX_ONLINE(m, s, v)                                  \
    do                                                        \
    {                                                         \
        const float v_ = (v);                                 \
        if(v_ > (m))                                          \
        {                                                     \
            (s) = (s) * F_EXP((m) - v_);                      \
            (m) = v_;                                         \
        }                                                     \
        /* m is -inf only while every value so far is -inf:   \
           they add 0 (exp(-inf - -inf) would be NaN) */      \
        (s) += (m) == SMAX_NEG_INF ? 0.0f : F_EXP(v_ - (m));  \
    } while(0)

KERNEL void softmax_fwd_rows(const GLOBAL data_t* RESTRICT x, GLOBAL data_t* RESTRICT y, i64 rows, int L,
                             int vec_ok, int log_mode, float alpha, float beta, int read_y)
{
    LOCAL float red[SMAX_GROUP];
    const int tid = LOCAL_ID0, lane = tid % SMAX_TEAM, team = tid / SMAX_TEAM;
    const int nchunks = (L + VEC - 1) / VEC;
    const int per = (nchunks + SMAX_TEAM - 1) / SMAX_TEAM;
    vec_ok = vec_ok && ALIGNED16(x) && ALIGNED16(y);
    const i64 nblocks = (rows + SMAX_ROWS - 1) / SMAX_ROWS;
    for(i64 blk = GROUP_ID0; blk < nblocks; blk += NUM_GROUPS0)
    {
        const i64 row = blk * SMAX_ROWS + team;
        const int live = row < rows;
        const i64 base = live ? row * L : 0;
        float cache[SMAX_SLOTS][VEC];
        float m = SMAX_NEG_INF, s = 0.0f;
        SMAX_UNROLL
        for(int k = 0; k < SMAX_NPER; ++k)
        {
            const int c = lane + k * SMAX_TEAM;
            const int n = live ? smax_count(c, L) : 0;
            float* v = cache[SMAX_SLOT(k)];
            smax_load(x, base, c, n, vec_ok, v);
            float cm = SMAX_NEG_INF;
            for(int j = 0; j < VEC; ++j)
                if(j < n)
                    cm = F_MAX(cm, v[j]);
            if(cm > m)
            {
                s *= F_EXP(m - cm);
                m = cm;
            }
            if(m != SMAX_NEG_INF) /* a row that starts with -inf values: they add 0, not NaN */
                for(int j = 0; j < VEC; ++j)
                    if(j < n)
                        s += F_EXP(v[j] - m);
        }
        const float mx = smax_team(m, 0, red, tid, lane);
        s = m == mx ? s : s * F_EXP(m - mx);
        const float sum = smax_team(s, 1, red, tid, lane);
        const float inv = 1.0f / sum, lg = mx + SMAX_LOGF(sum);
        SMAX_UNROLL
        for(int k = 0; k < SMAX_NPER; ++k)
        {
            const int c = lane + k * SMAX_TEAM;
            const int n = live ? smax_count(c, L) : 0;
            float* v = cache[SMAX_SLOT(k)];
#if SMAX_PER == 0
            smax_load(x, base, c, n, vec_ok, v);
#endif
            float old[VEC];
            if(read_y)
                smax_load(y, base, c, n, vec_ok, old);
            for(int j = 0; j < VEC; ++j)
            {
                const float r = log_mode ? v[j] - lg : F_EXP(v[j] - mx) * inv;
                v[j] = read_y ? alpha * r + beta * old[j] : alpha * r;
            }
            smax_store(y, base, c, n, vec_ok, v);
        }
    }
}

KERNEL void softmax_bwd_rows(const GLOBAL data_t* RESTRICT y, const GLOBAL data_t* RESTRICT dy,
                             GLOBAL data_t* RESTRICT dx, i64 rows, int L, int vec_ok, int log_mode, float alpha,
                             float beta, int read_dx)
{
    LOCAL float red[SMAX_GROUP];
    const int tid = LOCAL_ID0, lane = tid % SMAX_TEAM, team = tid / SMAX_TEAM;
    const int nchunks = (L + VEC - 1) / VEC;
    const int per = (nchunks + SMAX_TEAM - 1) / SMAX_TEAM;
    vec_ok = vec_ok && ALIGNED16(y) && ALIGNED16(dy) && ALIGNED16(dx);
    const i64 nblocks = (rows + SMAX_ROWS - 1) / SMAX_ROWS;
    for(i64 blk = GROUP_ID0; blk < nblocks; blk += NUM_GROUPS0)
    {
        const i64 row = blk * SMAX_ROWS + team;
        const int live = row < rows;
        const i64 base = live ? row * L : 0;
        float yc[SMAX_SLOTS][VEC], gc[SMAX_SLOTS][VEC];
        float dot = 0.0f;
        SMAX_UNROLL
        for(int k = 0; k < SMAX_NPER; ++k)
        {
            const int c = lane + k * SMAX_TEAM;
            const int n = live ? smax_count(c, L) : 0;
            float* yv = yc[SMAX_SLOT(k)];
            float* gv = gc[SMAX_SLOT(k)];
            smax_load(y, base, c, n, vec_ok, yv);
            smax_load(dy, base, c, n, vec_ok, gv);
            for(int j = 0; j < VEC; ++j)
                if(j < n)
                    dot += log_mode ? gv[j] : yv[j] * gv[j];
        }
        dot = smax_team(dot, 1, red, tid, lane);
        SMAX_UNROLL
        for(int k = 0; k < SMAX_NPER; ++k)
        {
            const int c = lane + k * SMAX_TEAM;
            const int n = live ? smax_count(c, L) : 0;
            float* yv = yc[SMAX_SLOT(k)];
            float* gv = gc[SMAX_SLOT(k)];
#if SMAX_PER == 0
            smax_load(y, base, c, n, vec_ok, yv);
            smax_load(dy, base, c, n, vec_ok, gv);
#endif
            float old[VEC];
            if(read_dx)
                smax_load(dx, base, c, n, vec_ok, old);
            for(int j = 0; j < VEC; ++j)
            {
                const float r = log_mode ? gv[j] - F_EXP(yv[j]) * dot : yv[j] * (gv[j] - dot);
                gv[j] = read_dx ? alpha * r + beta * old[j] : alpha * r;
            }
            smax_store(dx, base, c, n, vec_ok, gv);
        }
    }
}

KERNEL void softmax_fwd_cols(const GLOBAL data_t* RESTRICT x, GLOBAL data_t* RESTRICT y, i64 outer, int L,
                             i64 inner, int log_mode, float alpha, float beta, int read_y)
{
    for(i64 t = GLOBAL_ID0; t < outer * inner; t += GLOBAL_SIZE0)
    {
        const i64 o = t / inner;
        const i64 base = o * L * inner + (t - o * inner);
        float m = SMAX_NEG_INF, s = 0.0f;
        for(int c = 0; c < L; ++c)
            SMAX_ONLINE(m, s, LOAD(x, base + c * inner));
        const float inv = 1.0f / s, lg = m + SMAX_LOGF(s);
        for(int c = 0; c < L; ++c)
        {
            const i64 i = base + c * inner;
            const float v = LOAD(x, i);
            const float r = log_mode ? v - lg : F_EXP(v - m) * inv;
            STORE(y, i, read_y ? alpha * r + beta * LOAD(y, i) : alpha * r);
        }
    }
}

KERNEL void softmax_bwd_cols(const GLOBAL data_t* RESTRICT y, const GLOBAL data_t* RESTRICT dy,
                             GLOBAL data_t* RESTRICT dx, i64 outer, int L, i64 inner, int log_mode, float alpha,
                             float beta, int read_dx)
{
    for(i64 t = GLOBAL_ID0; t < outer * inner; t += GLOBAL_SIZE0)
    {
        const i64 o = t / inner;
        const i64 base = o * L * inner + (t - o * inner);
        float dot = 0.0f;
        for(int c = 0; c < L; ++c)
        {
            const i64 i = base + c * inner;
            dot += log_mode ? LOAD(dy, i) : LOAD(y, i) * LOAD(dy, i);
        }
        for(int c = 0; c < L; ++c)
        {
            const i64 i = base + c * inner;
            const float yv = LOAD(y, i), gv = LOAD(dy, i);
            const float r = log_mode ? gv - F_EXP(yv) * dot : yv * (gv - dot);
            STORE(dx, i, read_dx ? alpha * r + beta * LOAD(dx, i) : alpha * r);
        }
    }
}

/* the fallback: group g, element e of it -> offset with strides s (N,C,D,H,W) */
#define SMAX_STRIDES(t) i64 t##0, i64 t##1, i64 t##2, i64 t##3, i64 t##4
#define SMAX_OFF(t) (n_ * t##0 + c_ * t##1 + d_ * t##2 + h_ * t##3 + w_ * t##4)
#define SMAX_COORDS(g, e)                                                         \
    i64 n_, c_, d_, h_, w_;                                                       \
    if(channel)                                                                   \
    {                                                                             \
        i64 r_ = (g);                                                             \
        w_ = r_ % W; r_ /= W; h_ = r_ % H; r_ /= H; d_ = r_ % D; n_ = r_ / D;      \
        c_ = (e);                                                                 \
    }                                                                             \
    else                                                                          \
    {                                                                             \
        i64 r_ = (e);                                                             \
        w_ = r_ % W; r_ /= W; h_ = r_ % H; r_ /= H; d_ = r_ % D; c_ = r_ / D;      \
        n_ = (g);                                                                 \
    }

KERNEL void softmax_fwd_strided(const GLOBAL data_t* RESTRICT x, GLOBAL data_t* RESTRICT y, int N, int C, int D,
                                int H, int W, SMAX_STRIDES(xs), SMAX_STRIDES(ys), int channel, int log_mode,
                                float alpha, float beta, int read_y)
{
    const i64 groups = channel ? (i64)N * D * H * W : (i64)N;
    const i64 L = channel ? (i64)C : (i64)C * D * H * W;
    for(i64 g = GLOBAL_ID0; g < groups; g += GLOBAL_SIZE0)
    {
        float m = SMAX_NEG_INF, s = 0.0f;
        for(i64 e = 0; e < L; ++e)
        {
            SMAX_COORDS(g, e)
            SMAX_ONLINE(m, s, LOAD(x, SMAX_OFF(xs)));
        }
        const float inv = 1.0f / s, lg = m + SMAX_LOGF(s);
        for(i64 e = 0; e < L; ++e)
        {
            SMAX_COORDS(g, e)
            const float v = LOAD(x, SMAX_OFF(xs));
            const float r = log_mode ? v - lg : F_EXP(v - m) * inv;
            const i64 o = SMAX_OFF(ys);
            STORE(y, o, read_y ? alpha * r + beta * LOAD(y, o) : alpha * r);
        }
    }
}

KERNEL void softmax_bwd_strided(const GLOBAL data_t* RESTRICT y, const GLOBAL data_t* RESTRICT dy,
                                GLOBAL data_t* RESTRICT dx, int N, int C, int D, int H, int W, SMAX_STRIDES(ys),
                                SMAX_STRIDES(gs), SMAX_STRIDES(xs), int channel, int log_mode, float alpha,
                                float beta, int read_dx)
{
    const i64 groups = channel ? (i64)N * D * H * W : (i64)N;
    const i64 L = channel ? (i64)C : (i64)C * D * H * W;
    for(i64 g = GLOBAL_ID0; g < groups; g += GLOBAL_SIZE0)
    {
        float dot = 0.0f;
        for(i64 e = 0; e < L; ++e)
        {
            SMAX_COORDS(g, e)
            const float gv = LOAD(dy, SMAX_OFF(gs));
            dot += log_mode ? gv : LOAD(y, SMAX_OFF(ys)) * gv;
        }
        for(i64 e = 0; e < L; ++e)
        {
            SMAX_COORDS(g, e)
            const float yv = LOAD(y, SMAX_OFF(ys)), gv = LOAD(dy, SMAX_OFF(gs));
            const float r = log_mode ? gv - F_EXP(yv) * dot : yv * (gv - dot);
            const i64 o = SMAX_OFF(xs);
            STORE(dx, o, read_dx ? alpha * r + beta * LOAD(dx, o) : alpha * r);
        }
    }
}

/* *_rows_cpu: the rows kernels for CPU OpenCL devices (PoCL): one work item per contiguous row,
   float8 vectors along it (common/cpu_vec.h) and a scalar tail; the row is read from cache after
   the first pass. Same arguments as *_rows less vec_ok. fp16 and bf16 data take exp as exp2_f8_16
   (under 3e-6 relative, plenty for their outputs, and cheaper than PoCL's exp). */
#if defined(__OPENCL_VERSION__) && MIOPY_DTYPE != 3
#include "common/cpu_vec.h"
#define SMAX_ROW_BUF 1024 /* softmax_fwd_rows_cpu: rows up to this long keep their exps privately */
#if MIOPY_DTYPE == 0
#define SMAX_EXP8(v) exp(v)
#else
#define SMAX_EXP8(v) exp2_f8_16((v) * 1.4426950408889634f)
#endif

KERNEL void softmax_fwd_rows_cpu(const GLOBAL data_t* RESTRICT x, GLOBAL data_t* RESTRICT y, i64 rows, int L,
                                 int log_mode, float alpha, float beta, int read_y)
{
    const i64 row = GLOBAL_ID0;
    if(row >= rows)
        return;
    const i64 base = row * L;
    const int L8 = L & ~7;
    float8 m8 = (float8)(SMAX_NEG_INF);
    for(int c = 0; c < L8; c += 8)
        m8 = fmax(m8, load_f8(x, base + c));
    float m = hmax8(m8);
    for(int c = L8; c < L; ++c)
        m = fmax(m, LOAD(x, base + c));
    /* plain softmax written alone: y keeps exp(x - max) from the sum's pass, then is scaled
       (one exp per element); else the exps are computed again */
    const int keep = !log_mode && !read_y;
    if(keep && L8 == L && L <= SMAX_ROW_BUF) /* the exps kept in a private row: y written once */
    {
        float buf[SMAX_ROW_BUF];
        float8 s8 = (float8)(0.0f);
        for(int c = 0; c < L; c += 8)
        {
            const float8 e = SMAX_EXP8(load_f8(x, base + c) - m);
            s8 += e;
            vstore8(e, 0, buf + c);
        }
        const float scale = alpha / hsum8(s8);
        for(int c = 0; c < L; c += 8)
            store_f8(y, base + c, vload8(0, buf + c) * scale);
        return;
    }
    float8 s8 = (float8)(0.0f);
    for(int c = 0; c < L8; c += 8)
    {
        const float8 e = SMAX_EXP8(load_f8(x, base + c) - m);
        s8 += e;
        if(keep)
            store_f8(y, base + c, e);
    }
    float s = hsum8(s8);
    for(int c = L8; c < L; ++c)
    {
        const float e = exp(LOAD(x, base + c) - m);
        s += e;
        if(keep)
            STORE(y, base + c, e);
    }
    const float inv = 1.0f / s, lg = m + log(s);
    if(keep) /* fp16 / bf16 y held the exps rounded: one more rounding, far under their tolerance */
    {
        const float scale = alpha * inv;
        for(int c = 0; c < L8; c += 8)
            store_f8(y, base + c, load_f8(y, base + c) * scale);
        for(int c = L8; c < L; ++c)
            STORE(y, base + c, LOAD(y, base + c) * scale);
        return;
    }
    for(int c = 0; c < L8; c += 8)
    {
        const float8 v = load_f8(x, base + c);
        float8 r = log_mode ? v - lg : SMAX_EXP8(v - m) * inv;
        r = read_y ? alpha * r + beta * load_f8(y, base + c) : alpha * r;
        store_f8(y, base + c, r);
    }
    for(int c = L8; c < L; ++c)
    {
        const float v = LOAD(x, base + c);
        const float r = log_mode ? v - lg : exp(v - m) * inv;
        STORE(y, base + c, read_y ? alpha * r + beta * LOAD(y, base + c) : alpha * r);
    }
}

KERNEL void softmax_bwd_rows_cpu(const GLOBAL data_t* RESTRICT y, const GLOBAL data_t* RESTRICT dy,
                                 GLOBAL data_t* RESTRICT dx, i64 rows, int L, int log_mode, float alpha, float beta,
                                 int read_dx)
{
    const i64 row = GLOBAL_ID0;
    if(row >= rows)
        return;
    const i64 base = row * L;
    const int L8 = L & ~7;
    float8 d8 = (float8)(0.0f);
    for(int c = 0; c < L8; c += 8)
    {
        const float8 g = load_f8(dy, base + c);
        d8 += log_mode ? g : load_f8(y, base + c) * g;
    }
    float dot = hsum8(d8);
    for(int c = L8; c < L; ++c)
    {
        const float g = LOAD(dy, base + c);
        dot += log_mode ? g : LOAD(y, base + c) * g;
    }
    for(int c = 0; c < L8; c += 8)
    {
        const float8 yv = load_f8(y, base + c), g = load_f8(dy, base + c);
        float8 r = log_mode ? g - SMAX_EXP8(yv) * dot : yv * (g - dot);
        r = read_dx ? alpha * r + beta * load_f8(dx, base + c) : alpha * r;
        store_f8(dx, base + c, r);
    }
    for(int c = L8; c < L; ++c)
    {
        const float yv = LOAD(y, base + c), g = LOAD(dy, base + c);
        const float r = log_mode ? g - exp(yv) * dot : yv * (g - dot);
        STORE(dx, base + c, read_dx ? alpha * r + beta * LOAD(dx, base + c) : alpha * r);
    }
}

/* *_cols_cpu: channel mode over NCHW-like tensors (x[o][c][p], p < inner) on CPU OpenCL devices:
   a work item takes a run of up to SMAX_COL_BLOCKS blocks of 8 neighbouring positions (float8
   along a plane, as the LRN planes kernels) and walks the channels once per pass; the work item
   of the last run also does the inner % 8 positions past the last block, one at a time. The GPU
   kernel (one scalar position a work item, a stride of inner between loads) took 60-160 times
   the time of a copy on PoCL. */
#define SMAX_COL_BLOCKS 8
#define SMAX_COL_BUF 4096 /* softmax_fwd_cols_cpu: floats of exps a work item keeps */
DEVICE_FN i64 smax_col_runs(i64 inner)
{
    const i64 blocks = inner / 8;
    return blocks > SMAX_COL_BLOCKS ? (blocks + SMAX_COL_BLOCKS - 1) / SMAX_COL_BLOCKS : 1;
}

#define SMAX_COL_ITEM                                                                 \
    const i64 runs = smax_col_runs(inner), t = GLOBAL_ID0;                           \
    if(t >= outer * runs)                                                            \
        return;                                                                      \
    const i64 o = t / runs, r = t - o * runs, blocks = inner / 8;                   \
    const i64 base = o * L * inner + r * SMAX_COL_BLOCKS * 8;                        \
    const i64 left = blocks - r * SMAX_COL_BLOCKS;                                  \
    const int nb = left < SMAX_COL_BLOCKS ? (int)(left > 0 ? left : 0) : SMAX_COL_BLOCKS;

KERNEL void softmax_fwd_cols_cpu(const GLOBAL data_t* RESTRICT x, GLOBAL data_t* RESTRICT y, i64 outer, int L,
                                 i64 inner, int log_mode, float alpha, float beta, int read_y)
{
    SMAX_COL_ITEM
    float8 m[SMAX_COL_BLOCKS], s[SMAX_COL_BLOCKS];
    for(int b = 0; b < nb; ++b)
    {
        m[b] = (float8)(SMAX_NEG_INF);
        s[b] = (float8)(0.0f);
    }
    for(int c = 0; c < L; ++c)
        for(int b = 0; b < nb; ++b)
            m[b] = fmax(m[b], load_f8(x, base + c * inner + b * 8));
    /* plain softmax whose exps fit SMAX_COL_BUF: kept from the sum's pass (one exp an element) */
    const int keep = !log_mode && nb * 8 * L <= SMAX_COL_BUF;
    float kept[SMAX_COL_BUF];
    for(int c = 0; c < L; ++c)
        for(int b = 0; b < nb; ++b)
        {
            const float8 e = SMAX_EXP8(load_f8(x, base + c * inner + b * 8) - m[b]);
            s[b] += e;
            if(keep)
                vstore8(e, 0, kept + (c * nb + b) * 8);
        }
    for(int b = 0; b < nb; ++b) /* s: the scale of the exps, or log mode's offset */
        s[b] = log_mode ? m[b] + log(s[b]) : alpha / s[b];
    for(int c = 0; c < L; ++c)
        for(int b = 0; b < nb; ++b)
        {
            const i64 i = base + c * inner + b * 8;
            float8 q;
            if(keep)
                q = vload8(0, kept + (c * nb + b) * 8) * s[b];
            else
            {
                const float8 v = load_f8(x, i);
                q = log_mode ? alpha * (v - s[b]) : SMAX_EXP8(v - m[b]) * s[b];
            }
            if(read_y)
                q += beta * load_f8(y, i);
            store_f8(y, i, q);
        }
    if(r != runs - 1)
        return;
    for(i64 p = blocks * 8; p < inner; ++p) /* the positions past the last block */
    {
        const i64 pb = o * L * inner + p;
        float mp = SMAX_NEG_INF, sp = 0.0f;
        for(int c = 0; c < L; ++c)
            mp = fmax(mp, LOAD(x, pb + c * inner));
        for(int c = 0; c < L; ++c)
            sp += exp(LOAD(x, pb + c * inner) - mp);
        const float lg = mp + log(sp), scale = alpha / sp;
        for(int c = 0; c < L; ++c)
        {
            const i64 i = pb + c * inner;
            const float v = LOAD(x, i);
            const float q = log_mode ? alpha * (v - lg) : exp(v - mp) * scale;
            STORE(y, i, read_y ? q + beta * LOAD(y, i) : q);
        }
    }
}

KERNEL void softmax_bwd_cols_cpu(const GLOBAL data_t* RESTRICT y, const GLOBAL data_t* RESTRICT dy,
                                 GLOBAL data_t* RESTRICT dx, i64 outer, int L, i64 inner, int log_mode, float alpha,
                                 float beta, int read_dx)
{
    SMAX_COL_ITEM
    float8 dot[SMAX_COL_BLOCKS];
    for(int b = 0; b < nb; ++b)
        dot[b] = (float8)(0.0f);
    for(int c = 0; c < L; ++c)
        for(int b = 0; b < nb; ++b)
        {
            const i64 i = base + c * inner + b * 8;
            const float8 g = load_f8(dy, i);
            dot[b] += log_mode ? g : load_f8(y, i) * g;
        }
    for(int c = 0; c < L; ++c)
        for(int b = 0; b < nb; ++b)
        {
            const i64 i = base + c * inner + b * 8;
            const float8 yv = load_f8(y, i), g = load_f8(dy, i);
            float8 q = alpha * (log_mode ? g - SMAX_EXP8(yv) * dot[b] : yv * (g - dot[b]));
            if(read_dx)
                q += beta * load_f8(dx, i);
            store_f8(dx, i, q);
        }
    if(r != runs - 1)
        return;
    for(i64 p = blocks * 8; p < inner; ++p)
    {
        const i64 pb = o * L * inner + p;
        float dp = 0.0f;
        for(int c = 0; c < L; ++c)
        {
            const i64 i = pb + c * inner;
            dp += log_mode ? LOAD(dy, i) : LOAD(y, i) * LOAD(dy, i);
        }
        for(int c = 0; c < L; ++c)
        {
            const i64 i = pb + c * inner;
            const float yv = LOAD(y, i), g = LOAD(dy, i);
            const float q = alpha * (log_mode ? g - exp(yv) * dp : yv * (g - dp));
            STORE(dx, i, read_dx ? q + beta * LOAD(dx, i) : q);
        }
    }
}
#endif