//! Safe owners of the C++ shim's objects (shim.cpp, shim.h): the only Rust
//! code that calls into dlib. Every shim function catches every C++
//! exception, so a call returns a code and a message, never unwinds.

use std::ffi::{c_char, c_int, CStr, CString};
use std::path::Path;
use std::ptr::{self, NonNull};

use crate::error::{Error, Result};

#[allow(non_camel_case_types, non_upper_case_globals, dead_code)]
mod sys {
    include!(concat!(env!("OUT_DIR"), "/dlib_shim.rs"));
}

/// dlib's inclusive box of a face, in pixels.
pub type Rect = sys::tf_rect;
/// A face's box and its 5 landmarks.
pub type Shape = sys::tf_shape;
pub const DESCRIPTOR_LEN: usize = sys::TF_DESCRIPTOR_LEN as usize;
pub const CHIP_SIDE: usize = sys::TF_CHIP_SIDE as usize;
/// The most upsampling steps the detector takes (each quadruples the pixels).
pub const MAX_UPSAMPLE: u32 = sys::TF_MAX_UPSAMPLE;
/// The HOG detector's window: the smallest face it finds in an image as it is.
pub const HOG_WINDOW: u32 = sys::TF_HOG_WINDOW;
/// How far an image may be resized for HOG (`smallest_face` 20 to 800 px).
pub const MIN_SCALE: f64 = sys::TF_MIN_SCALE;
pub const MAX_SCALE: f64 = sys::TF_MAX_SCALE;

/// Threads OpenBLAS may use for the CPU networks. Process-wide, and set
/// once: the first dlib engine loaded decides (changing it while another
/// instance multiplies matrices is not safe in OpenBLAS). Returns the count
/// in force.
pub fn set_blas_threads(threads: usize) -> usize {
    static SET: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *SET.get_or_init(|| {
        let n = c_int::try_from(threads).unwrap_or(c_int::MAX);
        // SAFETY: no pointers; OpenBLAS clamps the count to its own limits;
        // the OnceLock runs it once, before this process's first dlib engine
        // exists, so no matrix product is in flight.
        unsafe { sys::tf_set_blas_threads(n) };
        threads
    })
}

const ERR_LEN: usize = 512;

/// Runs one shim call with an error buffer and turns its code into a Result.
fn call(what: &str, f: impl FnOnce(*mut c_char, usize) -> c_int) -> Result<()> {
    let mut err = [0 as c_char; ERR_LEN];
    let code = f(err.as_mut_ptr(), ERR_LEN);
    if code == sys::TF_OK as c_int {
        return Ok(());
    }
    // SAFETY: the shim always NUL-terminates within ERR_LEN (and the buffer
    // starts zeroed, so it is terminated even if it wrote nothing).
    let message = unsafe { CStr::from_ptr(err.as_ptr()) }.to_string_lossy();
    let message = format!("dlib {what}: {message}");
    Err(match code as u32 {
        // The shim refused the input before calling dlib (a documented
        // precondition of dlib's code): the request's fault.
        sys::TF_BAD_INPUT => Error::invalid(message),
        // Host memory ran out: capacity, may pass.
        sys::TF_NO_MEMORY => Error::unavailable(message),
        // dlib threw on input that met every precondition we know: we cannot
        // tell a bad image from a bug or a device failure (CUDA out of memory
        // is a dlib::cuda_error), so Internal.
        _ => Error::internal(message),
    })
}

/// Loads one object from a weights file; any failure is Unavailable (the
/// model's files are wrong, not a request).
fn load<T>(
    path: &Path,
    f: impl FnOnce(*const c_char, *mut *mut T, *mut c_char, usize) -> c_int,
) -> Result<NonNull<T>> {
    let shown = path.display();
    let c_path = CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| Error::unavailable(format!("dlib: path {shown} contains NUL")))?;
    let mut out = ptr::null_mut();
    call("load", |err, len| f(c_path.as_ptr(), &mut out, err, len))
        .map_err(|e| Error::unavailable(format!("cannot load {shown}: {e}")))?;
    NonNull::new(out).ok_or_else(|| Error::internal(format!("dlib load of {shown} gave null")))
}

