//! Timestamps for Triton statistics: nanoseconds of a monotonic clock, the
//! same clock as C++ `steady_clock` on Linux.

pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid out-pointer; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The four timestamps Triton asks for, per request and per batch.
#[derive(Clone, Copy, Debug, Default)]
pub struct ExecTimes {
    pub exec_start: u64,
    pub compute_start: u64,
    pub compute_end: u64,
    pub exec_end: u64,
}
