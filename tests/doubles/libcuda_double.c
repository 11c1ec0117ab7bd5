/* TEST DOUBLE of the CUDA driver (libcuda.so.1). There is no GPU driver on the development and
 * CI machines, so this stands in for the handful of driver entry points needed to prove that
 * mlprof hands its own wrappers back through cuGetProcAddress and dlsym on a libcuda handle.
 * It is not a driver: it counts the calls that reach it (double_counts) and returns fixed
 * results. Built by the tests as libcuda.so.1. */
#include <dlfcn.h>
#include <stdint.h>
#include <string.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;

static int counts[9];
enum { LAUNCH, LAUNCH_PTSZ, HTOD, STREAM_SYNC, CTX_SYNC, MEM_ALLOC, FUNC_NAME, LOOKUPS, KERNEL_NAME };

/* Handles the double treats as CUkernels (what the CUDA 12+ runtime launches): cuFuncGetName
 * refuses them as a driver does, cuKernelGetName names 0x9abc and refuses 0xdead. */
#define LIBRARY_KERNEL ((void *)0x9abc)
#define NAMELESS_KERNEL ((void *)0xdead)

CUresult cuInit(unsigned flags) { (void)flags; return 0; }

/* CUDA 13.2, as the driver reports it: mlprof looks for libcupti.so.13. */
CUresult cuDriverGetVersion(int *version) { *version = 13020; return 0; }

/* What the real driver's CUPTI instrumentation does, when the CUPTI test double is loaded
 * (found once per process by its soname, however it was loaded): a subscriber callback at the
 * API call, then an activity record with the same correlation id (1 µs of GPU time each). */
static void *cupti_double(const char *name) {
    static void *handle;
    static int looked;
    if (!looked) {
        handle = dlopen("libcupti.so.13", RTLD_NOW | RTLD_NOLOAD);
        looked = 1;
    }
    return handle ? dlsym(handle, name) : 0;
}

/* When the one queue of this "GPU" is free again: work runs one piece after another, from the
 * later of its call and the end of the piece before (so busy time is exactly their sum). */
static uint64_t gpu_free_at;

static void gpu_work(uint32_t cbid, const char *kernel, uint64_t copy_bytes) {
    uint32_t (*api)(int, uint32_t) = (uint32_t (*)(int, uint32_t))cupti_double("double_cupti_api");
    uint64_t (*now)(void) = (uint64_t (*)(void))cupti_double("double_cupti_now");
    if (!api || !now) return;
    uint32_t correlation = api(1 /* CUPTI_CB_DOMAIN_DRIVER_API */, cbid);
    uint64_t start = now();
    if (start < gpu_free_at) start = gpu_free_at;
    gpu_free_at = start + (kernel ? 1000 : 2000);
    if (kernel) {
        void (*emit)(uint32_t, const char *, uint32_t, uint64_t, uint64_t) =
            (void (*)(uint32_t, const char *, uint32_t, uint64_t, uint64_t))cupti_double("double_cupti_kernel");
        if (emit) emit(correlation, kernel, 7, start, 1000);
    } else {
        void (*emit)(uint32_t, int, uint64_t, uint64_t, uint64_t) =
            (void (*)(uint32_t, int, uint64_t, uint64_t, uint64_t))cupti_double("double_cupti_memcpy");
        if (emit) emit(correlation, 1 /* HtoD */, copy_bytes, start, 2000);
    }
}

CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shared, void *stream, void **params, void **extra) {
    (void)f; (void)gx; (void)gy; (void)gz; (void)bx; (void)by; (void)bz; (void)shared; (void)stream;
    (void)params; (void)extra;
    counts[LAUNCH]++;
    gpu_work(307 /* cuLaunchKernel */, f == (void *)0x1234 ? "_Z10testKernelPfi" : "other_kernel", 0);
    return 0;
}

CUresult cuLaunchKernel_ptsz(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                             unsigned bz, unsigned shared, void *stream, void **params, void **extra) {
    (void)f; (void)gx; (void)gy; (void)gz; (void)bx; (void)by; (void)bz; (void)shared; (void)stream;
    (void)params; (void)extra;
    counts[LAUNCH_PTSZ]++;
    return 0;
}

CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t bytes) {
    (void)dst; (void)src;
    counts[HTOD]++;
    gpu_work(276 /* cuMemcpyHtoD_v2 */, 0, bytes);
    return 0;
}

/* Fails like a real driver does for a bad stream, so error recording is exercised. */
CUresult cuStreamSynchronize(void *stream) {
    counts[STREAM_SYNC]++;
    return stream ? 400 /* CUDA_ERROR_INVALID_HANDLE */ : 0;
}

CUresult cuCtxSynchronize(void) { counts[CTX_SYNC]++; return 0; }

CUresult cuMemAlloc_v2(CUdeviceptr *out, size_t bytes) {
    (void)bytes;
    counts[MEM_ALLOC]++;
    *out = 0xd000;
    return 0;
}

CUresult cuFuncGetName(const char **name, void *f) {
    counts[FUNC_NAME]++;
    if (f == LIBRARY_KERNEL || f == NAMELESS_KERNEL) return 400; /* CUDA_ERROR_INVALID_HANDLE */
    *name = f == (void *)0x1234 ? "_Z10testKernelPfi" : "other_kernel";
    return 0;
}

CUresult cuKernelGetName(const char **name, void *k) {
    counts[KERNEL_NAME]++;
    if (k != LIBRARY_KERNEL) return 400;
    *name = "_Z13libraryKernelv";
    return 0;
}

/* CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM = 2 */
CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, unsigned long long flags, int *status) {
    (void)version;
    counts[LOOKUPS]++;
    void *f = 0;
    int ptds = (flags & 2) != 0;
    if (!strcmp(symbol, "cuLaunchKernel")) f = ptds ? (void *)cuLaunchKernel_ptsz : (void *)cuLaunchKernel;
    else if (!strcmp(symbol, "cuMemcpyHtoD")) f = (void *)cuMemcpyHtoD_v2;
    else if (!strcmp(symbol, "cuStreamSynchronize")) f = (void *)cuStreamSynchronize;
    else if (!strcmp(symbol, "cuCtxSynchronize")) f = (void *)cuCtxSynchronize;
    else if (!strcmp(symbol, "cuMemAlloc")) f = (void *)cuMemAlloc_v2;
    else if (!strcmp(symbol, "cuGetProcAddress")) f = (void *)cuGetProcAddress_v2;
    else if (!strcmp(symbol, "cuInit")) f = (void *)cuInit;
    if (status) *status = f ? 0 : 1;
    *pfn = f;
    return f ? 0 : 500 /* CUDA_ERROR_NOT_FOUND */;
}

void double_counts(int out[9]) { memcpy(out, counts, sizeof counts); }
