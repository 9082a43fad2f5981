//! Run one ONNX model with the engine's runtime (tract) on a raw input and
//! write its outputs, for comparing with another runtime:
//!
//!     onnx_run MODEL.onnx INPUT.f32 D0,D1,D2,D3 OUTPUT_PREFIX
//!
//! INPUT.f32 holds little-endian f32 values; each output k is written to
//! OUTPUT_PREFIX.k.f32 with its shape in OUTPUT_PREFIX.k.shape.
use std::path::Path;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 5 {
        eprintln!("usage: onnx_run MODEL.onnx INPUT.f32 D0,D1,... OUTPUT_PREFIX");
        std::process::exit(2);
    }
    let bytes = std::fs::read(&args[2]).expect("read input");
    let input: Vec<f32> = bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    let shape: Vec<usize> = args[3]
        .split(',')
        .map(|d| d.parse().expect("shape"))
        .collect();
    let outputs = triton_face::engine::onnx::run_model(Path::new(&args[1]), &input, &shape)
        .unwrap_or_else(|e| {
            eprintln!("onnx_run: {e}");
            std::process::exit(1)
        });
    for (k, (shape, values)) in outputs.iter().enumerate() {
        let data: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        std::fs::write(format!("{}.{k}.f32", args[4]), data).expect("write output");
        let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
        std::fs::write(format!("{}.{k}.shape", args[4]), dims.join(",")).expect("write shape");
    }
}
