/* The machinery shared by the implicit-GEMM kernels (igemm_fwd.cu, igemm_bwd.cu, igemm_wrw.cu):
   fragment loads from swizzled tiles in either orientation, the STAGES-deep cp.async main loop,
   the epilogue of the backward kernels (through shared memory, 16-byte stores) and the split-K
   sum. CUDA only (sm_80 and later).

   GEMM D[m][n] = sum_j A[m][j] * B[n][j], fp32 accumulators, each warp a WM x WN tile of MI m16
   by NI n8 fragments. A tile lies in shared memory either m-major (rows m, the reduction index j
   contiguous: ldmatrix) or k-major (rows j, m contiguous: ldmatrix.trans); B likewise. Tiles are
   rows of RC 16-byte chunks, swizzled by common/mma_sm80.h's swizzle<RC>. */
#ifndef MIOPY_IGEMM_CORE_H
#define MIOPY_IGEMM_CORE_H

#include "common/mma_sm80.h"
#include "common/conv_epilogue.h"

/* A fragments of k-step `ks` from an m-major tile (rows m, RC chunks of j). */
template <int MI, int RC>
DEVICE_FN void frags_a_mmajor(u32 tile, int wm0, int ks, int lane, u32 (&af)[MI][4])
{
    const int row = wm0 + (lane & 15), chunk = ks * 2 + (lane >> 4);
#pragma unroll
    for(int i = 0; i < MI; ++i)
        ldmatrix_x4(tile + swizzle<RC>(row + i * 16, chunk) * 16, af[i][0], af[i][1], af[i][2], af[i][3]);
}

/* A fragments from a k-major tile (rows j, RC chunks of m): matrix q = lane / 8 is m half q % 2,
   k half q / 2 (a0..a3 of mma m16n8k16). */
template <int MI, int RC>
DEVICE_FN void frags_a_kmajor(u32 tile, int wm0, int ks, int lane, u32 (&af)[MI][4])
{
    const int q = lane >> 3;
    const int row = ks * 16 + (lane & 7) + ((q >> 1) << 3);
    const int chunk = (wm0 >> 3) + (q & 1);
#pragma unroll
    for(int i = 0; i < MI; ++i)
        ldmatrix_x4_trans(tile + swizzle<RC>(row, chunk + i * 2) * 16, af[i][0], af[i][1], af[i][2], af[i][3]);
}

/* B fragments from a k-major tile (rows j, RC chunks of n): matrix q is k half q % 2, n half
   q / 2, so one ldmatrix gives b0, b1 of two n8 fragments. */
template <int NI, int RC>
DEVICE_FN void frags_b_kmajor(u32 tile, int wn0, int ks, int lane, u32 (&bf)[NI][2])
{
    const int q = lane >> 3;
    const int row = ks * 16 + (lane & 7) + ((q & 1) << 3);
    const int chunk = (wn0 >> 3) + (q >> 1);
#pragma unroll
    for(int j = 0; j < NI / 2; ++j)
        ldmatrix_x4_trans(tile + swizzle<RC>(row, chunk + j * 2) * 16, bf[2 * j][0], bf[2 * j][1],
                          bf[2 * j + 1][0], bf[2 * j + 1][1]);
}

/* B fragments from an n-major tile (rows n, RC chunks of j): matrix q = lane / 8 is k half q % 2,
   n half q / 2, so one ldmatrix gives b0, b1 of two n8 fragments. */
template <int NI, int RC>
DEVICE_FN void frags_b_nmajor(u32 tile, int wn0, int ks, int lane, u32 (&bf)[NI][2])
{
    const int row = wn0 + (lane & 7) + ((lane >> 4) << 3), chunk = ks * 2 + ((lane >> 3) & 1);
#pragma unroll
    for(int j = 0; j < NI / 2; ++j)
        ldmatrix_x4(tile + swizzle<RC>(row + j * 16, chunk) * 16, bf[2 * j][0], bf[2 * j][1], bf[2 * j + 1][0],
                    bf[2 * j + 1][1]);
}

template <int MI, int NI>
DEVICE_FN void zero_acc(float (&acc)[MI][NI][4])
{
#pragma unroll
    for(int i = 0; i < MI; ++i)
#pragma unroll
        for(int j = 0; j < NI; ++j)
#pragma unroll
            for(int e = 0; e < 4; ++e)
                acc[i][j][e] = 0.0f;
}

