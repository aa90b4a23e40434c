/* The fused epilogue of the implicit-GEMM conv kernels (solvers/conv/epilogue.py selects it):
   with MIOPY_EPI defined to 1, every final write of 8 outputs (16 bytes) becomes

       out = act(alpha * acc + bias[k]) + beta * out_old

   with alpha, beta, the activation's alpha (and beta) and the bias pointer as kernel arguments
   appended after the kernel's own (EPI_KERNEL_PARAMS). MIOPY_EPI_BIAS 1 adds bias[k] (k the
   output channel, per group); MIOPY_EPI_ACT is the activation (MIOpen's mode numbers: 0
   PASTHRU, 3 RELU, 7 CLIPPED_RELU min(a, max(0, v)), 8 LEAKY_RELU v > 0 ? v : a * v). beta == 0
   never reads out (so NaN or garbage there does not propagate, as in MIOpen and cuDNN).

   Where the value is fp32 at the write (a split-K sum) it is applied in fp32 (EPI_F32); where the
   tile was already rounded to data_t in shared memory (EPI_STORE8) the 8 values are read back
   as fp32 first: the same two roundings as a conv followed by a separate scaling kernel.

   Without MIOPY_EPI every macro here expands to nothing or to the plain store, so the default
   kernels are the same code token for token (the (1, 0) kernels' cubins do not change).
   EPI_VALUE is the same for one output whose channel the kernel knows (the fp32 3xTF32 kernels).
   CUDA only; the 16-byte helpers are for fp16 / bf16 data (data_t). */
#ifndef MIOPY_CONV_EPILOGUE_H
#define MIOPY_CONV_EPILOGUE_H

#ifndef MIOPY_EPI
#define MIOPY_EPI 0 /* the plain kernels; files name their epilogue variants to compile-test */
#endif

#if MIOPY_EPI
#ifndef MIOPY_EPI_BIAS
#define MIOPY_EPI_BIAS 0 /* no bias */
#endif
#ifndef MIOPY_EPI_ACT
#define MIOPY_EPI_ACT 0
#endif
#if MIOPY_EPI_ACT != 0 && MIOPY_EPI_ACT != 3 && MIOPY_EPI_ACT != 7 && MIOPY_EPI_ACT != 8
#error "MIOPY_EPI_ACT: the fused activations are 0 (PASTHRU), 3 (RELU), 7 (CLIPPED_RELU), 8 (LEAKY_RELU)"
#endif

struct EpiArgs
{
    const data_t* base; /* the output as this kernel's writes see it (a group's first channel) */
    const data_t* bias; /* the output channels' bias, shifted like base */
    float alpha, beta, act_a;
    int row; /* elements per output row: a write at dst is channel (dst - base) % row */
};

#define EPI_KERNEL_PARAMS , const data_t* RESTRICT epi_bias, float epi_alpha, float epi_beta, float epi_act_a
/* the kernel's EpiArgs `ep`: its output pointer, the channel offset of its group, the row length */
#define EPI_SETUP(out, chan_off, row_len) \
    const EpiArgs ep = {(out), epi_bias + (chan_off), epi_alpha, epi_beta, epi_act_a, (row_len)}
#define EPI_PARAM , const EpiArgs& ep
#define EPI_ARG , ep
#define EPI_F32(v, dst) epi_apply8(v, dst, ep)
#define EPI_STORE8(dst, val) epi_store8(dst, val, ep)
#define EPI_F32X2(lo, hi, dst) epi_apply2(lo, hi, dst, ep)
#define EPI_VALUE(v, k, dst) v = epi_value(v, k, dst, ep)

DEVICE_FN float epi_act(float v, float a)
{
#if MIOPY_EPI_ACT == 3
    return v > 0.0f ? v : 0.0f;
#elif MIOPY_EPI_ACT == 7
    return fminf(a, fmaxf(0.0f, v));
#elif MIOPY_EPI_ACT == 8
    return v > 0.0f ? v : a * v;
#else
    return v;
#endif
}

/* One output of channel k (of the kernel's group) written at dst: act(alpha * v + bias[k]) +
   beta * *dst. */
