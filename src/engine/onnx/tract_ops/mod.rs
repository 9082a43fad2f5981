//! Kernels of our own for the ops tract runs far from the hardware's speed
//! on these models, swapped in for tract's before it optimizes the graph:
//! convolutions (depthwise, and of one group as matrix products: 1x1 and
//! im2col), softmax over short rows, and PRelu (read from the ONNX file as
//! our op). A Relu or PRelu right after one of our convolutions is folded
//! into its output pass. On the sample models they take tract from about
//! 31 ms per frame to 13-15 ms of model time.

mod depthwise;
mod gemm;
mod gemm_conv;
mod prelu;
mod softmax;
mod window;

use tract_onnx::prelude::*;
use tract_onnx::tract_core::ops::binary::TypedBinOp;
use tract_onnx::tract_core::ops::cnn::Conv;
use tract_onnx::tract_core::ops::math::Max;
use tract_onnx::tract_core::ops::nn::Softmax;
use tract_onnx::tract_hir::internal::expand;

use depthwise::DepthwiseConv;
use gemm_conv::GemmConv;
use prelu::ChannelPrelu;
use softmax::ShortSoftmax;

/// What our convolutions apply to each output value as they write it: saves
/// the activation's own pass over the data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Then {
    Nothing,
    /// `max(v, 0)`, as tract's Relu.
    Relu,
    /// `v < 0 ? v * slope : v`, one slope per channel (a fourth input).
    Prelu,
}

impl Then {
    /// On one value (`slope` read with `Prelu` only); `prelu::activate` is
    /// the same on eight.
    pub fn apply(self, v: f32, slope: f32) -> f32 {
        match self {
            Then::Nothing => v,
            Then::Relu => v.max(0.0),
            Then::Prelu => prelu::prelu_value(v, slope),
        }
    }
}

/// How many ops of one model run on our kernels, for the load log.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OwnKernels {
    pub depthwise: usize,
    pub pointwise: usize,
    pub im2col: usize,
    pub prelu: usize,
    pub softmax: usize,
}

impl OwnKernels {
    pub fn describe(&self) -> String {
        format!(
            "{} depthwise convolutions, {} pointwise convolutions, {} im2col convolutions, \
             {} PRelu, {} softmax",
            self.depthwise, self.pointwise, self.im2col, self.prelu, self.softmax
        )
    }
}

/// Which of our ops replace tract's (all of them in the engine; the kernels
/// bench switches one off at a time to measure it against tract's own path).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Kernels {
    pub depthwise: bool,
    pub pointwise: bool,
    pub im2col: bool,
    pub softmax: bool,
    pub prelu: bool,
}

impl Kernels {
    pub const ALL: Kernels = Kernels {
        depthwise: true,
        pointwise: true,
        im2col: true,
        softmax: true,
        prelu: true,
    };
    pub const NONE: Kernels = Kernels {
        depthwise: false,
        pointwise: false,
        im2col: false,
        softmax: false,
        prelu: false,
    };
}

/// tract's ONNX reader, with PRelu read as our one-pass op (unless not).
pub(super) fn onnx(kernels: Kernels) -> tract_onnx::Onnx {
    let mut onnx = tract_onnx::onnx();
    if kernels.prelu {
        onnx.op_register
            .insert("PRelu", |_, _| Ok((expand(prelu::PreluNode), vec![])));
    }
    onnx
}

