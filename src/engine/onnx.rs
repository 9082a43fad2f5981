//! Pure-Rust ONNX engine (tract): a bring-your-own detector, optional
//! landmark model and embedder. OpenCV does the image work (resize, crop,
//! alignment warp). Matching is by cosine: `distance = 1 - cosine`.
//!
//! Detector family understood: UltraFace / RFB ("ultraface"): one input
//! 1x3xHxW, outputs scores [1,N,2] and boxes [1,N,4] (corner form, 0..1).
//! It gives no landmarks, so a 68-point `landmark_model` (grey 64x64 crop of
//! the box, /256, output 136 values relative to the box) provides them.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use opencv::core::{Mat, Scalar, Size, BORDER_CONSTANT};
use opencv::imgproc;
use opencv::prelude::*;
use tract_onnx::prelude::*;

use super::fpu::FlushDenormals;
use super::onnxruntime::{library_path, OrtNet};
use super::Engine;
use crate::error::{Error, Result};
use crate::pipeline::align::{five_from_68, similarity, ARCFACE_112};
use crate::pipeline::{BoxPx, Face, Frame, Metric};

/// How to turn 8-bit pixels into a network input: channel order, then
/// `(value - mean) * scale`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Normalize {
    pub rgb: bool,
    pub mean: f32,
    pub scale: f32,
}

#[derive(Clone, Debug, PartialEq)]
pub struct OnnxSettings {
    pub detector_model: PathBuf,
    pub landmark_model: Option<PathBuf>,
    pub embedder_model: PathBuf,
    /// Detector input (width, height) for models whose size is free; `None`:
    /// the model's own fixed size.
    pub detector_size: Option<(usize, usize)>,
    pub detector_norm: Normalize,
    pub score_threshold: f32,
    pub nms_iou: f32,
    pub embedder_norm: Normalize,
    /// Flush denormals to zero on the thread while the models run (fpu.rs).
    pub flush_denormals: bool,
    pub runtime: Runtime,
    /// `None`: ORT_DYLIB_PATH (see onnxruntime.rs).
    pub onnxruntime_library: Option<PathBuf>,
    pub intra_op_threads: usize,
}

/// What runs the models.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Runtime {
    /// onnxruntime through `ort`, the library loaded at run time.
    OnnxRuntime,
    /// tract: pure Rust, no native library.
    Tract,
}

impl Runtime {
    pub fn name(self) -> &'static str {
        match self {
            Runtime::OnnxRuntime => "onnxruntime",
            Runtime::Tract => "tract",
        }
    }
}

impl OnnxSettings {
    /// Defaults that fit UltraFace RFB-320 and ArcFace-style embedders.
    pub fn defaults(dir: &Path) -> Self {
        OnnxSettings {
            detector_model: dir.join("detector.onnx"),
            landmark_model: None,
            embedder_model: dir.join("embedder.onnx"),
            detector_size: None,
            detector_norm: Normalize {
                rgb: true,
                mean: 127.0,
                scale: 1.0 / 128.0,
            },
            score_threshold: 0.7,
            nms_iou: 0.3,
            embedder_norm: Normalize {
                rgb: false,
                mean: 127.0,
                scale: 1.0 / 128.0,
            },
            flush_denormals: true,
            runtime: Runtime::OnnxRuntime,
            onnxruntime_library: None,
            intra_op_threads: 1,
        }
    }
}

type Plan = Arc<TypedRunnableModel>;

/// A loaded model in the runtime that runs it.
enum Runner {
    Tract(Plan),
    Ort(OrtNet),
}

struct Net {
    runner: Runner,
    /// Input shape, batch first; `batch_free` when the batch dim is symbolic.
    shape: Vec<usize>,
    batch_free: bool,
}

/// The model file a parameter names; a missing one fails the load naming the
/// parameter and the path (relative values are in the version folder).
fn model_file<'a>(key: &str, path: &'a Path) -> Result<&'a Path> {
    if path.is_file() {
        Ok(path)
    } else {
        Err(Error::unavailable(format!(
            "model parameter `{key}`: file {} not found (relative paths are resolved against \
             the model's version folder)",
            path.display()
        )))
    }
}

