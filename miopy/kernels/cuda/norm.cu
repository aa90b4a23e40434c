// The variants with GN_* / LN_* sizes compile only the kernels those sizes shape (NORM_ONLY: gn_rows_fwd
// with gn_nhwc_fwd 20, gn_rows_bwd 21, ln_rows_fwd 16, ln_rows_bwd 18); the others compile every kernel.
// miopy-compile-test: -DNORM_PTYPE=0 -DNORM_VW=4 -DMIOPY_DTYPE=0 -DGN_LOCAL=1024 -DGN_PER=7 -DGN_VPP=2 -DNORM_ONLY=20
// miopy-compile-test: -DNORM_PTYPE=1 -DNORM_VW=8 -DMIOPY_DTYPE=1 -DGN_LOCAL=1024 -DGN_PER=7 -DGN_GPB=2 -DNORM_ONLY=20
#include "common/norm.h"
#include "common/gn_nhwc.h"
// miopy-compile-test: -DNORM_PTYPE=0
// miopy-compile-test: -DNORM_PTYPE=1 -DNORM_VW=8 -DMIOPY_DTYPE=1
// miopy-compile-test: -DNORM_PTYPE=0 -DNORM_VW=8 -DMIOPY_DTYPE=2
// miopy-compile-test: -DNORM_PTYPE=2 -DMIOPY_DTYPE=2
// miopy-compile-test: -DNORM_PTYPE=0 -DNORM_VW=4 -DMIOPY_DTYPE=0
// miopy-compile-test: -DNORM_PTYPE=1 -DNORM_VW=8 -DMIOPY_DTYPE=1 -DLN_LOCAL=128 -DLN_PER=2 -DLN_ROWS=4 -DNORM_ONLY=18
// miopy-compile-test: -DNORM_PTYPE=1 -DNORM_VW=8 -DMIOPY_DTYPE=1 -DLN_LOCAL=128 -DLN_PER=2 -DNORM_ONLY=16
// miopy-compile-test: -DNORM_PTYPE=1 -DNORM_VW=8 -DMIOPY_DTYPE=1 -DGN_LOCAL=1024 -DGN_PER=4 -DGN_CG_MOST=8 -DNORM_ONLY=21
// GN_BATCH 1 (benchmarks/gn_sweep.py's variants): gn_rows_fwd with gn_nhwc_fwd, gn_rows_bwd with and without GN_RELOAD
// miopy-compile-test: -DNORM_PTYPE=1 -DNORM_VW=8 -DMIOPY_DTYPE=1 -DGN_LOCAL=1024 -DGN_PER=4 -DGN_GPB=2 -DGN_VPP=1 -DGN_BATCH=1 -DNORM_ONLY=20
// miopy-compile-test: -DNORM_PTYPE=0 -DNORM_VW=4 -DMIOPY_DTYPE=0 -DGN_LOCAL=1024 -DGN_PER=7 -DGN_RELOAD=1 -DGN_BATCH=1 -DNORM_ONLY=21
// miopy-compile-test: -DNORM_PTYPE=1 -DNORM_VW=8 -DMIOPY_DTYPE=1 -DGN_LOCAL=1024 -DGN_PER=4 -DGN_CG_MOST=8 -DGN_BATCH=1 -DVEC_LD_HINT=1 -DVEC_ST_HINT=1 -DNORM_ONLY=21
// two work-groups an SM (GN_MIN_BLOCKS, gn_sweep.py): 512 work items of 7 vectors, backward reading dy again
// miopy-compile-test: -DNORM_PTYPE=1 -DNORM_VW=8 -DMIOPY_DTYPE=1 -DGN_LOCAL=512 -DGN_PER=7 -DGN_MIN_BLOCKS=2 -DGN_BATCH=1 -DNORM_ONLY=20
// miopy-compile-test: -DNORM_PTYPE=1 -DNORM_VW=8 -DMIOPY_DTYPE=1 -DGN_LOCAL=512 -DGN_PER=7 -DGN_CG_MOST=8 -DGN_RELOAD=1 -DGN_MIN_BLOCKS=2 -DNORM_ONLY=21
