//! Model hygiene at load, before either runtime sees the model:
//! - weights with |w| < 1e-10 become 0: exported face models carry hundreds
//!   of thousands of denormal weights (PRelu slopes ~1e-34) that change no
//!   output but make every multiply by them take the CPU's slow path;
//! - PRelu becomes `Relu(x) + slope * min(x, 0)`, which is exact (one side is
//!   always zero). Where x is known to be NCHW (it comes from a 2-D Conv) and
//!   the slope is per channel, it becomes two depthwise 1x1 convolutions,
//!   `x + Conv(1 - slope, Relu(Conv(-1, x)))`: plain convolutions stay in
//!   onnxruntime's blocked (NCHWc) layout and fuse the Relu and the Add,
//!   where a PRelu, Min or Mul node forces a layout change before and after
//!   it (the embedder: 12.7 ms with PRelu, 9.1 with Min/Mul, 5.7 with the
//!   convolutions). That form is within one rounding of x of the exact PRelu
//!   (the exact one as convolutions takes a third pass: 6.0 ms); the tests
//!   hold it to 1e-6 on real faces. Elsewhere (a GPU, data of unknown
//!   layout) `Min` and `Mul` do it, exactly. tract keeps the PRelu
//!   (`PreluForm::Native`): it runs on the engine's own one-pass kernel there
//!   (tract_ops/prelu.rs).
//!
//! - weights listed among the graph's inputs too (older exporters) are taken
//!   off them, so onnxruntime may fold them (BatchNormalization into Conv).
//!
//! All work on the ONNX protobuf before either runtime parses it; the two
//! runtimes differ only in the PRelu form (`PreluForm`). The first two steps
//! each have a model parameter to turn them off; the third changes nothing
//! but what the runtime may fold (the engine feeds only the image).

use std::collections::HashSet;

use tract_onnx::pb::{attribute_proto, tensor_proto, AttributeProto, GraphProto, ModelProto};
use tract_onnx::pb::{NodeProto, TensorProto};

/// Below this magnitude a weight is treated as noise and set to 0.
pub const TINY: f32 = 1e-10;

/// Which cleaning steps run (model parameters `zero_tiny_weights`,
/// `rewrite_prelu`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hygiene {
    pub zero_tiny_weights: bool,
    pub rewrite_prelu: bool,
}

impl Default for Hygiene {
    fn default() -> Self {
        Hygiene {
            zero_tiny_weights: true,
            rewrite_prelu: true,
        }
    }
}

/// The PRelu rewrite that suits the runtime.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PreluForm {
    /// `Relu(x) + Mul(Min(x, 0), slope)` everywhere.
    Elementwise,
    /// Depthwise convolutions where the slope is per channel on NCHW data
    /// (onnxruntime on the CPU, whose convolutions run in a blocked layout),
    /// within one rounding of the exact PRelu.
    Convolutions,
    /// Left as PRelu: the runtime runs it in one pass (tract, with our op).
    Native,
}

/// What the cleaning did to one model, for the load log.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    pub zeroed: usize,
    /// Weights that were also listed among the graph's inputs, no longer.
    pub inputs_fixed: usize,
    pub prelu_rewritten: usize,
    /// Of those, how many became depthwise convolutions (per-channel slope
    /// on NCHW data).
    pub prelu_as_conv: usize,
    /// Why a requested step did not run, if one did not.
    pub skipped: Option<String>,
}

impl Report {
    pub fn describe(&self) -> String {
        let mut out = format!(
            "{} tiny weights zeroed, {} PRelu rewritten ({} as depthwise convolutions)",
            self.zeroed, self.prelu_rewritten, self.prelu_as_conv
        );
        if self.inputs_fixed > 0 {
            out.push_str(&format!(
                ", {} weights no longer graph inputs",
                self.inputs_fixed
            ));
        }
        if let Some(why) = &self.skipped {
            out.push_str(&format!(" (skipped: {why})"));
        }
        out
    }
}

