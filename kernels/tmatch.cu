// Template matching by normalised cross-correlation (in place of Rodinia's heartwall): every
// position of a 16x16 template over an n x n image gets its NCC score. The template's sum and
// sum of squares come from the host. Timed step: the whole score map, one launch.
#define TM_SIDE 16

extern "C" __global__ void tmatch_ncc(const float* image, const float* tmpl, float* out, int n,
                                      float t_sum, float t_sqsum)
{
    __shared__ float t[TM_SIDE][TM_SIDE];
    const int tx = threadIdx.x;
    const int ty = threadIdx.y;
    t[ty][tx] = tmpl[ty * TM_SIDE + tx];
    __syncthreads();
    const int m = n - TM_SIDE + 1;
    const int x = blockIdx.x * blockDim.x + tx;
    const int y = blockIdx.y * blockDim.y + ty;
    if (x >= m || y >= m) {
        return;
    }
    float si = 0.0f;
    float sii = 0.0f;
    float sit = 0.0f;
    for (int u = 0; u < TM_SIDE; ++u) {
        for (int v = 0; v < TM_SIDE; ++v) {
            const float p = image[(y + u) * n + x + v];
            si += p;
            sii += p * p;
            sit += p * t[u][v];
        }
    }
    const float inv = 1.0f / (TM_SIDE * TM_SIDE);
    const float num = sit - si * t_sum * inv;
    const float den = sqrtf((sii - si * si * inv) * (t_sqsum - t_sum * t_sum * inv));
    out[y * m + x] = den > 0.0f ? num / den : 0.0f;
}
