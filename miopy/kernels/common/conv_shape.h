/* What the run-time-shaped convolution kernels share (conv_naive.h, im2col.h): their shape
   arguments, CONV_SHAPE_ARGS (solvers/conv/common.py's shape_args gives them), and the tap
   arithmetic of backward data. */
#ifndef MIOPY_CONV_SHAPE_H
#define MIOPY_CONV_SHAPE_H

#include "common/miopy_types.h"

#define CONV_SHAPE_ARGS                                                                          \
    int N, int C, int K, int G, int Di, int Hi, int Wi, int Do, int Ho, int Wo, int Z, int Y, int X, \
    int pd, int ph, int pw, int sd, int sh, int sw, int dd, int dh, int dw,                        \
    i64 xn, i64 xc, i64 xd, i64 xh, i64 xw, i64 wk, i64 wc, i64 wz, i64 wy, i64 wx,                \
    i64 yn, i64 yk, i64 yd, i64 yh, i64 yw

/* Along one dimension: the output index o that filter tap f reaches input index i from
   (i + p - f*d = o*s with 0 <= o < out), or -1 where there is none. */
DEVICE_FN int conv_out_index(int i, int p, int f, int d, int s, int out)
{
    const int t = i + p - f * d;
    if(t < 0 || t % s)
        return -1;
    const int o = t / s;
    return o < out ? o : -1;
}

#endif
