// Back-propagation network layer (after Rodinia's backprop): 16 hidden units. The forward pass
// multiplies 16 inputs by their 16x16 weights per block and reduces in shared memory to one
// partial sum per (block, hidden unit); the host would finish the sum. The weight adjustment
// applies the momentum update. Timed step: the forward pass.
#define BP_HIDDEN 16

extern "C" __global__ void bp_layerforward(const float* input, const float* weights,
                                           float* partial, int n_in)
{
    __shared__ float prod[BP_HIDDEN][BP_HIDDEN];
    const int tx = threadIdx.x;
    const int ty = threadIdx.y;
    const int i = blockIdx.x * BP_HIDDEN + ty;
    prod[ty][tx] = (i < n_in) ? input[i] * weights[i * BP_HIDDEN + tx] : 0.0f;
    __syncthreads();
    for (int stride = BP_HIDDEN / 2; stride > 0; stride /= 2) {
        if (ty < stride) {
            prod[ty][tx] += prod[ty + stride][tx];
        }
        __syncthreads();
    }
    if (ty == 0) {
        partial[blockIdx.x * BP_HIDDEN + tx] = prod[0][tx];
    }
}

extern "C" __global__ void bp_adjust_weights(float* weights, float* old_dw, const float* delta,
                                             const float* input, int n_in, float eta,
                                             float momentum)
{
    const int tx = threadIdx.x;
    const int i = blockIdx.x * BP_HIDDEN + threadIdx.y;
    if (i >= n_in) {
        return;
    }
    const int k = i * BP_HIDDEN + tx;
    const float dw = eta * delta[tx] * input[i] + momentum * old_dw[k];
    weights[k] += dw;
    old_dw[k] = dw;
}