/// Load, type, optimize and plan a model once. `size` fixes the input's
/// height and width (for models whose spatial dims are free).
fn load_net(
    what: &str,
    path: &Path,
    size: Option<(usize, usize)>,
    runtime: &RuntimeChoice,
) -> Result<Net> {
    let fail = |e: TractError| {
        Error::unavailable(format!(
            "{what} {}: not a loadable ONNX model: {e:#}",
            path.display()
        ))
    };
    let mut model = tract_onnx::onnx().model_for_path(path).map_err(fail)?;
    if let Some((w, h)) = size {
        let fact = InferenceFact::dt_shape(f32::datum_type(), tvec![1, 3, h, w]);
        model.set_input_fact(0, fact).map_err(fail)?;
    }
    let typed = model.into_typed().map_err(fail)?;
    let fact = typed.input_fact(0).map_err(fail)?.clone();
    let dims: Vec<Option<usize>> = fact
        .shape
        .iter()
        .map(|d| d.to_i64().ok().map(|v| v as usize))
        .collect();
    if dims.len() != 4 || dims[1..].iter().any(Option::is_none) {
        return Err(Error::unavailable(format!(
            "{what} {}: expected one NCHW input with fixed C, H, W; got {:?}",
            path.display(),
            fact.shape
        )));
    }
    let batch_free = dims[0].is_none();
    let shape: Vec<usize> = dims.iter().map(|d| d.unwrap_or(1)).collect();
    let runner = match runtime {
        RuntimeChoice::Tract => Runner::Tract(
            typed
                .into_optimized()
                .map_err(fail)?
                .into_runnable()
                .map_err(fail)?,
        ),
        RuntimeChoice::Ort { library, threads } => {
            let bytes = std::fs::read(path)
                .map_err(|e| Error::unavailable(format!("{what} {}: {e}", path.display())))?;
            Runner::Ort(OrtNet::load(what, &bytes, library, *threads)?)
        }
    };
    Ok(Net {
        runner,
        shape,
        batch_free,
    })
}

/// The runtime a model is loaded into, resolved (library found) once.
enum RuntimeChoice {
    Tract,
    Ort { library: PathBuf, threads: usize },
}

impl RuntimeChoice {
    fn of(settings: &OnnxSettings) -> Result<Self> {
        Ok(match settings.runtime {
            Runtime::Tract => RuntimeChoice::Tract,
            Runtime::OnnxRuntime => RuntimeChoice::Ort {
                library: library_path(settings.onnxruntime_library.as_deref())?,
                threads: settings.intra_op_threads,
            },
        })
    }
}

impl Net {
    fn run(&self, input: Tensor) -> Result<TVec<TValue>> {
        match &self.runner {
            Runner::Tract(plan) => plan
                .run(tvec!(input.into_tvalue()))
                .map_err(|e| Error::internal(format!("ONNX inference failed: {e:#}"))),
            Runner::Ort(net) => net.run(input),
        }
    }
}

/// Run one model on one raw f32 input (as the engine loads it: typed,
/// optimized, planned): every output's shape and values. For tools and the
/// parity test against onnxruntime.
pub fn run_model(
    path: &Path,
    input: &[f32],
    shape: &[usize],
) -> Result<Vec<(Vec<usize>, Vec<f32>)>> {
    let net = load_net("model", path, None, &RuntimeChoice::Tract)?;
    let tensor = Tensor::from_shape(shape, input).map_err(|e| Error::invalid(e.to_string()))?;
    let outputs = net.run(tensor)?;
    (0..outputs.len())
        .map(|i| {
            let v = view(&outputs, i)?;
            Ok((v.shape().to_vec(), v.iter().copied().collect()))
        })
        .collect()
}

fn view<'a>(outputs: &'a TVec<TValue>, index: usize) -> Result<tract_ndarray::ArrayViewD<'a, f32>> {
    outputs
        .get(index)
        .ok_or_else(|| Error::internal(format!("model has no output {index}")))?
        .to_plain_array_view::<f32>()
        .map_err(|e| Error::internal(format!("output {index} is not f32: {e}")))
}

pub struct OnnxEngine {
    settings: OnnxSettings,
    detector: Net,
    landmarks: Option<Net>,
    embedder: Net,
    embedding_len: usize,
}

// tract plans are plain Rust data: the compiler proves the engine can move
// to an instance's thread (`Engine: Send`), no `unsafe impl` needed.
const _: fn() = || {
    fn must_be_send<T: Send>() {}
    must_be_send::<OnnxEngine>();
};