/// tract's optimization of a typed model, with our convolutions in place of
/// tract's wherever they apply and the Relu or PRelu after them folded in;
/// what runs on our kernels, counted.
pub(super) fn optimize(
    mut model: TypedModel,
    kernels: Kernels,
) -> TractResult<(TypedModel, OwnKernels)> {
    // Before decluttering: tract turns 1x1 convolutions into matrix products there.
    swap(&mut model, |conv: &Conv, inputs| {
        (kernels.pointwise)
            .then(|| GemmConv::pointwise(conv, conv_data(inputs)?))
            .flatten()
            .map(|op| Box::new(op) as _)
    })?;
    let mut model = model.into_decluttered()?;
    // After: tract has folded explicit padding into the convolutions.
    swap(&mut model, |conv: &Conv, inputs| {
        let data = conv_data(inputs)?;
        let depthwise = kernels
            .depthwise
            .then(|| DepthwiseConv::for_conv(conv, data));
        (depthwise.flatten().map(|op| Box::new(op) as _)).or_else(|| {
            (kernels.im2col)
                .then(|| GemmConv::im2col(conv, data))
                .flatten()
                .map(|op| Box::new(op) as _)
        })
    })?;
    swap(&mut model, |softmax: &Softmax, inputs| {
        (kernels.softmax)
            .then(|| ShortSoftmax::for_softmax(softmax, inputs.first()?))
            .flatten()
            .map(|op| Box::new(op) as _)
    })?;
    while let Some(patch) = next_fusion(&model)? {
        patch.apply(&mut model)?;
        model.compact()?;
    }
    let model = model.into_optimized()?;
    // Counted in the optimized graph: what will actually run.
    let then = |n: &TypedNode| OurConv::of(n).map(|c| c.then());
    let count = |f: &dyn Fn(&TypedNode) -> bool| model.nodes.iter().filter(|n| f(n)).count();
    let kernels = OwnKernels {
        depthwise: count(&|n| n.op_is::<DepthwiseConv>()),
        pointwise: count(&|n| n.op_as::<GemmConv>().is_some_and(|c| c.window.is_none())),
        im2col: count(&|n| n.op_as::<GemmConv>().is_some_and(|c| c.window.is_some())),
        prelu: count(&|n| n.op_is::<ChannelPrelu>() || then(n) == Some(Then::Prelu)),
        softmax: count(&|n| n.op_is::<ShortSoftmax>()),
    };
    Ok((model, kernels))
}

/// One of our convolutions in a graph.
enum OurConv<'a> {
    Depthwise(&'a DepthwiseConv),
    Gemm(&'a GemmConv),
}

impl OurConv<'_> {
    fn of(node: &TypedNode) -> Option<OurConv<'_>> {
        node.op_as::<DepthwiseConv>()
            .map(OurConv::Depthwise)
            .or_else(|| node.op_as::<GemmConv>().map(OurConv::Gemm))
    }

    fn then(&self) -> Then {
        match self {
            OurConv::Depthwise(c) => c.then,
            OurConv::Gemm(c) => c.then,
        }
    }

    fn channel_axis(&self) -> usize {
        match self {
            OurConv::Depthwise(c) => c.channel_axis(),
            OurConv::Gemm(c) => c.channel_axis(),
        }
    }

    /// The same convolution with `then` folded in.
    fn with(&self, then: Then) -> Box<dyn TypedOp> {
        match self {
            OurConv::Depthwise(c) => Box::new((*c).clone().then(then)),
            OurConv::Gemm(c) => Box::new((*c).clone().then(then)),
        }
    }
}

/// The next of our convolutions whose only reader is a Relu or a per-channel
/// PRelu, as a patch folding that activation into the convolution's output
/// pass (one pass over the data instead of two); `None` when there is none.
fn next_fusion(model: &TypedModel) -> TractResult<Option<TypedModelPatch>> {
    for node in &model.nodes {
        let Some(conv) = OurConv::of(node) else {
            continue;
        };
        let out = OutletId::new(node.id, 0);
        if conv.then() != Then::Nothing || model.output_outlets()?.contains(&out) {
            continue;
        }
        let Some(next) = model.single_succ(node.id)? else {
            continue;
        };
        let (then, slopes) = match next.op_as::<ChannelPrelu>() {
            Some(p) if next.inputs[0] == out && p.axis == Some(conv.channel_axis()) => {
                (Then::Prelu, Some(next.inputs[1]))
            }
            Some(_) => continue,
            None if is_relu_of(model, next, out)? => (Then::Relu, None),
            None => continue,
        };
        let mut patch = TypedModelPatch::default();
        let inputs = node
            .inputs
            .iter()
            .chain(&slopes)
            .map(|o| patch.tap_model(model, *o))
            .collect::<TractResult<TVec<_>>>()?;
        let name = format!("{}+{}", node.name, next.name);
        let fused = patch.wire_node(name, conv.with(then), &inputs)?;
        patch.shunt_outside(model, OutletId::new(next.id, 0), fused[0])?;
        return Ok(Some(patch));
    }
    Ok(None)
}

