/* ITT annotations from C through Intel's ittnotify static part (compiled from the ittapi
 * sources): THREADS threads x N iterations of task "outer" { task "inner" { write(devnull, 1) } }
 * in domain "app.domain", then one marker "checkpoint", one pause/resume and one frame.
 * usage: itt_tasks THREADS N */
#include <fcntl.h>
#include <ittnotify.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

static __itt_domain *domain;
static __itt_string_handle *outer, *inner, *mark;
static int n, devnull;

static void *worker(void *arg) {
    (void)arg;
    __itt_thread_set_name("itt worker");
    for (int i = 0; i < n; i++) {
        __itt_task_begin(domain, __itt_null, __itt_null, outer);
        __itt_task_begin(domain, __itt_null, __itt_null, inner);
        if (write(devnull, "x", 1) != 1) exit(3);
        __itt_task_end(domain);
        __itt_task_end(domain);
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 3) return 2;
    int threads = atoi(argv[1]);
    n = atoi(argv[2]);
    devnull = open("/dev/null", O_WRONLY);
    domain = __itt_domain_create("app.domain");
    outer = __itt_string_handle_create("outer");
    inner = __itt_string_handle_create("inner");
    mark = __itt_string_handle_create("checkpoint");
    pthread_t t[64];
    if (threads > 64) threads = 64;
    for (int i = 0; i < threads; i++) pthread_create(&t[i], 0, worker, 0);
    for (int i = 0; i < threads; i++) pthread_join(t[i], 0);
    __itt_marker(domain, __itt_null, mark, __itt_scope_global);
    __itt_pause();
    __itt_resume();
    __itt_frame_begin_v3(domain, NULL);
    __itt_frame_end_v3(domain, NULL);
    close(devnull);
    return 0;
}
