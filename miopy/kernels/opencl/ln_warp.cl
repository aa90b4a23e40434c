#include "common/ln_warp.h"
