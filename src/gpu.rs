//! CUDA for GPU instances: the compute-capability rule at init, binding the
//! instance's device to the thread that runs the engine, and copying inputs
//! that arrive in GPU memory to the host.
//!
//! The driver library (libcuda) is loaded at run time and only by KIND_GPU
//! instances or a GPU-resident input: KIND_CPU instances never touch it. cudarc
//! panics when the library or one of its symbols is missing, so every call
//! into it runs under `catch_unwind` here and comes back as an error.

use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::str::FromStr;
use std::sync::Arc;

use cudarc::driver::{result as cu, sys as cusys, CudaContext};

use crate::error::{panic_text, Error, Result};

/// A CUDA compute capability such as 6.0 (Pascal) or 8.6.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Capability {
    pub major: u32,
    pub minor: u32,
}

impl Capability {
    /// The design card's floor: Pascal.
    pub const DEFAULT_MIN: Capability = Capability { major: 6, minor: 0 };
}

impl fmt::Display for Capability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

impl FromStr for Capability {
    type Err = ();
    /// "6.0", "8.6", or a bare major "7".
    fn from_str(s: &str) -> std::result::Result<Self, ()> {
        let s = s.trim();
        let (major, minor) = s.split_once('.').unwrap_or((s, "0"));
        match (major.parse(), minor.parse()) {
            (Ok(major), Ok(minor)) => Ok(Capability { major, minor }),
            _ => Err(()),
        }
    }
}

/// What the driver says about one device.
#[derive(Clone, Debug, PartialEq)]
pub struct DeviceInfo {
    pub ordinal: i32,
    pub name: String,
    pub capability: Capability,
    pub total_mem: usize,
}

impl fmt::Display for DeviceInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "GPU {} '{}' (compute capability {}, {} MiB)",
            self.ordinal,
            self.name,
            self.capability,
            self.total_mem >> 20
        )
    }
}

/// Why a device could not be looked at.
#[derive(Clone, Debug, PartialEq)]
pub enum ProbeFailure {
    /// libcuda could not be loaded: no NVIDIA driver on this machine.
    NoDriver,
    /// The driver is there but refused (no such device, driver too old...).
    Driver(String),
}

/// The rule, apart from any driver: may `instance` run on the probed device?
/// The error names the instance, the device, its capability and the minimum.
pub fn decide(
    instance: &str,
    device_id: i32,
    probe: std::result::Result<&DeviceInfo, &ProbeFailure>,
    min: Capability,
) -> Result<()> {
    match probe {
        Err(ProbeFailure::NoDriver) => Err(Error::unavailable(format!(
            "instance '{instance}' is KIND_GPU (device {device_id}) but no CUDA driver was found \
             (libcuda.so could not be loaded); install the NVIDIA driver or use KIND_CPU"
        ))),
        Err(ProbeFailure::Driver(why)) => Err(Error::unavailable(format!(
            "instance '{instance}' is KIND_GPU but CUDA device {device_id} could not be opened: \
             {why}"
        ))),
        Ok(info) if info.capability < min => Err(Error::unsupported(format!(
            "instance '{instance}': {info} is below the minimum compute capability {min} \
             (model parameter min_compute_capability)"
        ))),
        Ok(_) => Ok(()),
    }
}

/// "CUDA_ERROR_NO_DEVICE: no CUDA-capable device is detected".
fn describe(e: cu::DriverError) -> String {
    match e.error_string() {
        Ok(text) => format!("{:?}: {}", e.0, text.to_string_lossy()),
        Err(_) => format!("{:?}", e.0),
    }
}

/// Runs a cudarc call, turning its panics (missing library or symbol) into
/// a driver failure.
fn guarded<T>(
    f: impl FnOnce() -> std::result::Result<T, String>,
) -> std::result::Result<T, String> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|payload| {
        Err(format!(
            "CUDA driver call failed: {}",
            panic_text(payload.as_ref())
        ))
    })
}

fn driver_present() -> bool {
    // SAFETY: only tries to dlopen the library.
    catch_unwind(|| unsafe { cusys::is_culib_present() }).unwrap_or(false)
}