/// A face detector: dlib's HOG or MMOD CNN.
pub struct Detector(NonNull<sys::tf_detector>);

impl Detector {
    pub fn hog() -> Result<Self> {
        let mut out = ptr::null_mut();
        // SAFETY: `out` is a valid out-pointer; `err` holds `len` bytes.
        call("HOG detector", |err, len| unsafe {
            sys::tf_hog_new(&mut out, err, len)
        })?;
        NonNull::new(out)
            .map(Detector)
            .ok_or_else(|| Error::internal("dlib HOG detector is null"))
    }

    pub fn cnn(path: &Path) -> Result<Self> {
        // SAFETY: a NUL-terminated path, a valid out-pointer, `len` bytes of `err`.
        load(path, |p, out, err, len| unsafe {
            sys::tf_cnn_load(p, out, err, len)
        })
        .map(Detector)
    }

    /// Faces in `image` after doubling it `upsample` times, or else
    /// resizing it by `scale` (HOG only); boxes in the original image. How
    /// many dlib found, and the first `capacity` boxes.
    pub fn detect(
        &mut self,
        image: &Image,
        upsample: u32,
        scale: f64,
        capacity: usize,
    ) -> Result<(Vec<Rect>, usize)> {
        let mut rects = vec![Rect::default(); capacity];
        let mut found = 0usize;
        call("detector", |err, len| {
            // SAFETY: both objects are live and ours (`&mut self`: the CNN
            // mutates its buffers); `rects` holds `capacity` elements.
            unsafe {
                sys::tf_detect(
                    self.0.as_ptr(),
                    image.0.as_ptr(),
                    upsample,
                    scale,
                    rects.as_mut_ptr(),
                    capacity,
                    &mut found,
                    err,
                    len,
                )
            }
        })?;
        rects.truncate(found.min(capacity));
        Ok((rects, found))
    }
}

impl Drop for Detector {
    fn drop(&mut self) {
        // SAFETY: created by the shim, freed once, here.
        unsafe { sys::tf_detector_free(self.0.as_ptr()) }
    }
}

/// dlib's 5-point shape predictor.
pub struct Predictor(NonNull<sys::tf_predictor>);

impl Predictor {
    pub fn load(path: &Path) -> Result<Self> {
        // SAFETY: a NUL-terminated path, a valid out-pointer, `len` bytes of `err`.
        load(path, |p, out, err, len| unsafe {
            sys::tf_predictor_load(p, out, err, len)
        })
        .map(Predictor)
    }

    pub fn landmarks(&self, image: &Image, rect: &Rect) -> Result<Shape> {
        let mut shape = Shape::default();
        call("landmarks", |err, len| {
            // SAFETY: live objects; the predictor is only read (const in C++).
            unsafe {
                sys::tf_landmarks(
                    self.0.as_ptr(),
                    image.0.as_ptr(),
                    rect,
                    &mut shape,
                    err,
                    len,
                )
            }
        })?;
        Ok(shape)
    }
}

impl Drop for Predictor {
    fn drop(&mut self) {
        // SAFETY: created by the shim, freed once, here.
        unsafe { sys::tf_predictor_free(self.0.as_ptr()) }
    }
}

/// dlib's ResNet face encoder (128-d descriptors).
pub struct Encoder(NonNull<sys::tf_encoder>);

impl Encoder {
    pub fn load(path: &Path) -> Result<Self> {
        // SAFETY: a NUL-terminated path, a valid out-pointer, `len` bytes of `err`.
        load(path, |p, out, err, len| unsafe {
            sys::tf_encoder_load(p, out, err, len)
        })
        .map(Encoder)
    }

