/* TEST DOUBLE of CUPTI (libcupti.so.13). There is no GPU on the development and CI machines, and
 * the real libcupti needs a driver to deliver activity records, so this stands in for the part of
 * CUPTI's activity and callback API that mlprof uses: the buffer protocol (bufferRequested /
 * bufferCompleted, cuptiActivityGetNextRecord over records laid out as CUPTI 13.2 lays them out),
 * the timestamp callback, subscriber callbacks with correlation ids, dropped-record counts, and
 * the error paths. It is not CUPTI: records come from the libcuda double (tests/doubles), which
 * calls double_cupti_api() from its launches and copies as the real driver's instrumentation
 * would, or from double_cupti_kernel() with chosen times.
 *
 * Environment (read at each call):
 *   DOUBLE_CUPTI_VERSION       cuptiGetVersion's answer (default 130202, CUPTI 13.2)
 *   DOUBLE_CUPTI_NO_TIMESTAMP  1: refuse the timestamp callback (NOT_COMPATIBLE); records then
 *                              carry this double's own clock, CLOCK_MONOTONIC + 10 s
 *   DOUBLE_CUPTI_FAIL_ENABLE   a CUptiResult that cuptiActivityEnable returns for kernels
 *   DOUBLE_CUPTI_FAIL_SUBSCRIBE a CUptiResult that cuptiSubscribe returns (39: another subscriber)
 *   DOUBLE_CUPTI_DROPPED       records CUPTI says it dropped (told once, with the first buffer)
 *   DOUBLE_CUPTI_BUFFER_RECORDS kernels per buffer before it is handed back (default: as fit)
 * Built by the tests as libcupti.so.13. */
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int CUptiResult;
typedef void (*RequestFn)(uint8_t **, size_t *, size_t *);
typedef void (*CompleteFn)(void *, uint32_t, uint8_t *, size_t, size_t);
typedef uint64_t (*TimestampFn)(void);
typedef void (*CallbackFn)(void *, int, uint32_t, const void *);

enum { KIND_MEMCPY = 1, KIND_MEMSET = 2, KIND_KERNEL = 10, KIND_OVERHEAD = 17, KIND_SYNC = 38 };
enum { KERNEL_BYTES = 224, MEMCPY_BYTES = 80, MEMSET_BYTES = 56 };

static RequestFn requested;
static CompleteFn completed;
static TimestampFn timestamp;
static CallbackFn subscriber;
static int enabled[64];
static int callbacks_on[4][1024];
static uint8_t *buffer;
static size_t buffer_size, buffer_used, buffer_kernels;
static uint32_t next_correlation = 1;
static int dropped_told;

static long env_long(const char *name, long otherwise) {
    const char *v = getenv(name);
    return v && *v ? strtol(v, 0, 10) : otherwise;
}

static uint64_t own_clock(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec + 10000000000ull;
}

static uint64_t now(void) { return timestamp ? timestamp() : own_clock(); }

CUptiResult cuptiGetVersion(uint32_t *version) {
    *version = (uint32_t)env_long("DOUBLE_CUPTI_VERSION", 130202);
    return 0;
}
CUptiResult cuptiGetTimestamp(uint64_t *t) { *t = own_clock(); return 0; }
CUptiResult cuptiActivityRegisterCallbacks(RequestFn r, CompleteFn c) { requested = r; completed = c; return 0; }
CUptiResult cuptiActivityRegisterTimestampCallback(TimestampFn f) {
    if (env_long("DOUBLE_CUPTI_NO_TIMESTAMP", 0)) return 14; /* CUPTI_ERROR_NOT_COMPATIBLE */
    timestamp = f;
    return 0;
}
CUptiResult cuptiActivityEnable(int kind) {
    long fail = env_long("DOUBLE_CUPTI_FAIL_ENABLE", 0);
    if (kind == KIND_KERNEL && fail) return (CUptiResult)fail;
    if (kind < 0 || kind >= 64) return 1;
    enabled[kind] = 1;
    return 0;
}
CUptiResult cuptiActivityDisable(int kind) {
    if (kind < 0 || kind >= 64) return 1;
    enabled[kind] = 0;
    return 0;
}
CUptiResult cuptiActivityFlushPeriod(uint32_t ms) { (void)ms; return 0; }
CUptiResult cuptiSubscribe(void **handle, CallbackFn f, void *userdata) {
    (void)userdata;
    long fail = env_long("DOUBLE_CUPTI_FAIL_SUBSCRIBE", 0);
    if (fail) return (CUptiResult)fail;
    if (subscriber) return 39; /* CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED, before 13.3 */
    subscriber = f;
    *handle = (void *)&subscriber;
    return 0;
}
CUptiResult cuptiUnsubscribe(void *handle) { (void)handle; subscriber = 0; return 0; }
CUptiResult cuptiEnableCallback(uint32_t on, void *handle, int domain, uint32_t cbid) {
    (void)handle;
    if (domain < 0 || domain >= 4 || cbid >= 1024) return 1;
    callbacks_on[domain][cbid] = (int)on;
    return 0;
}

