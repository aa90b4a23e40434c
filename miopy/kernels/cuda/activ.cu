#include "common/activ.h"
// miopy-compile-test: -DACTIV_MODE=3
// miopy-compile-test: -DMIOPY_DTYPE=0
// miopy-compile-test: -DACTIV_MODE=4 -DMIOPY_DTYPE=2
// miopy-compile-test: -DACTIV_MODE=9 -DMIOPY_DTYPE=1
// miopy-compile-test: -DACTIV_MODE=3 -DMIOPY_DTYPE=1 -DACTIV_RAW=1 -DVEC_LD_HINT=2 -DVEC_ST_HINT=1
// miopy-compile-test: -DACTIV_MODE=3 -DMIOPY_DTYPE=2 -DACTIV_RAW=1 -DVEC_LD_HINT=3 -DVEC_ST_HINT=2
// miopy-compile-test: -DACTIV_MODE=3 -DMIOPY_DTYPE=0 -DACTIV_RAW=1 -DVEC_LD_HINT=1 -DVEC_ST_HINT=1
// miopy-compile-test: -DMIOPY_DTYPE=1 -DVEC_LD_HINT=4
