#include "common/softmax.h"
