/* Layer norm over contiguous rows held by a team of up to a warp (LayerNormFwdWarp /
   LayerNormBwdWarp, solvers/norm/ln_warp.py).

   A team of LNW_TEAM work items (a warp or part of one on CUDA) takes one row of L elements, L a
   multiple of VEC (16 bytes of data): work item `lane` holds the chunks lane, lane + LNW_TEAM, ...
   (LNW_PER of them, a compile-time count, kept in registers as loaded: on CUDA the raw 16-byte
   words, 4 registers a chunk whatever the type). A work-group of LNW_GROUP work items has
   LNW_ROWS teams; the sums of a row are team sums (shuffles on CUDA, no barrier), so a row is
   read once, written once, and no team waits for another.

   Forward: statistics shifted by the row's first element K (as ln_rows_fwd: exact near a large
   mean), the mean of x - K, then the sum of squared deviations from it (two passes over the
   registers, no cancellation); y = (x - mean) * rstd (* w + b); mean = K + that mean, rstd.

   Backward, from the saved mean and rstd: xhat = (x - mean) * rstd, g = dy * w,
     dx = rstd * (g - sum(g) / L - xhat * sum(g xhat) / L).
   The weight gradients' sums over rows, dy * xhat and dy, are kept per column in each work item's
   registers over the rows its team visits (its columns are the same in every row), then added
   over the work-group's teams in a fixed order and written as one partial row pair,
   ws[(group * 2 + s) * L + j]; ln_pgrad_finish (norm.h) adds up the work-groups' pairs in a
   fixed order: deterministic. The grid is persistent (a few work-groups an SM), so there are few
   partial rows. LNW_ACC_SHARED 1 keeps the column sums in local memory instead, a slice a team
   with the lanes innermost (no bank conflicts), for more resident warps at fewer registers (OpenCL
   always adds the teams' sums from such slices).

   Weights, bias, mean and rstd have x's type (layer norm's parameters do). */
#ifndef MIOPY_LN_WARP_H
#define MIOPY_LN_WARP_H
#ifndef NORM_ONLY
#define NORM_ONLY 0 /* only norm.h's types and helpers */
#endif
#include "common/norm.h"
#include "common/raw16.h"
#include "common/team_reduce.h"

#ifndef LNW_TEAM
#define LNW_TEAM 32
#endif
#ifndef LNW_PER
#define LNW_PER 4
#endif
#ifndef LNW_GROUP
#define LNW_GROUP 128
#endif
#ifndef LNW_MIN_BLOCKS
#define LNW_MIN_BLOCKS 1 /* work-groups an SM that __launch_bounds__ guarantees */
#endif
#ifndef LNW_ACC_SHARED
#define LNW_ACC_SHARED 0 /* backward: the column sums in local memory (see above) */
#endif
#define LNW_ROWS (LNW_GROUP / LNW_TEAM)
#define LNW_LMAX (LNW_TEAM * LNW_PER * VEC) /* the longest row */
#if LNW_ACC_SHARED || defined(__OPENCL_VERSION__)
#define LNW_SLICED 1 /* a slice of local memory a team for the column sums */
#else
#define LNW_SLICED 0
#endif
/* slot of team t's sum s (0: dy xhat, 1: dy) of element e of chunk k of work item l */
#define LNW_AIDX(t, s, k, e, l) (((((t) * 2 + (s)) * LNW_PER + (k)) * VEC + (e)) * LNW_TEAM + (l))

