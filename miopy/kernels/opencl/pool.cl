#include "common/pool.h"
