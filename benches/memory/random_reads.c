// What one random read of memory costs on this machine: 32 dependent reads
// (each address comes from the read before it) in a 1 GiB buffer, 300 times,
// optionally after writing a JUNK_MB buffer each time (as an in-process
// bench that empties the caches does), in 4 KiB or 2 MiB pages. Prints the
// p50 and p90 per read. docs/benchmarks.md, "What decides the figure".
//
//   cc -O2 benches/memory/random_reads.c -o /tmp/random_reads
//   /tmp/random_reads JUNK_MB HUGE        (e.g. 0 1, then 512 1)
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s JUNK_MB HUGE(0|1)\n", argv[0]);
        return 2;
    }
    size_t junk_bytes = (size_t)atoi(argv[1]) << 20, size = (size_t)1 << 30, n = size / 8;
    uint64_t *next = mmap(0, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (next == MAP_FAILED)
        return 1;
    if (atoi(argv[2]))
        madvise(next, size, MADV_HUGEPAGE);
    uint64_t x = 88172645463325252ull;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        next[i] = x % n;
    }
    char *junk = junk_bytes ? calloc(junk_bytes, 1) : NULL;
    enum { ROUNDS = 300, READS = 32 };
    double per_read[ROUNDS];
    volatile uint64_t sink;
    uint64_t at = 1;
    for (int r = 0; r < ROUNDS; r++) {
        for (size_t i = 0; i < junk_bytes; i += 64)
            junk[i]++;
        double start = now_ns();
        for (int k = 0; k < READS; k++)
            at = next[at];
        per_read[r] = (now_ns() - start) / READS;
        sink = at;
    }
    (void)sink;
    qsort(per_read, ROUNDS, sizeof(double), by_value);
    printf("junk %s MiB, %s pages: one random read p50 %.0f ns, p90 %.0f ns\n", argv[1],
           atoi(argv[2]) ? "2 MiB" : "4 KiB", per_read[ROUNDS / 2], per_read[ROUNDS * 9 / 10]);
    return 0;
}
