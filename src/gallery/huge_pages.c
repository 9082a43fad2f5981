/*
 * The gallery index's memory in 2 MiB pages. A graph walk reads a few
 * thousand vectors scattered over a gigabyte (a million people): with
 * 4 KiB pages nearly every one also misses the TLB, and 2 MiB pages made
 * the walk at a million 13 to 20% faster (docs/benchmarks.md, "Huge pages").
 *
 * usearch takes its arenas straight from mmap and has no option to advise
 * them, and Linux's default THP mode (madvise) gives huge pages only where
 * asked. So the library is linked with --wrap=mmap (build.rs): every mmap
 * call made from code inside it comes here, and large anonymous mappings
 * are advised before anything touches them. Address space only reserved
 * (MAP_NORESERVE: mimalloc's arenas) is left alone: there a huge page would
 * make each small touch cost 2 MiB. The rest of the server is not affected;
 * with THP "never" the advice does nothing.
 *
 * In C, not Rust: a Rust #[no_mangle] function would be exported by the
 * library, which exports the TRITONBACKEND_* entry points and nothing else.
 */
#include <errno.h>
#include <stddef.h>
#include <sys/mman.h>
#include <sys/types.h>

/* Smaller mappings are left as they are: usearch's first arena is 8 MiB. */
#define ADVISED_FROM ((size_t)4 << 20)

/* The C library's mmap, as --wrap=mmap names it. */
void *__real_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t offset);

/* mmap, then MADV_HUGEPAGE on a large committed anonymous mapping. A failed
 * advice changes nothing but the page size, so it is not reported, and the
 * caller sees the errno of its mmap alone. */
__attribute__((visibility("hidden"))) void *__wrap_mmap(void *addr, size_t len, int prot, int flags,
                                                        int fd, off_t offset) {
    void *mapped = __real_mmap(addr, len, prot, flags, fd, offset);
    int committed = (flags & MAP_ANONYMOUS) && !(flags & MAP_NORESERVE);
    if (mapped != MAP_FAILED && committed && len >= ADVISED_FROM) {
        int kept = errno;
        madvise(mapped, len, MADV_HUGEPAGE);
        errno = kept;
    }
    return mapped;
}
