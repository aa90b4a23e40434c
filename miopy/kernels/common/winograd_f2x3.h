/* Winograd F(2x2,3x3): the input transform V = B^T d B of one 4x4 tile, shared by the forward /
   backward-data and the backward-weights kernels (cuda/winograd_fwd_f2x3.cu, winograd_wrw_f2x3.cu).
   B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1]; element (i, j) of V goes to out[(4 i + j) * plane]. */
#ifndef MIOPY_WINOGRAD_F2X3_H
#define MIOPY_WINOGRAD_F2X3_H
#include "common/miopy_types.h"

DEVICE_FN void wino_f2x3_store_bt_d_b(const float (&d)[4][4], float* out, i64 plane)
{
    float b[4][4]; /* B^T d */
#pragma unroll
    for(int j = 0; j < 4; ++j)
    {
        b[0][j] = d[0][j] - d[2][j];
        b[1][j] = d[1][j] + d[2][j];
        b[2][j] = d[2][j] - d[1][j];
        b[3][j] = d[1][j] - d[3][j];
    }
#pragma unroll
    for(int i = 0; i < 4; ++i)
    {
        out[(i * 4 + 0) * plane] = b[i][0] - b[i][2];
        out[(i * 4 + 1) * plane] = b[i][1] + b[i][2];
        out[(i * 4 + 2) * plane] = b[i][2] - b[i][1];
        out[(i * 4 + 3) * plane] = b[i][1] - b[i][3];
    }
}
#endif
