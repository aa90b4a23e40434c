#include "common/norm.h"
