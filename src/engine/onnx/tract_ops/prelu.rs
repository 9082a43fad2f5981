//! ONNX PRelu for tract as one pass over the data. tract expands PRelu into
//! multiply, compare and select (or, rewritten, max/min/mul/add chains):
//! about 6 ms of the sample embedder's 20 went there. Here a value is
//! `x < 0 ? x * slope : x`, per channel, in place when the data is not
//! shared: exactly PRelu, so nothing is rewritten in the model.

use tract_onnx::prelude::*;
use tract_onnx::tract_hir::internal::*;
use tract_onnx::tract_hir::tract_core::ops::math;

/// The ONNX `PRelu` node, typed as [`ChannelPrelu`] when the slope is one
/// value per channel of float32 data, else as `max(x, 0) + min(x, 0) * slope`.
#[derive(Debug, Clone, Hash)]
pub struct PreluNode;

impl Expansion for PreluNode {
    fn name(&self) -> StaticName {
        "FacePrelu".into()
    }

    fn rules<'r, 'p: 'r, 's: 'r>(
        &'s self,
        s: &mut Solver<'r>,
        inputs: &'p [TensorProxy],
        outputs: &'p [TensorProxy],
    ) -> InferenceResult {
        check_input_arity(inputs, 2)?;
        check_output_arity(outputs, 1)?;
        s.equals(&inputs[0].datum_type, &outputs[0].datum_type)?;
        s.equals(&inputs[0].shape, &outputs[0].shape)?;
        Ok(())
    }

    fn wire(
        &self,
        name: &str,
        model: &mut TypedModel,
        inputs: &[OutletId],
    ) -> TractResult<TVec<OutletId>> {
        let (x, slope) = (inputs[0], inputs[1]);
        let layout = channel_layout(model.outlet_fact(x)?, model.outlet_fact(slope)?);
        if let Some(axis) = layout {
            return model.wire_node(name, ChannelPrelu { axis }, &[x, slope]);
        }
        // Any other broadcast or type: the exact elementwise form.
        let fact = model.outlet_fact(x)?.clone();
        let zero = tensor0(0f32)
            .cast_to_dt(fact.datum_type)?
            .into_owned()
            .broadcast_into_rank(fact.rank())?;
        let zero = model.add_const(format!("{name}.zero"), zero)?;
        let pos = model.wire_node(format!("{name}.pos"), math::max(), &[x, zero])?[0];
        let neg = model.wire_node(format!("{name}.neg"), math::min(), &[x, zero])?[0];
        let scaled =
            wire_with_rank_broadcast(format!("{name}.scaled"), model, math::mul(), &[neg, slope])?
                [0];
        model.wire_node(name, math::add(), &[pos, scaled])
    }
}

/// Where the slopes go in the data: `Some(None)` for one slope for all,
/// `Some(Some(axis))` for one per index of `axis`; `None` for anything else
/// (not float32, or a slope varying along several axes).
fn channel_layout(x: &TypedFact, slope: &TypedFact) -> Option<Option<usize>> {
    let f32_dt = f32::datum_type();
    if x.datum_type != f32_dt || slope.datum_type != f32_dt || slope.rank() > x.rank() {
        return None;
    }
    // Align the slope's dims to the right of the data's (ONNX broadcasting).
    let offset = x.rank() - slope.rank();
    let varying: Vec<usize> = (0..slope.rank())
        .filter(|&i| slope.shape[i] != 1.to_dim())
        .map(|i| i + offset)
        .collect();
    match varying[..] {
        [] => Some(None),
        [axis] if slope.shape[axis - offset] == x.shape[axis] => Some(Some(axis)),
        _ => None,
    }
}

/// PRelu with one slope, or one per index of `axis`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ChannelPrelu {
    axis: Option<usize>,
}

impl Op for ChannelPrelu {
    fn name(&self) -> StaticName {
        "FaceChannelPrelu".into()
    }

    op_as_typed_op!();
}

impl EvalOp for ChannelPrelu {
    op_out_of_plan!();

