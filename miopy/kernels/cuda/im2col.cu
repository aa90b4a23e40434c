#include "common/im2col.h"
