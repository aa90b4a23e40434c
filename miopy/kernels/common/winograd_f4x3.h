/* Winograd F(4x4,3x3) in one dimension, used in two by common/winograd_2d.h (cuda/winograd_fwd.cu
   with WF_M 4). Points 0, 1, -1, 1/2, -2, inf rather than Lavin and Gray's 0, +-1, +-2, inf: the
   same cost and about half the rounding error (measured in fp32 on 128-channel sums: ~16x a direct
   sum's error against ~30x), the choice of Barabasz et al., "Error analysis and improving the
   accuracy of Winograd convolution" (2020). Rows of B^T scaled by 2 where that makes them integral,
   the matching rows of G by 1/2 (powers of two: no change to the rounding):
   B^T = [2 -3 -4  3 2 0; 0 -2  1  5 2 0; 0  2 -5  1 2 0;
          0 -2 -1  2 1 0; 0  1 -2 -1 2 0; 0  2 -3 -4 3 2]                  (input, 6 -> 6)
   G   = [1/2 0 0; 1/6 1/6 1/6; -1/6 1/6 -1/6; -16/15 -8/15 -4/15;
          1/30 -1/15 2/15; 0 0 1/2]                                         (filter, 3 -> 6)
   A^T = [1 1 1 1 1 0; 0 1 -1 1/2 -2 0; 0 1 1 1/4 4 0; 0 1 -1 1/8 -8 1]   (output, 6 -> 4) */
#ifndef MIOPY_WINOGRAD_F4X3_H
#define MIOPY_WINOGRAD_F4X3_H
#include "common/winograd_2d.h"

DEVICE_FN void wino_f4x3_bt(const float (&d)[6], float (&o)[6])
{
    o[0] = 2.0f * (d[0] + d[4]) - 3.0f * (d[1] - d[3]) - 4.0f * d[2];
    o[1] = 2.0f * (d[4] - d[1]) + d[2] + 5.0f * d[3];
    o[2] = 2.0f * (d[1] + d[4]) - 5.0f * d[2] + d[3];
    o[3] = 2.0f * (d[3] - d[1]) + d[4] - d[2];
    o[4] = 2.0f * (d[4] - d[2]) + d[1] - d[3];
    o[5] = 2.0f * (d[1] + d[5]) - 3.0f * (d[2] - d[4]) - 4.0f * d[3];
}

DEVICE_FN void wino_f4x3_g(const float (&g)[3], float (&o)[6])
{
    o[0] = 0.5f * g[0];
    o[1] = (g[0] + g[1] + g[2]) * (1.0f / 6.0f);
    o[2] = (g[1] - g[0] - g[2]) * (1.0f / 6.0f);
    o[3] = (4.0f * g[0] + 2.0f * g[1] + g[2]) * (-4.0f / 15.0f);
    o[4] = (g[0] - 2.0f * g[1] + 4.0f * g[2]) * (1.0f / 30.0f);
    o[5] = 0.5f * g[2];
}

DEVICE_FN void wino_f4x3_at(const float (&m)[6], float (&o)[4])
{
    const float p1 = m[1] + m[2], n1 = m[1] - m[2];
    o[0] = p1 + m[3] + m[4] + m[0];
    o[1] = n1 + 0.5f * m[3] - 2.0f * m[4];
    o[2] = p1 + 0.25f * m[3] + 4.0f * m[4];
    o[3] = n1 + 0.125f * m[3] - 8.0f * m[4] + m[5];
}
#endif
