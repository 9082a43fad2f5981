//! What our convolutions share: where a 2-D window goes over a plane (read
//! from tract's `PoolSpec`) and the channels-first data it goes over.

use tract_onnx::prelude::*;
use tract_onnx::tract_core::internal::*;
use tract_onnx::tract_core::ops::cnn::{PaddingSpec, PoolSpec};
use tract_onnx::tract_core::ops::nn::DataFormat;

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
