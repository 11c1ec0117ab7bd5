// The GPU timeline check's CUDA program: N launches of one kernel and M host-to-device copies
// of 64 KiB on one stream, then a synchronization. Every launch is one kernel on the GPU and
// every copy one memcpy, so mlprof's timeline must hold exactly N kernels and M H2D copies,
// each linked to its call.
//   nvcc -O2 -o timeline_kernels timeline_kernels.cu && ./timeline_kernels N M
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

__global__ void add_one(float *x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += 1.0f;
}

int main(int argc, char **argv) {
    int kernels = argc > 1 ? atoi(argv[1]) : 1000, copies = argc > 2 ? atoi(argv[2]) : 50;
    const int n = 1 << 14;
    float *device = nullptr, *host = nullptr;
    if (cudaMalloc(&device, n * sizeof(float)) != cudaSuccess) return 2;
    if (cudaMallocHost(&host, n * sizeof(float)) != cudaSuccess) return 3;
    cudaStream_t stream;
    cudaStreamCreate(&stream);
    for (int i = 0; i < kernels; i++) add_one<<<n / 256, 256, 0, stream>>>(device, n);
    for (int i = 0; i < copies; i++) cudaMemcpyAsync(device, host, n * sizeof(float), cudaMemcpyHostToDevice, stream);
    if (cudaStreamSynchronize(stream) != cudaSuccess) return 4;
    printf("kernels=%d copies=%d\n", kernels, copies);
    return 0;
}