    fn eval(&self, _ctx: &EvalContext, inputs: TVec<TValue>) -> TractResult<TVec<TValue>> {
        let (data, slope) = args_2!(inputs);
        let slope = slope.try_as_plain_ram()?.as_slice::<f32>()?.to_vec();
        // In place when nothing else holds the data (the usual case: the
        // convolution before it has no other reader).
        let mut data = data.into_tensor();
        let shape = data.shape().to_vec();
        let (channels, inner) = match self.axis {
            None => (1, shape.iter().product::<usize>()),
            Some(axis) => (shape[axis], shape[axis + 1..].iter().product()),
        };
        ensure!(
            slope.len() == channels,
            "PRelu: {} slopes for {channels} channels",
            slope.len()
        );
        let mut view = data.try_as_plain_ram_mut()?;
        let values = view.as_slice_mut::<f32>()?;
        if inner > 0 {
            for (run, s) in values.chunks_exact_mut(inner).zip(slope.iter().cycle()) {
                prelu(run, *s);
            }
        }
        Ok(tvec!(data.into_tvalue()))
    }
}

impl TypedOp for ChannelPrelu {
    fn output_facts(&self, inputs: &[&TypedFact]) -> TractResult<TVec<TypedFact>> {
        Ok(tvec!(inputs[0].without_value()))
    }

    as_op!();
}

/// `x = x < 0 ? x * slope : x` over a run; AVX2 when the CPU has it (the
/// same bits either way).
fn prelu(run: &mut [f32], slope: f32) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2, checked just above.
        unsafe { prelu_avx2(run, slope) };
        return;
    }
    prelu_plain(run, slope)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn prelu_avx2(run: &mut [f32], slope: f32) {
    prelu_plain(run, slope)
}

#[inline(always)]
fn prelu_plain(run: &mut [f32], slope: f32) {
    for v in run {
        *v = if *v < 0.0 { *v * slope } else { *v };
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::test_models::{prelu_model, shape_of, slopes, test_input, SIDE};
    use super::super::{onnx, optimize};
    use super::*;
    use tract_onnx::pb::ModelProto;

    /// The model run on tract with our reader and kernels, and how many of
    /// its ops are our PRelu.
    fn run(model: &ModelProto, x: &[f32]) -> (Vec<f32>, usize) {
        let typed = onnx()
            .model_for_proto_model(model)
            .unwrap()
            .into_typed()
            .unwrap();
        let (optimized, kernels) = optimize(typed).unwrap();
        let plan = optimized.into_runnable().unwrap();
        let input = Tensor::from_shape(&shape_of(x.len()), x).unwrap();
        let out = plan.run(tvec!(input.into_tvalue())).unwrap();
        let values = out[0]
            .to_plain_array_view::<f32>()
            .unwrap()
            .iter()
            .copied()
            .collect();
        (values, kernels.prelu)
    }

    /// ONNX PRelu, value by value.
    fn expected(x: &[f32], slope_of: impl Fn(usize) -> f32) -> Vec<f32> {
        x.iter()
            .enumerate()
            .map(|(i, &v)| if v < 0.0 { v * slope_of(i) } else { v })
            .collect()
    }

    #[test]
    fn per_channel_slopes_run_in_one_pass_exactly() {
        let channels = 32;
        let (x, s) = (test_input(channels), slopes(channels));
        let (got, ours) = run(&prelu_model(&s, 9), &x);
        assert_eq!(ours, 1, "PRelu did not become our op");
        let plane = x.len() / channels;
        let want = expected(&x, |i| s[i / plane]);
        // Bit for bit, the sign of zeros included.
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&got), bits(&want));
    }

    #[test]
    fn other_slope_shapes_take_the_elementwise_form() {
        // One slope per value of each row (varies along two axes).
        let channels = 3;
        let x = test_input(channels);
        let mut model = prelu_model(&[0.0; 3], 9);
        let graph = model.graph.as_mut().unwrap();
        let s: Vec<f32> = (0..channels * SIDE).map(|i| i as f32 * 0.1 - 0.5).collect();
        graph.initializer[0].dims = vec![channels as i64, 1, SIDE as i64];
        graph.initializer[0].float_data = s.clone();
        let (got, ours) = run(&model, &x);
        assert_eq!(ours, 0);
        let plane = SIDE * SIDE;
        assert_eq!(got, expected(&x, |i| s[(i / plane) * SIDE + i % SIDE]));
    }

    #[test]
    fn one_slope_for_all() {
        let x = test_input(2);
        let mut model = prelu_model(&[0.0; 2], 9);
        let graph = model.graph.as_mut().unwrap();
        graph.initializer[0].dims = vec![1];
        graph.initializer[0].float_data = vec![-0.75];
        let (got, ours) = run(&model, &x);
        assert_eq!(ours, 1);
        assert_eq!(got, expected(&x, |_| -0.75));
    }
}
