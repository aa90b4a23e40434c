// miopy-compile-test: -DLRN_SIZE=5
// miopy-compile-test: -DLRN_SIZE=4 -DLRNR_U=4 -DLRNC_U=2
#include "common/miopy_types.h"
#if MIOPY_DTYPE != 3
#include "common/vec.h"
#endif
#include "common/lrn.h"
#include "common/lrn_ring_chunk.h"
#if MIOPY_DTYPE != 3
#include "common/lrn_chunk.h"
#endif