/* The main loop over `nkt` reduction tiles: load_tile(stage, t) issues the cp.async copies of
   tile t into a stage, load_frags(stage, ks, af, bf) reads one k-step's fragments. With
   FRAG_BUFS = 2 the next k-step's fragments are read while this one's MMAs run. Ends with
   every copy landed and every warp past its last shared-memory read (the caller may reuse it). */
template <int STAGES, int KSTEPS, int FRAG_BUFS, int MI, int NI, class LoadTile, class LoadFrags>
DEVICE_FN void mma_mainloop(int nkt, LoadTile& load_tile, LoadFrags& load_frags, float (&acc)[MI][NI][4])
{
    static_assert(STAGES >= 2 && (FRAG_BUFS == 1 || FRAG_BUFS == 2), "pipeline shape");
    u32 af[FRAG_BUFS][MI][4];
    u32 bf[FRAG_BUFS][NI][2];
#pragma unroll
    for(int s = 0; s < STAGES - 1; ++s)
    {
        if(s < nkt)
            load_tile(s, s);
        cp_async_commit();
    }
    int read_stage = 0;
    int write_stage = STAGES - 1;
    if(FRAG_BUFS == 2)
    {
        cp_async_wait<STAGES - 2>();
        __syncthreads();
        load_frags(0, 0, af[0], bf[0]);
        for(int t = 0; t < nkt; ++t)
        {
#pragma unroll
            for(int ks = 0; ks < KSTEPS; ++ks)
            {
                if(ks == KSTEPS - 1)
                {
                    /* tile t + 1 is in, and every warp has read its last fragments of tile t - 1 */
                    cp_async_wait<STAGES - 2>();
                    __syncthreads();
                    read_stage = read_stage == STAGES - 1 ? 0 : read_stage + 1;
                }
                load_frags(read_stage, (ks + 1) % KSTEPS, af[(ks + 1) & (FRAG_BUFS - 1)],
                           bf[(ks + 1) & (FRAG_BUFS - 1)]);
                if(ks == 0)
                {
                    if(t + STAGES - 1 < nkt)
                        load_tile(write_stage, t + STAGES - 1);
                    cp_async_commit();
                    write_stage = write_stage == STAGES - 1 ? 0 : write_stage + 1;
                }
#pragma unroll
                for(int i = 0; i < MI; ++i)
#pragma unroll
                    for(int j = 0; j < NI; ++j)
                        mma_16816(acc[i][j], af[ks & (FRAG_BUFS - 1)][i], bf[ks & (FRAG_BUFS - 1)][j]);
            }
        }
    }
    else
    {
        for(int t = 0; t < nkt; ++t)
        {
            cp_async_wait<STAGES - 2>();
            __syncthreads(); /* tile t is in; every warp is done with the stage refilled next */
            if(t + STAGES - 1 < nkt)
                load_tile(write_stage, t + STAGES - 1);
            cp_async_commit();
            write_stage = write_stage == STAGES - 1 ? 0 : write_stage + 1;
#pragma unroll
            for(int ks = 0; ks < KSTEPS; ++ks)
            {
                load_frags(read_stage, ks, af[0], bf[0]);
#pragma unroll
                for(int i = 0; i < MI; ++i)
#pragma unroll
                    for(int j = 0; j < NI; ++j)
                        mma_16816(acc[i][j], af[0][i], bf[0][j]);
            }
            read_stage = read_stage == STAGES - 1 ? 0 : read_stage + 1;
        }
    }
    cp_async_wait<0>();
    __syncthreads();
}

/* Shared-memory bytes of the epilogue of a BM x BN tile: the rounded tile (rows padded by 8
   elements) and one int per row, the row's element offset in the output. */
#define IGEMM_EPI_BYTES(BM, BN) ((BM) * ((BN) + 8) * 2 + (BM) * 4)

/* Writes the block's tile. row_off(r) is the element offset in `out` (or, with SPLIT, in the
   fp32 partial slice `part`) of the block's row r at its first column, or -1 where there is no
   such row; columns at or past cols_left do not exist. Computed once per row into shared memory
   (the caller's main loop has finished with it). */
