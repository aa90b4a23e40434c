#include "common/activ.h"
