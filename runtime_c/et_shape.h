/* edgetrain runtime: data movement (Transpose, Concat/Split/Slice blocks)
 * and ReduceSum/ReduceMean.  Outputs must not overlap inputs. */
#ifndef ET_SHAPE_H
#define ET_SHAPE_H

/* ONNX Transpose: output axis d is input axis perm[d].  Walks the output
 * in order so writes are sequential; rank <= ET_MAX_RANK (0: a scalar). */
static inline void et_transpose_f32(int rank, const int *in_shape, const int *perm,
                                    const float *X, float *Y)
{
    int in_strides[ET_MAX_RANK] = {0}, shape[ET_MAX_RANK] = {0};
    int strides[ET_MAX_RANK] = {0}, idx[ET_MAX_RANK] = {0};
    int d, n = 1, o, i, inner, s, xo = 0;
    if (rank < 1) {
        Y[0] = X[0];
        return;
    }
    for (d = rank - 1; d >= 0; --d) {
        in_strides[d] = n;
        n *= in_shape[d];
    }
    if (n == 0)
        return;
    for (d = 0; d < rank; ++d) {
        shape[d] = in_shape[perm[d]];
        strides[d] = in_strides[perm[d]];
    }
    inner = shape[rank - 1];
    s = strides[rank - 1];
    for (o = 0; o < n; o += inner) {
        for (i = 0; i < inner; ++i)
            Y[o + i] = X[xo + i * s];
        for (d = rank - 2; d >= 0; --d) {
            xo += strides[d];
            if (++idx[d] < shape[d])
                break;
            xo -= strides[d] * shape[d];
            idx[d] = 0;
        }
    }
}

static inline void et_copy_block_f32(int outer, int inner, const float *X, int x_stride,
                                     float *Y, int y_stride)
{
    int o;
    if (inner <= 0)
        return;
    for (o = 0; o < outer; ++o)
        memcpy(Y + (size_t)o * (size_t)y_stride, X + (size_t)o * (size_t)x_stride,
               (size_t)inner * sizeof(float));
}

/* Whether X, read in memory order, is [outer][Y's elements][inner] with the
 * outer and inner axes summed (a bias gradient: N and the spatial axes of
 * NCHW), and the sizes of the three. */
static inline int et_reduce_blocks_(int rank, const int *in_shape, const int *out_strides, int *outer, int *mid,
                                    int *inner)
{
    int d;
    *outer = *mid = *inner = 1;
    for (d = rank - 1; d >= 0; --d) {
        if (in_shape[d] == 1)
            continue;
        if (out_strides[d] == 0 && *mid == 1)
            *inner *= in_shape[d];
        else if (out_strides[d] == *mid && *outer == 1)
            *mid *= in_shape[d];
        else if (out_strides[d] == 0)
            *outer *= in_shape[d];
        else
            return 0;
    }
    return 1;
}

/* Outputs whose sums run side by side in et_reduce_sum_f32: each sum is a
 * chain of dependent additions, and independent chains overlap. */
#define ET_REDUCE_CHAINS 8

/* Sums in input row-major order, so each output's summation order is
 * fixed; the mean's 1/count is applied once at the end, after summing,
 * as PyTorch does. */
static inline void et_reduce_sum_f32(int rank, const int *in_shape, const int *out_strides,
                                     float scale, const float *X, float *Y, int y_size)
{
    int idx[ET_MAX_RANK] = {0};
    int d, n = 1, o, i, inner, s, yo = 0, outer, mid, c, l;
    for (i = 0; i < y_size; ++i)
        Y[i] = 0.0f;
    for (d = 0; d < rank; ++d)
        n *= in_shape[d];
    if (n > 0 && et_reduce_blocks_(rank, in_shape, out_strides, &outer, &mid, &inner)) {
        /* Each output still adds its inputs in memory order. */
        for (o = 0; o < outer; ++o)
            if (inner == 1)  /* a kept last axis (a Gemm's bias gradient): rows add to Y as they are */
                et_accumulate_f32(mid, X + (size_t)o * (size_t)mid, Y, 0);
            else
                for (c = 0; c < mid; c += ET_REDUCE_CHAINS) {
                    const float *x = X + ((size_t)o * (size_t)mid + (size_t)c) * (size_t)inner;
                    if (mid - c >= ET_REDUCE_CHAINS) {
                        float sum[ET_REDUCE_CHAINS];
                        for (l = 0; l < ET_REDUCE_CHAINS; ++l)
                            sum[l] = Y[c + l];
                        for (i = 0; i < inner; ++i)
                            for (l = 0; l < ET_REDUCE_CHAINS; ++l)
                                sum[l] += x[(size_t)l * (size_t)inner + (size_t)i];
                        for (l = 0; l < ET_REDUCE_CHAINS; ++l)
                            Y[c + l] = sum[l];
                    } else
                        for (l = 0; l < mid - c; ++l)
                            for (i = 0; i < inner; ++i)
                                Y[c + l] += x[(size_t)l * (size_t)inner + (size_t)i];
                }
    } else if (n > 0) {
        inner = in_shape[rank - 1];
        s = out_strides[rank - 1];
        for (o = 0; o < n; o += inner) {
            for (i = 0; i < inner; ++i)
                Y[yo + i * s] += X[o + i];
            for (d = rank - 2; d >= 0; --d) {
                yo += out_strides[d];
                if (++idx[d] < in_shape[d])
                    break;
                yo -= out_strides[d] * in_shape[d];
                idx[d] = 0;
            }
        }
    }
    for (i = 0; i < y_size; ++i)
        Y[i] *= scale;
}

#endif /* ET_SHAPE_H */