template <int BM, int BN, int THREADS, int MI, int NI, bool SPLIT, class RowOff>
DEVICE_FN void store_tile(uint4* smem, const float (&acc)[MI][NI][4], int wm0, int wn0, int lane, int tid,
                          int cols_left, data_t* RESTRICT out, float* RESTRICT part, RowOff& row_off EPI_PARAM)
{
    constexpr int PITCH = BN + 8; /* epilogue tile row, in elements */
    int* offs = reinterpret_cast<int*>(reinterpret_cast<char*>(smem) + BM * PITCH * 2);
    for(int r = tid; r < BM; r += THREADS)
        offs[r] = row_off(r);
    if(SPLIT)
    {
        __syncthreads();
#pragma unroll
        for(int i = 0; i < MI; ++i)
#pragma unroll
            for(int h = 0; h < 2; ++h)
            {
                const int off = offs[wm0 + i * 16 + h * 8 + (lane >> 2)];
                if(off < 0)
                    continue;
#pragma unroll
                for(int j = 0; j < NI; ++j)
                {
                    const int col = wn0 + j * 8 + (lane & 3) * 2;
                    if(col < cols_left)
                        *reinterpret_cast<float2*>(part + off + col) =
                            make_float2(acc[i][j][2 * h], acc[i][j][2 * h + 1]);
                }
            }
        return;
    }
    u32* ctile = reinterpret_cast<u32*>(smem);
#pragma unroll
    for(int i = 0; i < MI; ++i)
#pragma unroll
        for(int j = 0; j < NI; ++j)
        {
            const int row = wm0 + i * 16 + (lane >> 2);
            const int cc = wn0 + j * 8 + (lane & 3) * 2;
            ctile[(row * PITCH + cc) / 2] = pack2(acc[i][j][0], acc[i][j][1]);
            ctile[((row + 8) * PITCH + cc) / 2] = pack2(acc[i][j][2], acc[i][j][3]);
        }
    __syncthreads();
    constexpr int RC = BN / 8;
    static_assert(THREADS % RC == 0, "each thread stores one column of chunks");
    const int ch = tid % RC;
    if(ch * 8 >= cols_left)
        return;
#pragma unroll
    for(int row = tid / RC; row < BM; row += THREADS / RC)
    {
        const int off = offs[row];
        if(off >= 0)
            EPI_STORE8(out + off + ch * 8, smem[(row * PITCH) / 8 + ch]);
    }
}

/* out[e] = the sum of SPLIT fp32 partial slices of `total` elements, 8 per thread. */
template <int SPLIT>
DEVICE_FN void splitk_sum(const float* RESTRICT ws, data_t* RESTRICT out, i64 total EPI_PARAM)
{
    const i64 e = ((i64)blockIdx.x * blockDim.x + threadIdx.x) * 8;
    if(e >= total)
        return;
    float v[8];
    const float4* p = reinterpret_cast<const float4*>(ws + e);
    float4 lo = p[0], hi = p[1];
    v[0] = lo.x, v[1] = lo.y, v[2] = lo.z, v[3] = lo.w, v[4] = hi.x, v[5] = hi.y, v[6] = hi.z, v[7] = hi.w;
#pragma unroll 4
    for(int s = 1; s < SPLIT; ++s)
    {
        p = reinterpret_cast<const float4*>(ws + s * total + e);
        lo = p[0], hi = p[1];
        v[0] += lo.x, v[1] += lo.y, v[2] += lo.z, v[3] += lo.w;
        v[4] += hi.x, v[5] += hi.y, v[6] += hi.z, v[7] += hi.w;
    }
    EPI_F32(v, out + e);
    uint4 o;
    o.x = pack2(v[0], v[1]);
    o.y = pack2(v[2], v[3]);
    o.z = pack2(v[4], v[5]);
    o.w = pack2(v[6], v[7]);
    *reinterpret_cast<uint4*>(out + e) = o;
}

/* ---- split-K inside a thread-block cluster (sm_90 and later) ----
   The SPLIT blocks that share an output tile form one cluster; each leaves its fp32 partial tile
   in its own shared memory, and after a cluster barrier each block sums a share of the rows over
   the cluster's tiles (distributed shared memory) and writes them out: no workspace, no second
   kernel. A tile is BM rows of BN + 4 floats (16-byte aligned rows, fewer bank conflicts). */