#ifdef __OPENCL_VERSION__
#define LNW_BOUNDS
#define LNW_NUM_GROUPS ((i64)get_num_groups(0))
typedef struct
{
    float f[VEC];
} lnw_raw;
DEVICE_FN lnw_raw lnw_ld(const GLOBAL data_t* p, i64 off, int va)
{
    (void)va;
    lnw_raw r;
    load_vec(p, off, r.f);
    return r;
}
DEVICE_FN void lnw_unpack(lnw_raw r, float* v)
{
    for(int e = 0; e < VEC; ++e)
        v[e] = r.f[e];
}
DEVICE_FN lnw_raw lnw_zero(void)
{
    lnw_raw r;
    for(int e = 0; e < VEC; ++e)
        r.f[e] = 0.0f;
    return r;
}
#else
#define LNW_BOUNDS __launch_bounds__(LNW_GROUP, LNW_MIN_BLOCKS)
#define LNW_NUM_GROUPS ((i64)gridDim.x)
typedef uint4 lnw_raw;
DEVICE_FN lnw_raw lnw_ld(const data_t* p, i64 off, int va)
{ return raw16_ld(p, off, va); }
DEVICE_FN void lnw_unpack(lnw_raw t, float* v) { raw16_unpack(t, v); }
DEVICE_FN lnw_raw lnw_zero(void) { return make_uint4(0u, 0u, 0u, 0u); }
#endif

DEVICE_FN void lnw_store(GLOBAL data_t* p, i64 off, float* v, int va)
{
#ifndef __OPENCL_VERSION__
    if(va)
    {
        store_vec(p, off, v);
        return;
    }
#else
    (void)va;
#endif
    for(int e = 0; e < VEC; ++e)
        STORE(p, off + e, v[e]);
}

TR_DEFINE(lnw_team_sum, LNW_TEAM)

/* the team sums of a and b at once (one shuffle chain on CUDA) */
#ifdef __OPENCL_VERSION__
#define LNW_SUM2(a, b, red, tid)                                                                   \
    do                                                                                             \
    {                                                                                              \
        (a) = lnw_team_sum((a), 0, (red), (tid));                                                  \
        (b) = lnw_team_sum((b), 0, (red), (tid));                                                  \
    } while(0)
#else
#define LNW_SUM2(a, b, red, tid)                                                                   \
    do                                                                                             \
    {                                                                                              \
        (void)(red);                                                                               \
        UNROLL                                                                                     \
        for(int o_ = LNW_TEAM / 2; o_ > 0; o_ >>= 1)                                               \
        {                                                                                          \
            (a) += __shfl_xor_sync(0xffffffffu, (a), o_);                                          \
            (b) += __shfl_xor_sync(0xffffffffu, (b), o_);                                          \
        }                                                                                          \
    } while(0)
#endif

KERNEL void LNW_BOUNDS ln_warp_fwd(const GLOBAL data_t* RESTRICT x, GLOBAL data_t* RESTRICT y,
                                   const GLOBAL data_t* RESTRICT w, const GLOBAL data_t* RESTRICT b,
                                   GLOBAL data_t* RESTRICT mean, GLOBAL data_t* RESTRICT rstd, i64 rows, int L,
                                   float eps, int affine)
{
    LOCAL float red[LNW_GROUP];
    const int tid = LOCAL_ID0, lane = tid % LNW_TEAM, team = tid / LNW_TEAM;
    const int nchunks = L / VEC;
    const int va = ALIGNED16(x) && ALIGNED16(y);
    const int wa = ALIGNED16(w) && ALIGNED16(b);
    const float inv_l = 1.0f / (float)L;
    const i64 nblocks = (rows + LNW_ROWS - 1) / LNW_ROWS;
    for(i64 blk = GROUP_ID0; blk < nblocks; blk += LNW_NUM_GROUPS)
    {
        const i64 row = blk * LNW_ROWS + team;
        const int live = row < rows;
        const i64 base = live ? row * L : 0;
        lnw_raw raw[LNW_PER];
        UNROLL
        for(int k = 0; k < LNW_PER; ++k)
        {
            const int c = lane + k * LNW_TEAM;
            raw[k] = (live && c < nchunks) ? lnw_ld(x, base + (i64)c * VEC, va) : lnw_zero();
        }
        const float shift = live ? LOAD(x, base) : 0.0f;
        float s = 0.0f;
        UNROLL
        for(int k = 0; k < LNW_PER; ++k)
        {
            if(lane + k * LNW_TEAM >= nchunks)
                continue;
            float v[VEC];
            lnw_unpack(raw[k], v);
            UNROLL
            for(int e = 0; e < VEC; ++e)
                s += v[e] - shift;
        }
        const float m = lnw_team_sum(s, 0, red, tid) * inv_l; /* mean - shift */
        float s2 = 0.0f;
        UNROLL
        for(int k = 0; k < LNW_PER; ++k)
        {
            if(lane + k * LNW_TEAM >= nchunks)
                continue;
            float v[VEC];
            lnw_unpack(raw[k], v);
            UNROLL
            for(int e = 0; e < VEC; ++e)
            {
                const float d = (v[e] - shift) - m;
                s2 += d * d;
            }
        }
        const float r = NORM_RSQRT(lnw_team_sum(s2, 0, red, tid) * inv_l + eps);
        UNROLL
        for(int k = 0; k < LNW_PER; ++k)
        {
            const int c = lane + k * LNW_TEAM;
            if(!(live && c < nchunks))
                continue;
            float v[VEC];
            lnw_unpack(raw[k], v);
            UNROLL
            for(int e = 0; e < VEC; ++e)
                v[e] = ((v[e] - shift) - m) * r;
            if(affine)
            {
                float wv[VEC], bv[VEC];
                lnw_unpack(lnw_ld(w, (i64)c * VEC, wa), wv);
                lnw_unpack(lnw_ld(b, (i64)c * VEC, wa), bv);
                UNROLL
                for(int e = 0; e < VEC; ++e)
                    v[e] = v[e] * wv[e] + bv[e];
            }
            lnw_store(y, base + (i64)c * VEC, v, va);
        }
        if(live && lane == 0)
        {
            STORE(mean, row, shift + m);
            STORE(rstd, row, r);
        }
    }
}

