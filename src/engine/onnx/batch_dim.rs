//! A model's batch dimension, as its file declares it (the first dimension
//! of its first input: free, a name or nothing, or fixed, a number), and
//! the two changes the engine makes to it in memory before a runtime sees
//! the model; the file itself is never changed, so the gallery's identity
//! of the embedder (a hash of its files) stays what it was.
//!
//! - `free`: a model exported with a fixed batch of 1 (the sample models)
//!   made free, so that it can take runs of several items. net.rs then
//!   checks that it answers two items run together as each alone.
//! - `fix_to_one`: a free batch fixed to 1 for an engine that runs one item
//!   at a time: tract plans a fixed shape about 15% faster (13.6-14.4
//!   against 12.0-12.2 ms a frame for the sample models, Intel Xeon, one
//!   thread); onnxruntime is no slower.

use std::collections::HashMap;

use tract_onnx::pb::tensor_shape_proto::{dimension, Dimension};
use tract_onnx::pb::{attribute_proto, tensor_proto, type_proto};
use tract_onnx::pb::{AttributeProto, GraphProto, ModelProto, TensorProto, ValueInfoProto};

use super::hygiene::node;

/// The name a freed batch dimension gets.
const BATCH: &str = "batch";

/// Whether the model's first input has a free first dimension.
pub(super) fn is_free(model: &ModelProto) -> bool {
    first_dim(model).is_some_and(|d| !matches!(d.value, Some(dimension::Value::DimValue(_))))
}

/// A fixed batch of 1 made free: the first dimension of the first input and
/// of each output named, the shapes recorded at export dropped (they would
/// pin it again), and each Reshape to a constant `[1, ...]` made `[0, ...]`
/// (ONNX's "keep this dimension"). False, and nothing changed, unless the
/// first input's batch is a fixed 1.
pub(super) fn free(model: &mut ModelProto) -> bool {
    if first_dim(model).map(|d| &d.value) != Some(&Some(dimension::Value::DimValue(1))) {
        return false;
    }
    let Some(graph) = model.graph.as_mut() else {
        return false;
    };
    for dim in ends(graph).filter_map(first_dim_mut) {
        if dim.value == Some(dimension::Value::DimValue(1)) {
            dim.value = Some(dimension::Value::DimParam(BATCH.into()));
        }
    }
    graph.value_info.clear();
    free_reshapes(graph);
    true
}

/// Each Reshape to a constant shape `[1, ...]` (an initializer or a
/// Constant node) reads a new constant `[0, ...]` instead: another node may
/// share the old one. A Reshape with `allowzero` keeps its shape (a 0 would
/// mean an empty dimension there).
fn free_reshapes(graph: &mut GraphProto) {
    let mut made: HashMap<String, String> = HashMap::new();
    let mut constants = Vec::new();
    for i in 0..graph.node.len() {
        let reshape = &graph.node[i];
        if reshape.op_type != "Reshape" || reshape.input.len() < 2 || allows_zero(reshape) {
            continue;
        }
        let source = reshape.input[1].clone();
        if let Some(name) = made.get(&source) {
            graph.node[i].input[1] = name.clone();
            continue;
        }
        let Some(mut shape) = constant_ints(graph, &source).filter(|s| s.len() >= 2 && s[0] == 1)
        else {
            continue;
        };
        shape[0] = 0;
        let name = format!("{source}__batch_free");
        constants.push(int64_constant(&name, &shape));
        made.insert(source, name.clone());
        graph.node[i].input[1] = name;
    }
    // Constants first: a Constant node has no inputs, so this keeps the
    // nodes in an order every reader accepts (IR versions before 4 among them).
    graph.node.splice(0..0, constants);
}

fn allows_zero(reshape: &tract_onnx::pb::NodeProto) -> bool {
    reshape
        .attribute
        .iter()
        .any(|a| a.name == "allowzero" && a.i != 0)
}

/// The values of a constant int64 tensor `name`: an initializer, or a
/// Constant node's value.
fn constant_ints(graph: &GraphProto, name: &str) -> Option<Vec<i64>> {
    let from_node = graph
        .node
        .iter()
        .find(|n| n.op_type == "Constant" && n.output.first().is_some_and(|o| o == name))
        .and_then(|n| n.attribute.iter().find(|a| a.name == "value")?.t.as_ref());
    let tensor = graph
        .initializer
        .iter()
        .find(|t| t.name == name)
        .or(from_node)?;
    if tensor.data_type != tensor_proto::DataType::Int64 as i32 {
        return None;
    }
    if !tensor.int64_data.is_empty() {
        return Some(tensor.int64_data.clone());
    }
    let bytes = tensor.raw_data.chunks_exact(8);
    Some(
        bytes
            .map(|b| i64::from_le_bytes(b.try_into().expect("8 bytes")))
            .collect(),
    )
}

