/* Batch norm training forward and backward over a channels-last (NHWC-packed) x as ONE persistent
   grid (CUDA): the whole GPU reads x (and dy) once, the per-channel sums meet through a grid-wide
   barrier, and the outputs are written from what each work-group kept on chip. For the large
   ResNet shapes whose channels do not fit the registers of a cluster (bn_fused.h), where the
   three launches of bnorm.h read x twice from DRAM with part of the GPU idle.

   The grid is `tiles x R` work-groups, every one resident at once (the host sizes it to the
   occupancy that __launch_bounds__ guarantees and launches it cooperatively). The barriers use
   the driver's grid workspace (BNG_DRV, needs no zeroing) or, with BNG_DRV=0, a counter in our
   workspace that bn_grid_reset, launched first, zeroes. Work-group (tile, r) takes channels
   [tile * CT, +CT) of the rows [r * rps, +rps) in steps of TY rows; work item (tx, ty) holds
   NORM_VW channels of one row a step.

   Phase 1 reads the steps: the last BNG_HOLD into registers (loaded first), the `hs` before
   them into dynamic shared memory (all at once by cp.async with BNG_ASYNC, else BNG_U at a time
   through registers), the first ones only into the sums, BNG_U in flight a work item (they are
   read again in phase 2, newest first, from L2 where they still are). Sums are shifted by the
   channel's first element K as bn_fused.h's (s1 = sum(x - K), s2 = sum((x - K)^2); backward also
   g1 = sum(dy), g2 = sum(dy (x - K))), so a large mean does not cancel; the shifts and, in phase
   2, the coefficients go through shared memory (one load per channel and work-group: one per
   work item made a hot spot of a few L2 lines). A work-group's sums go to the workspace as
   part[s][channel][r]; after the first barrier BNG_GS work items per channel (a warp, or up to
   a work-group where there are few channels) add them in a fixed order (deterministic) and
   write the channel's coefficients and statistics (bn_fused.h's bnf_coefs_p, its parameters
   loaded before the barrier); after the second every work-group reads its channels'
   coefficients and writes y (dx): registers first, then shared memory, then the streamed steps
   newest first. Outputs are stored evict-first (VEC_ST_HINT) and the held steps loaded
   evict-first so that L2 keeps the steps read again. BNG_PROF stamps the phases' times after
   the workspace (benchmarks/bn_grid_profile.py).

   Workspace (floats): part[NS][K][R], coef[3][K], then two u32 counters (BNG_DRV=0). */
#ifndef MIOPY_BN_GRID_H
#define MIOPY_BN_GRID_H
#define BNF_ONLY 0 /* bn_fused.h's helpers only */
#include "common/bn_fused.h"

#ifndef BNG_BT
#define BNG_BT 512 /* work items per work-group */
#endif
#ifndef BNG_MINB
#define BNG_MINB 2 /* work-groups per SM that the registers must allow */
#endif
#ifndef BNG_TX
#define BNG_TX 8 /* work items across a tile's channels (a power of two) */
#endif
#ifndef BNG_HOLD
#define BNG_HOLD 1 /* steps held in registers (at least 1) */
#endif
#ifndef BNG_U
#define BNG_U 2 /* streamed steps in flight per work item */
#endif
#ifndef BNG_GS
#define BNG_GS 32 /* work items per channel adding up the partial sums (a power of two, <= BNG_BT) */
#endif
#define BNG_CPB (BNG_BT / BNG_GS) /* channels a work-group adds up at once */
#define BNG_TY (BNG_BT / BNG_TX)
#define BNG_CT (BNG_TX * NORM_VW)
#define BNG_NS (BN_BWD ? 4 : 2)
#define BNG_RROWS (BNG_TX < 32 ? BNG_BT / 32 : BNG_TY) /* rows of the work-group's reduction table */

