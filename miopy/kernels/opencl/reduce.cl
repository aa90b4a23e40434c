#include "common/reduce.h"
