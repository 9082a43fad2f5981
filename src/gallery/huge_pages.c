/*
 * The gallery index's memory in 2 MiB pages. A graph walk reads a few
 * thousand vectors scattered over a gigabyte (a million people): with
 * 4 KiB pages nearly every one also misses the TLB, and 2 MiB pages made
 * the walk at a million 13 to 20% faster (docs/benchmarks.md, "Huge pages").
 *
 * usearch takes its arenas straight from mmap and has no option to advise
 * them, and Linux's default THP mode (madvise) gives huge pages only where
 * asked. So the library is linked with --wrap=mmap and --wrap=munmap
 * (build.rs): every such call made from code inside it comes here, and large
 * anonymous mappings are advised before anything touches them. Address
 * space only reserved (MAP_NORESERVE: mimalloc's arenas) is left alone:
 * there a huge page would make each small touch cost 2 MiB. The rest of the
 * server is not affected; with THP "never" the advice does nothing.
 *
 * usearch's lookup tables (a pointer per slot to its vector and to its node,
 * the key-to-slot hash: 48 MiB at a million) come from aligned_alloc, that
 * is from glibc's heap, in 4 KiB pages: a walk reads a vector's pointer
 * before the vector, and that read was its costliest instruction. So
 * --wrap=aligned_alloc too: the whole 2 MiB pages inside a large block are
 * advised. Such a block is freed by free(), which this file does not see: a
 * deferred advice may then reach memory reused by someone else, where it
 * changes the page size only (MADV_COLLAPSE keeps every byte).
 *
 * While a thread reads an index from its file (triton_face_huge_pages_defer),
 * the advice waits: a huge page faulted in where the hypervisor took back the
 * guest's free memory (virtio-balloon free page reporting) cost 1 to 4 s
 * for the 1.4 GB of a million people, 4 KiB pages 0.6 s. The deferral is the
 * reading thread's alone (other models load beside it), and its regions are
 * tagged with its token. After the read, triton_face_huge_pages_collapse (on
 * a thread of the index's own) advises that token's regions and asks the
 * kernel to collapse them now (MADV_COLLAPSE, Linux 6.1; older kernels leave
 * it to khugepaged), unless THP is "never" (MADV_COLLAPSE would ignore it).
 *
 * The same large regions hold faces' vectors, biometric data: each is kept
 * out of core dumps (MADV_DONTDUMP) and locked against swap as its pages are
 * touched (mlock2 MLOCK_ONFAULT: nothing is faulted in ahead, so the huge
 * page deferral above is unchanged), where the memlock limit allows; the
 * first refusal's errno is kept for the model load's log
 * (triton_face_memory_lock_error). triton_face_keep_private does the same
 * for memory the Rust side holds vectors in (the fine bytes).
 *
 * In C, not Rust: a Rust #[no_mangle] function would be exported by the
 * library, which exports the TRITONBACKEND_* entry points and nothing else.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <unistd.h>

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25
#endif

/* Smaller mappings are left as they are: usearch's first arena is 8 MiB. */
#define ADVISED_FROM ((size_t)4 << 20)
/* Regions remembered while deferring; beyond, they are advised at once. */
#define DEFERRED_MAX 1024

/* The C library's mmap and munmap, as --wrap names them. */
void *__real_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t offset);
int __real_munmap(void *addr, size_t len);

