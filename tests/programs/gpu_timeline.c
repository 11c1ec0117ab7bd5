/* Launches kernels and makes host-to-device copies through the CUDA driver API, against the
 * libcuda test double and the CUPTI test double (tests/doubles; both linked, so the CUPTI double
 * is "the application's already-loaded copy"), then leaves the way it is told: the program of
 * the GPU timeline tests. The doubles turn each launch into one kernel of 1 µs and each copy
 * into one 4 KiB HtoD copy of 2 µs on the GPU, each with its own correlation id.
 *
 * With TAKEOVER, the program becomes a CUPTI tool of its own after that many kernels (as
 * torch.profiler does): it subscribes, registers activity callbacks and enables kernels, then
 * launches the rest and prints "tool saw N kernels" (what CUPTI delivered to it); any CUPTI
 * error fails it. With GPU_TIMELINE_TOOL=v2 in its environment it does so through CUPTI 13.3's
 * multi-subscriber API instead (cuptiSubscribe_v2 asking for multiple subscribers, its
 * subscriber's buffer callbacks and kinds), as a tool that shares CUPTI would; with
 * GPU_TIMELINE_TOOL=v2-single, through the same API asking to be CUPTI's only subscriber.
 *
 * LEAVE `fork`: before returning, a fork child launches KERNELS more without initializing CUDA
 * itself (which a real driver would refuse; the doubles let it happen) and leaves with _exit.
 *
 * With GPU_TIMELINE_WAIT_FOR=PATH in its environment, it prints "initialized" after cuInit and
 * waits (up to 60 s) for PATH to exist, then 0.7 s more, before its launches: the attach-mode
 * test starts its collector meanwhile, and the library joins it within that time.
 *
 * usage: gpu_timeline KERNELS COPIES [return|exit|_exit|noinit|fork] [TAKEOVER] */
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <stdint.h>
#include <stdio.h>

typedef int CUresult;
typedef int CUptiResult;
CUptiResult cuptiSubscribe(void **handle, void *callback, void *userdata);
CUptiResult cuptiActivityRegisterCallbacks(void *requested, void *completed);
CUptiResult cuptiActivityEnable(int kind);
CUptiResult cuptiActivityFlushAll(uint32_t flags);
CUptiResult cuptiActivityGetNextRecord(uint8_t *buffer, size_t valid, void **record);

#include "../doubles/cupti_params.h"
CUptiResult cuptiSubscribe_v2(void **handle, void *callback, void *userdata, SubscriberParams *params);
CUptiResult cuptiActivityRegisterCallbacks_v2(void *subscriber, void *requested, void *completed);
CUptiResult cuptiActivityEnable_v2(void *subscriber, int kind, void *config);
CUptiResult cuptiActivityGetNextRecord_v2(void *subscriber, uint8_t *buffer, size_t valid, void **record);
static void *tool_subscriber;

static uint8_t tool_buffer[1 << 16];
static long tool_kernels;

static void tool_requested(uint8_t **buffer, size_t *size, size_t *max) {
    *buffer = tool_buffer;
    *size = sizeof tool_buffer;
    *max = 0;
}

static void tool_completed(void *ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid) {
    (void)ctx; (void)stream; (void)size;
    void *record = 0;
    while (cuptiActivityGetNextRecord(buffer, valid, &record) == 0) {
        uint32_t kind;
        memcpy(&kind, record, 4);
        if (kind == 10) tool_kernels++;
    }
}

static void tool_callback(void *user, int domain, uint32_t cbid, const void *data) {
    (void)user; (void)domain; (void)cbid; (void)data;
}

static void tool_requested_v2(uint8_t **buffer, size_t *size, size_t *max, void *info) {
    (void)info;
    tool_requested(buffer, size, max);
}

