/* The cost of an ITT range received from an application, without Python around it: N pairs of
 * what PyTorch's range_push/range_pop do (a string handle looked up by name, then task
 * begin/end in a domain the static part created at start), through Intel's ittnotify static
 * part. Prints {"ns_per_pair": X}. Bare (no INTEL_LIBITTNOTIFY64) every call is the static
 * part's null check; under mlprof-collect they reach libmlprof.so.
 * build: gcc -O2 -I$ITT/include -I$ITT/src/ittnotify bench/itt_pairs.c $ITT/src/ittnotify/ittnotify_static.c -ldl
 * usage: itt_pairs N */
#include <ittnotify.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static long long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000LL + t.tv_nsec;
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1000000;
    __itt_domain *domain = __itt_domain_create("bench.domain");
    char name[32] = "bench.range";
    for (int i = 0; i < 1000; i++) {
        __itt_task_begin(domain, __itt_null, __itt_null, __itt_string_handle_create(name));
        __itt_task_end(domain);
    }
    long long start = now_ns();
    for (long i = 0; i < n; i++) {
        __itt_task_begin(domain, __itt_null, __itt_null, __itt_string_handle_create(name));
        __itt_task_end(domain);
    }
    long long elapsed = now_ns() - start;
    printf("{\"ns_per_pair\": %.2f}\n", (double)elapsed / (double)n);
    return 0;
}
