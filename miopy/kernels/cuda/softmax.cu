// miopy-compile-test: -DSMAX_TEAM=32 -DSMAX_PER=2
// miopy-compile-test: -DSMAX_TEAM=256 -DSMAX_PER=4
// miopy-compile-test: -DSMAX_TEAM=8 -DSMAX_PER=1 -DMIOPY_DTYPE=1
// miopy-compile-test: -DSMW_TEAM=8 -DSMW_PER=4
#include "common/softmax.h"
#include "common/softmax_warp.h"
