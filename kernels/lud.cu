// Blocked LU decomposition without pivoting (after Rodinia's lud), 16x16 tiles, in place
// (unit-lower L below the diagonal, U on and above it). For each diagonal tile: factor it,
// solve the tiles right of it (row) and below it (column), then update the trailing matrix.
// Timed step: the internal update of the first diagonal step, the largest.
#define LUD_TILE 16

extern "C" __global__ void lud_diagonal(float* a, int n, int offset)
{
    __shared__ float s[LUD_TILE][LUD_TILE];
    const int tx = threadIdx.x;
    const int ty = threadIdx.y;
    s[ty][tx] = a[(offset + ty) * n + offset + tx];
    __syncthreads();
    for (int k = 0; k < LUD_TILE - 1; ++k) {
        if (ty > k && tx == k) {
            s[ty][k] /= s[k][k];
        }
        __syncthreads();
        if (ty > k && tx > k) {
            s[ty][tx] -= s[ty][k] * s[k][tx];
        }
        __syncthreads();
    }
    a[(offset + ty) * n + offset + tx] = s[ty][tx];
}

// blockIdx.y == 0: the tile right of the diagonal, solved with L (forward substitution);
// blockIdx.y == 1: the tile below it, solved with U.
extern "C" __global__ void lud_perimeter(float* a, int n, int offset)
{
    __shared__ float d[LUD_TILE][LUD_TILE];
    __shared__ float s[LUD_TILE][LUD_TILE];
    const int tx = threadIdx.x;
    const int ty = threadIdx.y;
    const int other = offset + LUD_TILE * (blockIdx.x + 1);
    const bool row_tile = blockIdx.y == 0;
    const int r = row_tile ? offset + ty : other + ty;
    const int c = row_tile ? other + tx : offset + tx;
    d[ty][tx] = a[(offset + ty) * n + offset + tx];
    s[ty][tx] = a[r * n + c];
    __syncthreads();
    if (row_tile) {
        for (int k = 0; k < LUD_TILE; ++k) {
            if (ty > k) {
                s[ty][tx] -= d[ty][k] * s[k][tx];
            }
            __syncthreads();
        }
    } else {
        for (int k = 0; k < LUD_TILE; ++k) {
            if (tx == k) {
                s[ty][k] /= d[k][k];
            }
            __syncthreads();
            if (tx > k) {
                s[ty][tx] -= s[ty][k] * d[k][tx];
            }
            __syncthreads();
        }
    }
    a[r * n + c] = s[ty][tx];
}

extern "C" __global__ void lud_internal(float* a, int n, int offset)
{
    __shared__ float l[LUD_TILE][LUD_TILE];
    __shared__ float u[LUD_TILE][LUD_TILE];
    const int tx = threadIdx.x;
    const int ty = threadIdx.y;
    const int r0 = offset + LUD_TILE * (blockIdx.y + 1);
    const int c0 = offset + LUD_TILE * (blockIdx.x + 1);
    l[ty][tx] = a[(r0 + ty) * n + offset + tx];
    u[ty][tx] = a[(offset + ty) * n + c0 + tx];
    __syncthreads();
    float sum = 0.0f;
    for (int k = 0; k < LUD_TILE; ++k) {
        sum += l[ty][k] * u[k][tx];
    }
    a[(r0 + ty) * n + c0 + tx] -= sum;
}
