// miopy-compile-test: -DRED_TEAM=256
// miopy-compile-test: -DRED_TEAM=128 -DRED_VEC=4 -DMIOPY_DTYPE=0
// miopy-compile-test: -DRED_TEAM=64 -DRED_VEC=8 -DMIOPY_DTYPE=1
// miopy-compile-test: -DRED_TEAM=4 -DMIOPY_DTYPE=1
#include "common/reduce.h"
