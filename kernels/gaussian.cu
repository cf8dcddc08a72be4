// Gaussian elimination without pivoting (after Rodinia's gaussian). For pivot t, Fan1 computes
// the multipliers of the rows below it and Fan2 subtracts the scaled pivot row from them (and
// from the right-hand side). Timed step: Fan2 for t = 0, the largest update.
extern "C" __global__ void gaussian_fan1(const float* a, float* m, int n, int t)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x + t + 1;
    if (i >= n) {
        return;
    }
    m[i * n + t] = a[i * n + t] / a[t * n + t];
}

extern "C" __global__ void gaussian_fan2(float* a, float* b, const float* m, int n, int t)
{
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    const int i = blockIdx.y * blockDim.y + threadIdx.y + t + 1;
    if (i >= n || j >= n || j < t) {
        return;
    }
    const float mult = m[i * n + t];
    a[i * n + j] -= mult * a[t * n + j];
    if (j == t) {
        b[i] -= mult * b[t];
    }
}
