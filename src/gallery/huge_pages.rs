//! An index read from its file in small pages, then moved into huge ones
//! on a thread of its own (`huge_pages.c`): a huge page faulted in where
//! this VM's hypervisor had taken back the memory cost 1 to 4 s over a
//! million people's 1.4 GB, against 0.6 s in 4 KiB pages (docs/gallery.md,
//! "Huge pages").

use std::os::raw::c_int;
use std::thread::{self, JoinHandle};

extern "C" {
    fn triton_face_keep_private(addr: *const std::ffi::c_void, len: usize);
    fn triton_face_memory_lock_error() -> c_int;
    fn triton_face_huge_pages_defer() -> c_int;
    fn triton_face_huge_pages_resume(token: c_int) -> c_int;
    fn triton_face_huge_pages_collapse(token: c_int, now: c_int) -> c_int;
}

/// `buffer`'s allocation (the whole pages inside it) kept out of core dumps
/// and locked against swap where allowed, as the index's own memory is
/// (`huge_pages.c`): it holds vectors. Called again when it moves.
pub fn keep_private(buffer: &Vec<u8>) {
    // SAFETY: madvise and mlock2 on pages inside a live allocation; they
    // change how the kernel treats the pages, never their contents.
    unsafe { triton_face_keep_private(buffer.as_ptr().cast(), buffer.capacity()) }
}

/// Why the memory that holds vectors is not locked against swap, if the
/// memlock limit refused it (its first refusal).
pub fn lock_refused() -> Option<std::io::Error> {
    // SAFETY: reads an atomic int in huge_pages.c.
    let errno = unsafe { triton_face_memory_lock_error() };
    (errno != 0).then(|| std::io::Error::from_raw_os_error(errno))
}

/// While it lives, the large mappings this thread makes keep small pages.
pub struct Deferred {
    token: c_int,
    ended: bool,
}

impl Deferred {
    pub fn begin() -> Self {
        // SAFETY: a counter under a mutex and a thread-local in huge_pages.c.
        let token = unsafe { triton_face_huge_pages_defer() };
        Deferred {
            token,
            ended: false,
        }
    }

    /// The deferral ended: what this thread mapped meanwhile is moved into
    /// huge pages on a thread, returned to be joined before the memory's
    /// owner (and this library's code) goes; here when no thread could
    /// start.
    pub fn collapse(mut self) -> Option<JoinHandle<()>> {
        self.ended = true;
        let token = self.token;
        // SAFETY: as in `begin`.
        if unsafe { triton_face_huge_pages_resume(token) } == 0 {
            return None;
        }
        let collapse = move || {
            // SAFETY: advice to the kernel over regions huge_pages.c
            // recorded (and forgets when it sees them unmapped); it
            // changes no content.
            unsafe { triton_face_huge_pages_collapse(token, 1) };
        };
        match thread::Builder::new()
            .name("face-huge-pages".into())
            .spawn(collapse)
        {
            Ok(thread) => Some(thread),
            Err(_) => {
                collapse();
                None
            }
        }
    }
}

/// A read that failed ends its deferral too: what it left mapped is advised
/// (khugepaged may move it), not collapsed.
impl Drop for Deferred {
    fn drop(&mut self) {
        if !self.ended {
            // SAFETY: as in `begin` and `collapse`.
            unsafe {
                triton_face_huge_pages_resume(self.token);
                triton_face_huge_pages_collapse(self.token, 0);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernel's flags of the mapping at `addr` (`hg`: advised huge).
    fn flags_at(addr: usize) -> String {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let mut inside = false;
        for line in smaps.lines() {
            if let Some((range, _)) = line.split_once(' ') {
                if let Some((start, end)) = range.split_once('-') {
                    if let (Ok(s), Ok(e)) = (
                        usize::from_str_radix(start, 16),
                        usize::from_str_radix(end, 16),
                    ) {
                        inside = (s..e).contains(&addr);
                        continue;
                    }
                }
            }
            if inside {
                if let Some(flags) = line.strip_prefix("VmFlags:") {
                    return flags.to_string();
                }
            }
        }
        panic!("no mapping at {addr:#x}");
    }

    #[test]
    fn a_mapping_made_while_deferred_is_advised_after() {
        let len = 16 << 20;
        let deferred = Deferred::begin();
        // SAFETY: a new private anonymous mapping, unmapped below.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(addr, libc::MAP_FAILED);
        // SAFETY: inside the mapping just made.
        unsafe { std::ptr::write_bytes(addr as *mut u8, 1, len) };
        assert!(
            !flags_at(addr as usize).contains(" hg"),
            "advised while deferred"
        );
        if let Some(thread) = deferred.collapse() {
            thread.join().unwrap();
        }
        assert!(flags_at(addr as usize).contains(" hg"), "not advised after");
        // SAFETY: the mapping made above, no longer used.
        assert_eq!(unsafe { libc::munmap(addr, len) }, 0);
    }

    #[test]
    fn large_aligned_blocks_are_advised_now_or_after_a_deferral() {
        // usearch's lookup tables come from aligned_alloc (glibc's heap).
        // Past glibc's largest mmap threshold (32 MiB), each block is a
        // new mapping: none of another test's advice is reused.
        let len = 64 << 20;
        let huge_page_inside =
            |block: *mut libc::c_void| (block as usize + (2 << 20)) & !((2 << 20) - 1);
        for deferring in [false, true] {
            let deferred = deferring.then(Deferred::begin);
            // SAFETY: 64 is a power of two and `len` a multiple of it; freed below.
            let block = unsafe { libc::aligned_alloc(64, len) };
            assert!(!block.is_null());
            let advised = flags_at(huge_page_inside(block)).contains(" hg");
            assert_eq!(advised, !deferring, "advised at once: {advised}");
            if let Some(thread) = deferred.and_then(Deferred::collapse) {
                thread.join().unwrap();
            }
            assert!(
                flags_at(huge_page_inside(block)).contains(" hg"),
                "deferring: {deferring}"
            );
            // SAFETY: the block allocated above, no longer used.
            unsafe { libc::free(block) };
        }
    }
}
