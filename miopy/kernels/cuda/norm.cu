#include "common/norm.h"
// miopy-compile-test: -DNORM_PTYPE=0
// miopy-compile-test: -DNORM_PTYPE=1 -DNORM_VW=8 -DMIOPY_DTYPE=1
// miopy-compile-test: -DNORM_PTYPE=0 -DNORM_VW=8 -DMIOPY_DTYPE=2
// miopy-compile-test: -DNORM_PTYPE=2 -DMIOPY_DTYPE=2
// miopy-compile-test: -DNORM_PTYPE=0 -DNORM_VW=4 -DMIOPY_DTYPE=0
