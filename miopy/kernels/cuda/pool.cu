#include "common/pool.h"
// miopy-compile-test: -DPOOL_MODE=0
// miopy-compile-test: -DPOOL_MODE=1 -DPOOL_KD=2 -DPOOL_KH=3 -DPOOL_KW=3 -DMIOPY_DTYPE=1
// miopy-compile-test: -DPOOL_SAVE_INDEX=1 -DPOOL_INDEX_TYPE=1 -DPOOL_VEC=1 -DPOOL_NHWC=1 -DPOOL_KD=1 -DPOOL_KH=3 -DPOOL_KW=3 -DMIOPY_DTYPE=1
