/* Reaches driver entry points the ways the CUDA runtime, PyTorch and Triton do — dlsym on a
 * libcuda handle, cuGetProcAddress_v2, and the cuGetProcAddress obtained from itself — and
 * calls each `n` times. Run against the libcuda test double (tests/doubles), whose own call
 * counts prove that every call still reaches the driver.
 * usage: cuda_driver N   (prints "ok" and exits 0 when the double saw exactly the calls made,
 * then the name lookups the double answered) */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

typedef int (*launch_t)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *,
                        void **, void **);
typedef int (*htod_t)(unsigned long long, const void *, size_t);
typedef int (*sync_t)(void *);
typedef int (*ctx_sync_t)(void);
typedef int (*alloc_t)(unsigned long long *, size_t);
typedef int (*lookup_t)(const char *, void **, int, unsigned long long, int *);

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 10;
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!cuda) { fprintf(stderr, "dlopen: %s\n", dlerror()); return 2; }
    void (*counts)(int *) = (void (*)(int *))dlsym(cuda, "double_counts");

    /* 1. dlsym on the handle (Triton's cuLaunchKernelEx path, PyTorch's driver_api). */
    launch_t launch = (launch_t)dlsym(cuda, "cuLaunchKernel");
    for (int i = 0; i < n; i++) launch((void *)0x1234, 8, 4, 1, 256, 1, 1, 0, 0, 0, 0);
    /* CUkernel handles, as the CUDA 12+ runtime launches them: one the driver names through
     * cuKernelGetName, one it names through neither lookup. */
    for (int i = 0; i < n; i++) launch((void *)0x9abc, 1, 1, 1, 32, 1, 1, 0, 0, 0, 0);
    for (int i = 0; i < n; i++) launch((void *)0xdead, 1, 1, 1, 32, 1, 1, 0, 0, 0, 0);

    /* 2. cuGetProcAddress_v2 from the handle, as libcudart gets every entry point. */
    lookup_t lookup = (lookup_t)dlsym(cuda, "cuGetProcAddress_v2");
    launch_t launch2 = 0, launch_ptsz = 0;
    htod_t htod = 0;
    sync_t sync = 0;
    alloc_t alloc = 0;
    lookup("cuLaunchKernel", (void **)&launch2, 12000, 0, 0);
    lookup("cuLaunchKernel", (void **)&launch_ptsz, 12000, 2, 0);
    lookup("cuMemcpyHtoD", (void **)&htod, 12000, 0, 0);
    lookup("cuMemAlloc", (void **)&alloc, 12000, 0, 0);
    static char host[4096];
    for (int i = 0; i < n; i++) {
        launch2((void *)0x5678, 2, 1, 1, 32, 1, 1, 0, 0, 0, 0);
        launch_ptsz((void *)0x1234, 1, 1, 1, 64, 1, 1, 0, 0, 0, 0);
        htod(0xd000, host, sizeof host);
        unsigned long long p;
        alloc(&p, 1 << 20);
    }

    /* 3. cuGetProcAddress asked for itself, then used for another lookup. */
    lookup_t lookup2 = 0;
    lookup("cuGetProcAddress", (void **)&lookup2, 12000, 0, 0);
    lookup2("cuStreamSynchronize", (void **)&sync, 12000, 0, 0);
    for (int i = 0; i < n; i++) sync((void *)0x77); /* fails: CUDA_ERROR_INVALID_HANDLE */

    /* 4. A symbol we do not wrap still resolves to the driver's own. */
    ctx_sync_t ctx = (ctx_sync_t)dlsym(cuda, "cuCtxSynchronize");
    if (!ctx || ctx()) return 5;

    int c[9];
    counts(c);
    int want[8] = {4 * n, n, n, n, 1, n, c[6], c[7]};
    for (int i = 0; i < 6; i++) {
        if (c[i] != want[i]) {
            fprintf(stderr, "double saw %d calls of #%d, want %d\n", c[i], i, want[i]);
            return 6;
        }
    }
    /* Name lookups made for the program (by a profiler): cuFuncGetName, cuKernelGetName. */
    printf("ok\nname lookups %d %d\n", c[6], c[8]);
    return 0;
}
