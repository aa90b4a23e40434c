/* Winograd F(2x2,3x3) (points 0, 1, -1, inf) in one dimension, used in two by common/winograd_2d.h
   (cuda/winograd_fwd.cu with WF_M 2, cuda/winograd_wrw_f2x3.cu):
   B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1]  (input, 4 -> 4)
   G   = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1] (filter, 3 -> 4)
   A^T = [1 1 1 0; 0 1 -1 -1]                      (output, 4 -> 2) */
#ifndef MIOPY_WINOGRAD_F2X3_H
#define MIOPY_WINOGRAD_F2X3_H
#include "common/winograd_2d.h"

DEVICE_FN void wino_f2x3_bt(const float (&d)[4], float (&o)[4])
{
    o[0] = d[0] - d[2];
    o[1] = d[1] + d[2];
    o[2] = d[2] - d[1];
    o[3] = d[1] - d[3];
}

DEVICE_FN void wino_f2x3_g(const float (&g)[3], float (&o)[4])
{
    o[0] = g[0];
    o[1] = 0.5f * (g[0] + g[1] + g[2]);
    o[2] = 0.5f * (g[0] - g[1] + g[2]);
    o[3] = g[2];
}

DEVICE_FN void wino_f2x3_at(const float (&m)[4], float (&o)[2])
{
    o[0] = m[0] + m[1] + m[2];
    o[1] = m[1] - m[2] - m[3];
}

/* V = B^T d B of one 4x4 tile; element (i, j) of V goes to out[(4 i + j) * plane]. */
DEVICE_FN void wino_f2x3_store_bt_d_b(const float (&d)[4][4], float* out, i64 plane)
{
    float v[4][4];
    wino_2d<4, 4, wino_f2x3_bt>(d, v);
#pragma unroll
    for(int xi = 0; xi < 16; ++xi)
        out[xi * plane] = v[xi / 4][xi % 4];
}
#endif
