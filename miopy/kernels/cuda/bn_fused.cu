// miopy-compile-test: -DNORM_VW=8 -DMIOPY_DTYPE=1 -DBNF_ONLY=2 -DBNF_CL=8 -DBNF_TX=2 -DBNF_FR=13 -DBN_BWD=1 -DBNF_RELOAD=1 -DBNF_BT=512
// miopy-compile-test: -DNORM_VW=4 -DMIOPY_DTYPE=0 -DBNF_ONLY=1 -DBNF_CL=2 -DBNF_BT=512 -DBNF_FR=13 -DNORM_PTYPE=1
// miopy-compile-test: -DNORM_VW=8 -DMIOPY_DTYPE=1 -DBNF_ONLY=3
#include "common/bn_fused.h"
