// miopy-compile-test: -DNORM_VW=8 -DMIOPY_DTYPE=1 -DGNB_GPB=2 -DGNB_PER=7 -DGNB_RELOAD=1
// miopy-compile-test: -DNORM_VW=4 -DMIOPY_DTYPE=0 -DGNB_VPP=2 -DGNB_PER=4 -DGNB_LOCAL=512 -DNORM_PTYPE=1
#include "common/gn_nhwc_bwd.h"
