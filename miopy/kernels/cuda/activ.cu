#include "common/activ.h"
// miopy-compile-test: -DACTIV_MODE=3
// miopy-compile-test: -DMIOPY_DTYPE=0
// miopy-compile-test: -DACTIV_MODE=4 -DMIOPY_DTYPE=2
// miopy-compile-test: -DACTIV_MODE=9 -DMIOPY_DTYPE=1
