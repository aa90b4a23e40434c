/* Winograd transforms in two dimensions from their one-dimensional form: out = T in T^T for a
   transform T of O x I (B^T, G or A^T of winograd_f2x3.h / winograd_f4x3.h), given as a device
   function f(const float (&)[I], float (&)[O]) applying T to one vector. T goes down each column
   of in, then along each row of the result. CUDA only (a template). */
#ifndef MIOPY_WINOGRAD_2D_H
#define MIOPY_WINOGRAD_2D_H
#include "common/miopy_types.h"

template <int I, int O, void (*F)(const float (&)[I], float (&)[O])>
DEVICE_FN void wino_2d(const float (&in)[I][I], float (&out)[O][O])
{
    float t_in[O][I]; /* T in */
#pragma unroll
    for(int j = 0; j < I; ++j)
    {
        float col[I], res[O];
#pragma unroll
        for(int i = 0; i < I; ++i)
            col[i] = in[i][j];
        F(col, res);
#pragma unroll
        for(int o = 0; o < O; ++o)
            t_in[o][j] = res[o];
    }
#pragma unroll
    for(int o = 0; o < O; ++o)
        F(t_in[o], out[o]);
}
#endif
