// Kernels the CUDA backend needs for itself, not for calibration: the placement probe that
// proves a partition has the SMs it claims, and the memory-bandwidth stressor that runs on the
// complementary SMs for contended measurements.

// Every block records the SM it ran on. Blocks spin so that the block scheduler has to spread
// them over every SM of the partition instead of reusing a few fast ones.
extern "C" __global__ void wcetd_smid_probe(unsigned int* smids, unsigned long long spin_ns)
{
    unsigned int id;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
    unsigned long long start;
    unsigned long long now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < spin_ns);
    if (threadIdx.x == 0) {
        smids[blockIdx.x] = id;
    }
}

// Streams through a buffer larger than L2 until the host raises `stop` (mapped pinned memory)
// or max_ns have passed, so a lost host can never leave the GPU busy forever.
extern "C" __global__ void wcetd_stressor(float4* buf, unsigned long long n4,
                                          const volatile int* stop, unsigned long long max_ns)
{
    unsigned long long start;
    unsigned long long now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (;;) {
        for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
             i < n4; i += stride) {
            float4 v = buf[i];
            v.x += 1.0f;
            v.y += 1.0f;
            v.z += 1.0f;
            v.w += 1.0f;
            buf[i] = v;
        }
        if (*stop) {
            return;
        }
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
        if (now - start > max_ns) {
            return;
        }
    }
}

// Holds the stream for spin_ns so that the start event, the timed launch and the stop event are
// all enqueued before the GPU reaches them: the measured interval then starts on the GPU, not
// when the host gets round to calling cuLaunchKernel.
extern "C" __global__ void wcetd_gate(unsigned long long spin_ns)
{
    unsigned long long start;
    unsigned long long now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < spin_ns);
}

// Executes `trap`: a sticky device fault, for testing that the backend recovers from one.
extern "C" __global__ void wcetd_trap()
{
    asm volatile("trap;");
}

// A fixed amount of dependent arithmetic per thread (no clock reads, so a stall of the SM lengthens
// it): the delay probe times many launches of it on the whole device, and any launch well above
// the median was held up by something other than the kernel.
extern "C" __global__ void wcetd_delay_probe(float* out, int iterations)
{
    float x = (float)threadIdx.x * 1e-3f;
    for (int i = 0; i < iterations; ++i) {
        x = fmaf(x, 0.999999f, 1e-7f);
    }
    if (x == -1.0f) {
        out[blockIdx.x] = x;
    }
}
