//! The index's memory in 2 MiB pages. A graph walk reads a few thousand
//! vectors scattered over a gigabyte (a million people): with 4 KiB pages
//! nearly every one also misses the TLB, and 2 MiB pages made the walk at
//! a million a quarter faster (docs/benchmarks.md, "Huge pages").
//!
//! usearch takes its arenas straight from `mmap` and has no option to
//! advise them, and Linux's default THP mode (`madvise`) gives huge pages
//! only where asked. So the library is linked with `--wrap=mmap` (build.rs):
//! every `mmap` call made from code inside it comes here, and large
//! anonymous ones are advised before anything touches them. Address space
//! only reserved (`MAP_NORESERVE`: mimalloc's arenas) is left alone: there
//! a huge page would make each small touch cost 2 MiB. The rest of the
//! server is not affected; with THP `never` the advice is a no-op.

use libc::{c_int, c_void, off_t, size_t};

/// Smaller mappings are left as they are: usearch's first arena is 8 MiB.
const ADVISED_FROM: size_t = 4 << 20;

extern "C" {
    /// The C library's `mmap`, as `--wrap=mmap` names it.
    fn __real_mmap(
        addr: *mut c_void,
        len: size_t,
        prot: c_int,
        flags: c_int,
        fd: c_int,
        offset: off_t,
    ) -> *mut c_void;
}

/// `mmap`, then `MADV_HUGEPAGE` on a large anonymous mapping that is not
/// only reserved. A failed
/// advice changes nothing but the page size, so it is not reported.
///
/// # Safety
/// The contract of `mmap(2)`.
#[no_mangle]
pub unsafe extern "C" fn __wrap_mmap(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    offset: off_t,
) -> *mut c_void {
    // SAFETY: the caller's arguments, passed on unchanged.
    let mapped = unsafe { __real_mmap(addr, len, prot, flags, fd, offset) };
    let committed = flags & libc::MAP_ANONYMOUS != 0 && flags & libc::MAP_NORESERVE == 0;
    if mapped != libc::MAP_FAILED && committed && len >= ADVISED_FROM {
        // SAFETY: advice on the mapping just made, which nothing uses yet.
        unsafe { libc::madvise(mapped, len, libc::MADV_HUGEPAGE) };
    }
    mapped
}