fn open_context(device_id: i32) -> std::result::Result<Arc<CudaContext>, ProbeFailure> {
    if !driver_present() {
        return Err(ProbeFailure::NoDriver);
    }
    let ordinal = usize::try_from(device_id)
        .map_err(|_| ProbeFailure::Driver(format!("invalid device id {device_id}")))?;
    guarded(|| CudaContext::new(ordinal).map_err(describe)).map_err(ProbeFailure::Driver)
}

/// The device a GPU instance runs on, its context retained for the
/// instance's life.
pub struct Gpu {
    ctx: Arc<CudaContext>,
    pub info: DeviceInfo,
}

impl Gpu {
    /// Opens `device_id` and applies [`decide`].
    pub fn open(instance: &str, device_id: i32, min: Capability) -> Result<Gpu> {
        let probed = open_context(device_id).and_then(|ctx| {
            let info = guarded(|| {
                let (major, minor) = ctx.compute_capability().map_err(describe)?;
                Ok(DeviceInfo {
                    ordinal: device_id,
                    name: ctx.name().map_err(describe)?,
                    capability: Capability {
                        major: major.max(0) as u32,
                        minor: minor.max(0) as u32,
                    },
                    total_mem: ctx.total_mem().map_err(describe)?,
                })
            })
            .map_err(ProbeFailure::Driver)?;
            Ok((ctx, info))
        });
        decide(
            instance,
            device_id,
            probed.as_ref().map(|(_, info)| info),
            min,
        )?;
        let (ctx, info) = probed.expect("decide() accepted only a probed device");
        Ok(Gpu { ctx, info })
    }

    /// Makes this device current on the calling thread, so that CUDA work
    /// the engine starts (dlib's runtime API calls) lands on it.
    pub fn bind(&self) -> Result<()> {
        guarded(|| self.ctx.bind_to_thread().map_err(describe)).map_err(|why| {
            Error::internal(format!(
                "could not bind GPU {} to this thread: {why}",
                self.info.ordinal
            ))
        })
    }

    /// Whether this device's context is the calling thread's current one.
    pub fn is_current(&self) -> bool {
        let current = guarded(|| cu::ctx::get_current().map_err(describe));
        matches!(current, Ok(Some(ctx)) if ctx == self.ctx.cu_ctx())
    }
}

/// Copies `len` bytes at device address `ptr` on GPU `device_id` to the host.
/// The calling thread's current context (the instance's device) is restored
/// afterwards, so the engine keeps running where its instance lives.
pub fn copy_to_host(ptr: *const u8, len: usize, device_id: i64) -> Result<Vec<u8>> {
    let device = i32::try_from(device_id).map_err(|_| {
        Error::internal(format!(
            "input in GPU memory with an out-of-range device id {device_id}"
        ))
    })?;
    // Read before opening `device`, which makes its own context current.
    let previous = if driver_present() {
        guarded(|| cu::ctx::get_current().map_err(describe))
            .ok()
            .flatten()
    } else {
        None
    };
    let ctx = open_context(device).map_err(|failure| {
        Error::unavailable(format!(
            "an input is in GPU memory (device {device}) but {}",
            match failure {
                ProbeFailure::NoDriver => "no CUDA driver is loaded".to_string(),
                ProbeFailure::Driver(why) => format!("the device could not be opened: {why}"),
            }
        ))
    })?;
    let mut host = vec![0u8; len];
    let copied = guarded(|| {
        ctx.bind_to_thread().map_err(describe)?;
        // SAFETY: Triton says `ptr` holds `len` bytes of device memory while
        // the request lives; `host` has room for exactly `len` bytes.
        unsafe { cu::memcpy_dtoh_sync(&mut host, ptr as cusys::CUdeviceptr) }.map_err(describe)
    });
    // Dropping a cudarc context binds it to the thread first: drop, then restore.
    drop(ctx);
    if let Some(previous) = previous {
        // SAFETY: `previous` was current on this thread a moment ago and its
        // owner (the instance's Gpu) outlives this call.
        let _ = guarded(|| unsafe { cu::ctx::set_current(previous) }.map_err(describe));
    }
    copied.map_err(|why| Error::internal(format!("copying an input from GPU {device}: {why}")))?;
    Ok(host)
}

