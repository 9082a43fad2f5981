//! Convolutions of one group as matrix products on `gemm.rs`, channels
//! first: a 1x1 convolution (stride 1, no padding) straight on the image,
//! whose rows are already the input channels; any other through an im2col
//! copy (one row per input channel and tap) when that copy fits the L2
//! cache. These are nearly all of the sample models' work; tract runs them
//! on its own matrix product after repacking the image on every run.

use std::cell::RefCell;

use tract_onnx::prelude::*;
use tract_onnx::tract_core::internal::*;
use tract_onnx::tract_core::ops::cnn::{Conv, KernelFormat};
use tract_onnx::tract_core::ops::nn::DataFormat;

use super::gemm::{self, Gemm};
use super::window::{channel_axis, check_rank, ConvInputs, Window};
use super::Then;

/// Fewer output pixels than this per image leave most of a 16-pixel tile
/// empty: tract's matrix-vector kernels do better there.
const MIN_PIXELS: usize = 8;

/// Largest im2col matrix (values): one that outgrows the L2 cache costs more
/// to write and read back than the product saves (measured: the sample
/// detector's first layer, 2 MiB, ran at 1.2 ms against tract's 0.8).
const MAX_COLUMNS: usize = 128 * 1024;

/// Stands in for a `Conv` of one group: inputs data `[(N,) C, H, W]`, kernel
/// `[M, C, kh, kw]`, bias (`M` values, or one for all), and with
/// `Then::Prelu` the slopes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct GemmConv {
    /// The activation folded into the output pass (mod.rs fuses it).
    pub then: Then,
    format: DataFormat,
    /// `None`: 1x1, stride 1, no padding (the image is the matrix).
    pub window: Option<Window>,
}

/// Our im2col only on convolutions of the image itself: there it beats
/// tract's path 2.5-3.8x; on the detector's 3x3 convolutions of many
/// channels tract's is as fast (1.0x), so those stay tract's
/// (examples/tract_kernels.rs, docs/engines.md).
const IM2COL_MAX_CHANNELS: usize = 4;

impl GemmConv {
    /// The op for `conv` on data of shape `input`, when it is a float 1x1
    /// convolution (stride 1, no padding) this kernel covers on this CPU;
    /// `None` otherwise.
    pub fn pointwise(conv: &Conv, input: &TypedFact) -> Option<GemmConv> {
        let (window, _) = GemmConv::covered(conv, input)?;
        let direct = window.taps() == 1
            && window.stride == [1, 1]
            && window.pad_before == [0, 0]
            && window.pad_after == [0, 0];
        direct.then_some(GemmConv {
            then: Then::Nothing,
            format: conv.pool_spec.data_format,
            window: None,
        })
    }

    /// The op for `conv` on data of shape `input`, when it is a float
    /// convolution of one group with explicit padding this kernel covers on
    /// this CPU, through an im2col matrix that stays in the L2 cache; `None`
    /// otherwise.
    pub fn im2col(conv: &Conv, input: &TypedFact) -> Option<GemmConv> {
        let (window, pixels) = GemmConv::covered(conv, input)?;
        let channels = conv.pool_spec.input_channels;
        let columns = channels * window.taps() * pixels;
        (columns <= MAX_COLUMNS && channels <= IM2COL_MAX_CHANNELS).then_some(GemmConv {
            then: Then::Nothing,
            format: conv.pool_spec.data_format,
            window: Some(window),
        })
    }

    /// The window and output pixels of `conv` on `input` when it is a float
    /// 2-D convolution of one group, with explicit padding and enough
    /// output pixels, on a CPU that runs `gemm.rs`.
    fn covered(conv: &Conv, input: &TypedFact) -> Option<(Window, usize)> {
        let spec = &conv.pool_spec;
        let plain = gemm::available()
            && conv.q_params.is_none()
            && conv.kernel_fmt == KernelFormat::OIHW
            && input.datum_type == f32::datum_type()
            && matches!(spec.data_format, DataFormat::NCHW | DataFormat::CHW)
            && spec.kernel_shape.len() == 2
            && conv.group == 1;
        if !plain {
            return None;
        }
        let window = Window::of(spec, input)?;
        let shape = spec.data_format.shape(input.shape.to_tvec()).ok()?;
        let [h, w] = [0, 1].map(|i| shape.hw_dims()[i].to_usize().unwrap_or(0));
        let [ho, wo] = window.output_hw(h, w).ok()?;
        (ho * wo >= MIN_PIXELS).then_some((window, ho * wo))
    }

    /// The same convolution with `then` folded into its output pass.
    pub fn then(self, then: Then) -> Self {
        GemmConv { then, ..self }
    }