impl OnnxEngine {
    pub fn load(settings: &OnnxSettings) -> Result<Self> {
        let runtime = RuntimeChoice::of(settings)?;
        let detector = load_net(
            "detector_model",
            model_file("detector_model", &settings.detector_model)?,
            settings.detector_size,
            &runtime,
        )?;
        let landmarks = match &settings.landmark_model {
            Some(p) => Some(load_net(
                "landmark_model",
                model_file("landmark_model", p)?,
                None,
                &runtime,
            )?),
            None => return Err(Error::invalid(
                "the ultraface detector gives no landmarks: set the `landmark_model` parameter \
                     (a 68-point model) so faces can be aligned",
            )),
        };
        let embedder = load_net(
            "embedder_model",
            model_file("embedder_model", &settings.embedder_model)?,
            None,
            &runtime,
        )?;
        // One dry run tells the embedding length.
        let probe =
            Tensor::zero::<f32>(&[1, embedder.shape[1], embedder.shape[2], embedder.shape[3]])
                .map_err(|e| Error::internal(e.to_string()))?;
        let out = embedder.run(probe)?;
        let embedding_len = view(&out, 0)?.len();
        Ok(OnnxEngine {
            settings: settings.clone(),
            detector,
            landmarks,
            embedder,
            embedding_len,
        })
    }

    fn detect(&self, frame: &Frame, image: &Mat) -> Result<Vec<(BoxPx, f32)>> {
        let (w, h) = self
            .settings
            .detector_size
            .unwrap_or((self.detector.shape[3], self.detector.shape[2]));
        let input = to_tensor(&[resize(image, w, h)?], self.settings.detector_norm)?;
        let out = self.detector.run(input)?;
        let (scores, boxes) = (view(&out, 0)?, view(&out, 1)?);
        let n = scores.len() / 2;
        if boxes.len() != n * 4 {
            return Err(Error::internal(
                "detector outputs do not match (scores [1,N,2], boxes [1,N,4])",
            ));
        }
        let scores = scores
            .as_slice()
            .map(<[f32]>::to_vec)
            .unwrap_or_else(|| scores.iter().copied().collect());
        let boxes: Vec<f32> = boxes.iter().copied().collect();
        let (fw, fh) = (frame.width as f32, frame.height as f32);
        let mut found: Vec<(BoxPx, f32)> = (0..n)
            .filter(|&i| scores[2 * i + 1] >= self.settings.score_threshold)
            .map(|i| {
                let b = &boxes[4 * i..4 * i + 4];
                (
                    BoxPx {
                        left: b[0] * fw,
                        top: b[1] * fh,
                        right: b[2] * fw,
                        bottom: b[3] * fh,
                    },
                    scores[2 * i + 1],
                )
            })
            .collect();
        found.sort_by(|a, b| b.1.total_cmp(&a.1));
        Ok(nms(found, self.settings.nms_iou))
    }

    /// 68 points for a box, from the landmark model (grey 64x64 crop, /256).
    fn landmarks(&self, net: &Net, grey: &Mat, b: &BoxPx) -> Result<[[f32; 2]; 5]> {
        let (iw, ih) = (grey.cols() as f32, grey.rows() as f32);
        let left = b.left.clamp(0.0, iw - 1.0);
        let top = b.top.clamp(0.0, ih - 1.0);
        let right = b.right.clamp(left + 1.0, iw);
        let bottom = b.bottom.clamp(top + 1.0, ih);
        let rect = opencv::core::Rect::new(
            left as i32,
            top as i32,
            (right - left) as i32,
            (bottom - top) as i32,
        );
        let crop = Mat::roi(grey, rect)?;
        let (w, h) = (net.shape[3], net.shape[2]);
        let mut small = Mat::default();
        imgproc::resize(
            &crop,
            &mut small,
            Size::new(w as i32, h as i32),
            0.0,
            0.0,
            imgproc::INTER_LINEAR,
        )?;
        let data: Vec<f32> = small
            .data_bytes()?
            .iter()
            .map(|v| *v as f32 / 256.0)
            .collect();
        let input =
            Tensor::from_shape(&[1, 1, h, w], &data).map_err(|e| Error::internal(e.to_string()))?;
        let out = net.run(input)?;
        let values: Vec<f32> = view(&out, 0)?.iter().copied().collect();
        if values.len() != 136 {
            return Err(Error::internal(format!(
                "landmark model gave {} values, expected 136 (68 points)",
                values.len()
            )));
        }
        let (bw, bh) = (rect.width as f32, rect.height as f32);
        let points: Vec<[f32; 2]> = values
            .chunks_exact(2)
            .map(|p| [p[0] * bw + rect.x as f32, p[1] * bh + rect.y as f32])
            .collect();
        five_from_68(&points)
    }