static void tool_completed_v2(uint8_t *buffer, size_t size, size_t valid, void *info) {
    (void)size; (void)info;
    void *record = 0;
    while (cuptiActivityGetNextRecord_v2(tool_subscriber, buffer, valid, &record) == 0) {
        uint32_t kind;
        memcpy(&kind, record, 4);
        if (kind == 10) tool_kernels++;
    }
}

/* The same tool on CUPTI 13.3's multi-subscriber API; `shares`: whether it allows others. */
static int become_a_v2_cupti_tool(int shares) {
    SubscriberParams params;
    memset(&params, 0, sizeof params);
    params.structSize = sizeof params;
    params.subscriberName = "gpu_timeline tool";
    params.allowMultipleSubscribers = (uint8_t)shares;
    if (cuptiSubscribe_v2(&tool_subscriber, (void *)tool_callback, 0, &params) != 0) return 0;
    if (cuptiActivityRegisterCallbacks_v2(tool_subscriber, (void *)tool_requested_v2, (void *)tool_completed_v2) != 0)
        return 0;
    return cuptiActivityEnable_v2(tool_subscriber, 10 /* CONCURRENT_KERNEL */, 0) == 0;
}

static int become_a_cupti_tool(void) {
    const char *api = getenv("GPU_TIMELINE_TOOL");
    if (api && !strcmp(api, "v2")) return become_a_v2_cupti_tool(1);
    if (api && !strcmp(api, "v2-single")) return become_a_v2_cupti_tool(0);
    void *subscriber = 0;
    if (cuptiSubscribe(&subscriber, (void *)tool_callback, 0) != 0) return 0;
    if (cuptiActivityRegisterCallbacks((void *)tool_requested, (void *)tool_completed) != 0) return 0;
    return cuptiActivityEnable(10 /* CONCURRENT_KERNEL */) == 0;
}
CUresult cuInit(unsigned flags);
CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shared, void *stream, void **params, void **extra);
CUresult cuMemcpyHtoD_v2(unsigned long long dst, const void *src, size_t bytes);

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    long kernels = strtol(argv[1], 0, 10), copies = strtol(argv[2], 0, 10);
    const char *leave = argc > 3 ? argv[3] : "return";
    long takeover = argc > 4 ? strtol(argv[4], 0, 10) : -1;
    if (strcmp(leave, "noinit") != 0 && cuInit(0) != 0) return 3;
    const char *wait_for = getenv("GPU_TIMELINE_WAIT_FOR");
    if (wait_for) {
        printf("initialized\n");
        fflush(stdout);
        for (int i = 0; i < 6000 && access(wait_for, F_OK) != 0; i++) usleep(10000);
        /* 0.7 s more of hooked calls: a process with no session tries to join every 0.5 s. */
        for (int i = 0; i < 70; i++) {
            access(wait_for, F_OK);
            usleep(10000);
        }
    }
    static char host[4096];
    for (long i = 0; i < kernels; i++) {
        if (i == takeover && !become_a_cupti_tool()) return 6;
        if (cuLaunchKernel((void *)0x1234, 4, 1, 1, 128, 1, 1, 0, 0, 0, 0) != 0) return 4;
    }
    for (long i = 0; i < copies; i++) {
        if (cuMemcpyHtoD_v2(0xd000, host, sizeof host) != 0) return 5;
    }
    if (takeover >= 0) {
        cuptiActivityFlushAll(1);
        printf("tool saw %ld kernels\n", tool_kernels);
        fflush(stdout);
    }
    if (!strcmp(leave, "fork")) {
        pid_t child = fork();
        if (child < 0) return 7;
        if (child == 0) {
            for (long i = 0; i < kernels; i++) cuLaunchKernel((void *)0x1234, 4, 1, 1, 128, 1, 1, 0, 0, 0, 0);
            _exit(0);
        }
        int status = 0;
        if (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return 8;
    }
    if (!strcmp(leave, "exit")) exit(0);
    if (!strcmp(leave, "_exit")) _exit(0);
    return 0;
}