static size_t record_bytes(const uint8_t *record) {
    uint32_t kind;
    memcpy(&kind, record, 4);
    return kind == KIND_KERNEL ? KERNEL_BYTES : kind == KIND_MEMCPY ? MEMCPY_BYTES : MEMSET_BYTES;
}

CUptiResult cuptiActivityGetNextRecord(uint8_t *buf, size_t valid, void **record) {
    uint8_t *at = *record ? (uint8_t *)*record + record_bytes(*record) : buf;
    if (at >= buf + valid) return 12; /* CUPTI_ERROR_MAX_LIMIT_REACHED */
    *record = at;
    return 0;
}

CUptiResult cuptiActivityGetNumDroppedRecords(void *ctx, uint32_t stream, size_t *dropped) {
    (void)ctx; (void)stream;
    *dropped = dropped_told ? 0 : (size_t)env_long("DOUBLE_CUPTI_DROPPED", 0);
    dropped_told = 1;
    return 0;
}

static void hand_back(void) {
    if (!buffer) return;
    uint8_t *full = buffer;
    size_t used = buffer_used, size = buffer_size;
    buffer = 0;
    buffer_used = buffer_kernels = 0;
    completed(0, 0, full, size, used);
}

CUptiResult cuptiActivityFlushAll(uint32_t flags) { (void)flags; hand_back(); return 0; }

/* Room for one record of `bytes`, asking mlprof for a buffer when needed. */
static uint8_t *room(size_t bytes) {
    long per_buffer = env_long("DOUBLE_CUPTI_BUFFER_RECORDS", 0);
    if (buffer && (buffer_used + bytes > buffer_size || (per_buffer && (long)buffer_kernels >= per_buffer))) hand_back();
    if (!buffer) {
        size_t max_records = 0;
        requested(&buffer, &buffer_size, &max_records);
        buffer_used = 0;
        if (!buffer || buffer_size < bytes) return 0;
    }
    uint8_t *at = buffer + buffer_used;
    memset(at, 0, bytes);
    buffer_used += bytes;
    return at;
}

static void put32(uint8_t *r, size_t at, uint32_t v) { memcpy(r + at, &v, 4); }
static void put64(uint8_t *r, size_t at, uint64_t v) { memcpy(r + at, &v, 8); }

/* A kernel that ran from `start` for `ns` (CUPTI's clock), as CUpti_ActivityKernel11. */
void double_cupti_kernel(uint32_t correlation, const char *name, uint32_t stream, uint64_t start, uint64_t ns) {
    if (!enabled[KIND_KERNEL] || !requested) return;
    uint8_t *r = room(KERNEL_BYTES);
    if (!r) return;
    put32(r, 0, KIND_KERNEL);
    uint16_t registers = 32;
    memcpy(r + 6, &registers, 2);
    put64(r, 16, start);
    put64(r, 24, start + ns);
    put32(r, 40, 0);      /* deviceId */
    put32(r, 44, 1);      /* contextId */
    put32(r, 48, stream); /* streamId */
    put32(r, 52, 4); put32(r, 56, 1); put32(r, 60, 1);   /* grid */
    put32(r, 64, 128); put32(r, 68, 1); put32(r, 72, 1); /* block */
    put32(r, 92, correlation);
    put64(r, 104, (uint64_t)(uintptr_t)name);
    buffer_kernels++;
}

/* A copy of `bytes` (CUpti_ActivityMemcpyKind `kind`: 1 HtoD, 2 DtoH, 8 DtoD). */
void double_cupti_memcpy(uint32_t correlation, int kind, uint64_t bytes, uint64_t start, uint64_t ns) {
    if (!enabled[KIND_MEMCPY] || !requested) return;
    uint8_t *r = room(MEMCPY_BYTES);
    if (!r) return;
    put32(r, 0, KIND_MEMCPY);
    r[4] = (uint8_t)kind;
    put64(r, 8, bytes);
    put64(r, 16, start);
    put64(r, 24, start + ns);
    put32(r, 40, 7); /* streamId */
    put32(r, 44, correlation);
}

/* What the driver's instrumentation does at an API call: the subscriber's API_ENTER callback
 * (when it enabled this domain and id) with a fresh correlation id, which is returned. */
uint32_t double_cupti_api(int domain, uint32_t cbid) {
    uint32_t correlation = next_correlation++;
    if (subscriber && domain >= 0 && domain < 4 && cbid < 1024 && callbacks_on[domain][cbid]) {
        /* CUpti_CallbackData: callbackSite at 0 (0 = API_ENTER), correlationId at 64. */
        uint8_t data[128];
        memset(data, 0, sizeof data);
        put32(data, 64, correlation);
        subscriber(0, domain, cbid, data);
    }
    return correlation;
}

uint64_t double_cupti_now(void) { return now(); }
