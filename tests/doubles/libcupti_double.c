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
 *   DOUBLE_CUPTI_V2            1: the multi-subscriber API works, as CUPTI 13.3 with driver r610+
 *                              documents it (the version then defaults to 130300); otherwise the
 *                              _v2 symbols are there (13.2 exports them, as a beta) and
 *                              cuptiSubscribe_v2 answers 27 (NOT_SUPPORTED)
 *   DOUBLE_CUPTI_V2_REFUSE     a CUptiResult that cuptiSubscribe_v2 returns (an older driver)
 *
 * Multi-subscriber rules, after CUPTI's documentation ("Multiple Subscribers"): the first _v2
 * subscriber chooses whether several are allowed (allowMultipleSubscribers), a later one that
 * asks otherwise gets 39; v1 and _v2 calls do not mix (39), here while any _v2 subscriber is
 * subscribed; each subscriber has its own buffer callbacks, kinds and API callbacks, and gets the
 * records of the kinds it enabled. The v1 API is "subscriber" 0: one subscriber, process-wide
 * activity state.
 * Built by the tests as libcupti.so.13. */
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int CUptiResult;
typedef void (*RequestFn)(uint8_t **, size_t *, size_t *);
typedef void (*CompleteFn)(void *, uint32_t, uint8_t *, size_t, size_t);
typedef void (*RequestV2Fn)(uint8_t **, size_t *, size_t *, void *);
typedef void (*CompleteV2Fn)(uint8_t *, size_t, size_t, void *);
typedef uint64_t (*TimestampFn)(void);
typedef void (*CallbackFn)(void *, int, uint32_t, const void *);

#include "cupti_params.h"

enum { KIND_MEMCPY = 1, KIND_MEMSET = 2, KIND_KERNEL = 10, KIND_OVERHEAD = 17, KIND_SYNC = 38 };
enum { KERNEL_BYTES = 224, MEMCPY_BYTES = 80, MEMSET_BYTES = 56 };
enum { SUBSCRIBERS = 4, MULTI_UNSET = 2 };

/* Slot 0: the v1 API (its one subscriber and the process-wide activity state); 1..: _v2. */
typedef struct {
    int used;
    CallbackFn callback;
    void *userdata;
    RequestFn requested;
    CompleteFn completed;
    RequestV2Fn requested_v2;
    CompleteV2Fn completed_v2;
    int enabled[64];
    unsigned char callbacks_on[4][1024];
    uint8_t *buffer;
    size_t buffer_size, buffer_used, buffer_kernels;
} Subscriber;

static Subscriber subs[SUBSCRIBERS];
static int multi_state = MULTI_UNSET;
static TimestampFn timestamp;
static uint32_t next_correlation = 1;
static int dropped_told;

static long env_long(const char *name, long otherwise) {
    const char *v = getenv(name);
    return v && *v ? strtol(v, 0, 10) : otherwise;
}

static int v2_works(void) { return env_long("DOUBLE_CUPTI_V2", 0) == 1; }

static int v2_subscribed(void) {
    for (int i = 1; i < SUBSCRIBERS; i++)
        if (subs[i].used) return 1;
    return 0;
}

/* A v1 call: refused while a _v2 subscriber exists (the two APIs do not mix). */
static int v1_refused(void) { return v2_subscribed(); }

static Subscriber *of(void *handle) {
    Subscriber *s = (Subscriber *)handle;
    return s >= subs && s < subs + SUBSCRIBERS && s->used ? s : 0;
}

static uint64_t own_clock(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec + 10000000000ull;
}

static uint64_t now(void) { return timestamp ? timestamp() : own_clock(); }

