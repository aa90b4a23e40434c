// miopy-compile-test: -DNORM_VW=8 -DMIOPY_DTYPE=1 -DBNG_TX=8 -DBNG_MINB=2 -DBNG_HOLD=1 -DVEC_ST_HINT=1
// miopy-compile-test: -DNORM_VW=4 -DMIOPY_DTYPE=0 -DBNG_TX=64 -DBNG_MINB=1 -DBN_BWD=1 -DBNG_U=4
#include "common/bn_grid.h"