/// Clean `model` in place as `hygiene` asks.
pub fn clean(model: &mut ModelProto, hygiene: Hygiene, form: PreluForm) -> Report {
    let mut report = Report::default();
    let opset = default_opset(model);
    let ir_version = model.ir_version;
    let Some(graph) = model.graph.as_mut() else {
        return report;
    };
    if hygiene.zero_tiny_weights {
        report.zeroed = zero_tiny_weights(graph);
    }
    if ir_version >= 4 {
        report.inputs_fixed = initializers_out_of_inputs(graph);
    }
    if hygiene.rewrite_prelu && form != PreluForm::Native {
        // Min with a broadcast scalar needs opset 8 (multidirectional
        // broadcasting); older models keep their PRelu.
        if opset >= 8 {
            (report.prelu_rewritten, report.prelu_as_conv) = rewrite_prelu(graph, form);
        } else if graph.node.iter().any(is_prelu) {
            report.skipped = Some(format!("PRelu kept: opset {opset} < 8"));
        }
    }
    report
}

/// Each ConstantOfShape without its `value` given the one ONNX defines (a
/// float 0): tract 0.23 takes the missing value for a double and then
/// cannot join the result with float tensors (MediaPipe's BlazeFace pads
/// with one). The same model either way; how many were spelt out.
pub fn spell_out_defaults(model: &mut ModelProto) -> usize {
    let Some(graph) = model.graph.as_mut() else {
        return 0;
    };
    let mut count = 0;
    for n in graph.node.iter_mut() {
        if n.op_type == "ConstantOfShape" && !n.attribute.iter().any(|a| a.name == "value") {
            n.attribute.push(AttributeProto {
                name: "value".to_string(),
                r#type: attribute_proto::AttributeType::Tensor as i32,
                t: Some(float_tensor("", &[1], &[0.0])),
                ..Default::default()
            });
            count += 1;
        }
    }
    count
}

/// True when a weight lives outside the protobuf (external data file): such
/// a model is loaded from its path, uncleaned.
pub fn has_external_data(model: &ModelProto) -> bool {
    model.graph.as_ref().is_some_and(|g| {
        g.initializer
            .iter()
            .any(|t| t.data_location == Some(tensor_proto::DataLocation::External as i32))
    })
}

/// The version of the default ("ai.onnx") operator set.
fn default_opset(model: &ModelProto) -> i64 {
    model
        .opset_import
        .iter()
        .find(|o| o.domain.is_empty() || o.domain == "ai.onnx")
        .map_or(0, |o| o.version)
}

/// Take the initializers off the graph's inputs (older exporters list every
/// weight there, SFace's 174 of them): an input may be fed, so onnxruntime
/// treats such a weight as a variable and folds nothing into it (no
/// BatchNormalization fused into its Conv: SFace 20.7 ms against 15.9 in
/// onnxruntime, one thread). The engine feeds only the image. IR 4 and
/// later (before it, every initializer had to be an input). How many.
fn initializers_out_of_inputs(graph: &mut GraphProto) -> usize {
    let weights: HashSet<&String> = graph.initializer.iter().map(|t| &t.name).collect();
    let before = graph.input.len();
    graph.input.retain(|v| !weights.contains(&v.name));
    before - graph.input.len()
}

/// Zero the tiny float weights of initializers and Constant nodes.
fn zero_tiny_weights(graph: &mut GraphProto) -> usize {
    let constants = graph
        .node
        .iter_mut()
        .filter(|n| n.op_type == "Constant")
        .flat_map(|n| n.attribute.iter_mut())
        .filter_map(|a| a.t.as_mut());
    graph
        .initializer
        .iter_mut()
        .chain(constants)
        .map(zero_tiny_in_tensor)
        .sum()
}

