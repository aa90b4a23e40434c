#include "common/lrn.h"
