#include "common/conv_tiled.h"
