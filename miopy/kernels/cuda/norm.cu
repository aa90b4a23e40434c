// miopy-compile-test: -DNORM_PTYPE=0 -DNORM_VW=4 -DMIOPY_DTYPE=0 -DGN_LOCAL=1024 -DGN_PER=7 -DGN_VPP=2
// miopy-compile-test: -DNORM_PTYPE=1 -DNORM_VW=8 -DMIOPY_DTYPE=1 -DGN_LOCAL=1024 -DGN_PER=7 -DGN_GPB=2
#include "common/norm.h"
#include "common/gn_nhwc.h"
// miopy-compile-test: -DNORM_PTYPE=0
// miopy-compile-test: -DNORM_PTYPE=1 -DNORM_VW=8 -DMIOPY_DTYPE=1
// miopy-compile-test: -DNORM_PTYPE=0 -DNORM_VW=8 -DMIOPY_DTYPE=2
// miopy-compile-test: -DNORM_PTYPE=2 -DMIOPY_DTYPE=2
// miopy-compile-test: -DNORM_PTYPE=0 -DNORM_VW=4 -DMIOPY_DTYPE=0
// miopy-compile-test: -DNORM_PTYPE=1 -DNORM_VW=8 -DMIOPY_DTYPE=1 -DLN_LOCAL=128 -DLN_PER=2 -DLN_ROWS=4
// miopy-compile-test: -DNORM_PTYPE=1 -DNORM_VW=8 -DMIOPY_DTYPE=1 -DGN_LOCAL=1024 -DGN_PER=4 -DGN_CG_MOST=8