    /// The network as dlib's `net_to_xml` writes it (layers and weights),
    /// for converting it to ONNX (scripts/dlib_onnx.py).
    pub fn write_xml(&self, path: &Path) -> Result<()> {
        let c_path = CString::new(path.as_os_str().as_encoded_bytes())
            .map_err(|_| Error::invalid(format!("path {} contains NUL", path.display())))?;
        // SAFETY: a live encoder, only read; a NUL-terminated path.
        call("xml", |err, len| unsafe {
            sys::tf_encoder_xml(self.0.as_ptr(), c_path.as_ptr(), err, len)
        })
    }

    /// One descriptor per shape, computed in one network call.
    pub fn encode(&mut self, image: &Image, shapes: &[Shape]) -> Result<Vec<Vec<f32>>> {
        let mut out = vec![0f32; shapes.len() * DESCRIPTOR_LEN];
        call("encoder", |err, len| {
            // SAFETY: live objects (`&mut self`: the network mutates its
            // buffers); `out` holds shapes.len() * DESCRIPTOR_LEN floats.
            unsafe {
                sys::tf_encode(
                    self.0.as_ptr(),
                    image.0.as_ptr(),
                    shapes.as_ptr(),
                    shapes.len(),
                    out.as_mut_ptr(),
                    err,
                    len,
                )
            }
        })?;
        Ok(out.chunks(DESCRIPTOR_LEN).map(<[f32]>::to_vec).collect())
    }
}

/// The aligned chips `Encoder::encode` feeds the network, one per shape:
/// `CHIP_SIDE` square, RGB.
pub fn chips(image: &Image, shapes: &[Shape]) -> Result<Vec<Vec<u8>>> {
    let bytes = CHIP_SIDE * CHIP_SIDE * 3;
    let mut out = vec![0u8; shapes.len() * bytes];
    call("chips", |err, len| {
        // SAFETY: a live image, only read; `out` holds shapes.len() chips.
        unsafe {
            sys::tf_chips(
                image.0.as_ptr(),
                shapes.as_ptr(),
                shapes.len(),
                out.as_mut_ptr(),
                err,
                len,
            )
        }
    })?;
    Ok(out.chunks(bytes.max(1)).map(<[u8]>::to_vec).collect())
}

impl Drop for Encoder {
    fn drop(&mut self) {
        // SAFETY: created by the shim, freed once, here.
        unsafe { sys::tf_encoder_free(self.0.as_ptr()) }
    }
}

/// An RGB image copied into dlib's matrix.
pub struct Image(NonNull<sys::tf_image>);

impl Image {
    pub fn new(rgb: &[u8], width: usize, height: usize) -> Result<Self> {
        if width.checked_mul(height).and_then(|n| n.checked_mul(3)) != Some(rgb.len()) {
            return Err(Error::internal("frame buffer does not match its size"));
        }
        let mut out = ptr::null_mut();
        call("image", |err, len| {
            // SAFETY: `rgb` holds width * height * 3 bytes (checked above).
            unsafe { sys::tf_image_new(rgb.as_ptr(), width, height, &mut out, err, len) }
        })?;
        NonNull::new(out)
            .map(Image)
            .ok_or_else(|| Error::internal("dlib image is null"))
    }
}

impl Drop for Image {
    fn drop(&mut self) {
        // SAFETY: created by the shim, freed once, here.
        unsafe { sys::tf_image_free(self.0.as_ptr()) }
    }
}

/// dlib's correlation tracker following one box from image to image.
pub struct Tracker(NonNull<sys::tf_tracker>);

/// A box in sub-pixel units.
pub type DRect = sys::tf_drect;

impl Tracker {
    pub fn start(image: &Image, rect: &DRect) -> Result<Self> {
        let mut out = ptr::null_mut();
        call("tracker", |err, len| {
            // SAFETY: a live image, a valid rect and out-pointer, `len` bytes of `err`.
            unsafe { sys::tf_tracker_start(image.0.as_ptr(), rect, &mut out, err, len) }
        })?;
        NonNull::new(out)
            .map(Tracker)
            .ok_or_else(|| Error::internal("dlib tracker is null"))
    }

