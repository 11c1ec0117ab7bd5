/* Known phases for the energy attribution test. Two threads block in known calls on pipes:
 *   thread A: read() on pipe 1 from T0+100 ms until the feeder writes at T0+900 ms
 *   thread B: fread() on pipe 2 from T0+500 ms until the feeder writes at T0+1300 ms
 * then the program idles (nanosleep, not recorded) for 300 ms. Prints the CLOCK_MONOTONIC
 * times around each blocking call: "A <start_ns> <end_ns>" and "B <start_ns> <end_ns>". */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

static uint64_t t0;
static int p1[2], p2[2];
static uint64_t a_start, a_end, b_start, b_end;

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void sleep_until(uint64_t at) {
    struct timespec ts = {(time_t)(at / 1000000000ull), (long)(at % 1000000000ull)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) != 0) {
    }
}

static void *thread_a(void *arg) {
    (void)arg;
    char c;
    sleep_until(t0 + 100000000ull);
    a_start = now_ns();
    if (read(p1[0], &c, 1) != 1)
        perror("read");
    a_end = now_ns();
    return NULL;
}

static void *thread_b(void *arg) {
    (void)arg;
    char c;
    FILE *f = fdopen(p2[0], "r");
    setvbuf(f, NULL, _IONBF, 0);
    sleep_until(t0 + 500000000ull);
    b_start = now_ns();
    if (fread(&c, 1, 1, f) != 1)
        perror("fread");
    b_end = now_ns();
    return NULL;
}

int main(void) {
    if (pipe(p1) || pipe(p2))
        return 1;
    t0 = now_ns();
    pthread_t a, b;
    pthread_create(&a, NULL, thread_a, NULL);
    pthread_create(&b, NULL, thread_b, NULL);
    sleep_until(t0 + 900000000ull);
    if (write(p1[1], "x", 1) != 1)
        return 1;
    sleep_until(t0 + 1300000000ull);
    if (write(p2[1], "y", 1) != 1)
        return 1;
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    sleep_until(t0 + 1600000000ull);
    printf("A %llu %llu\nB %llu %llu\n", (unsigned long long)a_start, (unsigned long long)a_end,
           (unsigned long long)b_start, (unsigned long long)b_end);
    return 0;
}
