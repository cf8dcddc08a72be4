// Speckle-reducing anisotropic diffusion, one iteration in two passes (after Rodinia's srad v2).
// Pass one computes the four directional derivatives and the diffusion coefficient of every
// pixel; pass two applies the divergence to the image. q0sqr, the speckle scale of the image,
// comes from the host. Timed step: pass one (srad_coefficients).
extern "C" __global__ void srad_coefficients(const float* img, float* dn, float* ds, float* dw,
                                             float* de, float* coef, int rows, int cols,
                                             float q0sqr)
{
    const int x = blockIdx.x * blockDim.x + threadIdx.x;
    const int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (y >= rows || x >= cols) {
        return;
    }
    const int k = y * cols + x;
    const float jc = img[k];
    const float n = img[(y > 0 ? y - 1 : y) * cols + x] - jc;
    const float s = img[(y < rows - 1 ? y + 1 : y) * cols + x] - jc;
    const float w = img[y * cols + (x > 0 ? x - 1 : x)] - jc;
    const float e = img[y * cols + (x < cols - 1 ? x + 1 : x)] - jc;
    const float g2 = (n * n + s * s + w * w + e * e) / (jc * jc);
    const float l = (n + s + w + e) / jc;
    const float num = 0.5f * g2 - 0.0625f * l * l;
    const float den = 1.0f + 0.25f * l;
    const float qsqr = num / (den * den);
    const float q = (qsqr - q0sqr) / (q0sqr * (1.0f + q0sqr));
    const float c = 1.0f / (1.0f + q);
    dn[k] = n;
    ds[k] = s;
    dw[k] = w;
    de[k] = e;
    coef[k] = fminf(fmaxf(c, 0.0f), 1.0f);
}

extern "C" __global__ void srad_update(float* img, const float* dn, const float* ds,
                                       const float* dw, const float* de, const float* coef,
                                       int rows, int cols, float lambda)
{
    const int x = blockIdx.x * blockDim.x + threadIdx.x;
    const int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (y >= rows || x >= cols) {
        return;
    }
    const int k = y * cols + x;
    const float cn = coef[k];
    const float cw = coef[k];
    const float cs = coef[(y < rows - 1 ? y + 1 : y) * cols + x];
    const float ce = coef[y * cols + (x < cols - 1 ? x + 1 : x)];
    const float d = cn * dn[k] + cs * ds[k] + cw * dw[k] + ce * de[k];
    img[k] += 0.25f * lambda * d;
}