/// Whether `node` is `max(x, 0)` of `x` (tract's Relu) with one zero.
fn is_relu_of(model: &TypedModel, node: &TypedNode, x: OutletId) -> TractResult<bool> {
    let Some(bin) = node.op_as::<TypedBinOp>() else {
        return Ok(false);
    };
    if !bin.0.is::<Max>() || bin.1.is_some() || node.inputs.len() != 2 {
        return Ok(false);
    }
    let other = if node.inputs[0] == x {
        node.inputs[1]
    } else {
        node.inputs[0]
    };
    if !node.inputs.contains(&x) || other == x {
        return Ok(false);
    }
    let fact = model.outlet_fact(other)?;
    let zero = fact.konst.as_ref().and_then(|k| {
        let values = k.try_as_plain_ram().ok()?.as_slice::<f32>().ok()?.to_vec();
        Some(values.len() == 1 && values[0] == 0.0)
    });
    Ok(zero == Some(true)
        && model.outlet_fact(OutletId::new(node.id, 0))?.shape == model.outlet_fact(x)?.shape)
}

/// Put `ours(op, input facts)` in place of every `O` for which it gives an
/// op.
fn swap<O: TypedOp>(
    model: &mut TypedModel,
    ours: impl Fn(&O, &[&TypedFact]) -> Option<Box<dyn TypedOp>>,
) -> TractResult<()> {
    for id in 0..model.nodes.len() {
        let Some(op) = model.nodes[id].op_as::<O>() else {
            continue;
        };
        let swapped = ours(op, &model.node_input_facts(id)?);
        if let Some(op) = swapped {
            model.node_mut(id).op = op;
        }
    }
    Ok(())
}

/// A `Conv`'s data, when its kernel and bias are wired as our ops take them.
fn conv_data<'a>(inputs: &[&'a TypedFact]) -> Option<&'a TypedFact> {
    (inputs.len() == 3).then(|| inputs[0])
}

#[cfg(test)]
mod tests {
    use super::super::test_models::first_output;
    use super::*;
    use tract_onnx::tract_core::ops::cnn::{KernelFormat, PaddingSpec, PoolSpec};
    use tract_onnx::tract_core::ops::nn::DataFormat;

    // At most IM2COL_MAX_CHANNELS (gemm_conv.rs), so 3x3 convolutions are ours.
    const C: usize = 4;

    /// A 3x3 convolution (stride 2, padded by 1) of `groups` groups over C
    /// channels, as tract types an ONNX Conv.
    fn conv(groups: usize) -> Conv {
        Conv {
            pool_spec: PoolSpec {
                data_format: DataFormat::NCHW,
                kernel_shape: tvec![3, 3],
                padding: PaddingSpec::Explicit(tvec![1, 1], tvec![1, 1]),
                dilations: None,
                strides: Some(tvec![2, 2]),
                input_channels: C,
                output_channels: C,
            },
            kernel_fmt: KernelFormat::OIHW,
            group: groups,
            q_params: None,
        }
    }

    /// x [N, C, 9, 11] (N free) -> `op` -> y.
    fn model(op: Conv) -> TypedModel {
        model_then(op, |_, y| y)
    }

