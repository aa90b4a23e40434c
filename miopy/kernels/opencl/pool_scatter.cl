#include "common/pool_scatter_cpu.h"