/* zeroes the two counters at word `at` of the workspace */
KERNEL void bn_grid_reset(u32* RESTRICT ws, int at)
{
    if(threadIdx.x < 2)
        ws[at + (int)threadIdx.x] = 0u;
}

DEVICE_FN u32 bng_ld_acquire(const u32* p)
{
    u32 v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
    return v;
}

DEVICE_FN unsigned long long bng_now_ns()
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(t));
    return t;
}

#ifndef BNG_WAIT_NS
#define BNG_WAIT_NS 2000000000ull /* a barrier not met in this long traps (never hangs) */
#endif
#ifndef BNG_SLEEP
#define BNG_SLEEP 32 /* ns a polling work item sleeps between two reads of the counter */
#endif
#ifndef BNG_DRV
#define BNG_DRV 0 /* barriers on the driver's grid workspace (cooperative launch; no reset kernel) */
#endif
#ifndef BNG_PROF
#define BNG_PROF 0 /* timestamps of the phases, after the workspace (benchmarks/bn_grid_profile.py) */
#endif

#if BNG_DRV
/* the barrier word of the workspace the driver gives a cooperative launch (the address in
   %envreg1:%envreg2, a 32-bit size then the word, as CUDA's cooperative groups read it) */
DEVICE_FN u32* bng_driver_barrier()
{
    u32 hi, lo;
    asm("mov.u32 %0, %%envreg1;" : "=r"(hi));
    asm("mov.u32 %0, %%envreg2;" : "=r"(lo));
    if((hi | lo) == 0u) /* not a cooperative launch */
        __trap();
    return (u32*)(((unsigned long long)hi << 32) | lo) + 1;
}
#endif

/* every work-group of the grid arrives before any leaves (all are resident: see the file's text);
   a grid that cannot be resident (the GPU shared with other work) ends in a launch error.
   BNG_DRV: a barrier that needs no reset (as cooperative groups' grid sync): work-group 0 adds
   2^31 - (G - 1), the others 1, so the word's top bit flips once all have arrived and its low
   bits are back where they were; `target` is unused. */
DEVICE_FN void bng_grid_sync(u32* counter, u32 target)
{
    __syncthreads();
    if(threadIdx.x == 0)
    {
#if BNG_DRV
        (void)target;
        const u32 nb = blockIdx.x == 0 ? 0x80000000u - (gridDim.x - 1u) : 1u;
        u32 old;
        asm volatile("atom.add.release.gpu.u32 %0, [%1], %2;\n" : "=r"(old) : "l"(counter), "r"(nb) : "memory");
        const unsigned long long t0 = bng_now_ns();
        while(((bng_ld_acquire(counter) ^ old) & 0x80000000u) == 0u)
        {
#if BNG_SLEEP > 0
            __nanosleep(BNG_SLEEP);
#endif
            if(bng_now_ns() - t0 > BNG_WAIT_NS)
                __trap();
        }
#else
        __threadfence();
        atomicAdd(counter, 1u);
        const unsigned long long t0 = bng_now_ns();
        while(bng_ld_acquire(counter) < target)
        {
#if BNG_SLEEP > 0
            __nanosleep(BNG_SLEEP);
#endif
            if(bng_now_ns() - t0 > BNG_WAIT_NS)
                __trap();
        }
        __threadfence();
#endif
    }
    __syncthreads();
}

#if BNG_PROF
/* mark i of work-group blockIdx.x: when all its work items got there */
#define BNG_MARK(i)                                                                                        \
    do                                                                                                     \
    {                                                                                                      \
        __syncthreads();                                                                                   \
        if(threadIdx.x == 0)                                                                               \
            prof[(i64)blockIdx.x * 8 + (i)] = bng_now_ns();                                                \
    } while(0)
#else
#define BNG_MARK(i) ((void)0)
#endif

