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
    let depthwise = swap_depthwise(&mut model)?;
    let model = model.into_optimized()?;
    let prelu = model
        .nodes
        .iter()
        .filter(|n| n.op_is::<ChannelPrelu>())
        .count();
    Ok((model, OwnKernels { depthwise, prelu }))
}

/// Put our depthwise convolution in place of every float depthwise `Conv`
/// it covers (in a decluttered model: shapes known); returns how many.
fn swap_depthwise(model: &mut TypedModel) -> TractResult<usize> {
    let mut swapped = 0;
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
            swapped += 1;
        }
    }
    Ok(swapped)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tract_onnx::tract_core::ops::cnn::{KernelFormat, PaddingSpec, PoolSpec};
    use tract_onnx::tract_core::ops::nn::DataFormat;

    /// x [1, C, 9, 11] -> Conv 3x3 (stride 2, padded by 1), `group` groups.
    fn conv_model(c: usize, group: usize) -> TypedModel {
        let mut model = TypedModel::default();
        let x = model.add_source("x", f32::fact([1, c, 9, 11])).unwrap();
        let weights: Vec<f32> = (0..c * (c / group) * 9)
            .map(|i| ((i * 7) % 13) as f32 * 0.1 - 0.6)
            .collect();
        let k = tract_ndarray::ArrayD::from_shape_vec(vec![c, c / group, 3, 3], weights).unwrap();
        let k = model.add_const("k", k.into_tensor()).unwrap();
        let b = model.add_const("b", tensor1(&vec![0.25f32; c])).unwrap();
        let conv = Conv {
            pool_spec: PoolSpec {
                data_format: DataFormat::NCHW,
                kernel_shape: tvec![3, 3],
                padding: PaddingSpec::Explicit(tvec![1, 1], tvec![1, 1]),
                dilations: None,
                strides: Some(tvec![2, 2]),
                input_channels: c,
                output_channels: c,
            },
            kernel_fmt: KernelFormat::OIHW,
            group,
            q_params: None,
        };
        let y = model.wire_node("conv", conv, &[x, k, b]).unwrap();
        model.select_output_outlets(&y).unwrap();
        model
    }

    fn run(model: TypedModel, x: &Tensor) -> Vec<f32> {
        let out = model
            .into_runnable()
            .unwrap()
            .run(tvec!(x.clone().into_tvalue()))
            .unwrap();
        out[0]
            .to_plain_array_view::<f32>()
            .unwrap()
            .iter()
            .copied()
            .collect()
    }

    #[test]
    fn our_depthwise_convolution_agrees_with_tracts() {
        let c = 8;
        let values: Vec<f32> = (0..c * 99)
            .map(|i| ((i * 5) % 17) as f32 * 0.2 - 1.5)
            .collect();
        let x = tract_ndarray::ArrayD::from_shape_vec(vec![1, c, 9, 11], values)
            .unwrap()
            .into_tensor();
        let theirs = run(conv_model(c, c).into_optimized().unwrap(), &x);
        let (optimized, kernels) = optimize(conv_model(c, c)).unwrap();
        assert_eq!(
            kernels,
            OwnKernels {
                depthwise: 1,
                prelu: 0
            }
        );
        let ours = run(optimized, &x);
        assert_eq!(ours.len(), c * 5 * 6);
        for (a, b) in ours.iter().zip(&theirs) {
            assert!((a - b).abs() <= 1e-5 * (1.0 + b.abs()), "{a} vs {b}");
        }
    }

    #[test]
    fn grouped_but_not_depthwise_convolutions_stay_tracts() {
        let (_, kernels) = optimize(conv_model(8, 4)).unwrap();
        assert_eq!(kernels.depthwise, 0);
    }
}