/// Zero the tiny values of one float tensor, wherever the protobuf keeps them
/// (`float_data` or little-endian `raw_data`); how many were changed.
fn zero_tiny_in_tensor(t: &mut TensorProto) -> usize {
    if t.data_type != tensor_proto::DataType::Float as i32 {
        return 0;
    }
    let tiny = |v: f32| v != 0.0 && v.abs() < TINY;
    let mut changed = 0;
    for v in t.float_data.iter_mut().filter(|v| tiny(**v)) {
        *v = 0.0;
        changed += 1;
    }
    for bytes in t.raw_data.chunks_exact_mut(4) {
        let v = le_f32(bytes);
        if tiny(v) {
            bytes.copy_from_slice(&0f32.to_le_bytes());
            changed += 1;
        }
    }
    changed
}

fn is_prelu(node: &NodeProto) -> bool {
    is_op(node, "PRelu")
}

/// Whether `node` is operator `op` of the default operator set.
fn is_op(node: &NodeProto, op: &str) -> bool {
    node.op_type == op && (node.domain.is_empty() || node.domain == "ai.onnx")
}

/// Replace every PRelu(x, slope) -> y, in place so the node order stays
/// topological: by depthwise convolutions where `channel_slope` allows, else
/// by `Add(Relu(x), Mul(Min(x, 0), slope))`. How many were rewritten, and
/// how many of them as convolutions.
fn rewrite_prelu(graph: &mut GraphProto, form: PreluForm) -> (usize, usize) {
    if !graph.node.iter().any(is_prelu) {
        return (0, 0);
    }
    let mut names = Names::of(graph);
    let zero = names.fresh("face_hygiene_zero");
    let slopes: Vec<Option<Vec<f32>>> = graph
        .node
        .iter()
        .map(|n| match form {
            PreluForm::Convolutions => channel_slope(graph, n),
            PreluForm::Elementwise | PreluForm::Native => None,
        })
        .collect();
    let mut nodes = Vec::with_capacity(graph.node.len());
    let (mut count, mut moved_slopes) = (0, Vec::new());
    for (node, slope) in std::mem::take(&mut graph.node).into_iter().zip(slopes) {
        if !(is_prelu(&node) && node.input.len() == 2 && node.output.len() == 1) {
            nodes.push(node);
            continue;
        }
        count += 1;
        match slope {
            Some(slope) => {
                nodes.extend(prelu_as_convs(&node, &slope, &mut names));
                moved_slopes.push(node.input[1].clone());
            }
            None => nodes.extend(prelu_as_relu_min(&node, &zero, &mut names)),
        }
    }
    if count > moved_slopes.len() {
        nodes.insert(0, constant(&zero, &[], &[0.0]));
    }
    graph.node = nodes;
    drop_unread_initializers(graph, &moved_slopes);
    (count, moved_slopes.len())
}

/// Remove the `candidates` (slopes the rewrite copied into its own
/// constants) from the initializers when nothing reads them any more. Not
/// when a node has a subgraph: its body may read them by name.
fn drop_unread_initializers(graph: &mut GraphProto, candidates: &[String]) {
    let has_subgraph = graph
        .node
        .iter()
        .flat_map(|n| &n.attribute)
        .any(|a| a.g.is_some() || !a.graphs.is_empty());
    if has_subgraph {
        return;
    }
    let read: HashSet<String> = (graph.node.iter().flat_map(|n| n.input.iter()))
        .chain(graph.input.iter().map(|v| &v.name))
        .chain(graph.output.iter().map(|v| &v.name))
        .cloned()
        .collect();
    graph
        .initializer
        .retain(|t| read.contains(&t.name) || !candidates.contains(&t.name));
}

/// The names for the nodes that replace one PRelu, from its own.
fn prelu_parts(prelu: &NodeProto) -> (&str, &str, &str, &str) {
    let (x, slope, y) = (&prelu.input[0], &prelu.input[1], &prelu.output[0]);
    let base = if prelu.name.is_empty() {
        y
    } else {
        &prelu.name
    };
    (x, slope, y, base)
}

