/* Calls every intercepted CUDA runtime family a known number of times from several threads,
 * against the real libcudart (no GPU driver here: every call fails fast, which mlprof must
 * record faithfully). Built as a shared library linked against libcudart, so that a main
 * program can load it normally or with dlopen(RTLD_LOCAL) as Python extensions are.
 *
 * run_cuda(dir, threads, iterations): each thread makes `iterations` calls of each function in
 * CALLS below; the status each function returned (first call) is written to dir/status.txt as
 * "name code" lines. Returns 0. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int cudaError_t;
typedef void *cudaStream_t;
typedef void *cudaEvent_t;
typedef struct { unsigned x, y, z; } dim3;
typedef struct {
    dim3 gridDim;
    dim3 blockDim;
    size_t dynamicSmemBytes;
    cudaStream_t stream;
    void *attrs;
    unsigned numAttrs;
} cudaLaunchConfig_t;

cudaError_t cudaLaunchKernel(const void *, dim3, dim3, void **, size_t, cudaStream_t);
cudaError_t cudaLaunchKernel_ptsz(const void *, dim3, dim3, void **, size_t, cudaStream_t);
cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t *, const void *, void **);
cudaError_t cudaLaunchCooperativeKernel(const void *, dim3, dim3, void **, size_t, cudaStream_t);
cudaError_t cudaMemcpy(void *, const void *, size_t, int);
cudaError_t cudaMemcpy_ptds(void *, const void *, size_t, int);
cudaError_t cudaMemcpyAsync(void *, const void *, size_t, int, cudaStream_t);
cudaError_t cudaMemcpyAsync_ptsz(void *, const void *, size_t, int, cudaStream_t);
cudaError_t cudaMemcpy2D(void *, size_t, const void *, size_t, size_t, size_t, int);
cudaError_t cudaMemset(void *, int, size_t);
cudaError_t cudaMemsetAsync(void *, int, size_t, cudaStream_t);
cudaError_t cudaMalloc(void **, size_t);
cudaError_t cudaFree(void *);
cudaError_t cudaMallocAsync(void **, size_t, cudaStream_t);
cudaError_t cudaFreeAsync(void *, cudaStream_t);
cudaError_t cudaMallocHost(void **, size_t);
cudaError_t cudaHostAlloc(void **, size_t, unsigned);
cudaError_t cudaFreeHost(void *);
cudaError_t cudaStreamSynchronize(cudaStream_t);
cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaEventSynchronize(cudaEvent_t);
cudaError_t cudaEventRecord(cudaEvent_t, cudaStream_t);
cudaError_t cudaEventQuery(cudaEvent_t);
cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned);
cudaError_t cudaStreamQuery(cudaStream_t);
cudaError_t cudaGraphLaunch(void *, cudaStream_t);
cudaError_t cudaSetDevice(int);

/* The "kernel": a host function standing in for a kernel's host stub (named via dladdr). */
void my_kernel(float *x, int n) {
    (void)x;
    (void)n;
}

static char host_buf[8192];
static void *dev_ptr = (void *)0x1000;

#define NCALLS 27
static const char *names[NCALLS];
static int codes[NCALLS];

static void note(int i, const char *name, cudaError_t code) {
    if (!names[i]) {
        names[i] = name;
        codes[i] = code;
    }
}

struct args { int iterations; };

static void *worker(void *p) {
    int n = ((struct args *)p)->iterations;
    dim3 grid = {4, 2, 1}, block = {128, 1, 1};
    cudaLaunchConfig_t config = {{8, 1, 1}, {64, 1, 1}, 0, 0, 0, 0};
    void *args[2] = {0, 0};
    for (int k = 0; k < n; k++) {
        void *out = 0;
        note(0, "cudaLaunchKernel", cudaLaunchKernel((void *)my_kernel, grid, block, args, 0, 0));
        note(1, "cudaLaunchKernel_ptsz", cudaLaunchKernel_ptsz((void *)my_kernel, grid, block, args, 0, 0));
        note(2, "cudaLaunchKernelExC", cudaLaunchKernelExC(&config, (void *)my_kernel, args));
        note(3, "cudaLaunchCooperativeKernel", cudaLaunchCooperativeKernel((void *)my_kernel, grid, block, args, 0, 0));
        note(4, "cudaMemcpy", cudaMemcpy(dev_ptr, host_buf, 1024, 1 /* H2D */));
        note(5, "cudaMemcpy_ptds", cudaMemcpy_ptds(host_buf, dev_ptr, 512, 2 /* D2H */));
        note(6, "cudaMemcpyAsync", cudaMemcpyAsync(host_buf, dev_ptr, 2048, 2 /* D2H */, 0));
        note(7, "cudaMemcpyAsync_ptsz", cudaMemcpyAsync_ptsz(dev_ptr, dev_ptr, 256, 3 /* D2D */, 0));
        note(8, "cudaMemcpy2D", cudaMemcpy2D(dev_ptr, 64, host_buf, 64, 32, 4, 1 /* H2D: 128 bytes */));
        note(9, "cudaMemset", cudaMemset(dev_ptr, 0, 4096));
        note(10, "cudaMemsetAsync", cudaMemsetAsync(dev_ptr, 0, 4096, 0));
        note(11, "cudaMalloc", cudaMalloc(&out, 1 << 20));
        note(12, "cudaFree", cudaFree(dev_ptr));
        note(13, "cudaMallocAsync", cudaMallocAsync(&out, 1 << 16, 0));
        note(14, "cudaFreeAsync", cudaFreeAsync(dev_ptr, 0));
        note(15, "cudaMallocHost", cudaMallocHost(&out, 4096));
        note(16, "cudaHostAlloc", cudaHostAlloc(&out, 4096, 0));
        note(17, "cudaFreeHost", cudaFreeHost(host_buf));
        note(18, "cudaStreamSynchronize", cudaStreamSynchronize(0));
        note(19, "cudaStreamSynchronize_ptsz", cudaStreamSynchronize_ptsz(0));
        note(20, "cudaDeviceSynchronize", cudaDeviceSynchronize());
        note(21, "cudaEventSynchronize", cudaEventSynchronize(0));
        note(22, "cudaEventRecord", cudaEventRecord(0, 0));
        note(23, "cudaEventQuery", cudaEventQuery(0));
        note(24, "cudaStreamWaitEvent", cudaStreamWaitEvent(0, 0, 0));
        note(25, "cudaStreamQuery", cudaStreamQuery(0));
        note(26, "cudaGraphLaunch", cudaGraphLaunch(0, 0));
    }
    return 0;
}

int run_cuda(const char *dir, int threads, int iterations) {
    /* One call first, alone, so each function's status is noted by one thread. */
    note(NCALLS - 1, "cudaGraphLaunch", cudaGraphLaunch(0, 0));
    pthread_t t[64];
    struct args a = {iterations};
    if (threads > 64) threads = 64;
    for (int i = 0; i < threads; i++) pthread_create(&t[i], 0, worker, &a);
    for (int i = 0; i < threads; i++) pthread_join(t[i], 0);
    int dev = cudaSetDevice(0);
    char path[4096];
    snprintf(path, sizeof path, "%s/status.txt", dir);
    FILE *f = fopen(path, "w");
    if (!f) return 1;
    for (int i = 0; i < NCALLS; i++) fprintf(f, "%s %d\n", names[i], codes[i]);
    fprintf(f, "cudaSetDevice %d\n", dev);
    fclose(f);
    return 0;
}