CUptiResult cuptiGetVersion(uint32_t *version) {
    *version = (uint32_t)env_long("DOUBLE_CUPTI_VERSION", v2_works() ? 130300 : 130202);
    return 0;
}
CUptiResult cuptiGetTimestamp(uint64_t *t) { *t = own_clock(); return 0; }
CUptiResult cuptiActivityRegisterCallbacks(RequestFn r, CompleteFn c) {
    if (v1_refused()) return 39;
    subs[0].requested = r;
    subs[0].completed = c;
    return 0;
}
CUptiResult cuptiActivityRegisterTimestampCallback(TimestampFn f) {
    if (v1_refused()) return 39;
    if (env_long("DOUBLE_CUPTI_NO_TIMESTAMP", 0)) return 14; /* CUPTI_ERROR_NOT_COMPATIBLE */
    timestamp = f;
    return 0;
}
static CUptiResult enable(Subscriber *s, int kind, int on) {
    long fail = env_long("DOUBLE_CUPTI_FAIL_ENABLE", 0);
    if (on && kind == KIND_KERNEL && fail) return (CUptiResult)fail;
    if (kind < 0 || kind >= 64) return 1;
    s->enabled[kind] = on;
    return 0;
}
CUptiResult cuptiActivityEnable(int kind) { return v1_refused() ? 39 : enable(&subs[0], kind, 1); }
CUptiResult cuptiActivityDisable(int kind) { return v1_refused() ? 39 : enable(&subs[0], kind, 0); }
CUptiResult cuptiActivityFlushPeriod(uint32_t ms) { (void)ms; return 0; }
CUptiResult cuptiSubscribe(void **handle, CallbackFn f, void *userdata) {
    long fail = env_long("DOUBLE_CUPTI_FAIL_SUBSCRIBE", 0);
    if (fail) return (CUptiResult)fail;
    if (subs[0].used || v1_refused()) return 39; /* CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED */
    subs[0].used = 1;
    subs[0].callback = f;
    subs[0].userdata = userdata;
    *handle = &subs[0];
    return 0;
}
CUptiResult cuptiSubscribe_v2(void **handle, CallbackFn f, void *userdata, SubscriberParams *params) {
    if (!v2_works()) return 27; /* CUPTI_ERROR_NOT_SUPPORTED */
    long refuse = env_long("DOUBLE_CUPTI_V2_REFUSE", 0);
    if (refuse) return (CUptiResult)refuse;
    /* The v1 API in use (a subscriber, or activity buffers registered): no mixing. */
    if (subs[0].used || subs[0].requested) return 39;
    int allow = params && params->structSize > 32 ? params->allowMultipleSubscribers == 1 : 0;
    if (multi_state == MULTI_UNSET) multi_state = allow;
    else if (multi_state != allow || (!allow && v2_subscribed())) return 39;
    for (int i = 1; i < SUBSCRIBERS; i++) {
        if (subs[i].used) continue;
        memset(&subs[i], 0, sizeof subs[i]);
        subs[i].used = 1;
        subs[i].callback = f;
        subs[i].userdata = userdata;
        *handle = &subs[i];
        return 0;
    }
    return 8; /* CUPTI_ERROR_OUT_OF_MEMORY */
}
CUptiResult cuptiUnsubscribe(void *handle) {
    Subscriber *s = of(handle);
    if (!s) return 1;
    if (s == &subs[0]) {
        s->used = 0;
        s->callback = 0;
        memset(s->callbacks_on, 0, sizeof s->callbacks_on);
        return 0;
    }
    s->used = 0;
    if (!v2_subscribed()) multi_state = MULTI_UNSET;
    return 0;
}
CUptiResult cuptiEnableCallback(uint32_t on, void *handle, int domain, uint32_t cbid) {
    Subscriber *s = of(handle);
    if (!s || domain < 0 || domain >= 4 || cbid >= 1024) return 1;
    s->callbacks_on[domain][cbid] = (unsigned char)on;
    return 0;
}
CUptiResult cuptiActivityRegisterCallbacks_v2(void *handle, RequestV2Fn r, CompleteV2Fn c) {
    Subscriber *s = of(handle);
    if (!s || s == &subs[0]) return 1;
    s->requested_v2 = r;
    s->completed_v2 = c;
    return 0;
}
CUptiResult cuptiActivityEnable_v2(void *handle, int kind, void *config) {
    (void)config;
    Subscriber *s = of(handle);
    return s && s != &subs[0] ? enable(s, kind, 1) : 1;
}
CUptiResult cuptiActivityDisable_v2(void *handle, int kind, void *config) {
    (void)config;
    Subscriber *s = of(handle);
    return s && s != &subs[0] ? enable(s, kind, 0) : 1;
}
CUptiResult cuptiGetTimestamp_v2(void *handle, uint64_t *t) {
    if (!of(handle)) return 1;
    *t = own_clock();
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
CUptiResult cuptiActivityGetNextRecord_v2(void *handle, uint8_t *buf, size_t valid, void **record) {
    return of(handle) ? cuptiActivityGetNextRecord(buf, valid, record) : 1;
}

CUptiResult cuptiActivityGetNumDroppedRecords(void *ctx, uint32_t stream, size_t *dropped) {
    (void)ctx; (void)stream;
    *dropped = dropped_told ? 0 : (size_t)env_long("DOUBLE_CUPTI_DROPPED", 0);
    dropped_told = 1;
    return 0;
}
CUptiResult cuptiActivityGetNumDroppedRecords_v2(void *handle, void *ctx, uint32_t stream, size_t *dropped) {
    return of(handle) ? cuptiActivityGetNumDroppedRecords(ctx, stream, dropped) : 1;
}

static int collects(const Subscriber *s) { return s->requested || s->requested_v2; }

static void hand_back(Subscriber *s) {
    if (!s->buffer) return;
    uint8_t *full = s->buffer;
    size_t used = s->buffer_used, size = s->buffer_size;
    s->buffer = 0;
    s->buffer_used = s->buffer_kernels = 0;
    if (s->completed_v2) s->completed_v2(full, size, used, 0);
    else if (s->completed) s->completed(0, 0, full, size, used);
}

CUptiResult cuptiActivityFlushAll(uint32_t flags) {
    (void)flags;
    for (int i = 0; i < SUBSCRIBERS; i++) hand_back(&subs[i]);
    return 0;
}

/* Room for one record of `bytes` in `s`'s buffer, asking its owner for one when needed. */
static uint8_t *room(Subscriber *s, size_t bytes) {
    long per_buffer = env_long("DOUBLE_CUPTI_BUFFER_RECORDS", 0);
    if (s->buffer && (s->buffer_used + bytes > s->buffer_size || (per_buffer && (long)s->buffer_kernels >= per_buffer)))
        hand_back(s);
    if (!s->buffer) {
        size_t max_records = 0;
        if (s->requested_v2) s->requested_v2(&s->buffer, &s->buffer_size, &max_records, 0);
        else s->requested(&s->buffer, &s->buffer_size, &max_records);
        s->buffer_used = 0;
        if (!s->buffer || s->buffer_size < bytes) return 0;
    }
    uint8_t *at = s->buffer + s->buffer_used;
    memset(at, 0, bytes);
    s->buffer_used += bytes;
    return at;
}

static void put32(uint8_t *r, size_t at, uint32_t v) { memcpy(r + at, &v, 4); }
static void put64(uint8_t *r, size_t at, uint64_t v) { memcpy(r + at, &v, 8); }

/* A kernel that ran from `start` for `ns` (CUPTI's clock), as CUpti_ActivityKernel11. */
static void kernel_for(Subscriber *s, uint32_t correlation, const char *name, uint32_t stream, uint64_t start,
                       uint64_t ns) {
    if (!s->enabled[KIND_KERNEL] || !collects(s)) return;
    uint8_t *r = room(s, KERNEL_BYTES);
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
    s->buffer_kernels++;
}

void double_cupti_kernel(uint32_t correlation, const char *name, uint32_t stream, uint64_t start, uint64_t ns) {
    for (int i = 0; i < SUBSCRIBERS; i++) kernel_for(&subs[i], correlation, name, stream, start, ns);
}

/* A copy of `bytes` (CUpti_ActivityMemcpyKind `kind`: 1 HtoD, 2 DtoH, 8 DtoD). */
static void memcpy_for(Subscriber *s, uint32_t correlation, int kind, uint64_t bytes, uint64_t start, uint64_t ns) {
    if (!s->enabled[KIND_MEMCPY] || !collects(s)) return;
    uint8_t *r = room(s, MEMCPY_BYTES);
    if (!r) return;
    put32(r, 0, KIND_MEMCPY);
    r[4] = (uint8_t)kind;
    put64(r, 8, bytes);
    put64(r, 16, start);
    put64(r, 24, start + ns);
    put32(r, 40, 7); /* streamId */
    put32(r, 44, correlation);
}

void double_cupti_memcpy(uint32_t correlation, int kind, uint64_t bytes, uint64_t start, uint64_t ns) {
    for (int i = 0; i < SUBSCRIBERS; i++) memcpy_for(&subs[i], correlation, kind, bytes, start, ns);
}

/* What the driver's instrumentation does at an API call: each subscriber's API_ENTER callback
 * (when it enabled this domain and id) with a fresh correlation id, which is returned. */
uint32_t double_cupti_api(int domain, uint32_t cbid) {
    uint32_t correlation = next_correlation++;
    if (domain < 0 || domain >= 4 || cbid >= 1024) return correlation;
    for (int i = 0; i < SUBSCRIBERS; i++) {
        Subscriber *s = &subs[i];
        if (!s->used || !s->callback || !s->callbacks_on[domain][cbid]) continue;
        /* CUpti_CallbackData: callbackSite at 0 (0 = API_ENTER), correlationId at 64. */
        uint8_t data[128];
        memset(data, 0, sizeof data);
        put32(data, 64, correlation);
        s->callback(s->userdata, domain, cbid, data);
    }
    return correlation;
}

uint64_t double_cupti_now(void) { return now(); }
