/* Softmax forward over contiguous rows held in registers (the GPU kernel of SoftmaxRowsWarp).

   A team of SMW_TEAM work items (a warp or part of one on CUDA) takes one row of L elements,
   L a multiple of VEC and the tensors 16-byte aligned: work item `lane` holds the chunks
   lane, lane + SMW_TEAM, ... (SMW_PER of them, a compile-time count, so they stay in registers;
   chunks past the row are masked). The row's maximum comes first (no exp), then exp(x - max) once
   per element, kept in the registers for the sum and the scaling: one read and one write per
   element and one exp. exp is 2^((x - max) log2 e) with the product rounded once (fma). A row
   whose leading values are -inf (attention masks) gives 0 there; a row of only -inf gives NaN
   (0 / 0), as the reference does. */
#include "common/team_reduce.h"
#include "common/vec.h"

#ifndef SMW_TEAM
#define SMW_TEAM 32
#endif
#ifndef SMW_PER
#define SMW_PER 2
#endif
#define SMW_GROUP 256
#define SMW_ROWS (SMW_GROUP / SMW_TEAM)

#ifdef __OPENCL_VERSION__
#define SMW_NEG_INF (-INFINITY)
#define SMW_EXP2 exp2
#define SMW_LOG2 log2
#define SMW_FMA fma
#define SMW_NUM_GROUPS0 ((long)get_num_groups(0))
#else
#define SMW_NEG_INF (-__int_as_float(0x7f800000))
#define SMW_EXP2 exp2f
#define SMW_LOG2 log2f
#define SMW_FMA fmaf
#define SMW_NUM_GROUPS0 ((long long)gridDim.x)
#endif
#define SMW_LOG2E 1.4426950408889634f
#define SMW_LN2 0.6931471805599453f

TR_DEFINE(smw_team, SMW_TEAM)

KERNEL void softmax_fwd_warp(const GLOBAL data_t* RESTRICT x, GLOBAL data_t* RESTRICT y, i64 rows, int L,
                             int log_mode, float alpha, float beta, int read_y)
{
    LOCAL float red[SMW_GROUP];
    const int tid = LOCAL_ID0, lane = tid % SMW_TEAM, team = tid / SMW_TEAM;
    const int nchunks = L / VEC;
    const int va = ALIGNED16(x) && ALIGNED16(y);
    const i64 nblocks = (rows + SMW_ROWS - 1) / SMW_ROWS;
    for(i64 blk = GROUP_ID0; blk < nblocks; blk += SMW_NUM_GROUPS0)
    {
        const i64 row = blk * SMW_ROWS + team;
        const int live = row < rows;
        const i64 base = live ? row * L : 0;
        float v[SMW_PER][VEC];
        float m = SMW_NEG_INF;
        UNROLL
        for(int k = 0; k < SMW_PER; ++k)
        {
            const int c = lane + k * SMW_TEAM;
            if(live && c < nchunks && va)
                load_vec(x, base + (i64)c * VEC, v[k]);
            else if(live && c < nchunks)
                for(int j = 0; j < VEC; ++j)
                    v[k][j] = LOAD(x, base + (i64)c * VEC + j);
            else
                for(int j = 0; j < VEC; ++j)
                    v[k][j] = SMW_NEG_INF;
            UNROLL
            for(int j = 0; j < VEC; ++j)
                m = F_MAX(m, v[k][j]);
        }
        m = smw_team(m, 1, red, tid);
        const float ml = m * SMW_LOG2E;
        float s = 0.0f;
        UNROLL
        for(int k = 0; k < SMW_PER; ++k)
        {
            UNROLL
            for(int j = 0; j < VEC; ++j)
            {
                /* masked slots are -inf: exp2(-inf) = 0 (a row of only -inf: NaN, as 0 / 0) */
                const float e = SMW_EXP2(SMW_FMA(v[k][j], SMW_LOG2E, -ml));
                s += e;
                if(!log_mode)
                    v[k][j] = e;
            }
        }
        s = smw_team(s, 0, red, tid);
        const float scale = alpha / s, lg = m + SMW_LOG2(s) * SMW_LN2;
        UNROLL
        for(int k = 0; k < SMW_PER; ++k)
        {
            const int c = lane + k * SMW_TEAM;
            if(!(live && c < nchunks))
                continue;
            const i64 off = base + (i64)c * VEC;
            float old[VEC];
            if(read_y && va)
                load_vec(y, off, old);
            else if(read_y)
                for(int j = 0; j < VEC; ++j)
                    old[j] = LOAD(y, off + j);
            UNROLL
            for(int j = 0; j < VEC; ++j)
            {
                const float r = log_mode ? alpha * (v[k][j] - lg) : v[k][j] * scale;
                v[k][j] = read_y ? r + beta * old[j] : r;
            }
            if(va)
                store_vec(y, off, v[k]);
            else
                for(int j = 0; j < VEC; ++j)
                    STORE(y, off + j, v[k][j]);
        }
    }
}

