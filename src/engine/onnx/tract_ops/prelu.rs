//! ONNX PRelu for tract as one pass over the data. tract expands PRelu into
//! multiply, compare and select (or, rewritten, max/min/mul/add chains):
//! about 6 ms of the sample embedder's 20 went there. Here a value is
//! `x < 0 ? x * slope : x`, per channel, in place when the data is not
//! shared: exactly PRelu, so nothing is rewritten in the model.

use tract_onnx::prelude::*;
use tract_onnx::tract_hir::internal::*;
use tract_onnx::tract_hir::tract_core::ops::binary::TypedBinOp;
use tract_onnx::tract_hir::tract_core::ops::{logic, math};

/// The ONNX `PRelu` node, typed as [`ChannelPrelu`] when the slope is one
/// value per channel of float32 data, else as `select(x < 0, x * slope, x)`.
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
        let (xf, sf) = (model.outlet_fact(x)?, model.outlet_fact(slope)?);
        check_broadcast(xf, sf).with_context(|| format!("PRelu {name}"))?;
        if let Some(axis) = channel_layout(xf, sf) {
            return model.wire_node(name, ChannelPrelu { axis }, &[x, slope]);
        }
        // Any other broadcast or type: select(x < 0, x * slope, x), exact
        // for NaN, infinities and signed zeros alike.
        let fact = xf.clone();
        let zero = tensor0(0f32)
            .cast_to_dt(fact.datum_type)?
            .into_owned()
            .broadcast_into_rank(fact.rank())?;
        let zero = model.add_const(format!("{name}.zero"), zero)?;
        let scaled =
            wire_with_rank_broadcast(format!("{name}.scaled"), model, math::mul(), &[x, slope])?[0];
        let negative = model.wire_node(
            format!("{name}.negative"),
            TypedBinOp(logic::comp_gt(), None),
            &[zero, x],
        )?[0];
        model.wire_node(name, logic::Iff, &[negative, scaled, x])
    }
}

/// ONNX broadcasts the slope to x in one direction only: its dims, aligned
/// to the right, are 1 or x's. Anything else is not a valid model.
fn check_broadcast(x: &TypedFact, slope: &TypedFact) -> TractResult<()> {
    ensure!(
        slope.rank() <= x.rank(),
        "slope of rank {} for data of rank {}",
        slope.rank(),
        x.rank()
    );
    let offset = x.rank() - slope.rank();
    for (i, d) in slope.shape.iter().enumerate() {
        let (dx, known) = (&x.shape[i + offset], d.to_i64().is_ok());
        ensure!(
            *d == 1.to_dim() || d == dx || !known || dx.to_i64().is_err(),
            "slope dims {:?} do not broadcast to data dims {:?}",
            slope.shape,
            x.shape
        );
    }
    Ok(())
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
    pub axis: Option<usize>,
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
        let (data, slopes) = args_2!(inputs);
        let slope = slopes.try_as_plain_ram()?.as_slice::<f32>()?;
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
        *v = prelu_value(*v, slope);
    }
}

/// ONNX PRelu of one value: exact, NaN and -0 kept as they are.
#[inline(always)]
pub(super) fn prelu_value(v: f32, slope: f32) -> f32 {
    if v < 0.0 {
        v * slope
    } else {
        v
    }
}

/// `then` on eight values at once, as our convolutions write them: Relu as
/// `f32::max(v, 0)` (0 for NaN), PRelu as [`prelu_value`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
pub(super) fn activate(
    v: std::arch::x86_64::__m256,
    then: super::Then,
    slope: f32,
) -> std::arch::x86_64::__m256 {
    use std::arch::x86_64::*;
    let zero = _mm256_setzero_ps();
    match then {
        super::Then::Nothing => v,
        // max_ps gives its second operand when either is NaN.
        super::Then::Relu => _mm256_max_ps(v, zero),
        super::Then::Prelu => {
            let scaled = _mm256_mul_ps(v, _mm256_set1_ps(slope));
            _mm256_blendv_ps(v, scaled, _mm256_cmp_ps::<_CMP_LT_OQ>(v, zero))
        }
    }
}

