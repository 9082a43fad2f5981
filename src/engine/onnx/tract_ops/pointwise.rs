//! 1x1 convolution (every output channel a weighted sum of the input
//! channels at the same pixel) for tract, channels first, on the matrix
//! product of `gemm.rs`. These are two thirds of the sample embedder's
//! work; tract runs them as its own matrix product after repacking the
//! image on every run.

use tract_onnx::prelude::*;
use tract_onnx::tract_core::internal::*;
use tract_onnx::tract_core::ops::cnn::{Conv, KernelFormat, PaddingSpec};
use tract_onnx::tract_core::ops::nn::DataFormat;

use super::gemm::{self, Gemm};
use super::Then;

/// Fewer pixels than this per image leave most of a 16-pixel tile empty:
/// tract's matrix-vector kernels do better there.
const MIN_PIXELS: usize = 8;

/// Stands in for a 1x1 `Conv` (stride 1, no padding, one group): inputs data
/// `[(N,) K, H, W]`, kernel `[M, K, 1, 1]`, bias (`M` values, or one for
/// all), and with `Then::Prelu` the slopes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PointwiseConv {
    /// The activation folded into the output pass (mod.rs fuses it).
    pub then: Then,
    format: DataFormat,
}

impl PointwiseConv {
    /// The op for `conv` on data of shape `input`, when it is a float 1x1
    /// convolution this kernel covers on this CPU; `None` otherwise.
    pub fn for_conv(conv: &Conv, input: &TypedFact) -> Option<PointwiseConv> {
        let spec = &conv.pool_spec;
        let ones = |v: &Option<TVec<usize>>| v.iter().flatten().all(|&d| d == 1);
        let unpadded = match &spec.padding {
            PaddingSpec::Valid => true,
            PaddingSpec::Explicit(before, after) => before.iter().chain(after).all(|&p| p == 0),
            _ => false,
        };
        let plain = gemm::available()
            && conv.q_params.is_none()
            && conv.kernel_fmt == KernelFormat::OIHW
            && input.datum_type == f32::datum_type()
            && matches!(spec.data_format, DataFormat::NCHW | DataFormat::CHW)
            && spec.kernel_shape.len() == 2
            && spec.kernel_shape.iter().all(|&d| d == 1)
            && conv.group == 1
            && ones(&spec.strides)
            && ones(&spec.dilations)
            && unpadded;
        if !plain {
            return None;
        }
        let shape = spec.data_format.shape(input.shape.to_tvec()).ok()?;
        let pixels = shape
            .hw_dims()
            .iter()
            .map(|d| d.to_usize().ok())
            .product::<Option<usize>>()?;
        (pixels >= MIN_PIXELS).then_some(PointwiseConv {
            then: Then::Nothing,
            format: spec.data_format,
        })
    }

    /// The same convolution with `then` folded into its output pass.
    pub fn then(self, then: Then) -> Self {
        PointwiseConv { then, ..self }
    }

    /// The channel axis of the data (and of the output).
    pub fn channel_axis(&self) -> usize {
        self.format.has_n() as usize
    }

    /// Data of (N,) K, H, W: anything else is an error, never an index out
    /// of bounds in the shape helpers.
    fn check_rank(&self, rank: usize) -> TractResult<()> {
        let expected = 3 + self.format.has_n() as usize;
        ensure!(
            rank == expected,
            "pointwise convolution: data of rank {rank}, expected {expected}"
        );
        Ok(())
    }

    /// Output channels of a kernel of shape `[M, K, 1, 1]` for data of `k`
    /// channels.
    fn output_channels(&self, kernel: &[usize], k: usize) -> TractResult<usize> {
        ensure!(
            kernel.len() == 4 && kernel[1] == k && kernel[2] == 1 && kernel[3] == 1,
            "pointwise kernel {kernel:?} does not fit {k} channels"
        );
        Ok(kernel[0])
    }
}

impl Op for PointwiseConv {
    fn name(&self) -> StaticName {
        "FacePointwiseConv".into()
    }

    fn validation(&self) -> Validation {
        Validation::Rounding
    }

    op_as_typed_op!();
}

impl EvalOp for PointwiseConv {
    op_out_of_plan!();

    fn eval(&self, _ctx: &EvalContext, inputs: TVec<TValue>) -> TractResult<TVec<TValue>> {
        let mut inputs = inputs;
        let slopes = match self.then {
            Then::Prelu => Some(inputs.pop().context("pointwise convolution: no slopes")?),
            _ => None,
        };
        let (data, kernel, bias) = args_3!(inputs);
        self.check_rank(data.rank())?;
        let shape = self.format.shape(data.shape().to_vec())?;
        let (k, pixels) = (*shape.c(), shape.hw_dims().iter().product::<usize>());
        let m = self.output_channels(kernel.shape(), k)?;
        ensure!(k > 0 && pixels > 0, "pointwise convolution on empty data");
        let gemm = Gemm {
            w: kernel.try_as_plain_ram()?.as_slice::<f32>()?,
            bias: bias.try_as_plain_ram()?.as_slice::<f32>()?,
            slopes: match &slopes {
                Some(s) => s.try_as_plain_ram()?.as_slice::<f32>()?,
                None => &[],
            },
            then: self.then,
            m,
            k,
        };
        ensure!(
            gemm.bias.len() == m || gemm.bias.len() == 1,
            "pointwise bias does not match {m} channels"
        );
        ensure!(
            self.then != Then::Prelu || gemm.slopes.len() == m,
            "pointwise PRelu: {} slopes for {m} channels",
            gemm.slopes.len()
        );
        let mut out_shape = data.shape().to_vec();
        out_shape[self.channel_axis()] = m;
        // SAFETY: f32 has no invalid bit patterns, and `gemm.run` writes
        // every value (k > 0), image after image.
        let mut output = unsafe { Tensor::uninitialized::<f32>(&out_shape)? };
        let mut view = output.try_as_plain_ram_mut()?;
        let input = data.try_as_plain_ram()?.as_slice::<f32>()?;
        let images = input.chunks_exact(k * pixels);
        for (x, out) in images.zip(view.as_slice_mut::<f32>()?.chunks_exact_mut(m * pixels)) {
            gemm.run(x, pixels, out);
        }
        Ok(tvec!(output.into_tvalue()))
    }
}

impl TypedOp for PointwiseConv {
    fn output_facts(&self, inputs: &[&TypedFact]) -> TractResult<TVec<TypedFact>> {
        let expected = 3 + (self.then == Then::Prelu) as usize;
        ensure!(
            inputs.len() == expected,
            "pointwise convolution takes data, kernel, bias (and slopes with PRelu)"
        );
        self.check_rank(inputs[0].rank())?;
        let kernel = inputs[1]
            .shape
            .as_concrete()
            .context("pointwise kernel shape")?;
        let k = self
            .format
            .shape(inputs[0].shape.to_tvec())?
            .c()
            .to_usize()?;
        let mut shape = inputs[0].shape.to_tvec();
        shape[self.channel_axis()] = self.output_channels(kernel, k)?.into();
        Ok(tvec!(f32::fact(shape)))
    }

    as_op!();
}
