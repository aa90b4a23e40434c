/* The compile-time parameters every implicit-GEMM kernel shares (igemm_fwd.cu, igemm_bwd.cu,
   igemm_wrw.cu; solvers/conv/igemm_common.py's shape_defines sets them): the conv view's shape
   IG_N ... IG_DW, the config's IG_FRAG_BUFS and IG_SPLIT_K where a file gives no default of its
   own, the warp tiling derived from the config, and the checks every kernel needs.

   The shape defaults only let a file compile on its own (the CUDA compile test); the solvers
   define every one. A kernel file defines its own tile defaults (IG_BM, IG_BN, IG_BK,
   IG_WARPS_M, IG_WARPS_N, IG_STAGES) before including this. */
#ifndef MIOPY_IGEMM_DEFINES_H
#define MIOPY_IGEMM_DEFINES_H

#include "common/miopy_types.h"

#ifndef IG_N
#define IG_N 32
#define IG_C 64
#define IG_H 56
#define IG_W 56
#define IG_K 64
#define IG_R 3
#define IG_S 3
#define IG_P 56
#define IG_Q 56
#define IG_PH 1
#define IG_PW 1
#define IG_SH 1
#define IG_SW 1
#define IG_DH 1
#define IG_DW 1
#endif
#ifndef IG_G
#define IG_G 1 /* groups: IG_C and IG_K are then the channels of one group */
#endif
#define IG_XC (IG_C * IG_G) /* x's (dx's) pixel stride: all groups' channels */
#define IG_YK (IG_K * IG_G) /* y's (dy's) pixel stride */
#ifndef IG_FRAG_BUFS
#define IG_FRAG_BUFS 1 /* 2: double-buffered fragments */
#endif
#ifndef IG_SPLIT_K
#define IG_SPLIT_K 1 /* the reduction split over this many blocks, summed by a second kernel */
#endif
#ifndef IG_CLUSTER
#define IG_CLUSTER 0 /* 1: the IG_SPLIT_K blocks of a tile are a cluster and sum in shared memory */
#endif
#if IG_CLUSTER && (IG_SPLIT_K < 2 || IG_SPLIT_K > 8)
#error "a cluster split needs 2 to 8 blocks (IG_SPLIT_K)"
#endif

#if MIOPY_DTYPE == 0
#error "the implicit-GEMM kernels are for fp16 and bf16 (MIOPY_DTYPE 1 or 2)"
#endif

/* The group of this block and its index among the group's blocks: with IG_G > 1 the grid's x is
   IG_G equal runs of blocks, one per group (the group's channels are then a slice of x and y and
   a run of the filter's rows). */
#if IG_G > 1
#define IG_GROUP_OF_BLOCK(g, bid)              \
    const int bid##_run = gridDim.x / IG_G;     \
    const int g = blockIdx.x / bid##_run;       \
    const int bid = blockIdx.x - g * bid##_run
#else
#define IG_GROUP_OF_BLOCK(g, bid) \
    const int g = 0;              \
    const int bid = blockIdx.x
#endif

#define IG_THREADS (IG_WARPS_M * IG_WARPS_N * 32)
#define IG_WM (IG_BM / IG_WARPS_M) /* warp tile */
#define IG_WN (IG_BN / IG_WARPS_N)
#define IG_MI (IG_WM / 16) /* m16 fragments per warp */
#define IG_NI (IG_WN / 8)  /* n8 fragments per warp */

static_assert(IG_C % 8 == 0 && IG_K % 8 == 0, "C and K must be multiples of 8");
static_assert(IG_BK == 32 || IG_BK == 64, "BK is 32 or 64");
static_assert(IG_WM % 16 == 0 && IG_WN % 16 == 0, "warp tiles are multiples of 16");

#endif