    /// The channel axis of the data (and of the output).
    pub fn channel_axis(&self) -> usize {
        channel_axis(self.format)
    }

    /// Output channels of a kernel of shape `[M, C, kh, kw]` for data of `c`
    /// channels.
    fn output_channels(&self, kernel: &[usize], c: usize) -> TractResult<usize> {
        let [kh, kw] = self.window.map_or([1, 1], |w| w.kernel);
        ensure!(
            kernel == [kernel[0], c, kh, kw],
            "convolution kernel {kernel:?} does not fit {c} channels and a {kh}x{kw} window"
        );
        Ok(kernel[0])
    }

    /// Output height and width for an input of `h` x `w`.
    fn output_hw(&self, h: usize, w: usize) -> TractResult<[usize; 2]> {
        self.window.map_or(Ok([h, w]), |win| win.output_hw(h, w))
    }
}

impl Op for GemmConv {
    fn name(&self) -> StaticName {
        match self.window {
            None => "FaceGemmConv1x1".into(),
            Some(_) => "FaceGemmConvIm2col".into(),
        }
    }

    fn info(&self) -> TractResult<Vec<String>> {
        Ok(vec![match &self.window {
            Some(w) => format!("im2col {w:?}"),
            None => "1x1".into(),
        }])
    }

    fn validation(&self) -> Validation {
        Validation::Rounding
    }

    op_as_typed_op!();
}

