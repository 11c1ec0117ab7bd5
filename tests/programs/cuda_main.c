/* Loads cuda_calls (libcuda_calls.so) and runs it: linked normally (-DLINKED), or with
 * dlopen(RTLD_LOCAL | RTLD_NOW) as Python loads extension modules, so that libcudart ends up
 * in a local scope that dlsym(RTLD_NEXT) cannot see.
 * usage: cuda_main DIR LIBRARY THREADS ITERATIONS */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#ifdef LINKED
int run_cuda(const char *dir, int threads, int iterations);
#endif

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: %s DIR LIBRARY THREADS ITERATIONS\n", argv[0]);
        return 2;
    }
    int threads = atoi(argv[3]), iterations = atoi(argv[4]);
#ifdef LINKED
    return run_cuda(argv[1], threads, iterations);
#else
    void *lib = dlopen(argv[2], RTLD_LOCAL | RTLD_NOW);
    if (!lib) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        return 3;
    }
    int (*run)(const char *, int, int) = (int (*)(const char *, int, int))dlsym(lib, "run_cuda");
    if (!run) return 4;
    return run(argv[1], threads, iterations);
#endif
}
