//! Depthwise 2-D convolution (one filter per channel) for tract, channels
//! first. tract's own kernel walks strided convolutions through a generic
//! zone scanner: the detector's first stride-2 depthwise convolution took
//! 1.9 ms there, ten times its stride-1 neighbour of the same size. Here
//! every stride reads contiguous memory: the zero-padded plane is first
//! split into its stride phases, so each tap is one multiply-add over a
//! long run (see `Geometry::plane`).

use tract_onnx::prelude::*;
use tract_onnx::tract_core::internal::*;
use tract_onnx::tract_core::ops::cnn::{Conv, KernelFormat};
use tract_onnx::tract_core::ops::nn::DataFormat;

#[cfg(target_arch = "x86_64")]
use super::prelu::activate;
use super::window::{channel_axis, check_rank, ConvInputs, ConvWeights, Window};
use super::Then;

/// Stands in for a depthwise `Conv`: inputs data, kernel `[C, 1, kh, kw]`,
/// bias (`C` values, or one for all), and with `Then::Prelu` the slopes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DepthwiseConv {
    /// The activation folded into the output pass (mod.rs fuses it).
    pub then: Then,
    format: DataFormat,
    window: Window,
}

impl DepthwiseConv {
    /// The op for `conv` on data of shape `input`, when it is a float
    /// depthwise 2-D convolution this kernel covers; `None` otherwise.
    pub fn for_conv(conv: &Conv, input: &TypedFact) -> Option<DepthwiseConv> {
        let spec = &conv.pool_spec;
        let c = spec.input_channels;
        let plain = conv.q_params.is_none()
            && conv.kernel_fmt == KernelFormat::OIHW
            && input.datum_type == f32::datum_type()
            && matches!(spec.data_format, DataFormat::NCHW | DataFormat::CHW)
            && spec.kernel_shape.len() == 2
            && conv.group == c
            && spec.output_channels == c
            && spec.dilations.iter().flatten().all(|&d| d == 1);
        if !plain {
            return None;
        }
        Some(DepthwiseConv {
            then: Then::Nothing,
            format: spec.data_format,
            window: Window::of(spec, input)?,
        })
    }

    /// The same convolution with `then` folded into its output pass.
    pub fn then(self, then: Then) -> Self {
        DepthwiseConv { then, ..self }
    }

    /// The channel axis of the data (and of the output).
    pub fn channel_axis(&self) -> usize {
        channel_axis(self.format)
    }
}

impl Op for DepthwiseConv {
    fn name(&self) -> StaticName {
        "FaceDepthwiseConv".into()
    }

    fn info(&self) -> TractResult<Vec<String>> {
        Ok(vec![format!("{:?}", self.window)])
    }

    fn validation(&self) -> Validation {
        Validation::Rounding
    }

    op_as_typed_op!();
}

impl EvalOp for DepthwiseConv {
    op_out_of_plan!();

    fn eval(&self, _ctx: &EvalContext, inputs: TVec<TValue>) -> TractResult<TVec<TValue>> {
        let what = "depthwise convolution";
        let inputs = ConvInputs::take(self.then, inputs, what)?;
        let data = &inputs.data;
        check_rank(self.format, data.rank(), what)?;
        let shape = self.format.shape(data.shape().to_vec())?;
        let c = *shape.c();
        let [h, w] = [shape.hw_dims()[0], shape.hw_dims()[1]];
        ensure!(h > 0 && w > 0, "depthwise convolution on an empty image");
        let weights = inputs.weights(c, what)?;
        ensure!(
            weights.kernel.len() == c * self.window.taps(),
            "depthwise kernel does not match {c} channels"
        );
        let [ho, wo] = self.window.output_hw(h, w)?;
        let mut out_shape = data.shape().to_vec();
        out_shape[data.rank() - 2..].copy_from_slice(&[ho, wo]);
        // SAFETY: f32 has no invalid bit patterns, and `PlaneWork::run`
        // writes every value: each output plane, row by row.
        let mut output = unsafe { Tensor::uninitialized::<f32>(&out_shape)? };
        let mut view = output.try_as_plain_ram_mut()?;
        let planes = PlaneWork {
            geometry: Geometry {
                input: [h, w],
                output: [ho, wo],
                conv: self,
            },
            channels: c,
        };
        let input = data.try_as_plain_ram()?.as_slice::<f32>()?;
        planes.run(input, &weights, view.as_slice_mut::<f32>()?);
        Ok(tvec!(output.into_tvalue()))
    }
}

