//! Kernels of our own for the ops tract runs far from the hardware's speed
//! on these models: depthwise convolutions (swapped in for tract's before
//! it optimizes the graph) and PRelu (read from the ONNX file as our op).
//! A Relu or PRelu right after a depthwise convolution is folded into its
//! output pass. On the sample models they took tract from about 31 to 21 ms
//! per frame.

mod depthwise;
mod prelu;

use tract_onnx::prelude::*;
use tract_onnx::tract_core::ops::binary::TypedBinOp;
use tract_onnx::tract_core::ops::cnn::Conv;
use tract_onnx::tract_core::ops::math::Max;
use tract_onnx::tract_hir::internal::expand;

use depthwise::{DepthwiseConv, Then};
use prelu::ChannelPrelu;

/// How many ops of one model run on our kernels, for the load log.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OwnKernels {
    pub depthwise: usize,
    pub prelu: usize,
}

impl OwnKernels {
    pub fn describe(&self) -> String {
        format!(
            "{} depthwise convolutions, {} PRelu",
            self.depthwise, self.prelu
        )
    }
}

/// tract's ONNX reader, with PRelu read as our one-pass op.
pub(super) fn onnx() -> tract_onnx::Onnx {
    let mut onnx = tract_onnx::onnx();
    onnx.op_register
        .insert("PRelu", |_, _| Ok((expand(prelu::PreluNode), vec![])));
    onnx
}

/// tract's optimization of a typed model, with our depthwise convolution in
/// place of tract's wherever it applies and the Relu or PRelu after it
/// folded in; what runs on our kernels, counted.
pub(super) fn optimize(model: TypedModel) -> TractResult<(TypedModel, OwnKernels)> {
    let mut model = model.into_decluttered()?;
    swap_depthwise(&mut model)?;
    while let Some(patch) = next_fusion(&model)? {
        patch.apply(&mut model)?;
        model.compact()?;
    }
    let model = model.into_optimized()?;
    // Counted in the optimized graph: what will actually run.
    let dw = |n: &TypedNode| n.op_as::<DepthwiseConv>().map(|op| op.then);
    let kernels = OwnKernels {
        depthwise: model.nodes.iter().filter(|n| dw(n).is_some()).count(),
        prelu: model
            .nodes
            .iter()
            .filter(|n| n.op_is::<ChannelPrelu>() || dw(n) == Some(Then::Prelu))
            .count(),
    };
    Ok((model, kernels))
}

/// The next depthwise convolution whose only reader is a Relu or a per-channel
/// PRelu, as a patch folding that activation into the convolution's output
/// pass (one pass over the data instead of two); `None` when there is none.
fn next_fusion(model: &TypedModel) -> TractResult<Option<TypedModelPatch>> {
    for node in &model.nodes {
        let Some(dw) = node.op_as::<DepthwiseConv>() else {
            continue;
        };
        let out = OutletId::new(node.id, 0);
        if dw.then != Then::Nothing || model.output_outlets()?.contains(&out) {
            continue;
        }
        let Some(next) = model.single_succ(node.id)? else {
            continue;
        };
        let (then, slopes) = match next.op_as::<ChannelPrelu>() {
            Some(p) if next.inputs[0] == out && p.axis == Some(dw.channel_axis()) => {
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
        let op = dw.clone().then(then);
        let fused = patch.wire_node(format!("{}+{}", node.name, next.name), op, &inputs)?;
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

/// Put our depthwise convolution in place of every float depthwise `Conv`
/// it covers (in a decluttered model: shapes known).
fn swap_depthwise(model: &mut TypedModel) -> TractResult<()> {
    for id in 0..model.nodes.len() {
        let node = &model.nodes[id];
        let Some(conv) = node.op_as::<Conv>() else {
            continue;
        };
        if node.inputs.len() != 3 {
            continue;
        }
        if let Some(op) = DepthwiseConv::for_conv(conv, model.outlet_fact(node.inputs[0])?) {
            model.node_mut(id).op = Box::new(op);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::test_models::first_output;
    use super::*;
    use tract_onnx::tract_core::ops::cnn::{KernelFormat, PaddingSpec, PoolSpec};
    use tract_onnx::tract_core::ops::nn::DataFormat;

    const C: usize = 8;

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
        let weights: Vec<f32> = (0..C * per_group * 9)
            .map(|i| ((i * 7) % 13) as f32 * 0.1 - 0.6)
            .collect();
        let k = Tensor::from_shape(&[C, per_group, 3, 3], &weights).unwrap();
        let k = model.add_const("k", k).unwrap();
        let b = model.add_const("b", tensor1(&[0.25f32; C])).unwrap();
        let y = model.wire_node("conv", op, &[x, k, b]).unwrap()[0];
        let y = then(&mut model, y);
        model.select_output_outlets(&[y]).unwrap();
        model
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
    fn relu_and_prelu_fold_into_the_depthwise_output_pass() {
        for (then, wire) in [
            (
                Then::Relu,
                relu as fn(&mut TypedModel, OutletId) -> OutletId,
            ),
            (Then::Prelu, prelu),
        ] {
            let x = batch_input();
            let theirs = run(model_then(conv(C), wire).into_optimized().unwrap(), &x);
            let (fused, kernels) = optimize(model_then(conv(C), wire)).unwrap();
            let ops: Vec<_> = fused.nodes.iter().map(|n| n.op.name()).collect();
            let thens: Vec<_> = fused
                .nodes
                .iter()
                .filter_map(|n| n.op_as::<DepthwiseConv>())
                .map(|d| d.then)
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
            assert_eq!(computing, ["FaceDepthwiseConv"], "{ops:?}");
            assert_eq!(kernels.prelu, (then == Then::Prelu) as usize);
            assert_close(&run(fused, &x), &theirs);
        }
    }

    fn run(model: TypedModel, x: &Tensor) -> Vec<f32> {
        first_output(model, x.clone())
    }

    #[test]
    fn our_depthwise_convolution_agrees_with_tracts_on_a_batch() {
        let x = batch_input();
        let theirs = run(model(conv(C)).into_optimized().unwrap(), &x);
        let (optimized, kernels) = optimize(model(conv(C))).unwrap();
        assert_eq!(
            kernels,
            OwnKernels {
                depthwise: 1,
                prelu: 0
            }
        );
        let ours = run(optimized, &x);
        assert_eq!(ours.len(), 2 * C * 5 * 6);
        assert_close(&ours, &theirs);
    }

    #[test]
    fn convolutions_it_does_not_cover_stay_tracts() {
        let dilated = {
            let mut c = conv(C);
            c.pool_spec.dilations = Some(tvec![2, 2]);
            c
        };
        let same = {
            let mut c = conv(C);
            c.pool_spec.padding = PaddingSpec::SameUpper;
            c
        };
        for (what, op) in [("grouped", conv(4)), ("dilated", dilated), ("same", same)] {
            let (_, kernels) = optimize(model(op)).unwrap();
            assert_eq!(kernels.depthwise, 0, "{what}");
        }
    }
}
