/*
 * stdio DIR N
 *
 *   f = fopen(DIR/stdio.dat, "w"); N x fwrite(buf, 10, 4, f) -> 4; fclose(f)
 *   f = fopen(DIR/stdio.dat, "r"); N x fread(buf, 10, 4, f)  -> 4; fclose(f)
 *
 * Counts: fopen 2, fwrite N (40 bytes each), fread N (40 bytes each),
 * fclose 2.  stdio reaches the kernel through glibc-internal calls, so
 * open/read/write/close stay at 0.
 */
#include "common.h"

int main(int argc, char **argv) {
    const char *dir = arg_str(argc, argv, 1, "DIR");
    long n = arg_long(argc, argv, 2, "N");
    char path[4096];
    char buf[40];
    memset(buf, 's', sizeof buf);
    snprintf(path, sizeof path, "%s/stdio.dat", dir);

    FILE *f = fopen(path, "w");
    CHECK(f != NULL, "fopen w %s", path);
    for (long i = 0; i < n; i++)
        CHECK(fwrite(buf, 10, 4, f) == 4, "fwrite");
    CHECK(fclose(f) == 0, "fclose");

    f = fopen(path, "r");
    CHECK(f != NULL, "fopen r %s", path);
    for (long i = 0; i < n; i++)
        CHECK(fread(buf, 10, 4, f) == 4, "fread");
    CHECK(fclose(f) == 0, "fclose");
    return 0;
}
