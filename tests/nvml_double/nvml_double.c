/* A test double of the NVML library (libnvidia-ml.so.1) for machines with no GPU.
 *
 * Exports the entry points mlprof-collect uses through nvml-wrapper. Simulated GPUs draw a
 * known power curve, driven by CLOCK_MONOTONIC since a start time:
 *
 *   P_g(t) = BASE * (g + 1) + AMP * sin(2 pi t / PERIOD)      [W], t = now - START
 *
 * and their total-energy counter (mJ) holds the integral of that curve up to the last 100 ms
 * boundary (real GPUs update it about that often), plus an offset (the counter counts since
 * the driver was loaded).
 *
 * Configuration (environment):
 *   NVML_DOUBLE_GPUS=N          simulated GPUs (1..8, default 1)
 *   NVML_DOUBLE_START_NS=T      CLOCK_MONOTONIC ns of t = 0 (default: nvmlInit time)
 *   NVML_DOUBLE_BASE_W, NVML_DOUBLE_AMP_W, NVML_DOUBLE_PERIOD_MS   (default 100, 50, 2000)
 *   NVML_DOUBLE_UPDATE_MS       energy counter update period (default 100)
 *   NVML_DOUBLE_NO_ENERGY=1     the energy counter is not supported (NVML_ERROR_NOT_SUPPORTED)
 *   NVML_DOUBLE_ENERGY_READ_US=U  each energy-counter read spins U µs of CPU first, as an H200's
 *                               driver does for 3-4 ms (tests/gpu/nvml_cost.py)
 *   NVML_DOUBLE_MEMORY_READ_US=U  likewise for each memory-info read (a slow metric)
 *   NVML_DOUBLE_AVERAGED_POWER=1  nvmlDeviceGetPowerUsage returns the mean power of the last
 *                               second, as on Ampere and newer GPUs; the field
 *                               NVML_FI_DEV_POWER_INSTANT (nvmlDeviceGetFieldValues) always
 *                               gives the instantaneous power
 *   NVML_DOUBLE_LOSE=G:MS       GPU G answers NVML_ERROR_GPU_IS_LOST from MS after START on
 *   NVML_DOUBLE_FAIL_INIT=1     nvmlInit fails (NVML_ERROR_DRIVER_NOT_LOADED)
 *
 * UUIDs are GPU-00000000-0000-0000-0000-00000000000<g>, names "Double GPU <g>".
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NVML_SUCCESS 0
#define NVML_ERROR_UNINITIALIZED 1
#define NVML_ERROR_INVALID_ARGUMENT 2
#define NVML_ERROR_NOT_SUPPORTED 3
#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_ERROR_DRIVER_NOT_LOADED 9
#define NVML_ERROR_GPU_IS_LOST 15

#define MAX_GPUS 8

typedef struct nvmlDevice_st {
    unsigned index;
} *nvmlDevice_t;

typedef struct {
    unsigned gpu;
    unsigned memory;
} nvmlUtilization_t;

typedef struct {
    unsigned version;
    unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;

typedef struct {
    unsigned long long total, free, used;
} nvmlMemory_t;

static struct nvmlDevice_st devices[MAX_GPUS];
static int initialized;
static unsigned gpu_count = 1;
static uint64_t start_ns;
static double base_w = 100.0, amp_w = 50.0, period_s = 2.0, update_s = 0.1;
static int no_energy;
static double energy_read_s, memory_read_s;
static int averaged_power;
static int lose_gpu = -1;
static double lose_after_s;

static uint64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void spin_s(double seconds) {
    uint64_t until = mono_ns() + (uint64_t)(seconds * 1e9);
    while (mono_ns() < until) {
    }
}

static double env_double(const char *name, double fallback) {
    const char *v = getenv(name);
    return v && *v ? strtod(v, NULL) : fallback;
}

/* Seconds since START (negative before it). */
static double elapsed_s(void) {
    return ((double)(int64_t)(mono_ns() - start_ns)) / 1e9;
}

