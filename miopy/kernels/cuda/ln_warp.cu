// miopy-compile-test: -DLNW_TEAM=16 -DLNW_PER=8 -DLNW_GROUP=512
// miopy-compile-test: -DLNW_TEAM=32 -DLNW_PER=6 -DLNW_GROUP=256 -DLNW_MIN_BLOCKS=2
// miopy-compile-test: -DLNW_TEAM=8 -DLNW_PER=1 -DLNW_GROUP=128 -DMIOPY_DTYPE=1
// miopy-compile-test: -DLNW_TEAM=32 -DLNW_PER=4 -DLNW_GROUP=128 -DLNW_MIN_BLOCKS=6 -DLNW_ACC_SHARED=1
#include "common/ln_warp.h"
