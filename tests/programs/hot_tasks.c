/*
 * hot_tasks MS: ITT task "alpha" around run_alpha(MS), then task "beta" around run_beta(MS)
 * (libhot_tasks.so, tests/programs/hot_lib.c), through Intel's ittnotify static part, in
 * domain "hot".  For `mlprof-collect --sample`: each task's samples are its hot function's.
 */
#include <ittnotify.h>
#include <stdio.h>
#include <stdlib.h>

double run_alpha(int ms);
long run_beta(int ms);

int main(int argc, char **argv) {
    if (argc != 2) return 2;
    int ms = atoi(argv[1]);
    __itt_domain *domain = __itt_domain_create("hot");
    __itt_string_handle *alpha = __itt_string_handle_create("alpha");
    __itt_string_handle *beta = __itt_string_handle_create("beta");
    __itt_task_begin(domain, __itt_null, __itt_null, alpha);
    double a = run_alpha(ms);
    __itt_task_end(domain);
    __itt_task_begin(domain, __itt_null, __itt_null, beta);
    long b = run_beta(ms);
    __itt_task_end(domain);
    printf("%g %ld\n", a, b);
    return 0;
}