/// The four nodes that compute one PRelu with any slope shape.
fn prelu_as_relu_min(prelu: &NodeProto, zero: &str, names: &mut Names) -> [NodeProto; 4] {
    let (x, slope, y, base) = prelu_parts(prelu);
    let relu = names.fresh(&format!("{base}/relu"));
    let min = names.fresh(&format!("{base}/min"));
    let neg = names.fresh(&format!("{base}/neg"));
    [
        node("Relu", &[x], &relu, &relu),
        node("Min", &[x, zero], &min, &min),
        node("Mul", &[&min, slope], &neg, &neg),
        node("Add", &[&relu, &neg], y, &format!("{base}/add")),
    ]
}

/// One PRelu with a per-channel slope on NCHW data: `x + Conv(1 - slope,
/// Relu(Conv(-1, x)))`, the convolutions depthwise 1x1. onnxruntime fuses
/// the Relu into the first and the Add into the second: two passes over the
/// data (`Relu(x) + slope * min(x, 0)` needs three, its Relu alone). For
/// x >= 0 the result is x exactly; for x < 0 it is `x + (1 - slope) * -x`,
/// within about one rounding of x of `slope * x` (the exact PRelu): 1 - slope
/// is rounded once, and the sum once more.
fn prelu_as_convs(prelu: &NodeProto, slope: &[f32], names: &mut Names) -> Vec<NodeProto> {
    let (x, _, y, base) = prelu_parts(prelu);
    let channels = slope.len();
    let dims = [channels as i64, 1, 1, 1];
    let [minus_one, one_minus_slope, negated, negative_part, scaled] = [
        "minus_one",
        "one_minus_slope",
        "negated",
        "negative_part",
        "scaled",
    ]
    .map(|part| names.fresh(&format!("{base}/{part}")));
    let depthwise = |input: &str, weight: &str, output: &str| {
        let mut conv = node("Conv", &[input, weight], output, output);
        conv.attribute.push(int("group", channels as i64));
        conv.attribute.push(ints("kernel_shape", &[1, 1]));
        conv
    };
    let complement: Vec<f32> = slope.iter().map(|s| 1.0 - s).collect();
    vec![
        constant(&minus_one, &dims, &vec![-1.0; channels]),
        constant(&one_minus_slope, &dims, &complement),
        depthwise(x, &minus_one, &negated),
        node("Relu", &[&negated], &negative_part, &negative_part),
        depthwise(&negative_part, &one_minus_slope, &scaled),
        node("Add", &[x, &scaled], y, &format!("{base}/add")),
    ]
}

/// A PRelu's slope, one value per channel, when its input is certainly
/// NCHW: the slope a constant of shape [C, 1, 1] and the input the output
/// of a 2-D Conv (4-D weight) with C output channels, directly or through a
/// BatchNormalization. `None` otherwise.
fn channel_slope(graph: &GraphProto, prelu: &NodeProto) -> Option<Vec<f32>> {
    if !is_prelu(prelu) || prelu.input.len() != 2 {
        return None;
    }
    let slope = constant_tensor(graph, &prelu.input[1])?;
    let [channels, 1, 1] = slope.dims[..] else {
        return None;
    };
    let producer_of = |name: &String| graph.node.iter().find(|n| n.output.first() == Some(name));
    let mut producer = producer_of(&prelu.input[0])?;
    // A BatchNormalization between them keeps the Conv's layout (SFace).
    if is_op(producer, "BatchNormalization") {
        producer = producer_of(producer.input.first()?)?;
    }
    let weight = constant_tensor(graph, producer.input.get(1)?)?;
    let from_conv2d =
        is_op(producer, "Conv") && weight.dims.len() == 4 && weight.dims[0] == channels;
    let values = floats_of(slope)?;
    (from_conv2d && values.len() == channels as usize).then_some(values)
}