thread_local! {
    /// The im2col matrix, kept from run to run on the thread (at most
    /// `MAX_COLUMNS` values): a fresh one would be allocated every run.
    static COLUMNS: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

impl EvalOp for GemmConv {
    op_out_of_plan!();

    fn eval(&self, _ctx: &EvalContext, inputs: TVec<TValue>) -> TractResult<TVec<TValue>> {
        let inputs = ConvInputs::take(self.then, inputs, "convolution")?;
        let data = &inputs.data;
        check_rank(self.format, data.rank(), "convolution")?;
        let shape = self.format.shape(data.shape().to_vec())?;
        let (c, [h, w]) = (*shape.c(), [shape.hw_dims()[0], shape.hw_dims()[1]]);
        let m = self.output_channels(inputs.kernel_shape(), c)?;
        let [ho, wo] = self.output_hw(h, w)?;
        ensure!(m * c * h * w * ho * wo > 0, "convolution on empty data");
        let weights = inputs.weights(m, "convolution")?;
        let k = weights.kernel.len() / m;
        let gemm = Gemm {
            weights,
            then: self.then,
            m,
            k,
        };
        let mut out_shape = data.shape().to_vec();
        let rank = out_shape.len();
        out_shape[self.channel_axis()] = m;
        out_shape[rank - 2..].copy_from_slice(&[ho, wo]);
        // SAFETY: f32 has no invalid bit patterns, and `gemm.run` writes
        // every value (k > 0), image after image.
        let mut output = unsafe { Tensor::uninitialized::<f32>(&out_shape)? };
        let mut view = output.try_as_plain_ram_mut()?;
        let input = data.try_as_plain_ram()?.as_slice::<f32>()?;
        let pixels = ho * wo;
        let outs = view.as_slice_mut::<f32>()?.chunks_exact_mut(m * pixels);
        for (x, out) in input.chunks_exact(c * h * w).zip(outs) {
            match &self.window {
                None => gemm.run(x, pixels, out),
                Some(window) => COLUMNS.with_borrow_mut(|cols| {
                    cols.resize(gemm.k * pixels, 0.0);
                    im2col(x, [c, h, w], window, cols);
                    gemm.run(cols, pixels, out)
                }),
            }
        }
        Ok(tvec!(output.into_tvalue()))
    }
}

impl TypedOp for GemmConv {
    fn output_facts(&self, inputs: &[&TypedFact]) -> TractResult<TVec<TypedFact>> {
        ConvInputs::check_count(self.then, inputs.len(), "convolution")?;
        let rank = inputs[0].rank();
        check_rank(self.format, rank, "convolution")?;
        let kernel = inputs[1].shape.as_concrete().context("kernel shape")?;
        let mut shape = inputs[0].shape.to_tvec();
        let c = self.format.shape(&shape)?.c().to_usize()?;
        let (h, w) = (shape[rank - 2].to_usize()?, shape[rank - 1].to_usize()?);
        let [ho, wo] = self.output_hw(h, w)?;
        shape[self.channel_axis()] = self.output_channels(kernel, c)?.into();
        shape[rank - 2] = ho.into();
        shape[rank - 1] = wo.into();
        Ok(tvec!(f32::fact(shape)))
    }

    as_op!();
}

/// One image `x` of `c` planes of `h` x `w` as the matrix the window sees:
/// a row per input channel and tap (the kernel's order), a column per
/// output pixel; taps outside the image read 0.
fn im2col(x: &[f32], [c, h, w]: [usize; 3], window: &Window, cols: &mut [f32]) {
    let [_, wo] = window.output_hw(h, w).expect("checked by the caller");
    let [kh, kw] = window.kernel;
    let ([sy, sx], [dy, dx]) = (window.stride, window.dilation);
    let [pt, pl] = window.pad_before;
    let pixels = cols.len() / (c * kh * kw);
    let mut rows = cols.chunks_exact_mut(pixels);
    for plane in x.chunks_exact(h * w).take(c) {
        for ky in 0..kh {
            for kx in 0..kw {
                let row = rows.next().expect("a row per channel and tap");
                // Output columns whose tap falls inside the image: [lo, hi).
                let hi = (w + pl).saturating_sub(kx * dx).div_ceil(sx).min(wo);
                let lo = pl.saturating_sub(kx * dx).div_ceil(sx).min(hi);
                for (oy, out) in row.chunks_exact_mut(wo).enumerate() {
                    let iy = (oy * sy + ky * dy).checked_sub(pt).filter(|&iy| iy < h);
                    let Some(iy) = iy else {
                        out.fill(0.0);
                        continue;
                    };
                    out[..lo].fill(0.0);
                    out[hi..].fill(0.0);
                    if lo == hi {
                        continue;
                    }
                    // lo * sx + kx * dx >= pl: the first column inside.
                    let src = &plane[iy * w + lo * sx + kx * dx - pl..][..(hi - lo - 1) * sx + 1];
                    for (o, v) in out[lo..hi].iter_mut().zip(src.iter().step_by(sx)) {
                        *o = *v;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::window::textbook::{self, values, window};
    use super::*;

    /// Windows whose taps fall outside the image on whole rows and columns,
    /// strides and dilations past the kernel, against the textbook sum.
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn im2col_products_give_the_textbook_convolution() {
        assert!(
            gemm::available(),
            "this test needs an x86-64 CPU with AVX2 and FMA"
        );
        let cases = [
            (
                window([3, 3], [1, 1], [1, 1], [1, 1, 1, 1]),
                [2, 3, 6, 7],
                5,
            ),
            (
                window([3, 3], [2, 2], [1, 1], [1, 1, 1, 1]),
                [1, 3, 9, 8],
                16,
            ),
            (
                window([3, 3], [1, 1], [3, 2], [3, 2, 3, 2]),
                [1, 4, 5, 6],
                7,
            ),
            (
                window([3, 3], [1, 1], [1, 1], [4, 4, 4, 4]),
                [1, 2, 3, 3],
                6,
            ),
            (
                window([2, 5], [3, 1], [1, 2], [0, 4, 2, 0]),
                [2, 2, 8, 5],
                9,
            ),
            (
                window([1, 1], [2, 3], [1, 1], [0, 1, 1, 0]),
                [1, 5, 7, 7],
                13,
            ),
        ];
        for (win, shape, m) in cases {
            let [n, c, h, w] = shape;
            let [kh, kw] = win.kernel;
            let (x, k, b) = (
                values(n * c * h * w, 1),
                values(m * c * kh * kw, 2),
                values(m, 3),
            );
            let op = GemmConv {
                then: Then::Nothing,
                format: DataFormat::NCHW,
                window: Some(win),
            };
            let inputs = tvec![
                Tensor::from_shape(&shape, &x).unwrap().into_tvalue(),
                Tensor::from_shape(&[m, c, kh, kw], &k)
                    .unwrap()
                    .into_tvalue(),
                Tensor::from_shape(&[m], &b).unwrap().into_tvalue(),
            ];
            let out = op
                .eval(&EvalContext::out_of_plan(), inputs)
                .unwrap()
                .remove(0);
            let [ho, wo] = win.output_hw(h, w).unwrap();
            assert_eq!(out.shape(), [n, m, ho, wo], "{win:?}");
            let got: Vec<f32> = out
                .to_plain_array_view::<f32>()
                .unwrap()
                .iter()
                .copied()
                .collect();
            let want = textbook::conv(&win, 1, &x, shape, (&k, &b, m));
            let scale = (c * kh * kw) as f32 * 2.4 * 2.5;
            for (i, (a, e)) in got.iter().zip(&want).enumerate() {
                assert!((a - e).abs() <= 1e-6 * scale, "{win:?} at {i}: {a} vs {e}");
            }
        }
    }
}
