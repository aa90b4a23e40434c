#include "common/gemm.h"