    /// x [N, C, 9, 11] (N free) -> `op` -> `then` -> y.
    fn model_then(op: Conv, then: fn(&mut TypedModel, OutletId) -> OutletId) -> TypedModel {
        let mut model = TypedModel::default();
        let n = model.symbols.sym("N");
        let x = model
            .add_source(
                "x",
                f32::fact(&[n.to_dim(), C.to_dim(), 9.to_dim(), 11.to_dim()]),
            )
            .unwrap();
        let per_group = C / op.group;
        let [kh, kw] = [op.pool_spec.kernel_shape[0], op.pool_spec.kernel_shape[1]];
        let weights: Vec<f32> = (0..C * per_group * kh * kw)
            .map(|i| ((i * 7) % 13) as f32 * 0.1 - 0.6)
            .collect();
        let k = Tensor::from_shape(&[C, per_group, kh, kw], &weights).unwrap();
        let k = model.add_const("k", k).unwrap();
        let b = model.add_const("b", tensor1(&[0.25f32; C])).unwrap();
        let y = model.wire_node("conv", op, &[x, k, b]).unwrap()[0];
        let y = then(&mut model, y);
        model.select_output_outlets(&[y]).unwrap();
        model
    }

    /// A 1x1 convolution over C channels, as tract types an ONNX Conv.
    fn pointwise() -> Conv {
        let mut c = conv(1);
        c.pool_spec.kernel_shape = tvec![1, 1];
        c.pool_spec.padding = PaddingSpec::Valid;
        c.pool_spec.strides = None;
        c
    }

    fn relu(model: &mut TypedModel, x: OutletId) -> OutletId {
        let zero = model.add_const("zero", tensor4(&[[[[0f32]]]])).unwrap();
        let max = tract_onnx::tract_core::ops::math::max();
        model.wire_node("relu", max, &[x, zero]).unwrap()[0]
    }

    fn prelu(model: &mut TypedModel, x: OutletId) -> OutletId {
        let s: Vec<f32> = (0..C).map(|c| c as f32 * 0.3 - 1.2).collect();
        let slope = model
            .add_const("slope", Tensor::from_shape(&[C, 1, 1], &s).unwrap())
            .unwrap();
        let op = ChannelPrelu { axis: Some(1) };
        model.wire_node("prelu", op, &[x, slope]).unwrap()[0]
    }

    fn batch_input() -> Tensor {
        let values: Vec<f32> = (0..2 * C * 99)
            .map(|i| ((i * 5) % 17) as f32 * 0.2 - 1.5)
            .collect();
        Tensor::from_shape(&[2, C, 9, 11], &values).unwrap()
    }

    fn assert_close(ours: &[f32], theirs: &[f32]) {
        assert_eq!(ours.len(), theirs.len());
        for (a, b) in ours.iter().zip(theirs) {
            assert!((a - b).abs() <= 1e-5 * (1.0 + b.abs()), "{a} vs {b}");
        }
    }

    #[test]
    fn relu_and_prelu_fold_into_our_convolutions_output_pass() {
        let wires = [
            (
                Then::Relu,
                relu as fn(&mut TypedModel, OutletId) -> OutletId,
            ),
            (Then::Prelu, prelu),
        ];
        for (op, name) in [
            (conv(C), "FaceDepthwiseConv"),
            (pointwise(), "FaceGemmConv1x1"),
            (conv(1), "FaceGemmConvIm2col"),
        ] {
            for (then, wire) in wires {
                let x = batch_input();
                let theirs = run(model_then(op.clone(), wire).into_optimized().unwrap(), &x);
                let (fused, kernels) =
                    optimize(model_then(op.clone(), wire), Kernels::ALL).unwrap();
                let ops: Vec<_> = fused.nodes.iter().map(|n| n.op.name()).collect();
                let thens: Vec<_> = fused
                    .nodes
                    .iter()
                    .filter_map(|n| OurConv::of(n).map(|c| c.then()))
                    .collect();
                assert_eq!(thens, [then], "{ops:?}");
                assert!(
                    !fused.nodes.iter().any(|n| n.op_is::<ChannelPrelu>()),
                    "{ops:?}"
                );
                // Nothing computes but the convolution: no Max, no PRelu left.
                let computing: Vec<_> = ops
                    .iter()
                    .filter(|o| !["Source", "Const"].contains(&o.as_ref()))
                    .collect();
                assert_eq!(computing, [name], "{ops:?}");
                assert_eq!(kernels.prelu, (then == Then::Prelu) as usize);
                assert_close(&run(fused, &x), &theirs);
            }
        }
    }

