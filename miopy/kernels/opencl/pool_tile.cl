#include "common/pool_tile_cpu.h"
