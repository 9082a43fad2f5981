//! What our convolutions share: where a 2-D window goes over a plane (read
//! from tract's `PoolSpec`), the channels-first data it goes over, and
//! their inputs and weights.

use tract_onnx::prelude::*;
use tract_onnx::tract_core::internal::*;
use tract_onnx::tract_core::ops::cnn::{PaddingSpec, PoolSpec};
use tract_onnx::tract_core::ops::nn::DataFormat;

use super::Then;

/// Height then width in each pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Window {
    pub kernel: [usize; 2],
    pub stride: [usize; 2],
    pub dilation: [usize; 2],
    pub pad_before: [usize; 2],
    pub pad_after: [usize; 2],
}

impl Window {
    /// The window of `spec` on data of shape `input`, when it is 2-D with
    /// explicit (or no) padding and the plane's height and width are known;
    /// `None` otherwise.
    pub fn of(spec: &PoolSpec, input: &TypedFact) -> Option<Window> {
        let (before, after) = match &spec.padding {
            PaddingSpec::Explicit(b, a) => (b.clone(), a.clone()),
            PaddingSpec::Valid => (tvec![0, 0], tvec![0, 0]),
            _ => return None,
        };
        let ones = tvec![1, 1];
        let stride = spec.strides.clone().unwrap_or_else(|| ones.clone());
        let dilation = spec.dilations.clone().unwrap_or(ones);
        let shape = spec.data_format.shape(input.shape.to_tvec()).ok()?;
        // Height and width must be known to plan the rows.
        shape
            .hw_dims()
            .iter()
            .try_for_each(|d| d.to_usize().map(drop))
            .ok()?;
        // Two values each, none zero where a zero would divide or be empty.
        let pair = |v: &[usize]| -> Option<[usize; 2]> { v.try_into().ok() };
        let positive = |v: &[usize]| pair(v).filter(|p| p.iter().all(|&x| x > 0));
        Some(Window {
            kernel: positive(&spec.kernel_shape)?,
            stride: positive(&stride)?,
            dilation: positive(&dilation)?,
            pad_before: pair(&before)?,
            pad_after: pair(&after)?,
        })
    }

    /// Taps of the kernel.
    pub fn taps(&self) -> usize {
        self.kernel[0] * self.kernel[1]
    }

    /// Output height and width for an input of `h` x `w`.
    pub fn output_hw(&self, h: usize, w: usize) -> TractResult<[usize; 2]> {
        let mut out = [0; 2];
        for (axis, size) in [h, w].into_iter().enumerate() {
            let padded = size + self.pad_before[axis] + self.pad_after[axis];
            let span = (self.kernel[axis] - 1) * self.dilation[axis] + 1;
            ensure!(
                padded >= span,
                "convolution: input {h}x{w} smaller than its kernel"
            );
            out[axis] = (padded - span) / self.stride[axis] + 1;
        }
        Ok(out)
    }
}

/// The channel axis of channels-first data (and of the output).
pub fn channel_axis(format: DataFormat) -> usize {
    format.has_n() as usize
}

/// Data of (N,) C, H, W: anything else is an error, never an index out of
/// bounds in the shape helpers.
pub fn check_rank(format: DataFormat, rank: usize, what: &str) -> TractResult<()> {
    let expected = 3 + format.has_n() as usize;
    ensure!(
        rank == expected,
        "{what}: data of rank {rank}, expected {expected}"
    );
    Ok(())
}

/// The inputs of our convolutions: the data, then the kernel, the bias
/// and, with PRelu folded in, the slopes.
pub struct ConvInputs {
    pub data: TValue,
    kernel: TValue,
    bias: TValue,
    slopes: Option<TValue>,
}

impl ConvInputs {
    /// Check that a convolution applying `then` has its inputs.
    pub fn check_count(then: Then, count: usize, what: &str) -> TractResult<()> {
        ensure!(
            count == 3 + (then == Then::Prelu) as usize,
            "{what} takes data, kernel, bias (and slopes with PRelu), not {count} inputs"
        );
        Ok(())
    }

    pub fn take(then: Then, inputs: TVec<TValue>, what: &str) -> TractResult<ConvInputs> {
        ConvInputs::check_count(then, inputs.len(), what)?;
        let mut inputs = inputs.into_iter();
        let mut next = || inputs.next().context("counted above");
        Ok(ConvInputs {
            data: next()?,
            kernel: next()?,
            bias: next()?,
            slopes: if then == Then::Prelu {
                Some(next()?)
            } else {
                None
            },
        })
    }