/// The float tensor an initializer or a Constant node gives `name`.
fn constant_tensor<'a>(graph: &'a GraphProto, name: &str) -> Option<&'a TensorProto> {
    graph
        .initializer
        .iter()
        .find(|t| t.name == name)
        .or_else(|| {
            let node = graph.node.iter().find(|n| {
                n.op_type == "Constant" && n.output.first().map(String::as_str) == Some(name)
            })?;
            node.attribute
                .iter()
                .find(|a| a.name == "value")?
                .t
                .as_ref()
        })
        .filter(|t| t.data_type == tensor_proto::DataType::Float as i32)
}

/// A float tensor's values, wherever the protobuf keeps them.
fn floats_of(t: &TensorProto) -> Option<Vec<f32>> {
    if !t.float_data.is_empty() {
        return Some(t.float_data.clone());
    }
    t.raw_data
        .len()
        .is_multiple_of(4)
        .then(|| t.raw_data.chunks_exact(4).map(le_f32).collect())
}

/// One float of a TensorProto's `raw_data` (little-endian, 4 bytes).
fn le_f32(bytes: &[u8]) -> f32 {
    f32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]])
}

fn int(name: &str, value: i64) -> AttributeProto {
    AttributeProto {
        name: name.to_string(),
        r#type: attribute_proto::AttributeType::Int as i32,
        i: value,
        ..Default::default()
    }
}

fn ints(name: &str, values: &[i64]) -> AttributeProto {
    AttributeProto {
        name: name.to_string(),
        r#type: attribute_proto::AttributeType::Ints as i32,
        ints: values.to_vec(),
        ..Default::default()
    }
}

pub(super) fn node(op: &str, inputs: &[&str], output: &str, name: &str) -> NodeProto {
    NodeProto {
        op_type: op.to_string(),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: vec![output.to_string()],
        name: name.to_string(),
        ..Default::default()
    }
}

/// A float tensor named `name` (empty for a Constant node's value).
pub(super) fn float_tensor(name: &str, dims: &[i64], values: &[f32]) -> TensorProto {
    TensorProto {
        name: name.to_string(),
        dims: dims.to_vec(),
        data_type: tensor_proto::DataType::Float as i32,
        float_data: values.to_vec(),
        ..Default::default()
    }
}

/// A Constant node giving a float tensor (a node, not an initializer: IR
/// versions before 4 would need every initializer among the inputs).
fn constant(name: &str, dims: &[i64], values: &[f32]) -> NodeProto {
    let value = float_tensor("", dims, values);
    let mut n = node("Constant", &[], name, name);
    n.attribute.push(AttributeProto {
        name: "value".to_string(),
        r#type: attribute_proto::AttributeType::Tensor as i32,
        t: Some(value),
        ..Default::default()
    });
    n
}

/// Every value name in the graph, so new ones never collide.
struct Names(HashSet<String>);

impl Names {
    fn of(graph: &GraphProto) -> Self {
        let mut set: HashSet<String> = graph
            .node
            .iter()
            .flat_map(|n| n.input.iter().chain(&n.output))
            .cloned()
            .collect();
        set.extend(graph.initializer.iter().map(|t| t.name.clone()));
        set.extend(
            graph
                .input
                .iter()
                .chain(&graph.output)
                .map(|v| v.name.clone()),
        );
        Names(set)
    }