    /// The aligned chip (embedder input size) of one face.
    fn align(&self, image: &Mat, five: &[[f32; 2]; 5]) -> Result<Mat> {
        let (w, h) = (self.embedder.shape[3], self.embedder.shape[2]);
        // Reference points are for 112x112; scale them to the embedder's size.
        let (sx, sy) = (w as f32 / 112.0, h as f32 / 112.0);
        let reference: Vec<[f32; 2]> = ARCFACE_112.iter().map(|p| [p[0] * sx, p[1] * sy]).collect();
        let m = similarity(five, &reference)?;
        let matrix = Mat::from_slice_2d(&[m[0].to_vec(), m[1].to_vec()])?;
        let mut chip = Mat::default();
        imgproc::warp_affine(
            image,
            &mut chip,
            &matrix,
            Size::new(w as i32, h as i32),
            imgproc::INTER_LINEAR,
            BORDER_CONSTANT,
            Scalar::default(),
        )?;
        Ok(chip)
    }

    fn embed(&self, chips: &[Mat]) -> Result<Vec<Vec<f32>>> {
        let norm = self.settings.embedder_norm;
        let run = |batch: &[Mat]| -> Result<Vec<Vec<f32>>> {
            let out = self.embedder.run(to_tensor(batch, norm)?)?;
            let flat: Vec<f32> = view(&out, 0)?.iter().copied().collect();
            if flat.len() != batch.len() * self.embedding_len {
                return Err(Error::internal(
                    "embedder output size does not match its batch",
                ));
            }
            Ok(flat
                .chunks_exact(self.embedding_len)
                .map(l2_normalize)
                .collect())
        };
        if self.embedder.batch_free {
            run(chips)
        } else {
            chips
                .chunks(1)
                .map(run)
                .collect::<Result<Vec<_>>>()
                .map(|v| v.concat())
        }
    }

    fn analyze_one(&mut self, frame: &Frame, max_faces: usize) -> Result<Vec<Face>> {
        let image = frame_mat(frame)?;
        let found = self.detect(frame, &image)?;
        if found.len() > max_faces {
            return Err(Error::invalid(format!(
                "found {} faces, more than max_faces_per_image = {max_faces}",
                found.len()
            )));
        }
        if found.is_empty() {
            return Ok(Vec::new());
        }
        let mut grey = Mat::default();
        imgproc::cvt_color(&image, &mut grey, imgproc::COLOR_RGB2GRAY, 0)?;
        let net = self.landmarks.as_ref().expect("checked at load");
        let mut faces = Vec::with_capacity(found.len());
        let mut chips = Vec::with_capacity(found.len());
        for (bbox, score) in found {
            let five = self.landmarks(net, &grey, &bbox)?;
            chips.push(self.align(&image, &five)?);
            faces.push(Face {
                bbox,
                score: Some(score),
                landmarks: five,
                embedding: Vec::new(),
            });
        }
        for (face, embedding) in faces.iter_mut().zip(self.embed(&chips)?) {
            face.embedding = embedding;
        }
        Ok(faces)
    }
}

impl Engine for OnnxEngine {
    fn name(&self) -> &str {
        "onnx"
    }
    fn metric(&self) -> Metric {
        Metric::Cosine
    }
    fn describe(&self) -> String {
        let name = |p: &Path| {
            p.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        };
        format!(
            "onnx ({}; ultraface detector {} {}x{}, landmarks {}, embedder {} {}-d, {})",
            self.settings.runtime.name(),
            name(&self.settings.detector_model),
            self.detector.shape[3],
            self.detector.shape[2],
            self.settings
                .landmark_model
                .as_deref()
                .map(name)
                .unwrap_or_default(),
            name(&self.settings.embedder_model),
            self.embedding_len,
            if self.embedder.batch_free {
                "faces batched"
            } else {
                "one face per run"
            }
        )
    }
    fn embedding_len(&self) -> usize {
        self.embedding_len
    }
    fn analyze(&mut self, frames: &[&Frame], max_faces: usize) -> Vec<Result<Vec<Face>>> {
        let _flush = FlushDenormals::new(self.settings.flush_denormals);
        frames
            .iter()
            .map(|f| self.analyze_one(f, max_faces))
            .collect()
    }
}

