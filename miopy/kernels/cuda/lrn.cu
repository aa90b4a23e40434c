// miopy-compile-test: -DLRN_SIZE=5
#include "common/lrn.h"