#ifndef BNG_ASYNC
#define BNG_ASYNC 0 /* shared-memory steps copied by cp.async (sm_80+), all in flight at once */
#endif
#if NORM_VW == 1
#undef BNG_ASYNC
#define BNG_ASYNC 0
#endif
#if BNG_ASYNC
/* 16 bytes global -> shared without registers, marked evict-first in L2 (`pol`) */
DEVICE_FN void bng_cp16(void* dst, const void* src, unsigned long long pol)
{
    asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;\n" ::"r"(bnf_smem(dst)), "l"(src),
                 "l"(pol)
                 : "memory");
}
#endif

/* a held vector loaded evict-first (it is not read from memory again) */
DEVICE_FN bnf_v bng_ld_once(const data_t* p, i64 off, int va)
{
#if NORM_VW > 1
    if(va)
        return __ldcs((const uint4*)(p + off));
#endif
    return bnf_ld(p, off, va);
}

/* adds a loaded vector to the sums (a step past the rows, or channels past K, adds nothing: its
   zeros minus the shift would) */
DEVICE_FN void bng_acc(float (*acc)[NORM_VW], bnf_v xr, bnf_v gr, const float* shift, bool ok)
{
    if(!ok)
        return;
    float v[NORM_VW];
    bnf_unpack(xr, v);
#if BN_BWD
    float g[NORM_VW];
    bnf_unpack(gr, g);
#else
    (void)gr;
#endif
    UNROLL
    for(int e = 0; e < NORM_VW; ++e)
    {
        const float dd = v[e] - shift[e];
        acc[0][e] += dd;
        acc[1][e] += dd * dd;
#if BN_BWD
        acc[2][e] += g[e];
        acc[3][e] += g[e] * dd;
#endif
    }
}

DEVICE_FN void bng_out(data_t* out, i64 o, bnf_v xr, bnf_v gr, const float* shift, const float* ca,
                       const float* cb, const float* cd, int va)
{
    float v[NORM_VW];
    bnf_unpack(xr, v);
#if BN_BWD
    float g[NORM_VW];
    bnf_unpack(gr, g);
    UNROLL
    for(int e = 0; e < NORM_VW; ++e)
        v[e] = g[e] * ca[e] + ((v[e] - shift[e]) * cb[e] + cd[e]);
#else
    (void)gr, (void)cb;
    UNROLL
    for(int e = 0; e < NORM_VW; ++e)
        v[e] = (v[e] - shift[e]) * ca[e] + cd[e];
#endif
    bnf_st(out, o, v, va);
}

