//! Denormal floats on the executing thread. Some published face models carry
//! weights and produce activations around 1e-34; x86 handles such denormals
//! in microcode, tens of times slower. Flush-to-zero and denormals-are-zero
//! (MXCSR bits 0x8040) make them 0 at no cost to the results we check. The
//! setting is per thread and other code (the server, onnxruntime) may rely on
//! its own, so it is set for one engine call and restored after.

/// Sets FTZ|DAZ while alive; restores the previous MXCSR on drop.
pub struct FlushDenormals {
    #[cfg(target_arch = "x86_64")]
    saved: Option<u32>,
}

#[cfg(target_arch = "x86_64")]
const FTZ_DAZ: u32 = 0x8040;

impl FlushDenormals {
    /// `on`: flush for the guard's lifetime; off: leave the thread as it is.
    #[cfg(target_arch = "x86_64")]
    #[allow(deprecated)] // _mm_getcsr/_mm_setcsr: the direct way to this per-thread flag
    pub fn new(on: bool) -> Self {
        use std::arch::x86_64::{_mm_getcsr, _mm_setcsr};
        if !on {
            return FlushDenormals { saved: None };
        }
        // SAFETY: SSE is baseline on x86_64; only the FTZ and DAZ control bits change.
        let saved = unsafe { _mm_getcsr() };
        // SAFETY: as above.
        unsafe { _mm_setcsr(saved | FTZ_DAZ) };
        FlushDenormals { saved: Some(saved) }
    }

    #[cfg(not(target_arch = "x86_64"))]
    pub fn new(_on: bool) -> Self {
        FlushDenormals {}
    }
}

impl Drop for FlushDenormals {
    fn drop(&mut self) {
        #[cfg(target_arch = "x86_64")]
        #[allow(deprecated)]
        if let Some(saved) = self.saved {
            // SAFETY: restores the value read in `new` on this same thread
            // (the guard is not Send: it holds no data, but lives in one call).
            unsafe { std::arch::x86_64::_mm_setcsr(saved) };
        }
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;

    #[test]
    fn flushes_inside_and_restores_after() {
        let tiny = std::hint::black_box(1e-39_f32); // a denormal
        assert!(tiny * 1.0 != 0.0);
        {
            let _guard = FlushDenormals::new(true);
            assert_eq!(std::hint::black_box(tiny) * 1.0, 0.0);
        }
        assert!(std::hint::black_box(tiny) * 1.0 != 0.0);
        let _off = FlushDenormals::new(false);
        assert!(std::hint::black_box(tiny) * 1.0 != 0.0);
    }
}