struct region {
    uintptr_t start;
    size_t len;
    int token;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
/* Signalled when the region being collapsed is done. */
static pthread_cond_t collapsed = PTHREAD_COND_INITIALIZER;
static int last_token;
/* The token of the read this thread is deferring for (0: none). */
static __thread int deferring;
static struct region deferred[DEFERRED_MAX];
static int deferred_count; /* written under the lock, read by munmap without */
/* The region advised outside the lock now (len 0: none; len is read by
 * munmap without the lock). */
static struct region in_flight;

static void set_count(int n) {
    __atomic_store_n(&deferred_count, n, __ATOMIC_RELEASE);
}

/* A failed advice changes nothing but the page size, so it is not reported,
 * and the caller sees the errno of its own call alone. */
static int advise(void *addr, size_t len, int advice) {
    int kept = errno;
    int done = madvise(addr, len, advice) == 0;
    errno = kept;
    return done;
}

/* The errno of the first mlock the memlock limit refused (0: none). */
static int lock_errno;

/* Out of core dumps, and locked against swap where allowed (see the top). */
static void keep_private(void *addr, size_t len) {
    int kept = errno;
    madvise(addr, len, MADV_DONTDUMP);
    if (mlock2(addr, len, MLOCK_ONFAULT) != 0) {
        int none = 0;
        __atomic_compare_exchange_n(&lock_errno, &none, errno, 0, __ATOMIC_RELAXED,
                                    __ATOMIC_RELAXED);
    }
    errno = kept;
}

/* The whole pages inside `len` bytes at `addr` kept private (the Rust side's
 * memory: a Vec's buffer shares its first and last pages with others). */
__attribute__((visibility("hidden"))) void triton_face_keep_private(void *addr, size_t len) {
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t start = ((uintptr_t)addr + page - 1) & ~(page - 1);
    uintptr_t end = ((uintptr_t)addr + len) & ~(page - 1);
    if (start < end) {
        keep_private((void *)start, end - start);
    }
}

__attribute__((visibility("hidden"))) int triton_face_memory_lock_error(void) {
    return __atomic_load_n(&lock_errno, __ATOMIC_RELAXED);
}

static int overlaps(struct region r, uintptr_t start, size_t len) {
    return start < r.start + r.len && r.start < start + len;
}

/* Remembered while this thread defers (true), else to be advised now. */
static int remember(void *addr, size_t len) {
    int kept = 0;
    if (deferring == 0) {
        return 0;
    }
    pthread_mutex_lock(&lock);
    if (deferred_count < DEFERRED_MAX) {
        deferred[deferred_count].start = (uintptr_t)addr;
        deferred[deferred_count].len = len;
        deferred[deferred_count].token = deferring;
        set_count(deferred_count + 1);
        kept = 1;
    }
    pthread_mutex_unlock(&lock);
    return kept;
}

/* MADV_HUGEPAGE on `len` bytes at `addr`, or remembered for later while
 * this thread reads an index. */
static void advise_now_or_later(void *addr, size_t len) {
    if (!remember(addr, len)) {
        advise(addr, len, MADV_HUGEPAGE);
    }
}

/* mmap, then MADV_HUGEPAGE on a large committed anonymous mapping (or
 * remembered for later while this thread reads an index). */
__attribute__((visibility("hidden"))) void *__wrap_mmap(void *addr, size_t len, int prot, int flags,
                                                        int fd, off_t offset) {
    void *mapped = __real_mmap(addr, len, prot, flags, fd, offset);
    int committed = (flags & MAP_ANONYMOUS) && !(flags & MAP_NORESERVE);
    if (mapped != MAP_FAILED && committed && len >= ADVISED_FROM) {
        keep_private(mapped, len);
        advise_now_or_later(mapped, len);
    }
    return mapped;
}

void *__real_aligned_alloc(size_t alignment, size_t size);

/* aligned_alloc, then MADV_HUGEPAGE on the whole 2 MiB pages inside a large
 * block (or remembered for later while this thread reads an index). */
__attribute__((visibility("hidden"))) void *__wrap_aligned_alloc(size_t alignment, size_t size) {
    void *block = __real_aligned_alloc(alignment, size);
    const uintptr_t huge = (uintptr_t)2 << 20;
    uintptr_t start = ((uintptr_t)block + huge - 1) & ~(huge - 1);
    uintptr_t end = ((uintptr_t)block + size) & ~(huge - 1);
    if (block != NULL && size >= ADVISED_FROM && start < end) {
        keep_private((void *)start, end - start);
        advise_now_or_later((void *)start, end - start);
    }
    return block;
}

/* munmap; a remembered region it touches is forgotten, and one being
 * collapsed is waited for, so no advice reaches memory unmapped here and
 * mapped again by someone else (an aligned_alloc block's: see the top). */
__attribute__((visibility("hidden"))) int __wrap_munmap(void *addr, size_t len) {
    if (__atomic_load_n(&deferred_count, __ATOMIC_ACQUIRE) > 0 ||
        __atomic_load_n(&in_flight.len, __ATOMIC_ACQUIRE) > 0) {
        uintptr_t start = (uintptr_t)addr;
        pthread_mutex_lock(&lock);
        while (in_flight.len > 0 && overlaps(in_flight, start, len)) {
            pthread_cond_wait(&collapsed, &lock);
        }
        for (int i = 0; i < deferred_count;) {
            if (overlaps(deferred[i], start, len)) {
                set_count(deferred_count - 1);
                deferred[i] = deferred[deferred_count];
            } else {
                i++;
            }
        }
        pthread_mutex_unlock(&lock);
    }
    return __real_munmap(addr, len);
}

/* Large mappings this thread makes from here on wait for the collapse of
 * the token returned. */
__attribute__((visibility("hidden"))) int triton_face_huge_pages_defer(void) {
    pthread_mutex_lock(&lock);
    int token = ++last_token;
    pthread_mutex_unlock(&lock);
    deferring = token;
    return token;
}

/* The end of this thread's deferral; returns how many of `token`'s regions
 * wait. */
__attribute__((visibility("hidden"))) int triton_face_huge_pages_resume(int token) {
    deferring = 0;
    int waiting = 0;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < deferred_count; i++) {
        waiting += deferred[i].token == token;
    }
    pthread_mutex_unlock(&lock);
    return waiting;
}

/* Whether the system's THP mode is "never" (then no collapse). */
static int thp_never(void) {
    char mode[128] = "";
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    if (f == NULL) {
        return 0;
    }
    int read = fgets(mode, sizeof mode, f) != NULL;
    fclose(f);
    return read && strstr(mode, "[never]") != NULL;
}

/* `token`'s regions advised and, with `now`, collapsed into huge pages,
 * one at a time outside the lock (a collapse takes seconds, and every
 * munmap of this library would wait for it; one of that region waits).
 * Returns how many regions were collapsed whole. */
__attribute__((visibility("hidden"))) int triton_face_huge_pages_collapse(int token, int now) {
    int whole = 0;
    now = now && !thp_never();
    for (;;) {
        pthread_mutex_lock(&lock);
        int i = 0;
        while (i < deferred_count && deferred[i].token != token) {
            i++;
        }
        if (i == deferred_count) {
            pthread_mutex_unlock(&lock);
            return whole;
        }
        struct region r = deferred[i];
        /* In flight before it leaves the list: an munmap that reads the
         * count without the lock then sees one or the other. */
        in_flight.start = r.start;
        in_flight.token = r.token;
        __atomic_store_n(&in_flight.len, r.len, __ATOMIC_RELEASE);
        set_count(deferred_count - 1);
        deferred[i] = deferred[deferred_count];
        pthread_mutex_unlock(&lock);
        advise((void *)r.start, r.len, MADV_HUGEPAGE);
        whole += now && advise((void *)r.start, r.len, MADV_COLLAPSE);
        pthread_mutex_lock(&lock);
        __atomic_store_n(&in_flight.len, 0, __ATOMIC_RELEASE);
        pthread_cond_broadcast(&collapsed);
        pthread_mutex_unlock(&lock);
    }
}
