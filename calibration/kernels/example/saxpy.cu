// y = a * x + y over n floats: the README's example of bringing a kernel of one's own.
extern "C" __global__ void saxpy(const float* x, float* y, float a, unsigned int n)
{
    const unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = a * x[i] + y[i];
    }
}
