/* reduce_rows_warp: the additive reductions (add, avg, norm1, norm2; no indices) of contiguous
   runs, a run per team of RW_TEAM work items (a warp or part of one on CUDA, finished with
   shuffles). Each work item keeps RW_U 16-byte loads in flight with one partial sum per load slot
   (more memory parallelism and shorter sums); on CUDA the loads stay raw 16-byte words until all
   are issued (4 registers a load, not VEC floats: occupancy). RW_OP compiles the op in (the
   kernel's op argument is then ignored), else -1 takes it at run time. Included after
   common/reduce.h (red_term, red_finish, RED_KEPT_OFFSETS); the arguments are reduce_rows_vec's. */
#include "common/team_reduce.h"
#include "common/vec.h"
#include "common/raw16.h"

#ifndef RW_TEAM
#define RW_TEAM 32
#endif
#ifndef RW_U
#define RW_U 8
#endif
#ifndef RW_OP
#define RW_OP -1
#endif
#define RW_ROWS (RED_GROUP / RW_TEAM)

TR_DEFINE(rw_team, RW_TEAM)

KERNEL void reduce_rows_warp(const GLOBAL data_t* RESTRICT x, GLOBAL data_t* RESTRICT y, GLOBAL int* RESTRICT idx,
                             i64 nout, i64 L, RED_KEPT_ARGS, RED_STRIDES(xs), RED_STRIDES(ys), int op,
                             int nanprop, int want_idx, acc_t alpha, acc_t beta, int read_y)
{
    LOCAL float red[RED_GROUP];
    const int tid = LOCAL_ID0, lane = tid % RW_TEAM, team = tid / RW_TEAM;
    const i64 nblocks = (nout + RW_ROWS - 1) / RW_ROWS;
    const int va = ALIGNED16(x);
    const i64 nv = L / VEC;
    (void)nanprop;
    (void)want_idx;
    for(i64 blk = GROUP_ID0; blk < nblocks; blk += RED_NUM_GROUPS0)
    {
        const i64 o = blk * RW_ROWS + team;
        const int live = o < nout;
        RED_KEPT_OFFSETS(live ? o : 0, xb, yo)
        float part[RW_U];
        UNROLL
        for(int u = 0; u < RW_U; ++u)
            part[u] = 0.0f;
        if(RW_OP >= 0)
            op = RW_OP;
        if(live)
            for(i64 j0 = lane; j0 < nv; j0 += RW_U * RW_TEAM)
            {
#ifndef __OPENCL_VERSION__
                if(va)
                {
                    uint4 raw[RW_U];
                    UNROLL
                    for(int u = 0; u < RW_U; ++u)
                    {
                        const i64 j = j0 + u * RW_TEAM;
                        raw[u] = j < nv ? vec_ld16(x + xb + j * VEC) : make_uint4(0u, 0u, 0u, 0u);
                    }
                    UNROLL
                    for(int u = 0; u < RW_U; ++u)
                    {
                        float f[VEC];
                        raw16_unpack(raw[u], f); /* zero words: 0 terms for every additive op */
                        UNROLL
                        for(int e = 0; e < VEC; ++e)
                            part[u] += red_term(f[e], op);
                    }
                    continue;
                }
#endif
                float v[RW_U][VEC];
                UNROLL
                for(int u = 0; u < RW_U; ++u)
                {
                    const i64 j = j0 + u * RW_TEAM;
                    if(j < nv && va)
                        load_vec(x, xb + j * VEC, v[u]);
                    else
                        for(int e = 0; e < VEC; ++e)
                            v[u][e] = j < nv ? LOAD(x, xb + j * VEC + e) : 0.0f;
                }
                UNROLL
                for(int u = 0; u < RW_U; ++u)
                    UNROLL
                    for(int e = 0; e < VEC; ++e)
                        part[u] += red_term(v[u][e], op); /* 0 for the slots past the run */
            }
        float acc = 0.0f;
        UNROLL
        for(int u = 0; u < RW_U; ++u)
            acc += part[u];
        acc = rw_team(acc, 0, red, tid);
        if(live && lane == 0)
            red_finish(y, idx, yo, acc, -1, op, L, alpha, beta, read_y, 0);
    }
}