KERNEL void __launch_bounds__(BNG_BT, BNG_MINB)
    bn_grid_cols(const data_t* RESTRICT x, const data_t* RESTRICT dy, data_t* RESTRICT out,
                 const param_t* RESTRICT scale, const param_t* RESTRICT bias, param_t* s_a, param_t* s_b,
                 param_t* s_c, param_t* s_d, float* ws, int K, int rows, int R, int rps, int hs, int flags,
                 float eps, float factor)
{
    extern __shared__ bnf_v held[]; /* [hs][BNG_BT] of x, then of dy backward */
    __shared__ float red[BNG_RROWS * BNG_CT];
    __shared__ float ctab[4][BNG_CT]; /* the tile's shifts, then (phase 2) its coefficients */
#if BNG_GS > 32
    __shared__ float gsum[BNG_NS][BNG_BT / 32];
#endif
    const int tid = (int)threadIdx.x;
    const int tx = tid % BNG_TX, ty = tid / BNG_TX;
    const int tile = (int)blockIdx.x / R, r = (int)blockIdx.x % R;
    const int G = (int)gridDim.x;
    const int c0 = tile * BNG_CT;
    const int col = c0 + tx * NORM_VW;
    const int live = col < K; /* K is a multiple of NORM_VW */
    const int row0 = r * rps;
    const int nrows = max(0, min(rows - row0, rps));
    const int nsteps = (nrows + BNG_TY - 1) / BNG_TY;
    const int nreg = min(BNG_HOLD, nsteps);
    const int nsm = min(hs, nsteps - nreg);
    const int nst = nsteps - nreg - nsm; /* streamed steps */
    float* part = ws;
    float* coef = ws + (i64)BNG_NS * K * R;
    u32* counter = (u32*)(coef + 3 * K);
#if BNG_PROF
    unsigned long long* prof = (unsigned long long*)(((size_t)(counter + 2) + 7) & ~(size_t)7);
#endif
#if BNG_DRV
    counter = bng_driver_barrier();
#endif
    BNG_MARK(0);
#if BN_BWD
    const int va = NORM_VW > 1 && ALIGNED16(x) && ALIGNED16(dy) && ALIGNED16(out);
#else
    const int va = NORM_VW > 1 && ALIGNED16(x) && ALIGNED16(out);
    (void)dy;
#endif
    float acc[BNG_NS][NORM_VW];
    UNROLL
    for(int s = 0; s < BNG_NS; ++s)
        UNROLL
        for(int e = 0; e < NORM_VW; ++e)
            acc[s][e] = 0.0f;

    /* the register steps, loaded first (in flight during the others) */
    bnf_v xh[BNG_HOLD], gh[BNG_HOLD];
    UNROLL
    for(int h = 0; h < BNG_HOLD; ++h)
    {
        const int row = row0 + (nst + nsm + h) * BNG_TY + ty;
        xh[h] = BNF_ZERO;
        gh[h] = BNF_ZERO;
        if(live && h < nreg && row < rows)
        {
            const i64 o = (i64)row * K + col;
            xh[h] = bng_ld_once(x, o, va);
#if BN_BWD
            gh[h] = bng_ld_once(dy, o, va);
#endif
        }
    }
#if BNG_ASYNC
    /* the shared-memory steps: all in flight at once, copied without registers */
    if(va)
    {
        unsigned long long pol;
        asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(pol));
        for(int j = 0; j < nsm; ++j)
        {
            const int row = row0 + (nst + j) * BNG_TY + ty;
            if(live && row < rows)
            {
                const i64 o = (i64)row * K + col;
                bng_cp16(&held[j * BNG_BT + tid], x + o, pol);
#if BN_BWD
                bng_cp16(&held[(hs + j) * BNG_BT + tid], dy + o, pol);
#endif
            }
        }
        asm volatile("cp.async.commit_group;\n" ::: "memory");
    }
#endif
    /* the channels' shifts (x's first row): one load per channel and work-group (every work item
       loading its own made a hot spot of those few L2 lines) */
    for(int c = tid; c < BNG_CT; c += BNG_BT)
        ctab[0][c] = c0 + c < K ? LOAD(x, c0 + c) : 0.0f;
    __syncthreads();
    float shift[NORM_VW];
    UNROLL
    for(int e = 0; e < NORM_VW; ++e)
        shift[e] = ctab[0][tx * NORM_VW + e];

    /* ---- phase 1: the streamed steps, then the shared-memory ones, BNG_U in flight ---- */
    const int nmem = BNG_ASYNC && va ? nst : nst + nsm; /* steps loaded through registers */
    for(int j0 = 0; j0 < nmem; j0 += BNG_U)
    {
        bnf_v xr[BNG_U], gr[BNG_U];
        bool ok[BNG_U];
        UNROLL
        for(int u = 0; u < BNG_U; ++u)
        {
            const int j = j0 + u;
            const int row = row0 + j * BNG_TY + ty;
            ok[u] = live && j < nmem && row < rows;
            xr[u] = BNF_ZERO;
            gr[u] = BNF_ZERO;
            if(ok[u])
            {
                const i64 o = (i64)row * K + col;
                if(j < nst)
                {
                    xr[u] = bnf_ld(x, o, va);
#if BN_BWD
                    gr[u] = bnf_ld(dy, o, va);
#endif
                }
                else
                {
                    xr[u] = bng_ld_once(x, o, va);
#if BN_BWD
                    gr[u] = bng_ld_once(dy, o, va);
#endif
                }
            }
        }
        UNROLL
        for(int u = 0; u < BNG_U; ++u)
        {
            const int j = j0 + u;
            if(j >= nst && j < nmem)
            {
                held[(j - nst) * BNG_BT + tid] = xr[u];
#if BN_BWD
                held[(hs + j - nst) * BNG_BT + tid] = gr[u];
#endif
            }
            bng_acc(acc, xr[u], gr[u], shift, ok[u]);
        }
    }