#define IGEMM_CLUSTER_BYTES(BM, BN) ((BM) * ((BN) + 4) * 4)

DEVICE_FN u32 cluster_rank()
{
    u32 r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
    return r;
}
DEVICE_FN void cluster_sync()
{
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
/* The address of shared-memory location `addr` (this block's) in block `rank` of the cluster. */
DEVICE_FN u32 cluster_map(u32 addr, u32 rank)
{
    u32 r;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(addr), "r"(rank));
    return r;
}
DEVICE_FN float4 cluster_ld4(u32 addr)
{
    float4 v;
    asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];\n"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
                 : "r"(addr)
                 : "memory");
    return v;
}

/* The sum of cluster_store_tile, for kernels that place their fp32 partial tile
   themselves (BM rows of BN + 4 floats at `smem`): every thread of every block of the cluster
   calls it; each block sums its share of the rows over the cluster's tiles into `out`. */
template <int BM, int BN, int THREADS, int SPLIT, class RowOff>
DEVICE_FN void cluster_sum_tile(uint4* smem, int tid, int cols_left, data_t* RESTRICT out, RowOff& row_off EPI_PARAM)
{
    constexpr int PITCH = BN + 4; /* floats */
    constexpr int RC = BN / 8;    /* 8-column chunks per row */
    constexpr int MY_ROWS = (BM + SPLIT - 1) / SPLIT;
    cluster_sync(); /* every partial tile of the cluster is in place */
    const int rank = (int)cluster_rank();
    const u32 base = smem_addr(smem);
    for(int e = tid; e < MY_ROWS * RC; e += THREADS)
    {
        const int row = rank + (e / RC) * SPLIT;
        const int ch = e % RC;
        if(row >= BM || ch * 8 >= cols_left)
            continue;
        const int off = row_off(row);
        if(off < 0)
            continue;
        const u32 addr = base + (u32)((row * PITCH + ch * 8) * 4);
        float v[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for(int s = 0; s < SPLIT; ++s)
        {
            const u32 a = cluster_map(addr, (u32)s);
            const float4 lo = cluster_ld4(a), hi = cluster_ld4(a + 16);
            v[0] += lo.x, v[1] += lo.y, v[2] += lo.z, v[3] += lo.w;
            v[4] += hi.x, v[5] += hi.y, v[6] += hi.z, v[7] += hi.w;
        }
        EPI_F32(v, out + off + ch * 8);
        uint4 o;
        o.x = pack2(v[0], v[1]);
        o.y = pack2(v[2], v[3]);
        o.z = pack2(v[4], v[5]);
        o.w = pack2(v[6], v[7]);
        *reinterpret_cast<uint4*>(out + off + ch * 8) = o;
    }
    cluster_sync(); /* no block leaves (freeing its tile) while another still reads it */
}

/* Writes the sum over the cluster's SPLIT blocks of their tiles. row_off(r) is the element offset
   in `out` of the block's row r at its first column, or -1 where there is no such row; columns
   at or past cols_left do not exist. Block `rank` writes rows rank, rank + SPLIT, ... Every
   thread of every block of the cluster must call it (two cluster barriers). */
template <int BM, int BN, int THREADS, int MI, int NI, int SPLIT, class RowOff>
DEVICE_FN void cluster_store_tile(uint4* smem, const float (&acc)[MI][NI][4], int wm0, int wn0, int lane, int tid,
                                  int cols_left, data_t* RESTRICT out, RowOff& row_off EPI_PARAM)
{
    constexpr int PITCH = BN + 4; /* floats */
    float* tile = reinterpret_cast<float*>(smem);
#pragma unroll
    for(int i = 0; i < MI; ++i)
#pragma unroll
        for(int j = 0; j < NI; ++j)
        {
            const int row = wm0 + i * 16 + (lane >> 2);
            const int col = wn0 + j * 8 + (lane & 3) * 2;
            *reinterpret_cast<float2*>(tile + row * PITCH + col) = make_float2(acc[i][j][0], acc[i][j][1]);
            *reinterpret_cast<float2*>(tile + (row + 8) * PITCH + col) = make_float2(acc[i][j][2], acc[i][j][3]);
        }
    cluster_sum_tile<BM, BN, THREADS, SPLIT>(smem, tid, cols_left, out, row_off EPI_ARG);
}

#endif