    pub fn kernel_shape(&self) -> &[usize] {
        self.kernel.shape()
    }

    /// The weights, checked against `channels` output channels: a bias
    /// each (or one for all) and, with PRelu, a slope each.
    pub fn weights(&self, channels: usize, what: &str) -> TractResult<ConvWeights<'_>> {
        let weights = ConvWeights {
            kernel: self.kernel.try_as_plain_ram()?.as_slice::<f32>()?,
            bias: self.bias.try_as_plain_ram()?.as_slice::<f32>()?,
            slopes: match &self.slopes {
                Some(s) => s.try_as_plain_ram()?.as_slice::<f32>()?,
                None => &[],
            },
        };
        let bias = weights.bias.len();
        ensure!(
            bias == channels || bias == 1,
            "{what}: {bias} bias values for {channels} channels"
        );
        ensure!(
            self.slopes.is_none() || weights.slopes.len() == channels,
            "{what} PRelu: {} slopes for {channels} channels",
            weights.slopes.len()
        );
        Ok(weights)
    }
}

/// A convolution's weights, checked against its output channels.
pub struct ConvWeights<'a> {
    pub kernel: &'a [f32],
    pub bias: &'a [f32],
    pub slopes: &'a [f32],
}

impl ConvWeights<'_> {
    /// Output channel `ch`'s bias.
    pub fn bias(&self, ch: usize) -> f32 {
        self.bias[if self.bias.len() == 1 { 0 } else { ch }]
    }

    /// Output channel `ch`'s PRelu slope (0 when there are none).
    pub fn slope(&self, ch: usize) -> f32 {
        self.slopes.get(ch).copied().unwrap_or(0.0)
    }
}

/// The textbook convolution and test data, for checking ours.
#[cfg(test)]
pub mod textbook {
    use super::Window;

    /// Deterministic values of both signs (|v| <= 2.5).
    pub fn values(n: usize, seed: usize) -> Vec<f32> {
        (0..n)
            .map(|i| ((i * 37 + seed * 11) % 53) as f32 * 0.093 - 2.4)
            .collect()
    }

    /// A window with padding `[top, left, bottom, right]`.
    pub fn window(
        kernel: [usize; 2],
        stride: [usize; 2],
        dilation: [usize; 2],
        [top, left, bottom, right]: [usize; 4],
    ) -> Window {
        Window {
            kernel,
            stride,
            dilation,
            pad_before: [top, left],
            pad_after: [bottom, right],
        }
    }

    /// `m` output channels of `groups` groups over `x` of shape
    /// `[n, c, h, w]` (kernel `[m, c / groups, kh, kw]`): each output is
    /// its bias plus the products input channel by input channel, tap by
    /// tap in row order, taps outside the input left out.
    pub fn conv(
        window: &Window,
        groups: usize,
        x: &[f32],
        [n, c, h, w]: [usize; 4],
        (k, b, m): (&[f32], &[f32], usize),
    ) -> Vec<f32> {
        let [ho, wo] = window.output_hw(h, w).unwrap();
        let [kh, kw] = window.kernel;
        let (cg, mg) = (c / groups, m / groups);
        let mut out = Vec::new();
        for image in 0..n {
            for o in 0..m {
                let first = (o / mg) * cg;
                for oy in 0..ho {
                    for ox in 0..wo {
                        let mut sum = b[o];
                        for i in 0..cg {
                            for ky in 0..kh {
                                for kx in 0..kw {
                                    let at = |out: usize, tap: usize, axis: usize| {
                                        (out * window.stride[axis] + tap * window.dilation[axis])
                                            .checked_sub(window.pad_before[axis])
                                    };
                                    let (Some(iy), Some(ix)) = (at(oy, ky, 0), at(ox, kx, 1))
                                    else {
                                        continue;
                                    };
                                    if iy < h && ix < w {
                                        let plane = image * c + first + i;
                                        sum += k[((o * cg + i) * kh + ky) * kw + kx]
                                            * x[(plane * h + iy) * w + ix];
                                    }
                                }
                            }
                        }
                        out.push(sum);
                    }
                }
            }
        }
        out
    }
}