    fn run(model: TypedModel, x: &Tensor) -> Vec<f32> {
        first_output(model, x.clone())
    }

    /// `conv` with its padding, stride or dilation changed.
    fn with(mut c: Conv, change: fn(&mut PoolSpec)) -> Conv {
        change(&mut c.pool_spec);
        c
    }

    #[test]
    fn our_convolutions_agree_with_tracts_on_a_batch() {
        // (depthwise, pointwise, im2col) convolutions ours, output pixels.
        let cases = [
            ("depthwise", conv(C), (1, 0, 0), 5 * 6),
            ("1x1", pointwise(), (0, 1, 0), 9 * 11),
            ("3x3 stride 2", conv(1), (0, 0, 1), 5 * 6),
            (
                "3x3 dilated 2, padded 2",
                with(conv(1), |p| {
                    p.strides = None;
                    p.dilations = Some(tvec![2, 2]);
                    p.padding = PaddingSpec::Explicit(tvec![2, 2], tvec![2, 2]);
                }),
                (0, 0, 1),
                9 * 11,
            ),
            (
                "3x3 stride 1x3, uneven padding",
                with(conv(1), |p| {
                    p.strides = Some(tvec![1, 3]);
                    p.padding = PaddingSpec::Explicit(tvec![0, 2], tvec![1, 0]);
                }),
                (0, 0, 1),
                8 * 4,
            ),
            (
                "padded 1x1",
                with(pointwise(), |p| {
                    p.padding = PaddingSpec::Explicit(tvec![1, 0], tvec![0, 0])
                }),
                (0, 0, 1),
                10 * 11,
            ),
        ];
        for (what, op, (depthwise, pointwise, im2col), pixels) in cases {
            let x = batch_input();
            let theirs = run(model(op.clone()).into_optimized().unwrap(), &x);
            let (optimized, kernels) = optimize(model(op), Kernels::ALL).unwrap();
            let expected = OwnKernels {
                depthwise,
                pointwise,
                im2col,
                prelu: 0,
                softmax: 0,
            };
            assert_eq!(kernels, expected, "{what}");
            let ours = run(optimized, &x);
            assert_eq!(ours.len(), 2 * C * pixels, "{what}");
            assert_close(&ours, &theirs);
        }
    }

    #[test]
    fn im2col_is_ours_on_the_image_only() {
        // At most IM2COL_MAX_CHANNELS input channels: there it beats tract's
        // path; on many channels tract's is as fast (examples/tract_kernels).
        for (channels, ours) in [(3, true), (C, true), (8, false), (64, false)] {
            let mut op = conv(1);
            op.pool_spec.input_channels = channels;
            let fact = f32::fact([1, channels, 9, 11]);
            let im2col = GemmConv::im2col(&op, &fact);
            assert_eq!(
                im2col.is_some(),
                ours && gemm::available(),
                "{channels} channels"
            );
        }
    }

    #[test]
    fn convolutions_it_does_not_cover_stay_tracts() {
        let grouped_1x1 = {
            let mut c = pointwise();
            c.group = 2;
            c
        };
        let cases = [
            ("grouped", conv(2)),
            ("grouped 1x1", grouped_1x1),
            (
                "dilated depthwise",
                with(conv(C), |p| p.dilations = Some(tvec![2, 2])),
            ),
            (
                "same",
                with(conv(C), |p| p.padding = PaddingSpec::SameUpper),
            ),
            (
                "same, one group",
                with(conv(1), |p| p.padding = PaddingSpec::SameUpper),
            ),
        ];
        for (what, op) in cases {
            let x = batch_input();
            let theirs = run(model(op.clone()).into_optimized().unwrap(), &x);
            let (optimized, kernels) = optimize(model(op), Kernels::ALL).unwrap();
            assert_eq!(kernels, OwnKernels::default(), "{what}");
            assert_close(&run(optimized, &x), &theirs);
        }
    }
}
