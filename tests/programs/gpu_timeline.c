/* Launches kernels and makes host-to-device copies through the CUDA driver API, against the
 * libcuda test double and the CUPTI test double (tests/doubles; both linked, so the CUPTI double
 * is "the application's already-loaded copy"), then leaves the way it is told: the program of
 * the GPU timeline tests. The doubles turn each launch into one kernel of 1 µs and each copy
 * into one 4 KiB HtoD copy of 2 µs on the GPU, each with its own correlation id.
 *
 * usage: gpu_timeline KERNELS COPIES [return|exit|_exit|noinit] */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef int CUresult;
CUresult cuInit(unsigned flags);
CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shared, void *stream, void **params, void **extra);
CUresult cuMemcpyHtoD_v2(unsigned long long dst, const void *src, size_t bytes);

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    long kernels = strtol(argv[1], 0, 10), copies = strtol(argv[2], 0, 10);
    const char *leave = argc > 3 ? argv[3] : "return";
    if (strcmp(leave, "noinit") != 0 && cuInit(0) != 0) return 3;
    static char host[4096];
    for (long i = 0; i < kernels; i++) {
        if (cuLaunchKernel((void *)0x1234, 4, 1, 1, 128, 1, 1, 0, 0, 0, 0) != 0) return 4;
    }
    for (long i = 0; i < copies; i++) {
        if (cuMemcpyHtoD_v2(0xd000, host, sizeof host) != 0) return 5;
    }
    if (!strcmp(leave, "exit")) exit(0);
    if (!strcmp(leave, "_exit")) _exit(0);
    return 0;
}