#if BNG_ASYNC
    if(va)
    {
        asm volatile("cp.async.wait_all;\n" ::: "memory"); /* this work item's own copies */
        for(int j = 0; j < nsm; ++j)
        {
            const int row = row0 + (nst + j) * BNG_TY + ty;
#if BN_BWD
            const bnf_v gr = held[(hs + j) * BNG_BT + tid];
#else
            const bnf_v gr = BNF_ZERO;
#endif
            bng_acc(acc, held[j * BNG_BT + tid], gr, shift, live && row < rows);
        }
    }
#endif
    UNROLL
    for(int h = 0; h < BNG_HOLD; ++h)
        bng_acc(acc, xh[h], gh[h], shift, live && h < nreg && row0 + (nst + nsm + h) * BNG_TY + ty < rows);

    BNG_MARK(1);
    /* ---- the work-group's sums -> part[s][channel][r] ---- */
    UNROLL
    for(int s = 0; s < BNG_NS; ++s)
    {
#if BNG_TX < 32
        UNROLL
        for(int e = 0; e < NORM_VW; ++e)
            acc[s][e] = bnf_warp_sum(acc[s][e], BNG_TX);
        if((tid & 31) < BNG_TX)
            UNROLL
            for(int e = 0; e < NORM_VW; ++e)
                red[(tid >> 5) * BNG_CT + tx * NORM_VW + e] = acc[s][e];
#else
        UNROLL
        for(int e = 0; e < NORM_VW; ++e)
            red[ty * BNG_CT + tx * NORM_VW + e] = acc[s][e];
#endif
        __syncthreads();
        for(int c = tid; c < BNG_CT; c += BNG_BT)
        {
            float t = 0.0f;
            for(int q = 0; q < BNG_RROWS; ++q)
                t += red[q * BNG_CT + c];
            if(c0 + c < K)
                part[((i64)s * K + c0 + c) * R + r] = t;
        }
        __syncthreads();
    }
    /* this work-group's first channel of the per-channel sums below: its parameters loaded now,
       in flight during the barrier */
    const int gl = tid % BNG_GS, gi = tid / BNG_GS;
    const int first = (int)blockIdx.x * BNG_CPB;
    bnf_pv pv = {0.0f, 0.0f, 0.0f, 0.0f};
    float sh = 0.0f;
    if(gl == 0 && first + gi < K)
    {
        pv = bnf_params(first + gi, 1, scale, bias, s_a, s_b, flags);
        sh = LOAD(x, first + gi);
    }
    BNG_MARK(2);
    bng_grid_sync(counter, (u32)G);
    BNG_MARK(3);

    /* ---- BNG_GS work items per channel: the R partial sums in a fixed order, the coefficients ---- */
    for(int base = first; base < K; base += G * BNG_CPB)
    {
        const int c = base + gi;
        if(base != first && gl == 0 && c < K)
        {
            pv = bnf_params(c, 1, scale, bias, s_a, s_b, flags);
            sh = LOAD(x, c);
        }
        float t[BNG_NS];
        UNROLL
        for(int s = 0; s < BNG_NS; ++s)
            t[s] = 0.0f;
        if(c < K)
        {
#pragma unroll 4
            for(int q = gl; q < R; q += BNG_GS)
                UNROLL
                for(int s = 0; s < BNG_NS; ++s)
                    t[s] += __ldcg(part + ((i64)s * K + c) * R + q);
        }
        UNROLL
        for(int s = 0; s < BNG_NS; ++s)
            t[s] = bnf_warp_sum(t[s], 1);
#if BNG_GS > 32
        if((tid & 31) == 0)
            UNROLL
            for(int s = 0; s < BNG_NS; ++s)
                gsum[s][tid >> 5] = t[s];
        __syncthreads();
        UNROLL
        for(int s = 0; s < BNG_NS; ++s)
        {
            float v = 0.0f;
            for(int w = 0; w < BNG_GS / 32; ++w)
                v += gsum[s][gi * (BNG_GS / 32) + w];
            t[s] = v;
        }
        __syncthreads();
#endif
        if(gl == 0 && c < K)
        {
            float a, b, d;
            bnf_coefs_p(t, (float)rows, sh, c, 1, pv, s_a, s_b, s_c, s_d, flags, eps, factor, &a, &b, &d);
            coef[c] = a;
            coef[K + c] = b;
            coef[2 * K + c] = d;
        }
    }
    BNG_MARK(4);
    bng_grid_sync(counter, (u32)(2 * G));
    BNG_MARK(5);

    /* ---- phase 2: the outputs, from registers, shared memory, then L2 / DRAM newest first ---- */
    /* the tile's coefficients: one load per channel and work-group (see the shifts) */
    for(int q = tid; q < 3 * BNG_CT; q += BNG_BT)
    {
        const int s = q / BNG_CT, c = q % BNG_CT;
        ctab[1 + s][c] = c0 + c < K ? __ldcg(coef + s * K + c0 + c) : 0.0f;
    }
    __syncthreads();
    float ca[NORM_VW], cb[NORM_VW], cd[NORM_VW];
    UNROLL
    for(int e = 0; e < NORM_VW; ++e)
    {
        shift[e] = ctab[0][tx * NORM_VW + e]; /* again: no register kept through the barriers */
        ca[e] = ctab[1][tx * NORM_VW + e];
        cb[e] = ctab[2][tx * NORM_VW + e];
        cd[e] = ctab[3][tx * NORM_VW + e];
    }
    UNROLL
    for(int h = 0; h < BNG_HOLD; ++h)
    {
        const int row = row0 + (nst + nsm + h) * BNG_TY + ty;
        if(live && h < nreg && row < rows)
            bng_out(out, (i64)row * K + col, xh[h], gh[h], shift, ca, cb, cd, va);
    }
    for(int j = nsm - 1; j >= 0; --j)
    {
        const int row = row0 + (nst + j) * BNG_TY + ty;
        if(live && row < rows)
        {
#if BN_BWD
            const bnf_v gr = held[(hs + j) * BNG_BT + tid];
#else
            const bnf_v gr = BNF_ZERO;
#endif
            bng_out(out, (i64)row * K + col, held[j * BNG_BT + tid], gr, shift, ca, cb, cd, va);
        }
    }
    for(int j0 = nst - 1; j0 >= 0; j0 -= BNG_U)
    {
        bnf_v xr[BNG_U], gr[BNG_U];
        UNROLL
        for(int u = 0; u < BNG_U; ++u)
        {
            const int row = row0 + (j0 - u) * BNG_TY + ty;
            xr[u] = BNF_ZERO;
            gr[u] = BNF_ZERO;
            if(live && j0 - u >= 0 && row < rows)
            {
                const i64 o = (i64)row * K + col;
                xr[u] = bng_ld_once(x, o, va);
#if BN_BWD
                gr[u] = bng_ld_once(dy, o, va);
#endif
            }
        }
        UNROLL
        for(int u = 0; u < BNG_U; ++u)
        {
            const int row = row0 + (j0 - u) * BNG_TY + ty;
            if(live && j0 - u >= 0 && row < rows)
                bng_out(out, (i64)row * K + col, xr[u], gr[u], shift, ca, cb, cd, va);
        }
    }
    BNG_MARK(6);
}

#endif
