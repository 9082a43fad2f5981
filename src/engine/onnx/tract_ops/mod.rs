//! Kernels of our own for the ops tract runs far from the hardware's speed
//! on these models: depthwise convolutions (swapped in for tract's before
//! it optimizes the graph) and PRelu (read from the ONNX file as our op).
//! On the sample models they took tract from about 31 to 23 ms per frame.

mod depthwise;
mod prelu;

use tract_onnx::prelude::*;
use tract_onnx::tract_core::ops::cnn::Conv;
use tract_onnx::tract_hir::internal::expand;

use depthwise::DepthwiseConv;
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
/// place of tract's wherever it applies.
pub(super) fn optimize(model: TypedModel) -> TractResult<(TypedModel, OwnKernels)> {
    let mut model = model.into_decluttered()?;
    swap_depthwise(&mut model)?;
    let model = model.into_optimized()?;
    // Counted in the optimized graph: what will actually run.
    let count = |is: fn(&TypedNode) -> bool| model.nodes.iter().filter(|n| is(n)).count();
    let kernels = OwnKernels {
        depthwise: count(|n| n.op_is::<DepthwiseConv>()),
        prelu: count(|n| n.op_is::<ChannelPrelu>()),
    };
    Ok((model, kernels))
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
        let y = model.wire_node("conv", op, &[x, k, b]).unwrap();
        model.select_output_outlets(&y).unwrap();
        model
    }

    fn run(model: TypedModel, x: &Tensor) -> Vec<f32> {
        let plan = model.into_runnable().unwrap();
        let out = plan.run(tvec!(x.clone().into_tvalue())).unwrap();
        out[0]
            .to_plain_array_view::<f32>()
            .unwrap()
            .iter()
            .copied()
            .collect()
    }

    #[test]
    fn our_depthwise_convolution_agrees_with_tracts_on_a_batch() {
        let values: Vec<f32> = (0..2 * C * 99)
            .map(|i| ((i * 5) % 17) as f32 * 0.2 - 1.5)
            .collect();
        let x = Tensor::from_shape(&[2, C, 9, 11], &values).unwrap();
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
        assert_eq!((ours.len(), theirs.len()), (2 * C * 5 * 6, 2 * C * 5 * 6));
        for (a, b) in ours.iter().zip(&theirs) {
            assert!((a - b).abs() <= 1e-5 * (1.0 + b.abs()), "{a} vs {b}");
        }
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
