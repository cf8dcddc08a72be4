// 2-D transient thermal simulation (after Rodinia's hotspot): one explicit Euler step of the
// heat equation on a rows x cols grid of chip cells, with clamped borders. The host folds the
// chip constants into k_step and the inverse resistances. Timed step: one stencil step.
extern "C" __global__ void hotspot_step(const float* temp, const float* power, float* out,
                                        int rows, int cols, float k_step, float inv_rx,
                                        float inv_ry, float inv_rz, float ambient)
{
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    const int r = blockIdx.y * blockDim.y + threadIdx.y;
    if (r >= rows || c >= cols) {
        return;
    }
    const int k = r * cols + c;
    const float t = temp[k];
    const float n = temp[(r > 0 ? r - 1 : r) * cols + c];
    const float s = temp[(r < rows - 1 ? r + 1 : r) * cols + c];
    const float w = temp[r * cols + (c > 0 ? c - 1 : c)];
    const float e = temp[r * cols + (c < cols - 1 ? c + 1 : c)];
    out[k] = t + k_step * (power[k] + (n + s - 2.0f * t) * inv_ry + (e + w - 2.0f * t) * inv_rx
                           + (ambient - t) * inv_rz);
}