/// [`activate`] on sixteen values.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
pub(super) fn activate16(
    v: std::arch::x86_64::__m512,
    then: super::Then,
    slope: f32,
) -> std::arch::x86_64::__m512 {
    use std::arch::x86_64::*;
    let zero = _mm512_setzero_ps();
    match then {
        super::Then::Nothing => v,
        super::Then::Relu => _mm512_max_ps(v, zero),
        super::Then::Prelu => {
            let negative = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(v, zero);
            _mm512_mask_blend_ps(negative, v, _mm512_mul_ps(v, _mm512_set1_ps(slope)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::test_models::{first_output, prelu_model, slopes, test_input, SIDE};
    use super::super::{onnx, optimize};
    use super::*;
    use tract_onnx::pb::tensor_shape_proto::dimension;
    use tract_onnx::pb::{type_proto, ModelProto};

    /// The model run on tract with our reader and kernels on `batch` images
    /// of `x.len() / batch` values, and how many of its ops are our PRelu.
    fn run(model: &ModelProto, x: &[f32], batch: usize) -> (Vec<f32>, usize) {
        let typed = onnx(super::super::Kernels::ALL)
            .model_for_proto_model(model)
            .unwrap()
            .into_typed()
            .unwrap();
        let (optimized, kernels) = optimize(typed, super::super::Kernels::ALL).unwrap();
        let shape = [batch, x.len() / (batch * SIDE * SIDE), SIDE, SIDE];
        let input = Tensor::from_shape(&shape, x).unwrap();
        (first_output(optimized, input), kernels.prelu)
    }

    /// ONNX PRelu, value by value.
    fn expected(x: &[f32], slope_of: impl Fn(usize) -> f32) -> Vec<f32> {
        x.iter()
            .enumerate()
            .map(|(i, &v)| if v < 0.0 { v * slope_of(i) } else { v })
            .collect()
    }

    /// Bit for bit: signed zeros and NaNs included.
    fn assert_same_bits(got: &[f32], want: &[f32]) {
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(got), bits(want), "{got:?} != {want:?}");
    }

    /// `prelu_model` with a free batch size ("N").
    fn batch_free(mut model: ModelProto) -> ModelProto {
        let graph = model.graph.as_mut().unwrap();
        for io in graph.input.iter_mut().chain(graph.output.iter_mut()) {
            let Some(type_proto::Value::TensorType(t)) =
                io.r#type.as_mut().and_then(|t| t.value.as_mut())
            else {
                panic!("a tensor input");
            };
            let dims = &mut t.shape.as_mut().unwrap().dim;
            dims[0].value = Some(dimension::Value::DimParam("N".into()));
        }
        model
    }

    /// `test_input`, with a NaN among its values.
    fn input_with_nan(channels: usize) -> Vec<f32> {
        let mut x = test_input(channels);
        x[2] = f32::NAN;
        x
    }

    #[test]
    fn per_channel_slopes_run_in_one_pass_exactly() {
        let channels = 32;
        let (x, s) = (input_with_nan(channels), slopes(channels));
        let (got, ours) = run(&prelu_model(&s, 9), &x, 1);
        assert_eq!(ours, 1, "PRelu did not become our op");
        let plane = x.len() / channels;
        assert_same_bits(&got, &expected(&x, |i| s[i / plane]));
    }

    #[test]
    fn every_image_of_a_batch_gets_the_channel_slopes() {
        let channels = 3;
        let s = slopes(channels);
        let x: Vec<f32> = [test_input(channels), test_input(channels)].concat();
        let (got, ours) = run(&batch_free(prelu_model(&s, 9)), &x, 2);
        assert_eq!(ours, 1);
        let plane = SIDE * SIDE;
        assert_same_bits(&got, &expected(&x, |i| s[(i / plane) % channels]));
    }

    #[test]
    fn other_slope_shapes_take_the_exact_select_form() {
        // One slope per value of each row (varies along two axes), one of
        // them infinite: positive values must come through untouched.
        let channels = 3;
        let x = input_with_nan(channels);
        let mut model = prelu_model(&[0.0; 3], 9);
        let graph = model.graph.as_mut().unwrap();
        let mut s: Vec<f32> = (0..channels * SIDE).map(|i| i as f32 * 0.1 - 0.5).collect();
        s[5] = f32::INFINITY;
        graph.initializer[0].dims = vec![channels as i64, 1, SIDE as i64];
        graph.initializer[0].float_data = s.clone();
        let (got, ours) = run(&model, &x, 1);
        assert_eq!(ours, 0);
        let plane = SIDE * SIDE;
        assert_same_bits(&got, &expected(&x, |i| s[(i / plane) * SIDE + i % SIDE]));
    }

    #[test]
    fn one_slope_for_all() {
        let x = test_input(2);
        let mut model = prelu_model(&[0.0; 2], 9);
        let graph = model.graph.as_mut().unwrap();
        graph.initializer[0].dims = vec![1];
        graph.initializer[0].float_data = vec![-0.75];
        let (got, ours) = run(&model, &x, 1);
        assert_eq!(ours, 1);
        assert_same_bits(&got, &expected(&x, |_| -0.75));
    }

    #[test]
    fn a_slope_that_does_not_broadcast_fails_the_load() {
        // 4 slopes for 3 channels.
        let mut model = prelu_model(&[0.5; 4], 9);
        let graph = model.graph.as_mut().unwrap();
        let Some(type_proto::Value::TensorType(t)) = graph.input[0]
            .r#type
            .as_mut()
            .and_then(|t| t.value.as_mut())
        else {
            panic!("a tensor input");
        };
        t.shape.as_mut().unwrap().dim[1].value = Some(dimension::Value::DimValue(3));
        let typed = onnx(super::super::Kernels::ALL)
            .model_for_proto_model(&model)
            .and_then(|m| m.into_typed());
        let err = format!("{:#}", typed.expect_err("a load error"));
        assert!(err.contains("do not broadcast to data dims"), "{err}");
    }
}
