// miopy-compile-test: -DLRN_SIZE=5
#include "common/miopy_types.h"
#if MIOPY_DTYPE != 3
#include "common/vec.h"
#endif
#include "common/lrn.h"
#if MIOPY_DTYPE != 3
#include "common/lrn_chunk.h"
#endif
