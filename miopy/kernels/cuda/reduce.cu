// miopy-compile-test: -DRED_TEAM=256
// miopy-compile-test: -DRED_TEAM=4 -DMIOPY_DTYPE=1
#include "common/reduce.h"
