/* Calls the intercepted NCCL functions `n` times each against the real libnccl.so.2 (no GPU
 * here: communicator creation fails and collectives on a null communicator fail fast; group
 * start/end succeed). Writes "name code" lines (first call's status) to DIR/status.txt.
 * usage: nccl_calls DIR N */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int ncclResult_t;
typedef void *ncclComm_t;
typedef struct { char internal[128]; } ncclUniqueId;

ncclResult_t ncclAllReduce(const void *, void *, size_t, int, int, ncclComm_t, void *);
ncclResult_t ncclAllGather(const void *, void *, size_t, int, ncclComm_t, void *);
ncclResult_t ncclReduceScatter(const void *, void *, size_t, int, int, ncclComm_t, void *);
ncclResult_t ncclBroadcast(const void *, void *, size_t, int, int, ncclComm_t, void *);
ncclResult_t ncclReduce(const void *, void *, size_t, int, int, int, ncclComm_t, void *);
ncclResult_t ncclSend(const void *, size_t, int, int, ncclComm_t, void *);
ncclResult_t ncclRecv(void *, size_t, int, int, ncclComm_t, void *);
ncclResult_t ncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);
ncclResult_t ncclCommInitRank(ncclComm_t *, int, ncclUniqueId, int);
ncclResult_t ncclCommDestroy(ncclComm_t);
ncclResult_t ncclCommAbort(ncclComm_t);

int main(int argc, char **argv) {
    if (argc != 3) return 2;
    int n = atoi(argv[2]);
    static float buf[1024];
    int codes[12];
    for (int i = 0; i < n; i++) {
        ncclComm_t comm = 0;
        ncclUniqueId id;
        memset(&id, 0, sizeof id);
        codes[0] = ncclGroupStart();
        codes[1] = ncclAllReduce(buf, buf, 1024, 7 /* float32 */, 0 /* sum */, 0, 0);
        codes[2] = ncclAllGather(buf, buf, 256, 7, 0, 0);
        codes[3] = ncclReduceScatter(buf, buf, 128, 7, 2 /* max */, 0, 0);
        codes[4] = ncclBroadcast(buf, buf, 512, 2 /* int32 */, 1, 0, 0);
        codes[5] = ncclReduce(buf, buf, 64, 8 /* float64 */, 0, 0, 0, 0);
        codes[6] = ncclSend(buf, 100, 0 /* int8 */, 3, 0, 0);
        codes[7] = ncclRecv(buf, 100, 0, 3, 0, 0);
        codes[8] = ncclGroupEnd();
        codes[9] = ncclCommInitRank(&comm, 1, id, 0);
        codes[10] = ncclCommDestroy(0);
        codes[11] = ncclCommAbort(0);
    }
    const char *names[12] = {"ncclGroupStart", "ncclAllReduce", "ncclAllGather", "ncclReduceScatter",
                             "ncclBroadcast", "ncclReduce", "ncclSend", "ncclRecv", "ncclGroupEnd",
                             "ncclCommInitRank", "ncclCommDestroy", "ncclCommAbort"};
    char path[4096];
    snprintf(path, sizeof path, "%s/status.txt", argv[1]);
    FILE *f = fopen(path, "w");
    if (!f) return 3;
    for (int i = 0; i < 12; i++) fprintf(f, "%s %d\n", names[i], codes[i]);
    fclose(f);
    return 0;
}
