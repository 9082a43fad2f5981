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
 * While an index is read from its file (triton_face_huge_pages_defer), the
 * advice waits: a huge page faulted in where the hypervisor took back the
 * guest's free memory (virtio-balloon free page reporting) cost 1 to 4 s
 * for the 1.4 GB of a million people, 4 KiB pages 0.6 s. After the read,
 * triton_face_huge_pages_collapse (on a thread of the gallery's own) advises
 * the regions and asks the kernel to collapse them now (MADV_COLLAPSE,
 * Linux 6.1; older kernels leave it to khugepaged).
 *
 * In C, not Rust: a Rust #[no_mangle] function would be exported by the
 * library, which exports the TRITONBACKEND_* entry points and nothing else.
 */
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/types.h>

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
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int deferring;
static struct region deferred[DEFERRED_MAX];
static int deferred_count; /* written under the lock, read by munmap without */

static void set_count(int n) {
    __atomic_store_n(&deferred_count, n, __ATOMIC_RELEASE);
}

/* A failed advice changes nothing but the page size, so it is not reported,
 * and the caller sees the errno of its own call alone. */
static void advise(void *addr, size_t len, int advice) {
    int kept = errno;
    madvise(addr, len, advice);
    errno = kept;
}

/* Remembered while deferring (true), else to be advised now (false). */
static int remember(void *addr, size_t len) {
    int kept = 0;
    pthread_mutex_lock(&lock);
    if (deferring > 0 && deferred_count < DEFERRED_MAX) {
        deferred[deferred_count].start = (uintptr_t)addr;
        deferred[deferred_count].len = len;
        set_count(deferred_count + 1);
        kept = 1;
    }
    pthread_mutex_unlock(&lock);
    return kept;
}

/* mmap, then MADV_HUGEPAGE on a large committed anonymous mapping (or
 * remembered for later while an index is read). */
__attribute__((visibility("hidden"))) void *__wrap_mmap(void *addr, size_t len, int prot, int flags,
                                                        int fd, off_t offset) {
    void *mapped = __real_mmap(addr, len, prot, flags, fd, offset);
    int committed = (flags & MAP_ANONYMOUS) && !(flags & MAP_NORESERVE);
    if (mapped != MAP_FAILED && committed && len >= ADVISED_FROM && !remember(mapped, len)) {
        advise(mapped, len, MADV_HUGEPAGE);
    }
    return mapped;
}

/* munmap; a remembered region it touches is forgotten, so no advice ever
 * reaches memory mapped there later by someone else. */
__attribute__((visibility("hidden"))) int __wrap_munmap(void *addr, size_t len) {
    if (__atomic_load_n(&deferred_count, __ATOMIC_ACQUIRE) > 0) {
        uintptr_t start = (uintptr_t)addr;
        pthread_mutex_lock(&lock);
        for (int i = 0; i < deferred_count;) {
            struct region r = deferred[i];
            if (start < r.start + r.len && r.start < start + len) {
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

/* Large mappings from here on wait for triton_face_huge_pages_collapse. */
__attribute__((visibility("hidden"))) void triton_face_huge_pages_defer(void) {
    pthread_mutex_lock(&lock);
    deferring++;
    pthread_mutex_unlock(&lock);
}

/* The end of a triton_face_huge_pages_defer; returns how many regions wait
 * (0 while another read still defers: its own end collapses them). */
__attribute__((visibility("hidden"))) int triton_face_huge_pages_resume(void) {
    pthread_mutex_lock(&lock);
    deferring--;
    int waiting = deferring == 0 ? deferred_count : 0;
    pthread_mutex_unlock(&lock);
    return waiting;
}

/* The waiting regions advised and collapsed into huge pages, one at a time
 * and outside the lock (a collapse takes seconds, and every munmap of this
 * library would wait for it). A region unmapped meanwhile makes its advice
 * fail; mapped again by another, the advice changes only its page size.
 * Returns how many regions were collapsed whole. */
__attribute__((visibility("hidden"))) int triton_face_huge_pages_collapse(void) {
    int whole = 0;
    for (;;) {
        pthread_mutex_lock(&lock);
        if (deferring > 0 || deferred_count == 0) {
            pthread_mutex_unlock(&lock);
            return whole;
        }
        set_count(deferred_count - 1);
        struct region r = deferred[deferred_count];
        pthread_mutex_unlock(&lock);
        advise((void *)r.start, r.len, MADV_HUGEPAGE);
        int kept = errno;
        whole += madvise((void *)r.start, r.len, MADV_COLLAPSE) == 0;
        errno = kept;
    }
}