impl TypedOp for DepthwiseConv {
    fn output_facts(&self, inputs: &[&TypedFact]) -> TractResult<TVec<TypedFact>> {
        ConvInputs::check_count(self.then, inputs.len(), "depthwise convolution")?;
        let mut shape = inputs[0].shape.to_tvec();
        let rank = shape.len();
        check_rank(self.format, rank, "depthwise convolution")?;
        let (h, w) = (shape[rank - 2].to_usize()?, shape[rank - 1].to_usize()?);
        let [ho, wo] = self.window.output_hw(h, w)?;
        shape[rank - 2] = ho.into();
        shape[rank - 1] = wo.into();
        Ok(tvec!(f32::fact(shape)))
    }

    as_op!();
}

/// Every plane of one evaluation, channel after channel.
struct PlaneWork<'a> {
    geometry: Geometry<'a>,
    channels: usize,
}

impl PlaneWork<'_> {
    fn run(&self, input: &[f32], weights: &ConvWeights, out: &mut [f32]) {
        let [h, w] = self.geometry.input;
        let [ho, wo] = self.geometry.output;
        let [kh, kw] = self.geometry.conv.window.kernel;
        let taps = kh * kw;
        let mut scratch = Scratch::default();
        let planes = input.chunks_exact(h * w).zip(out.chunks_exact_mut(ho * wo));
        for (plane, (src, dst)) in planes.enumerate() {
            let ch = plane % self.channels;
            let (bias, slope) = (weights.bias(ch), weights.slope(ch));
            let kernel = &weights.kernel[ch * taps..][..taps];
            self.geometry
                .plane(src, (kernel, bias, slope), dst, &mut scratch);
        }
    }
}

/// Output values summed over every tap in registers before they are
/// written (eight 8-lane vectors: eight independent chains of additions
/// keep both adders busy).
const BLOCK: usize = 64;

/// One plane's sizes, for its tap loops.
struct Geometry<'a> {
    input: [usize; 2],
    output: [usize; 2],
    conv: &'a DepthwiseConv,
}

/// Buffers reused from plane to plane.
#[derive(Default)]
struct Scratch {
    /// The zero-padded plane split into its stride phases.
    phases: Vec<f32>,
    /// The output with rows as wide as a phase row.
    wide: Vec<f32>,
    /// Where each tap's run starts in `phases`.
    offsets: Vec<usize>,
}

