//! Small ONNX models and inputs built in code, for the unit tests of the
//! model cleaning (hygiene.rs) and of the tract kernels (tract_ops).

use tract_onnx::pb::tensor_shape_proto::{dimension, Dimension};
use tract_onnx::pb::{tensor_proto, GraphProto, ModelProto, ValueInfoProto};
use tract_onnx::pb::{type_proto, OperatorSetIdProto, TensorShapeProto, TypeProto};

use tract_onnx::prelude::*;

use super::hygiene::node;

/// Run a (typed, optimized) model on `input`: its first output's values.
pub(super) fn first_output(model: TypedModel, input: Tensor) -> Vec<f32> {
    let plan = model.into_runnable().unwrap();
    let out = plan.run(tvec!(input.into_tvalue())).unwrap();
    out[0]
        .to_plain_array_view::<f32>()
        .unwrap()
        .iter()
        .copied()
        .collect()
}

/// A named float tensor (an initializer).
pub(super) use super::hygiene::float_tensor as floats;

/// Height and width of the test models' data.
pub(super) const SIDE: usize = 4;

/// The NCHW shape of a test input of `len` values.
pub(super) fn shape_of(len: usize) -> [usize; 4] {
    [1, len / (SIDE * SIDE), SIDE, SIDE]
}

/// x [1,C,4,4] -> PRelu(x, slope [C,1,1]) -> y, at `opset`.
pub(super) fn prelu_model(slope: &[f32], opset: i64) -> ModelProto {
    let channels = slope.len() as i64;
    let side = SIDE as i64;
    let dims = [1, channels, side, side].map(|d| Dimension {
        value: Some(dimension::Value::DimValue(d)),
        ..Default::default()
    });
    let io = |name: &str| ValueInfoProto {
        name: name.to_string(),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: tensor_proto::DataType::Float as i32,
                shape: Some(TensorShapeProto { dim: dims.to_vec() }),
            })),
            ..Default::default()
        }),
        ..Default::default()
    };
    ModelProto {
        ir_version: 7,
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: opset,
        }],
        graph: Some(GraphProto {
            node: vec![node("PRelu", &["x", "slope"], "y", "act")],
            initializer: vec![floats("slope", &[channels, 1, 1], slope)],
            input: vec![io("x")],
            output: vec![io("y")],
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Values of both signs, and zeros of both signs, for `channels`.
pub(super) fn test_input(channels: usize) -> Vec<f32> {
    let n = channels * SIDE * SIDE;
    let mut x: Vec<f32> = (0..n)
        .map(|i| ((i * 13) % 29) as f32 * 0.37 - 5.0)
        .collect();
    x[0] = 0.0;
    x[1] = -0.0;
    x
}

/// Per-channel slopes of both signs and zero.
pub(super) fn slopes(channels: usize) -> Vec<f32> {
    (0..channels).map(|c| (c as f32 - 10.0) * 0.13).collect()
}
