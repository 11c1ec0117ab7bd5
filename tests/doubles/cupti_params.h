/* CUPTI 13.3's `CUpti_SubscriberParams` (cupti_callbacks.h), as the CUPTI test double
 * (libcupti_double.c) reads it and the timeline program (tests/programs/gpu_timeline.c), acting
 * as another tool, passes it: one definition, so that the two cannot drift apart. */
#ifndef MLPROF_CUPTI_PARAMS_H
#define MLPROF_CUPTI_PARAMS_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    size_t structSize;
    const char *subscriberName;
    char *oldSubscriberName;
    size_t oldSubscriberSize;
    uint8_t allowMultipleSubscribers;
} SubscriberParams;

#endif
