/* Tiled GEMM on fully strided operands, shared by every GEMM-based solver where no vendor BLAS
   is used:  for each batch (b0, b1):  C[m, n] = sum_k A[m, k] * B[k, n]  (beta = 0).

   Every operand is addressed as base + offset + b0*s0 + b1*s1 + row*rs + col*cs, so transposes,
   NCHW/NHWC views of tensors and the im2col workspace all are the same kernel; the host picks the
   strides. A 256-thread work-group computes a GEMM_TM x GEMM_TN tile of C in fp32 from
   GEMM_TK-deep slices of A and B staged in local memory; each thread owns a (TM/16) x (TN/16)
   sub-block, strided by 16 so that neighbouring threads read neighbouring local words.

   Operands are stored as data_t (MIOPY_DTYPE) unless GEMM_{A,B,C}_F32 is 1: the fp32 workspace
   lets backward data keep the GEMM's fp32 result until col2im has summed it (one rounding). */
#include "common/miopy_types.h"

#ifndef GEMM_TM
#define GEMM_TM 64
#endif
#ifndef GEMM_TN
#define GEMM_TN 64
#endif
#ifndef GEMM_TK
#define GEMM_TK 16
#endif
#ifndef GEMM_A_F32
#define GEMM_A_F32 0
#endif
#ifndef GEMM_B_F32
#define GEMM_B_F32 0
#endif
#ifndef GEMM_C_F32
#define GEMM_C_F32 0
#endif

#define GEMM_THREADS 256
#define GEMM_RM (GEMM_TM / 16)
#define GEMM_RN (GEMM_TN / 16)

#ifdef __OPENCL_VERSION__
#define GEMM_NUM_GROUPS0 ((i64)get_num_groups(0))
#else
#define GEMM_NUM_GROUPS0 ((i64)gridDim.x)
#endif

#if GEMM_A_F32
typedef float gemm_a_t;
#define GEMM_LOAD_A(p, i) ((p)[i])
#else
typedef data_t gemm_a_t;
#define GEMM_LOAD_A(p, i) LOAD(p, i)
#endif
#if GEMM_B_F32
typedef float gemm_b_t;
#define GEMM_LOAD_B(p, i) ((p)[i])
#else
typedef data_t gemm_b_t;
#define GEMM_LOAD_B(p, i) LOAD(p, i)
#endif
#if GEMM_C_F32
typedef float gemm_c_t;
#define GEMM_STORE_C(p, i, v) ((p)[i] = (v))
#else
typedef data_t gemm_c_t;
#define GEMM_STORE_C(p, i, v) STORE(p, i, v)
#endif

#define GEMM_OPERAND(T, p) T p, i64 p##_off, i64 p##_rs, i64 p##_cs, i64 p##_s0, i64 p##_s1

KERNEL void gemm_strided(GEMM_OPERAND(const GLOBAL gemm_a_t* RESTRICT, a),
                         GEMM_OPERAND(const GLOBAL gemm_b_t* RESTRICT, b),
                         GEMM_OPERAND(GLOBAL gemm_c_t* RESTRICT, c),
                         int M, int N, int K, int B0, int B1)
{
    /* +1 column: the transposing stores into the tiles hit distinct banks */
    LOCAL float As[GEMM_TK][GEMM_TM + 1];
    LOCAL float Bs[GEMM_TK][GEMM_TN + 1];
    const int tid = LOCAL_ID0;
    const int tx = tid % 16, ty = tid / 16;
    const int tiles_m = (M + GEMM_TM - 1) / GEMM_TM;
    const int tiles_n = (N + GEMM_TN - 1) / GEMM_TN;
    const i64 total = (i64)B0 * B1 * tiles_m * tiles_n;
    /* grid-stride over tiles: the host may cap the number of work-groups */
    for(i64 t = GROUP_ID0; t < total; t += GEMM_NUM_GROUPS0)
    {
        const int tn = (int)(t % tiles_n);
        i64 r = t / tiles_n;
        const int tm = (int)(r % tiles_m);
        r /= tiles_m;
        const int b1 = (int)(r % B1);
        const int b0 = (int)(r / B1);
        const int m0 = tm * GEMM_TM, n0 = tn * GEMM_TN;
        const i64 abase = a_off + b0 * a_s0 + b1 * a_s1;
        const i64 bbase = b_off + b0 * b_s0 + b1 * b_s1;
        const i64 cbase = c_off + b0 * c_s0 + b1 * c_s1;
        float acc[GEMM_RM][GEMM_RN];
        for(int i = 0; i < GEMM_RM; ++i)
            for(int j = 0; j < GEMM_RN; ++j)
                acc[i][j] = 0.0f;
        for(int k0 = 0; k0 < K; k0 += GEMM_TK)
        {
            /* consecutive threads walk the operand's unit-stride dimension (coalesced reads) */
            for(int e = tid; e < GEMM_TM * GEMM_TK; e += GEMM_THREADS)
            {
                int i, l;
                if(a_cs == 1) { l = e % GEMM_TK; i = e / GEMM_TK; }
                else { i = e % GEMM_TM; l = e / GEMM_TM; }
                const int gi = m0 + i, gl = k0 + l;
                As[l][i] = (gi < M && gl < K) ? GEMM_LOAD_A(a, abase + gi * a_rs + gl * a_cs) : 0.0f;
            }
            for(int e = tid; e < GEMM_TN * GEMM_TK; e += GEMM_THREADS)
            {
                int j, l;
                if(b_cs == 1) { j = e % GEMM_TN; l = e / GEMM_TN; }
                else { l = e % GEMM_TK; j = e / GEMM_TK; }
                const int gj = n0 + j, gl = k0 + l;
                Bs[l][j] = (gj < N && gl < K) ? GEMM_LOAD_B(b, bbase + gl * b_rs + gj * b_cs) : 0.0f;
            }
            BARRIER();
            for(int l = 0; l < GEMM_TK; ++l)
            {
                float av[GEMM_RM], bv[GEMM_RN];
                for(int i = 0; i < GEMM_RM; ++i)
                    av[i] = As[l][ty + 16 * i];
                for(int j = 0; j < GEMM_RN; ++j)
                    bv[j] = Bs[l][tx + 16 * j];
                for(int i = 0; i < GEMM_RM; ++i)
                    for(int j = 0; j < GEMM_RN; ++j)
                        acc[i][j] += av[i] * bv[j];
            }
            BARRIER();
        }
        for(int i = 0; i < GEMM_RM; ++i)
        {
            const int gi = m0 + ty + 16 * i;
            if(gi >= M) continue;
            for(int j = 0; j < GEMM_RN; ++j)
            {
                const int gj = n0 + tx + 16 * j;
                if(gj < N) GEMM_STORE_C(c, cbase + gi * c_rs + gj * c_cs, acc[i][j]);
            }
        }
    }
}