KERNEL void LNW_BOUNDS ln_warp_bwd(const GLOBAL data_t* RESTRICT x, const GLOBAL data_t* RESTRICT dy,
                                   const GLOBAL data_t* RESTRICT w, const GLOBAL data_t* RESTRICT mean,
                                   const GLOBAL data_t* RESTRICT rstd, GLOBAL data_t* RESTRICT dx,
                                   GLOBAL float* RESTRICT ws, i64 rows, int L, int affine)
{
    LOCAL float red[LNW_GROUP];
#if LNW_SLICED
    LOCAL float part[2 * LNW_ROWS * LNW_LMAX];
#else
    LOCAL float part[2 * LNW_LMAX];
#endif
    const int tid = LOCAL_ID0, lane = tid % LNW_TEAM, team = tid / LNW_TEAM;
    const int nchunks = L / VEC;
    const int va = ALIGNED16(x) && ALIGNED16(dy) && ALIGNED16(dx);
    const int wa = ALIGNED16(w);
    const float inv_l = 1.0f / (float)L;
#if LNW_ACC_SHARED /* a work item's own slots: no barrier until the sums are added */
#define LNW_AW(k, e) part[LNW_AIDX(team, 0, k, e, lane)]
#define LNW_AB(k, e) part[LNW_AIDX(team, 1, k, e, lane)]
#else
    float aw[LNW_PER][VEC], ab[LNW_PER][VEC];
#define LNW_AW(k, e) aw[k][e]
#define LNW_AB(k, e) ab[k][e]
#endif
    UNROLL
    for(int k = 0; k < LNW_PER; ++k)
        UNROLL
        for(int e = 0; e < VEC; ++e)
            LNW_AW(k, e) = LNW_AB(k, e) = 0.0f;
    const i64 nblocks = (rows + LNW_ROWS - 1) / LNW_ROWS;
    for(i64 blk = GROUP_ID0; blk < nblocks; blk += LNW_NUM_GROUPS)
    {
        const i64 row = blk * LNW_ROWS + team;
        const int live = row < rows;
        const i64 base = live ? row * L : 0;
        lnw_raw rx[LNW_PER], rg[LNW_PER];
        UNROLL
        for(int k = 0; k < LNW_PER; ++k)
        {
            const int c = lane + k * LNW_TEAM;
            const int in = live && c < nchunks;
            rx[k] = in ? lnw_ld(x, base + (i64)c * VEC, va) : lnw_zero();
            rg[k] = in ? lnw_ld(dy, base + (i64)c * VEC, va) : lnw_zero();
        }
        const float m = live ? LOAD(mean, row) : 0.0f;
        const float r = live ? LOAD(rstd, row) : 0.0f;
        float sg = 0.0f, sgx = 0.0f;
        UNROLL
        for(int k = 0; k < LNW_PER; ++k)
        {
            const int c = lane + k * LNW_TEAM;
            if(c >= nchunks)
                continue;
            float xv[VEC], gv[VEC], wv[VEC];
            lnw_unpack(rx[k], xv);
            lnw_unpack(rg[k], gv);
            if(affine)
                lnw_unpack(lnw_ld(w, (i64)c * VEC, wa), wv);
            UNROLL
            for(int e = 0; e < VEC; ++e)
            {
                /* dead rows hold zeros and r = 0: they add nothing */
                const float h = (xv[e] - m) * r, d = gv[e];
                LNW_AW(k, e) += d * h;
                LNW_AB(k, e) += d;
                const float g = affine ? d * wv[e] : d;
                sg += g;
                sgx += g * h;
            }
        }
        LNW_SUM2(sg, sgx, red, tid);
        sg *= inv_l;
        sgx *= inv_l;
        UNROLL
        for(int k = 0; k < LNW_PER; ++k)
        {
            const int c = lane + k * LNW_TEAM;
            if(!(live && c < nchunks))
                continue;
            float xv[VEC], gv[VEC], wv[VEC];
            lnw_unpack(rx[k], xv);
            lnw_unpack(rg[k], gv);
            if(affine)
                lnw_unpack(lnw_ld(w, (i64)c * VEC, wa), wv);
            UNROLL
            for(int e = 0; e < VEC; ++e)
            {
                const float h = (xv[e] - m) * r;
                const float g = affine ? gv[e] * wv[e] : gv[e];
                xv[e] = r * (g - sg - h * sgx);
            }
            lnw_store(dx, base + (i64)c * VEC, xv, va);
        }
    }
    if(!affine)
        return; /* uniform across the work-group */
    GLOBAL float* out = ws + (i64)GROUP_ID0 * 2 * L;
#if LNW_SLICED
    /* every team's sums in its slice of part, then each column added over the teams in team
       order (PoCL does not take the CUDA path's barrier inside a loop below) */
#if !LNW_ACC_SHARED
    for(int k = 0; k < LNW_PER; ++k)
        for(int e = 0; e < VEC; ++e)
        {
            part[LNW_AIDX(team, 0, k, e, lane)] = aw[k][e];
            part[LNW_AIDX(team, 1, k, e, lane)] = ab[k][e];
        }
#endif
    BARRIER();
    for(int j = tid; j < L; j += LNW_GROUP)
    {
        const int c = j / VEC, e = j % VEC, l = c % LNW_TEAM, k = c / LNW_TEAM;
        float a = 0.0f, bsum = 0.0f;
        for(int t = 0; t < LNW_ROWS; ++t)
        {
            a += part[LNW_AIDX(t, 0, k, e, l)];
            bsum += part[LNW_AIDX(t, 1, k, e, l)];
        }
        out[j] = a;
        out[L + j] = bsum;
    }
#else
    /* the teams' columns added in team order into part, then one partial row pair */
    for(int t = 0; t < LNW_ROWS; ++t)
    {
        if(team == t)
            UNROLL
            for(int k = 0; k < LNW_PER; ++k)
            {
                const int c = lane + k * LNW_TEAM;
                if(c >= nchunks)
                    continue;
                UNROLL
                for(int e = 0; e < VEC; ++e)
                {
                    const int j = c * VEC + e;
                    part[j] = t ? part[j] + aw[k][e] : aw[k][e];
                    part[LNW_LMAX + j] = t ? part[LNW_LMAX + j] + ab[k][e] : ab[k][e];
                }
            }
        BARRIER();
    }
    for(int j = tid; j < L; j += LNW_GROUP)
    {
        out[j] = part[j];
        out[L + j] = part[LNW_LMAX + j];
    }
#endif
}

#endif
