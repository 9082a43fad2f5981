//! Softmax over a short last axis, row by row in one loop. tract calls its
//! three vector routines (max, exp-sum, scale) per row, set up for long
//! rows: the detector's 4,420 rows of two class scores took 0.55 ms there,
//! a twentieth of the whole detector.

use tract_onnx::prelude::*;
use tract_onnx::tract_core::internal::*;
use tract_onnx::tract_core::ops::nn::{Softmax, SoftmaxKind};

/// Longest row this op takes; longer ones suit tract's vector routines.
const MAX_ROW: usize = 16;

/// Stands in for a float softmax over the last axis of rows of at most
/// `MAX_ROW` values.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ShortSoftmax;

impl ShortSoftmax {
    /// The op for `softmax` on data of type and shape `input`, when it
    /// covers it; `None` otherwise.
    pub fn for_softmax(softmax: &Softmax, input: &TypedFact) -> Option<ShortSoftmax> {
        let rank = input.rank();
        let row = input.shape.last()?.to_usize().ok()?;
        let covered = softmax.kind == SoftmaxKind::Softmax
            && softmax.quant_output_dt.is_none()
            && input.datum_type == f32::datum_type()
            && *softmax.axes == [rank - 1]
            && (1..=MAX_ROW).contains(&row);
        covered.then_some(ShortSoftmax)
    }
}

/// `exp(x - max) / sum`, in place over each row.
fn softmax_rows(data: &mut [f32], row: usize) {
    for values in data.chunks_exact_mut(row) {
        let max = values.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let mut sum = 0.0;
        for v in values.iter_mut() {
            *v = (*v - max).exp();
            sum += *v;
        }
        let scale = sum.recip();
        values.iter_mut().for_each(|v| *v *= scale);
    }
}

impl Op for ShortSoftmax {
    fn name(&self) -> StaticName {
        "FaceShortSoftmax".into()
    }

    fn validation(&self) -> Validation {
        Validation::Rounding
    }

    op_as_typed_op!();
}

impl EvalOp for ShortSoftmax {
    op_out_of_plan!();

    fn eval(&self, _ctx: &EvalContext, inputs: TVec<TValue>) -> TractResult<TVec<TValue>> {
        let input = args_1!(inputs);
        let row = *input.shape().last().context("softmax of a scalar")?;
        ensure!(row > 0, "softmax over an empty axis");
        let mut output = input.into_tensor();
        let mut view = output.try_as_plain_ram_mut()?;
        softmax_rows(view.as_slice_mut::<f32>()?, row);
        Ok(tvec!(output.into_tvalue()))
    }
}

impl TypedOp for ShortSoftmax {
    fn output_facts(&self, inputs: &[&TypedFact]) -> TractResult<TVec<TypedFact>> {
        Ok(tvec!(inputs[0].without_value()))
    }

    as_op!();
}

#[cfg(test)]
mod tests {
    use super::super::super::test_models::first_output;
    use super::super::optimize;
    use super::*;

    /// x [3, 4, row] -> softmax over `axis` -> y.
    fn model(row: usize, axis: usize) -> TypedModel {
        let mut model = TypedModel::default();
        let x = model.add_source("x", f32::fact([3, 4, row])).unwrap();
        let op = Softmax::new(tvec![axis], None, SoftmaxKind::Softmax);
        let y = model.wire_node("softmax", op, &[x]).unwrap()[0];
        model.select_output_outlets(&[y]).unwrap();
        model
    }

    #[test]
    fn short_rows_of_the_last_axis_agree_with_tract() {
        for (row, axis, ours) in [(2, 2, 1), (16, 2, 1), (17, 2, 0), (2, 1, 0)] {
            let values: Vec<f32> = (0..12 * row)
                .map(|i| ((i * 7) % 19) as f32 * 0.7 - 6.0)
                .collect();
            let x = Tensor::from_shape(&[3, 4, row], &values).unwrap();
            let theirs = first_output(model(row, axis).into_optimized().unwrap(), x.clone());
            let (optimized, kernels) =
                optimize(model(row, axis), super::super::Kernels::ALL).unwrap();
            assert_eq!(kernels.softmax, ours, "row {row} axis {axis}");
            let got = first_output(optimized, x);
            for (a, b) in got.iter().zip(&theirs) {
                assert!((a - b).abs() <= 1e-6, "row {row} axis {axis}: {a} vs {b}");
            }
        }
    }

    #[test]
    fn rows_sum_to_one_in_the_ratios_of_their_exponentials() {
        let mut data = [0.0, 2f32.ln(), 1.0, 1.0, -1000.0, 1000.0];
        softmax_rows(&mut data, 2);
        let expected = [1.0 / 3.0, 2.0 / 3.0, 0.5, 0.5, 0.0, 1.0];
        for (a, b) in data.iter().zip(expected) {
            assert!((a - b).abs() < 1e-6, "{data:?}");
        }
    }
}
