#include "common/tensorop.h"