#ifndef __OPENCL_VERSION__
/* Softmax backward over the same rows (CUDA): the team holds its row of y and dy in registers,
   takes dot = sum(y dy) (log: sum(dy)) by shuffles, then writes dx = y (dy - dot) (log:
   dy - exp(y) dot) from the registers: y and dy read once, dx written once, as softmax_bwd_rows
   computes it. */
KERNEL void softmax_bwd_warp(const GLOBAL data_t* RESTRICT y, const GLOBAL data_t* RESTRICT dy,
                             GLOBAL data_t* RESTRICT dx, i64 rows, int L, int log_mode, float alpha, float beta,
                             int read_dx)
{
    LOCAL float red[SMW_GROUP];
    const int tid = LOCAL_ID0, lane = tid % SMW_TEAM, team = tid / SMW_TEAM;
    const int nchunks = L / VEC;
    const int va = ALIGNED16(y) && ALIGNED16(dy) && ALIGNED16(dx);
    const i64 nblocks = (rows + SMW_ROWS - 1) / SMW_ROWS;
    for(i64 blk = GROUP_ID0; blk < nblocks; blk += SMW_NUM_GROUPS0)
    {
        const i64 row = blk * SMW_ROWS + team;
        const int live = row < rows;
        const i64 base = live ? row * L : 0;
        float yv[SMW_PER][VEC], gv[SMW_PER][VEC];
        UNROLL
        for(int k = 0; k < SMW_PER; ++k)
        {
            const int c = lane + k * SMW_TEAM;
            const i64 off = base + (i64)c * VEC;
            if(live && c < nchunks && va)
            {
                load_vec(y, off, yv[k]);
                load_vec(dy, off, gv[k]);
            }
            else
                UNROLL
                for(int j = 0; j < VEC; ++j)
                {
                    const int in = live && c < nchunks;
                    yv[k][j] = in ? LOAD(y, off + j) : 0.0f;
                    gv[k][j] = in ? LOAD(dy, off + j) : 0.0f;
                }
        }
        float dot = 0.0f;
        UNROLL
        for(int k = 0; k < SMW_PER; ++k)
            UNROLL
            for(int j = 0; j < VEC; ++j)
                dot += log_mode ? gv[k][j] : yv[k][j] * gv[k][j]; /* masked slots are 0 */
        dot = smw_team(dot, 0, red, tid);
        UNROLL
        for(int k = 0; k < SMW_PER; ++k)
        {
            const int c = lane + k * SMW_TEAM;
            if(!(live && c < nchunks))
                continue;
            const i64 off = base + (i64)c * VEC;
            float old[VEC];
            if(read_dx && va)
                load_vec(dx, off, old);
            else if(read_dx)
                for(int j = 0; j < VEC; ++j)
                    old[j] = LOAD(dx, off + j);
            UNROLL
            for(int j = 0; j < VEC; ++j)
            {
                const float r = log_mode ? gv[k][j] - F_EXP(yv[k][j]) * dot : yv[k][j] * (gv[k][j] - dot);
                gv[k][j] = read_dx ? alpha * r + beta * old[j] : alpha * r;
            }
            if(va)
                store_vec(dx, off, gv[k]);
            else
                for(int j = 0; j < VEC; ++j)
                    STORE(dx, off + j, gv[k][j]);
        }
    }
}
#endif
