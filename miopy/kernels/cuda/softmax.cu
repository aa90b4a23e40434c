// miopy-compile-test: -DSMAX_TEAM=32 -DSMAX_PER=2
// miopy-compile-test: -DSMAX_TEAM=256 -DSMAX_PER=4
// miopy-compile-test: -DSMAX_TEAM=8 -DSMAX_PER=1 -DMIOPY_DTYPE=1
#include "common/softmax.h"