impl Geometry<'_> {
    /// One channel: `dst = bias + sum over taps of weight * shifted src`.
    ///
    /// The zero-padded plane is split into `sy * sx` phases (phase (a, b)
    /// holds padded[a + i*sy][b + j*sx] at [i][j]). Tap (ky, kx) then reads
    /// phase (ky % sy, kx % sx) shifted by (ky / sy, kx / sx), so over an
    /// output as wide as a phase row it is one multiply-add over a long
    /// contiguous run; the columns past the output's width are dropped.
    /// `weights` are the plane's taps, bias and (with PRelu) slope.
    fn plane(
        &self,
        src: &[f32],
        (taps, bias, slope): (&[f32], f32, f32),
        dst: &mut [f32],
        scratch: &mut Scratch,
    ) {
        let conv = self.conv;
        let ([h, w], [ho, wo]) = (self.input, self.output);
        let window = &conv.window;
        let ([kh, kw], [sy, sx]) = (window.kernel, window.stride);
        let [pt, pl] = window.pad_before;
        let hp = h + pt + window.pad_after[0];
        let wp = w + pl + window.pad_after[1];
        let (hq, wq) = (hp.div_ceil(sy), wp.div_ceil(sx));
        let phase_len = hq * wq;
        // Same positions in every plane: the padding stays zero, only the
        // interior is written. A tap's run may go past its phase by kx / sx
        // values, and the last block past the run: slack.
        let phases = &mut scratch.phases;
        let len = sy * sx * phase_len + kw + BLOCK;
        if phases.len() != len {
            phases.clear();
            phases.resize(len, 0.0);
        }
        for (y, row) in src.chunks_exact(w).enumerate() {
            let py = y + pt;
            let at_row = (py % sy) * sx * phase_len + (py / sy) * wq;
            if sx == 1 {
                phases[at_row + pl..][..w].copy_from_slice(row);
                continue;
            }
            if sx == 2 {
                split_pairs(row, pl, &mut phases[at_row..][..phase_len + wq], phase_len);
                continue;
            }
            for b in 0..sx {
                // Input columns x with x + pl in phase b, from the first.
                let first = (b + sx - pl % sx) % sx;
                let at = at_row + b * phase_len + (first + pl) / sx;
                for (out, v) in phases[at..]
                    .iter_mut()
                    .zip(row.iter().skip(first).step_by(sx))
                {
                    *out = *v;
                }
            }
        }
        let run = ho * wq;
        scratch.offsets.clear();
        for ky in 0..kh {
            for kx in 0..kw {
                let phase = (ky % sy) * sx + kx % sx;
                (scratch.offsets).push(phase * phase_len + (ky / sy) * wq + kx / sx);
            }
        }
        let wide = &mut scratch.wide;
        wide.resize(run.next_multiple_of(BLOCK), 0.0);
        let sums = Taps {
            phases,
            offsets: &scratch.offsets,
            weights: taps,
            bias,
            then: (conv.then, slope),
        };
        for (b, block) in wide.chunks_exact_mut(BLOCK).enumerate() {
            sums.block(b * BLOCK, block.try_into().expect("BLOCK values"));
        }
        for (out, row) in dst.chunks_exact_mut(wo).zip(wide.chunks_exact(wq)) {
            out.copy_from_slice(&row[..wo]);
        }
    }
}

/// One plane's sums over its taps, a block of the wide output at a time:
/// `then(bias + w0 * x0 + w1 * x1 + ...)`, added in tap order.
struct Taps<'a> {
    phases: &'a [f32],
    offsets: &'a [usize],
    weights: &'a [f32],
    bias: f32,
    /// The activation and, with PRelu, the slope.
    then: (Then, f32),
}