fn int64_constant(name: &str, values: &[i64]) -> tract_onnx::pb::NodeProto {
    let mut constant = node("Constant", &[], name, name);
    constant.attribute.push(AttributeProto {
        name: "value".into(),
        r#type: attribute_proto::AttributeType::Tensor as i32,
        t: Some(TensorProto {
            dims: vec![values.len() as i64],
            data_type: tensor_proto::DataType::Int64 as i32,
            int64_data: values.to_vec(),
            ..Default::default()
        }),
        ..Default::default()
    });
    constant
}

/// A free batch fixed to 1: the first dimension of the first input, and of
/// each output whose first dimension is the input's (or unnamed).
pub(super) fn fix_to_one(model: &mut ModelProto) {
    let batch = match first_dim(model).and_then(|d| d.value.clone()) {
        Some(dimension::Value::DimValue(_)) => return,
        named => named,
    };
    let Some(graph) = model.graph.as_mut() else {
        return;
    };
    for dim in ends(graph).filter_map(first_dim_mut) {
        if dim.value.is_none() || dim.value == batch {
            dim.value = Some(dimension::Value::DimValue(1));
        }
    }
}

/// The first input and the outputs: where a batch dimension is declared.
fn ends(graph: &mut GraphProto) -> impl Iterator<Item = &mut ValueInfoProto> {
    graph
        .input
        .iter_mut()
        .take(1)
        .chain(graph.output.iter_mut())
}

fn first_dim(model: &ModelProto) -> Option<&Dimension> {
    let input = model.graph.as_ref()?.input.first()?;
    let type_proto::Value::TensorType(t) = input.r#type.as_ref()?.value.as_ref()?;
    t.shape.as_ref()?.dim.first()
}

fn first_dim_mut(value: &mut ValueInfoProto) -> Option<&mut Dimension> {
    let type_proto::Value::TensorType(t) = value.r#type.as_mut()?.value.as_mut()?;
    t.shape.as_mut()?.dim.first_mut()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::test_assets;
    use prost::Message;

    fn sample(model: &str) -> ModelProto {
        let bytes = std::fs::read(test_assets(&format!("onnx/{model}"))).unwrap();
        ModelProto::decode(bytes.as_slice()).unwrap()
    }

    fn first_dims(model: &mut ModelProto) -> Vec<Option<dimension::Value>> {
        let graph = model.graph.as_mut().unwrap();
        ends(graph)
            .map(|v| first_dim_mut(v).unwrap().value.clone())
            .collect()
    }

    #[test]
    fn the_published_samples_are_freed_once() {
        for name in ["fr_detect.onnx", "fr_landmark.onnx", "fr_feature.onnx"] {
            let mut model = sample(name);
            assert!(!is_free(&model), "{name}");
            assert!(free(&mut model), "{name}");
            assert!(is_free(&model), "{name}");
            let named = Some(dimension::Value::DimParam(BATCH.into()));
            assert!(first_dims(&mut model).iter().all(|d| *d == named), "{name}");
            let again = model.clone();
            assert!(!free(&mut model), "{name}: already free");
            assert_eq!(model, again);
        }
    }

    #[test]
    fn the_embedders_reshape_keeps_the_batch() {
        let mut model = sample("fr_feature.onnx");
        free(&mut model);
        let graph = model.graph.as_ref().unwrap();
        let reshape = graph.node.iter().find(|n| n.op_type == "Reshape").unwrap();
        assert_eq!(constant_ints(graph, &reshape.input[1]), Some(vec![0, -1]));
        assert_eq!(
            graph.node[0].op_type, "Constant",
            "the new constant comes first"
        );
    }

    #[test]
    fn fixing_to_one_fixes_the_input_and_the_outputs() {
        let mut model = sample("fr_detect.onnx");
        free(&mut model);
        fix_to_one(&mut model);
        assert!(!is_free(&model));
        let one = Some(dimension::Value::DimValue(1));
        assert!(first_dims(&mut model).iter().all(|d| *d == one));
    }
}
