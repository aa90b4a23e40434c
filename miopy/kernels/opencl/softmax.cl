#include "common/softmax.h"
#include "common/softmax_warp.h"
