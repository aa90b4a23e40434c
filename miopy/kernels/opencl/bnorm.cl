#include "common/bnorm.h"
