// miopy-compile-test: -DTENSOROP_OP=0
// miopy-compile-test: -DTENSOROP_OP=5 -DMIOPY_DTYPE=1
#include "common/tensorop.h"
#include "common/tensorop_au.h"