    fn fresh(&mut self, wanted: &str) -> String {
        let mut name = wanted.to_string();
        let mut n = 1;
        while !self.0.insert(name.clone()) {
            name = format!("{wanted}_{n}");
            n += 1;
        }
        name
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_models::{
        first_output, floats, prelu_model, shape_of, slopes, test_input,
    };
    use super::*;
    use tract_onnx::prelude::*;

    fn run(model: &ModelProto, x: &[f32]) -> Vec<f32> {
        let m = tract_onnx::onnx().model_for_proto_model(model).unwrap();
        let input = Tensor::from_shape(&shape_of(x.len()), x).unwrap();
        first_output(m.into_optimized().unwrap(), input)
    }

    #[test]
    fn tiny_weights_become_zero_wherever_they_are_stored() {
        let mut raw = floats("raw", &[3], &[]);
        for v in [1e-30f32, -0.5, 3e-11] {
            raw.raw_data.extend_from_slice(&v.to_le_bytes());
        }
        let mut ints = floats("ints", &[1], &[]);
        ints.data_type = tensor_proto::DataType::Int32 as i32;
        ints.int32_data = vec![0];
        let mut model = prelu_model(&[1e-34, 0.25, -1e-12], 9);
        let graph = model.graph.as_mut().unwrap();
        graph.initializer.extend([raw, ints]);
        let mut constant = constant("c", &[], &[0.0]);
        constant.attribute[0].t.as_mut().unwrap().float_data = vec![5e-20, 1.0];
        graph.node.insert(0, constant);

        let report = clean(
            &mut model,
            Hygiene {
                zero_tiny_weights: true,
                rewrite_prelu: false,
            },
            PreluForm::Convolutions,
        );
        assert_eq!(report.zeroed, 2 + 2 + 1);
        assert_eq!(report.prelu_rewritten, 0);
        let graph = model.graph.as_ref().unwrap();
        assert_eq!(graph.initializer[0].float_data, vec![0.0, 0.25, 0.0]);
        let raw: Vec<f32> = graph.initializer[1]
            .raw_data
            .chunks_exact(4)
            .map(le_f32)
            .collect();
        assert_eq!(raw, vec![0.0, -0.5, 0.0]);
        assert_eq!(
            graph.node[0].attribute[0].t.as_ref().unwrap().float_data,
            vec![0.0, 1.0]
        );
    }

    #[test]
    fn prelu_rewrite_is_bit_exact() {
        let before = prelu_model(&[0.25, -1.5, 0.0], 9);
        let x = test_input(3);
        let mut after = before.clone();
        let report = clean(&mut after, Hygiene::default(), PreluForm::Elementwise);
        assert_eq!(report.prelu_rewritten, 1);
        assert_eq!(ops(&after), ["Constant", "Relu", "Min", "Mul", "Add"]);
        assert_same_outputs(&before, &after, &x);
    }

    /// `prelu_model` with a 1x1 Conv (C -> C channels) in front of the PRelu.
    fn conv_prelu_model(slope: &[f32]) -> ModelProto {
        let mut model = prelu_model(slope, 9);
        let graph = model.graph.as_mut().unwrap();
        let c = slope.len();
        let weight: Vec<f32> = (0..c * c)
            .map(|k| ((k * 7) % 11) as f32 * 0.1 - 0.5)
            .collect();
        let dims = [c as i64, c as i64, 1, 1];
        graph.initializer.push(floats("w", &dims, &weight));
        graph.node.insert(0, node("Conv", &["x", "w"], "c", "conv"));
        graph.node[1].input[0] = "c".into();
        model
    }

    fn ops(model: &ModelProto) -> Vec<&str> {
        let graph = model.graph.as_ref().unwrap();
        graph.node.iter().map(|n| n.op_type.as_str()).collect()
    }

    /// The same values from `before` and `after`, bit for bit (zeros of
    /// either sign are equal), on tract and on onnxruntime.
    fn assert_same_outputs(before: &ModelProto, after: &ModelProto, x: &[f32]) {
        let same = |a: &[f32], b: &[f32]| a.len() == x.len() && a == b;
        let (a, b) = (run(before, x), run(after, x));
        assert!(same(&a, &b), "tract: {a:?} != {b:?}");
        let (a, b) = (run_ort(before, x), run_ort(after, x));
        assert!(same(&a, &b), "onnxruntime: {a:?} != {b:?}");
    }

    fn run_ort(model: &ModelProto, x: &[f32]) -> Vec<f32> {
        use super::super::blob::Blob;
        use super::super::onnxruntime::{library_path, OrtNet};
        use prost::Message;
        let library = library_path(None).expect("ORT_DYLIB_PATH (run through scripts/test.sh)");
        let net = OrtNet::load("test", &model.encode_to_vec(), &library, 1, None, false).unwrap();
        let input = Blob {
            shape: shape_of(x.len()).to_vec(),
            data: x.to_vec(),
        };
        net.run(&input).unwrap().remove(0).data
    }

    #[test]
    fn prelu_after_a_conv_becomes_two_depthwise_convolutions() {
        // 32 channels: enough for onnxruntime's blocked layout (blocks of
        // 8 or 16), where the Relu and the Add fuse into the convolutions.
        let channels = 32;
        let x = test_input(channels);
        let before = conv_prelu_model(&slopes(channels));
        let mut after = before.clone();
        let report = clean(&mut after, Hygiene::default(), PreluForm::Convolutions);
        assert_eq!((report.prelu_rewritten, report.prelu_as_conv), (1, 1));
        // No elementwise form left, so no zero constant for it.
        let expected = [
            "Conv", "Constant", "Constant", "Conv", "Relu", "Conv", "Add",
        ];
        assert_eq!(ops(&after), expected);
        // The slope moved into the rewrite's constants.
        let graph = after.graph.as_ref().unwrap();
        assert!(graph.initializer.iter().all(|t| t.name != "slope"));
        assert_within_a_rounding(&before, &after, &x);
        // For onnxruntime on a GPU, the elementwise form, exact.
        let mut elementwise = before.clone();
        let report = clean(&mut elementwise, Hygiene::default(), PreluForm::Elementwise);
        assert_eq!((report.prelu_rewritten, report.prelu_as_conv), (1, 0));
        assert_same_outputs(&before, &elementwise, &x);
    }

    /// `after` (the convolution form of `conv_prelu_model`'s PRelu) gives
    /// PRelu's values where the Conv's output is >= 0, and within 4 roundings
    /// of that output elsewhere, on both runtimes.
    fn assert_within_a_rounding(before: &ModelProto, after: &ModelProto, x: &[f32]) {
        let mut conv_only = before.clone();
        let graph = conv_only.graph.as_mut().unwrap();
        graph.node.truncate(1);
        graph.node[0].output[0] = "y".into();
        type Runner = fn(&ModelProto, &[f32]) -> Vec<f32>;
        let runs: [(&str, Runner); 2] = [("tract", run), ("onnxruntime", run_ort)];
        for (runtime, run) in runs {
            let (pre, exact, rewritten) = (run(&conv_only, x), run(before, x), run(after, x));
            assert_eq!(rewritten.len(), x.len(), "{runtime}");
            let mut negative = 0;
            for ((p, e), r) in pre.iter().zip(&exact).zip(&rewritten) {
                if *p >= 0.0 {
                    assert_eq!(e, r, "{runtime}: PRelu({p})");
                } else {
                    negative += 1;
                    let bound = 4.0 * f32::EPSILON * p.abs();
                    assert!(
                        (e - r).abs() <= bound,
                        "{runtime}: PRelu({p}) = {e}, got {r}"
                    );
                }
            }
            assert!(negative > 0, "{runtime}: no negative input tested");
        }
    }

    /// SFace's shape: Conv, BatchNormalization, PRelu, every weight also a
    /// graph input (an older exporter's habit). The weights leave the
    /// inputs, the PRelu becomes convolutions through the BatchNormalization,
    /// and the values stay within a few roundings on both runtimes.
    #[test]
    fn weights_leave_the_inputs_and_a_prelu_after_batch_norm_becomes_convolutions() {
        let channels = 8;
        let x = test_input(channels);
        let mut before = conv_prelu_model(&slopes(channels));
        let graph = before.graph.as_mut().unwrap();
        let c = channels as i64;
        let scale: Vec<f32> = (0..channels).map(|k| 0.5 + k as f32 * 0.1).collect();
        let bias: Vec<f32> = (0..channels).map(|k| k as f32 * 0.05 - 0.2).collect();
        let mean: Vec<f32> = (0..channels).map(|k| k as f32 * 0.01).collect();
        let var = vec![1.0f32; channels];
        for (name, values) in [("s", scale), ("b", bias), ("m", mean), ("v", var)] {
            graph.initializer.push(floats(name, &[c], &values));
        }
        let bn = node("BatchNormalization", &["c", "s", "b", "m", "v"], "n", "bn");
        graph.node.insert(1, bn);
        graph.node[2].input[0] = "n".into();
        let listed: Vec<_> = graph
            .initializer
            .iter()
            .map(|t| {
                let mut input = graph.input[0].clone();
                input.name = t.name.clone();
                // Of any shape: the weight's own.
                let kind = input.r#type.as_mut().and_then(|t| t.value.as_mut());
                if let Some(tract_onnx::pb::type_proto::Value::TensorType(tensor)) = kind {
                    tensor.shape = None;
                }
                input
            })
            .collect();
        graph.input.extend(listed);
        let weights = graph.initializer.len();
        before.ir_version = 6;

        let mut after = before.clone();
        let report = clean(&mut after, Hygiene::default(), PreluForm::Convolutions);
        assert_eq!(report.inputs_fixed, weights);
        assert_eq!((report.prelu_rewritten, report.prelu_as_conv), (1, 1));
        let graph = after.graph.as_ref().unwrap();
        assert_eq!(graph.input.len(), 1, "only the image is an input");
        for (a, b) in run_ort(&before, &x).iter().zip(run_ort(&after, &x)) {
            assert!((a - b).abs() <= 1e-5 * a.abs().max(1.0), "{a} against {b}");
        }
    }

    #[test]
    fn prelu_on_data_of_unknown_layout_stays_elementwise() {
        // Its input is a graph input, not a Conv's output.
        let mut model = prelu_model(&[0.25, 0.5, 1.0], 9);
        let report = clean(&mut model, Hygiene::default(), PreluForm::Convolutions);
        assert_eq!((report.prelu_rewritten, report.prelu_as_conv), (1, 0));
        assert_eq!(ops(&model), ["Constant", "Relu", "Min", "Mul", "Add"]);
    }

    #[test]
    fn the_native_form_keeps_prelu() {
        let mut model = conv_prelu_model(&slopes(4));
        let report = clean(&mut model, Hygiene::default(), PreluForm::Native);
        assert_eq!((report.prelu_rewritten, report.zeroed), (0, 0));
        assert_eq!(report.skipped, None);
        assert_eq!(ops(&model), ["Conv", "PRelu"]);
    }

    #[test]
    fn old_opsets_keep_their_prelu() {
        let mut model = prelu_model(&[0.25, 0.5, 1.0], 7);
        let report = clean(&mut model, Hygiene::default(), PreluForm::Convolutions);
        assert_eq!(report.prelu_rewritten, 0);
        assert!(report.skipped.unwrap().contains("opset 7"));
        assert_eq!(model.graph.unwrap().node.len(), 1);
    }

    #[test]
    fn new_names_never_collide() {
        let mut model = prelu_model(&[0.25, 0.5, 1.0], 9);
        let graph = model.graph.as_mut().unwrap();
        graph.node[0].output = vec!["act/relu".into()];
        graph.output[0].name = "act/relu".into();
        clean(&mut model, Hygiene::default(), PreluForm::Convolutions);
        let graph = model.graph.unwrap();
        let outputs: Vec<&String> = graph.node.iter().flat_map(|n| &n.output).collect();
        let unique: HashSet<&&String> = outputs.iter().collect();
        assert_eq!(unique.len(), outputs.len(), "{outputs:?}");
        assert_eq!(graph.node.last().unwrap().output[0], "act/relu");
    }
}
