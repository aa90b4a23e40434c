#include "common/norm.h"
#include "common/gn_nhwc.h"