/// Whether the dlib this library links was built with CUDA (build.rs reads
/// dlib's config header).
pub const DLIB_USES_CUDA: bool = cfg!(dlib_cuda);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    fn device(major: u32, minor: u32) -> DeviceInfo {
        DeviceInfo {
            ordinal: 1,
            name: "Tesla K80".into(),
            capability: Capability { major, minor },
            total_mem: 12 << 30,
        }
    }

    #[test]
    fn capability_parses_and_orders() {
        assert_eq!("6.0".parse(), Ok(Capability { major: 6, minor: 0 }));
        assert_eq!(" 8.6 ".parse(), Ok(Capability { major: 8, minor: 6 }));
        assert_eq!("7".parse(), Ok(Capability { major: 7, minor: 0 }));
        assert!("six".parse::<Capability>().is_err());
        assert!("6.x".parse::<Capability>().is_err());
        assert!("-1.0".parse::<Capability>().is_err());
        let c = |s: &str| s.parse::<Capability>().unwrap();
        assert!(c("5.2") < c("6.0") && c("6.0") < c("6.1") && c("6.1") < c("7.0"));
        assert!(c("10.0") > c("9.0"), "numeric, not lexical");
        assert_eq!(Capability::DEFAULT_MIN.to_string(), "6.0");
    }

    #[test]
    fn no_driver_is_unavailable_and_names_the_instance() {
        let e = decide(
            "face_0_0",
            0,
            Err(&ProbeFailure::NoDriver),
            Capability::DEFAULT_MIN,
        )
        .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Unavailable);
        assert!(e.message().contains("face_0_0"), "{}", e.message());
        assert!(e.message().contains("no CUDA driver"), "{}", e.message());
    }

    #[test]
    fn driver_refusal_is_unavailable_and_says_why() {
        let why = ProbeFailure::Driver("CUDA_ERROR_INVALID_DEVICE".into());
        let e = decide("face_0_1", 3, Err(&why), Capability::DEFAULT_MIN).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Unavailable);
        assert!(e.message().contains("device 3"), "{}", e.message());
        assert!(e.message().contains("CUDA_ERROR_INVALID_DEVICE"));
    }

    #[test]
    fn below_minimum_names_device_capability_and_minimum() {
        let e = decide("face_0_0", 1, Ok(&device(3, 7)), Capability::DEFAULT_MIN).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Unsupported);
        let m = e.message();
        for needle in ["face_0_0", "GPU 1", "Tesla K80", "3.7", "6.0"] {
            assert!(m.contains(needle), "{needle:?} missing from {m}");
        }
    }

    #[test]
    fn at_or_above_minimum_is_accepted() {
        let min = Capability::DEFAULT_MIN;
        assert!(decide("i", 0, Ok(&device(6, 0)), min).is_ok());
        assert!(decide("i", 0, Ok(&device(8, 6)), min).is_ok());
        assert!(decide("i", 0, Ok(&device(5, 3)), min).is_err());
        let higher = "7.5".parse().unwrap();
        assert!(decide("i", 0, Ok(&device(7, 0)), higher).is_err());
        assert!(decide("i", 0, Ok(&device(7, 5)), higher).is_ok());
    }

    #[test]
    fn an_unusable_device_is_an_error_not_a_panic() {
        // Without a driver (these CI machines) device 0 is unusable; with one,
        // device 4096 does not exist. Either way: UNAVAILABLE, never a panic.
        let (device, needle) = if driver_present() {
            (4096, "could not be opened")
        } else {
            (0, "no CUDA driver")
        };
        let e = Gpu::open("probe", device, Capability::DEFAULT_MIN)
            .err()
            .expect("an unusable device must be refused");
        assert_eq!(e.kind(), ErrorKind::Unavailable);
        assert!(e.message().contains(needle), "{}", e.message());
        let byte = 0u8;
        let e = copy_to_host(&byte, 1, device.into()).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Unavailable);
    }
}
