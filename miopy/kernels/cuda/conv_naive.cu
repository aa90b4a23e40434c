#include "common/conv_naive.h"