static double power_w(unsigned g, double t) {
    return base_w * (g + 1) + amp_w * sin(2.0 * M_PI * t / period_s);
}

/* Integral of power_w over [0, t], J. */
static double energy_j(unsigned g, double t) {
    return base_w * (g + 1) * t - amp_w * period_s / (2.0 * M_PI) * (cos(2.0 * M_PI * t / period_s) - 1.0);
}

static int check(nvmlDevice_t device) {
    if (!initialized)
        return NVML_ERROR_UNINITIALIZED;
    if (device == NULL || device < devices || device >= devices + gpu_count)
        return NVML_ERROR_INVALID_ARGUMENT;
    if ((int)device->index == lose_gpu && elapsed_s() >= lose_after_s)
        return NVML_ERROR_GPU_IS_LOST;
    return NVML_SUCCESS;
}

int nvmlInit_v2(void) {
    const char *fail = getenv("NVML_DOUBLE_FAIL_INIT");
    if (fail && *fail == '1')
        return NVML_ERROR_DRIVER_NOT_LOADED;
    gpu_count = (unsigned)env_double("NVML_DOUBLE_GPUS", 1);
    if (gpu_count > MAX_GPUS)
        gpu_count = MAX_GPUS;
    for (unsigned i = 0; i < MAX_GPUS; i++)
        devices[i].index = i;
    const char *start = getenv("NVML_DOUBLE_START_NS");
    start_ns = start && *start ? strtoull(start, NULL, 10) : mono_ns();
    base_w = env_double("NVML_DOUBLE_BASE_W", 100.0);
    amp_w = env_double("NVML_DOUBLE_AMP_W", 50.0);
    period_s = env_double("NVML_DOUBLE_PERIOD_MS", 2000.0) / 1000.0;
    update_s = env_double("NVML_DOUBLE_UPDATE_MS", 100.0) / 1000.0;
    const char *ne = getenv("NVML_DOUBLE_NO_ENERGY");
    no_energy = ne && *ne == '1';
    energy_read_s = env_double("NVML_DOUBLE_ENERGY_READ_US", 0.0) / 1e6;
    memory_read_s = env_double("NVML_DOUBLE_MEMORY_READ_US", 0.0) / 1e6;
    averaged_power = env_double("NVML_DOUBLE_AVERAGED_POWER", 0.0) == 1.0;
    const char *lose = getenv("NVML_DOUBLE_LOSE");
    if (lose && *lose) {
        char *colon;
        lose_gpu = (int)strtol(lose, &colon, 10);
        lose_after_s = *colon == ':' ? strtod(colon + 1, NULL) / 1000.0 : 0.0;
    }
    initialized = 1;
    return NVML_SUCCESS;
}

int nvmlInitWithFlags(unsigned flags) {
    (void)flags;
    return nvmlInit_v2();
}

int nvmlShutdown(void) {
    initialized = 0;
    return NVML_SUCCESS;
}

const char *nvmlErrorString(int result) {
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    default: return "Unknown Error";
    }
}

static int copy_string(char *out, unsigned length, const char *text) {
    if (out == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(text) + 1 > length)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    strcpy(out, text);
    return NVML_SUCCESS;
}

int nvmlSystemGetDriverVersion(char *version, unsigned length) {
    return copy_string(version, length, "550.00.double");
}

int nvmlDeviceGetCount_v2(unsigned *count) {
    if (!initialized)
        return NVML_ERROR_UNINITIALIZED;
    *count = gpu_count;
    return NVML_SUCCESS;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned index, nvmlDevice_t *device) {
    if (!initialized)
        return NVML_ERROR_UNINITIALIZED;
    if (index >= gpu_count || device == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *device = &devices[index];
    return NVML_SUCCESS;
}

int nvmlDeviceGetIndex(nvmlDevice_t device, unsigned *index) {
    int rc = check(device);
    if (rc == NVML_SUCCESS)
        *index = device->index;
    return rc;
}

int nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned length) {
    int rc = check(device);
    if (rc != NVML_SUCCESS)
        return rc;
    char text[64];
    snprintf(text, sizeof text, "Double GPU %u", device->index);
    return copy_string(name, length, text);
}

int nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned length) {
    int rc = check(device);
    if (rc != NVML_SUCCESS)
        return rc;
    char text[96];
    snprintf(text, sizeof text, "GPU-00000000-0000-0000-0000-%012u", device->index);
    return copy_string(uuid, length, text);
}

int nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device, unsigned long long *energy) {
    int rc = check(device);
    if (rc != NVML_SUCCESS)
        return rc;
    if (no_energy)
        return NVML_ERROR_NOT_SUPPORTED;
    spin_s(energy_read_s);
    double t = elapsed_s();
    double updated = floor(t / update_s) * update_s;
    /* 1e6 mJ "since the driver was loaded" before the curve starts. */
    *energy = (unsigned long long)(1000000.0 + energy_j(device->index, updated) * 1000.0);
    return NVML_SUCCESS;
}

int nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned *power) {
    int rc = check(device);
    if (rc != NVML_SUCCESS)
        return rc;
    double t = elapsed_s();
    double w = averaged_power ? energy_j(device->index, t) - energy_j(device->index, t - 1.0)
                              : power_w(device->index, t);
    *power = (unsigned)(w * 1000.0 + 0.5);
    return NVML_SUCCESS;
}

/* nvmlFieldValue_t; only NVML_FI_DEV_POWER_INSTANT (186) is answered, in mW. */
typedef struct {
    unsigned fieldId, scopeId;
    long long timestamp, latencyUsec;
    int valueType, nvmlReturn;
    union {
        double dVal;
        unsigned uiVal;
        unsigned long long ullVal;
    } value;
} nvmlFieldValue_t;

int nvmlDeviceGetFieldValues(nvmlDevice_t device, int count, nvmlFieldValue_t *values) {
    int rc = check(device);
    if (rc != NVML_SUCCESS)
        return rc;
    for (int i = 0; i < count; i++) {
        values[i].timestamp = (long long)(mono_ns() / 1000);
        values[i].latencyUsec = 0;
        if (values[i].fieldId == 186) {
            values[i].valueType = 1; /* NVML_VALUE_TYPE_UNSIGNED_INT */
            values[i].value.uiVal = (unsigned)(power_w(device->index, elapsed_s()) * 1000.0 + 0.5);
            values[i].nvmlReturn = NVML_SUCCESS;
        } else {
            values[i].nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        }
    }
    return NVML_SUCCESS;
}

int nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization) {
    int rc = check(device);
    if (rc != NVML_SUCCESS)
        return rc;
    double s = sin(2.0 * M_PI * elapsed_s() / period_s);
    utilization->gpu = (unsigned)(50.0 + 50.0 * s);
    utilization->memory = 30;
    return NVML_SUCCESS;
}

int nvmlDeviceGetClockInfo(nvmlDevice_t device, int type, unsigned *clock) {
    int rc = check(device);
    if (rc != NVML_SUCCESS)
        return rc;
    *clock = type == 1 /* NVML_CLOCK_SM */ ? 1410 : 1215;
    return NVML_SUCCESS;
}

int nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory) {
    int rc = check(device);
    if (rc != NVML_SUCCESS)
        return rc;
    spin_s(memory_read_s);
    memory->total = 80ull << 30;
    memory->reserved = 0;
    memory->used = (1ull << 30) * (device->index + 1);
    memory->free = memory->total - memory->used;
    return NVML_SUCCESS;
}

int nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory) {
    int rc = check(device);
    if (rc != NVML_SUCCESS)
        return rc;
    memory->total = 80ull << 30;
    memory->used = (1ull << 30) * (device->index + 1);
    memory->free = memory->total - memory->used;
    return NVML_SUCCESS;
}

int nvmlDeviceGetTemperature(nvmlDevice_t device, int sensor, unsigned *temp) {
    int rc = check(device);
    if (rc != NVML_SUCCESS)
        return rc;
    (void)sensor;
    *temp = 40 + device->index;
    return NVML_SUCCESS;
}