    /// The box in `image` and the correlation's peak-to-sidelobe ratio.
    pub fn update(&mut self, image: &Image) -> Result<(DRect, f64)> {
        let (mut rect, mut confidence) = (DRect::default(), 0.0);
        call("tracker", |err, len| {
            // SAFETY: live objects, valid out-pointers; `&mut self` makes the
            // update exclusive.
            unsafe {
                sys::tf_tracker_update(
                    self.0.as_ptr(),
                    image.0.as_ptr(),
                    &mut rect,
                    &mut confidence,
                    err,
                    len,
                )
            }
        })?;
        Ok((rect, confidence))
    }
}

impl Drop for Tracker {
    fn drop(&mut self) {
        // SAFETY: created by the shim, freed once, here.
        unsafe { sys::tf_tracker_free(self.0.as_ptr()) }
    }
}

// SAFETY: each owns its C++ object alone (no copies, no shared state in the
// shim), and dlib's CPU objects have no thread affinity, so they may move
// between threads; they are not Sync, and mutation needs `&mut`.
unsafe impl Send for Detector {}
// SAFETY: as for Detector.
unsafe impl Send for Predictor {}
// SAFETY: as for Detector.
unsafe impl Send for Encoder {}
// SAFETY: as for Detector.
unsafe impl Send for Tracker {}
// SAFETY: as for Detector (an image is only read once made).
unsafe impl Send for Image {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    fn weights(file: &str) -> std::path::PathBuf {
        super::super::tests::assets(&format!("dlib/{file}"))
    }

    fn grey(width: usize, height: usize) -> Image {
        Image::new(&vec![128; width * height * 3], width, height).unwrap()
    }

    #[test]
    fn cnn_refuses_what_dlib_cannot_take_and_runs_the_rest() {
        let mut cnn = Detector::cnn(&weights("mmod_human_face_detector.dat")).unwrap();
        // Twice: dlib aborts on its second fatal_error; none may reach it.
        for _ in 0..2 {
            for (w, h) in [(1, 1), (10, 6), (9, 4000), (9, 40), (2, 2), (64, 5)] {
                let e = cnn.detect(&grey(w, h), 0, 1.0, 4).unwrap_err();
                assert_eq!(e.kind(), ErrorKind::InvalidInput, "{w}x{h}: {e}");
                assert!(e.message().contains(&format!("{w}x{h}")), "{e}");
            }
        }
        for (w, h) in [(10, 7), (4000, 9), (11, 300)] {
            let (rects, found) = cnn.detect(&grey(w, h), 0, 1.0, 4).unwrap();
            assert!(rects.is_empty() && found == 0, "{w}x{h}");
        }
    }

    #[test]
    fn hog_takes_tiny_images() {
        let mut hog = Detector::hog().unwrap();
        for (w, h) in [(1, 1), (10, 6), (9, 4000)] {
            assert_eq!(hog.detect(&grey(w, h), 0, 1.0, 4).unwrap().1, 0, "{w}x{h}");
        }
    }

    #[test]
    fn bad_weights_are_unavailable_and_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let garbage = dir.path().join("garbage.dat");
        std::fs::write(&garbage, b"not dlib").unwrap();
        let wrong_net = weights("mmod_human_face_detector.dat");
        let errors = [
            Predictor::load(&garbage).err(),
            Encoder::load(&wrong_net).err(),
            Detector::cnn(&dir.path().join("missing.dat")).err(),
            // A 68-point predictor would be refused too; the CNN file is no predictor at all.
            Predictor::load(&wrong_net).err(),
        ];
        for e in errors {
            let e = e.expect("loading bad weights must fail");
            assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
            assert!(e.message().contains(".dat"), "{e}");
        }
    }

    #[test]
    fn image_must_match_its_size() {
        let e = Image::new(&[0; 11], 2, 2).err().unwrap();
        assert_eq!(e.kind(), ErrorKind::Internal);
        assert!(Image::new(&[], 0, 0).is_ok());
    }
}