DEVICE_FN float epi_value(float v, int k, const data_t* dst, const EpiArgs& ep)
{
    v *= ep.alpha;
#if MIOPY_EPI_BIAS
    v += LOAD(ep.bias, k);
#endif
    v = epi_act(v, ep.act_a);
    if(ep.beta != 0.0f)
        v += ep.beta * LOAD(dst, 0);
    return v;
}

#if MIOPY_DTYPE != 0
/* Two adjacent 16-bit elements (one u32) as fp32. */
DEVICE_FN float2 epi_unpack2(u32 bits)
{
#if MIOPY_DTYPE == 2
    return make_float2(__uint_as_float(bits << 16), __uint_as_float(bits & 0xffff0000u));
#else
    __half2 h = *reinterpret_cast<__half2*>(&bits);
    return __half22float2(h);
#endif
}

/* v: the 8 fp32 results to be written at dst[0..7]; out = act(alpha * v + bias) + beta * old. */
DEVICE_FN void epi_apply8(float (&v)[8], const data_t* dst, const EpiArgs& ep)
{
#if MIOPY_EPI_BIAS
    const int k = (int)((dst - ep.base) % ep.row);
    const uint4 bb = *reinterpret_cast<const uint4*>(ep.bias + k);
    const u32 bw[4] = {bb.x, bb.y, bb.z, bb.w};
#endif
#pragma unroll
    for(int i = 0; i < 8; i += 2)
    {
        float lo = ep.alpha * v[i], hi = ep.alpha * v[i + 1];
#if MIOPY_EPI_BIAS
        const float2 b = epi_unpack2(bw[i / 2]);
        lo += b.x;
        hi += b.y;
#endif
        v[i] = epi_act(lo, ep.act_a);
        v[i + 1] = epi_act(hi, ep.act_a);
    }
    if(ep.beta != 0.0f)
    {
        const uint4 o = *reinterpret_cast<const uint4*>(dst);
        const u32 ow[4] = {o.x, o.y, o.z, o.w};
#pragma unroll
        for(int i = 0; i < 4; ++i)
        {
            const float2 f = epi_unpack2(ow[i]);
            v[2 * i] += ep.beta * f.x;
            v[2 * i + 1] += ep.beta * f.y;
        }
    }
}

/* Two fp32 results to be written at dst[0..1] (4-byte aligned) through the epilogue. */
DEVICE_FN void epi_apply2(float& lo, float& hi, const data_t* dst, const EpiArgs& ep)
{
    lo *= ep.alpha;
    hi *= ep.alpha;
#if MIOPY_EPI_BIAS
    const int k = (int)((dst - ep.base) % ep.row);
    const float2 b = epi_unpack2(*reinterpret_cast<const u32*>(ep.bias + k));
    lo += b.x;
    hi += b.y;
#endif
    lo = epi_act(lo, ep.act_a);
    hi = epi_act(hi, ep.act_a);
    if(ep.beta != 0.0f)
    {
        const float2 f = epi_unpack2(*reinterpret_cast<const u32*>(dst));
        lo += ep.beta * f.x;
        hi += ep.beta * f.y;
    }
}

/* The 16 bytes `packed` (8 rounded results) written at dst through the epilogue. */
DEVICE_FN void epi_store8(data_t* dst, uint4 packed, const EpiArgs& ep)
{
    const u32 pw[4] = {packed.x, packed.y, packed.z, packed.w};
    float v[8];
#pragma unroll
    for(int i = 0; i < 4; ++i)
    {
        const float2 f = epi_unpack2(pw[i]);
        v[2 * i] = f.x;
        v[2 * i + 1] = f.y;
    }
    epi_apply8(v, dst, ep);
    uint4 o;
    o.x = pack2(v[0], v[1]);
    o.y = pack2(v[2], v[3]);
    o.z = pack2(v[4], v[5]);
    o.w = pack2(v[6], v[7]);
    *reinterpret_cast<uint4*>(dst) = o;
}
#endif /* MIOPY_DTYPE != 0 */
#else
#define EPI_KERNEL_PARAMS
#define EPI_SETUP(out, chan_off, row_len)
#define EPI_PARAM
#define EPI_ARG
#define EPI_F32(v, dst)
#define EPI_F32X2(lo, hi, dst)
#define EPI_VALUE(v, k, dst)
#define EPI_STORE8(dst, val) *reinterpret_cast<uint4*>(dst) = val
#endif /* MIOPY_EPI */

#endif