/// The frame as an OpenCV RGB image (a copy: OpenCV wants its own buffer).
fn frame_mat(frame: &Frame) -> Result<Mat> {
    let flat =
        Mat::new_rows_cols_with_data(frame.height as i32, frame.width as i32 * 3, &frame.rgb)?;
    Ok(flat.reshape(3, frame.height as i32)?.try_clone()?)
}

fn resize(image: &Mat, w: usize, h: usize) -> Result<Mat> {
    let mut out = Mat::default();
    imgproc::resize(
        image,
        &mut out,
        Size::new(w as i32, h as i32),
        0.0,
        0.0,
        imgproc::INTER_LINEAR,
    )?;
    Ok(out)
}

/// RGB images of one size into an NCHW f32 tensor.
fn to_tensor(images: &[Mat], norm: Normalize) -> Result<Tensor> {
    let (w, h) = (images[0].cols() as usize, images[0].rows() as usize);
    let plane = w * h;
    let mut data = vec![0f32; images.len() * 3 * plane];
    for (n, img) in images.iter().enumerate() {
        let px = img.data_bytes()?;
        let base = n * 3 * plane;
        for i in 0..plane {
            for c in 0..3 {
                let src = if norm.rgb { c } else { 2 - c };
                data[base + c * plane + i] = (px[3 * i + src] as f32 - norm.mean) * norm.scale;
            }
        }
    }
    Tensor::from_shape(&[images.len(), 3, h, w], &data).map_err(|e| Error::internal(e.to_string()))
}

fn l2_normalize(v: &[f32]) -> Vec<f32> {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        v.iter().map(|x| x / norm).collect()
    } else {
        v.to_vec()
    }
}

fn iou(a: &BoxPx, b: &BoxPx) -> f32 {
    let w = (a.right.min(b.right) - a.left.max(b.left)).max(0.0);
    let h = (a.bottom.min(b.bottom) - a.top.max(b.top)).max(0.0);
    let inter = w * h;
    let area = |r: &BoxPx| (r.right - r.left).max(0.0) * (r.bottom - r.top).max(0.0);
    let union = area(a) + area(b) - inter;
    if union > 0.0 {
        inter / union
    } else {
        0.0
    }
}

/// Greedy non-maximum suppression over boxes sorted by descending score.
pub fn nms(sorted: Vec<(BoxPx, f32)>, max_iou: f32) -> Vec<(BoxPx, f32)> {
    let mut kept: Vec<(BoxPx, f32)> = Vec::new();
    for candidate in sorted {
        if kept.iter().all(|k| iou(&k.0, &candidate.0) <= max_iou) {
            kept.push(candidate);
        }
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(l: f32, t: f32, r: f32, bo: f32) -> BoxPx {
        BoxPx {
            left: l,
            top: t,
            right: r,
            bottom: bo,
        }
    }

    #[test]
    fn nms_keeps_the_best_of_overlapping_boxes() {
        let boxes = vec![
            (b(0.0, 0.0, 10.0, 10.0), 0.9),
            (b(1.0, 1.0, 11.0, 11.0), 0.8),
            (b(20.0, 20.0, 30.0, 30.0), 0.7),
        ];
        let kept = nms(boxes, 0.3);
        assert_eq!(kept.len(), 2);
        assert_eq!(kept[0].1, 0.9);
        assert_eq!(kept[1].1, 0.7);
        assert_eq!(iou(&b(0.0, 0.0, 1.0, 1.0), &b(5.0, 5.0, 6.0, 6.0)), 0.0);
    }

    #[test]
    fn l2_normalized() {
        let v = l2_normalize(&[3.0, 4.0]);
        assert!((v[0] - 0.6).abs() < 1e-6 && (v[1] - 0.8).abs() < 1e-6);
        assert_eq!(l2_normalize(&[0.0, 0.0]), vec![0.0, 0.0]);
    }
}