impl Taps<'_> {
    /// The `BLOCK` values of the wide output from `start`. With AVX2 when
    /// the CPU has it (the build targets baseline x86-64); no fused
    /// multiply-add either way, so both give the same bits.
    fn block(&self, start: usize, out: &mut [f32; BLOCK]) {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2, checked just above.
            unsafe { self.block_avx2(start, out) };
            return;
        }
        self.block_plain(start, out)
    }

    fn block_plain(&self, start: usize, out: &mut [f32; BLOCK]) {
        let (then, slope) = self.then;
        for (i, o) in out.iter_mut().enumerate() {
            let mut sum = self.bias;
            for (&at, &w) in self.offsets.iter().zip(self.weights) {
                sum += w * self.phases[at + start + i];
            }
            *o = then.apply(sum, slope);
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn block_avx2(&self, start: usize, out: &mut [f32; BLOCK]) {
        use std::arch::x86_64::*;
        let mut sums = [_mm256_set1_ps(self.bias); BLOCK / 8];
        for (&at, &w) in self.offsets.iter().zip(self.weights) {
            let x = &self.phases[at + start..][..BLOCK];
            let w = _mm256_set1_ps(w);
            for (sum, x) in sums.iter_mut().zip(x.chunks_exact(8)) {
                // SAFETY: `x` holds 8 values.
                let x = unsafe { _mm256_loadu_ps(x.as_ptr()) };
                *sum = _mm256_add_ps(*sum, _mm256_mul_ps(w, x));
            }
        }
        for (sum, out) in sums.iter().zip(out.chunks_exact_mut(8)) {
            let (then, slope) = self.then;
            // SAFETY: `out` holds 8 values.
            unsafe { _mm256_storeu_ps(out.as_mut_ptr(), activate(*sum, then, slope)) };
        }
    }
}

/// Stride 2: padded column x + pl of `row` to the row of phase (x + pl) % 2
/// (phase 1's row starts `phase_len` after phase 0's), at (x + pl) / 2, in
/// one pass over pairs.
fn split_pairs(row: &[f32], pl: usize, rows: &mut [f32], phase_len: usize) {
    let (p0, p1) = rows.split_at_mut(phase_len);
    let (even_x, odd_x) = if pl.is_multiple_of(2) {
        (p0, p1)
    } else {
        (p1, p0)
    };
    let even_x = &mut even_x[pl / 2..];
    let odd_x = &mut odd_x[pl.div_ceil(2)..];
    for ((e, o), pair) in even_x
        .iter_mut()
        .zip(odd_x.iter_mut())
        .zip(row.chunks_exact(2))
    {
        *e = pair[0];
        *o = pair[1];
    }
    if row.len() % 2 == 1 {
        even_x[row.len() / 2] = row[row.len() - 1];
    }
}

#[cfg(test)]
mod tests {
    use super::super::window::textbook::{values, window};
    use super::*;

    fn conv(
        kernel: [usize; 2],
        stride: [usize; 2],
        before: [usize; 2],
        after: [usize; 2],
    ) -> DepthwiseConv {
        DepthwiseConv {
            then: Then::Nothing,
            format: DataFormat::NCHW,
            window: window(
                kernel,
                stride,
                [1, 1],
                [before[0], before[1], after[0], after[1]],
            ),
        }
    }

    /// The textbook sum, tap by tap in row order.
    fn textbook(
        dw: &DepthwiseConv,
        x: &[f32],
        shape: [usize; 4],
        k: &[f32],
        b: &[f32],
    ) -> Vec<f32> {
        let c = shape[1];
        let b: Vec<f32> = (0..c)
            .map(|ch| b[if b.len() == 1 { 0 } else { ch }])
            .collect();
        super::super::window::textbook::conv(&dw.window, c, x, shape, (k, &b, c))
    }

    fn eval(
        dw: &DepthwiseConv,
        x: &[f32],
        shape: [usize; 4],
        k: &[f32],
        b: &[f32],
    ) -> (Vec<usize>, Vec<f32>) {
        let [_, c, ..] = shape;
        let [kh, kw] = dw.window.kernel;
        let inputs = tvec![
            Tensor::from_shape(&shape, x).unwrap().into_tvalue(),
            Tensor::from_shape(&[c, 1, kh, kw], k)
                .unwrap()
                .into_tvalue(),
            Tensor::from_shape(&[b.len()], b).unwrap().into_tvalue(),
        ];
        let out = dw
            .eval(&EvalContext::out_of_plan(), inputs)
            .unwrap()
            .remove(0);
        let values = out
            .to_plain_array_view::<f32>()
            .unwrap()
            .iter()
            .copied()
            .collect();
        (out.shape().to_vec(), values)
    }

    #[test]
    fn every_stride_and_padding_gives_the_textbook_sum_exactly() {
        let cases = [
            // The sample models: 3x3 stride 1 and 2 padded by 1, 4x4 and
            // 7x7 over the whole plane, 1x1.
            (conv([3, 3], [1, 1], [1, 1], [1, 1]), [2, 3, 6, 7]),
            (conv([3, 3], [2, 2], [1, 1], [1, 1]), [2, 3, 7, 8]),
            (conv([3, 3], [2, 2], [1, 1], [1, 1]), [1, 2, 8, 9]),
            (conv([4, 4], [1, 1], [0, 0], [0, 0]), [1, 3, 4, 4]),
            (conv([7, 7], [1, 1], [0, 0], [0, 0]), [1, 2, 7, 7]),
            (conv([1, 1], [1, 1], [0, 0], [0, 0]), [1, 3, 5, 5]),
            // Uneven pads, a wide stride, a kernel wider than the padding.
            (conv([3, 3], [2, 2], [0, 1], [1, 0]), [1, 2, 6, 5]),
            (conv([5, 3], [2, 3], [2, 1], [1, 2]), [2, 2, 9, 10]),
            (conv([2, 5], [3, 1], [0, 4], [0, 0]), [1, 1, 8, 3]),
            // Stride 2 with an even left pad, on odd and even widths.
            (conv([3, 3], [2, 2], [0, 0], [0, 0]), [1, 2, 7, 9]),
            (conv([3, 3], [2, 2], [2, 2], [2, 2]), [1, 2, 6, 7]),
            (conv([3, 3], [2, 2], [2, 2], [1, 1]), [1, 1, 5, 6]),
        ];
        for (dw, shape) in cases {
            let [n, c, h, w] = shape;
            let [kh, kw] = dw.window.kernel;
            let x = values(n * c * h * w, 1);
            let k = values(c * kh * kw, 2);
            let b = values(c, 3);
            let (out_shape, got) = eval(&dw, &x, shape, &k, &b);
            let [ho, wo] = dw.window.output_hw(h, w).unwrap();
            assert_eq!(out_shape, [n, c, ho, wo], "{dw:?}");
            assert_eq!(got, textbook(&dw, &x, shape, &k, &b), "{dw:?} on {shape:?}");
        }
    }

    #[test]
    fn data_without_a_batch_axis_gives_the_same_planes() {
        let nchw = conv([3, 3], [2, 2], [1, 1], [1, 1]);
        let chw = DepthwiseConv {
            format: DataFormat::CHW,
            ..nchw.clone()
        };
        let (x, k, b) = (values(2 * 35, 6), values(18, 7), values(2, 8));
        let inputs = |shape: &[usize]| {
            tvec![
                Tensor::from_shape(shape, &x).unwrap().into_tvalue(),
                Tensor::from_shape(&[2, 1, 3, 3], &k).unwrap().into_tvalue(),
                Tensor::from_shape(&[2], &b).unwrap().into_tvalue(),
            ]
        };
        let ctx = EvalContext::out_of_plan();
        let with = nchw.eval(&ctx, inputs(&[1, 2, 5, 7])).unwrap().remove(0);
        let without = chw.eval(&ctx, inputs(&[2, 5, 7])).unwrap().remove(0);
        assert_eq!(without.shape(), &[2, 3, 4]);
        let flat = |t: &TValue| {
            t.to_plain_array_view::<f32>()
                .unwrap()
                .iter()
                .copied()
                .collect::<Vec<_>>()
        };
        assert_eq!(flat(&with), flat(&without));
        // Data of the wrong rank is an error, not a panic.
        assert!(chw.eval(&ctx, inputs(&[1, 2, 5, 7])).is_err());
    }

    #[test]
    fn one_bias_serves_every_channel() {
        let dw = conv([3, 3], [1, 1], [1, 1], [1, 1]);
        let shape = [1, 3, 4, 4];
        let (x, k) = (values(48, 4), values(27, 5));
        let (_, one) = eval(&dw, &x, shape, &k, &[0.5]);
        let (_, each) = eval(&dw, &x, shape, &k, &[0.5; 3]);
        assert_eq!(one, each);
    }
}
