// miopy-compile-test: -DNORM_PTYPE=0
// miopy-compile-test: -DNORM_PTYPE=1 -DNORM_VW=8 -DMIOPY_DTYPE=1 -DBN_TX=8 -DBN_BWD=1
// miopy-compile-test: -DNORM_PTYPE=0 -DNORM_VW=8 -DMIOPY_DTYPE=2 -DBN_TX=16
// miopy-compile-test: -DNORM_PTYPE=0 -DNORM_VW=4 -DMIOPY_DTYPE=0 -DBN_BWD=1
// miopy-compile-test: -DNORM_PTYPE=0 -DNORM_VW=8 -DMIOPY_DTYPE=1 -DBN_ONLY=4 -DBN_AU=8
#include "common/bnorm.h"
#include "common/bn_apply_cl.h"
