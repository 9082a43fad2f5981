//! Write an ONNX model as the engine hands it to onnxruntime on the CPU:
//! tiny weights zeroed, PRelu as depthwise convolutions (hygiene.rs). The
//! int8 copies are quantized from this form (scripts/quantize.py): a PRelu
//! left in a quantized graph runs in float between a dequantize and a
//! quantize.
//!
//!     onnx_clean MODEL.onnx OUT.onnx
use std::path::Path;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 3 {
        eprintln!("usage: onnx_clean MODEL.onnx OUT.onnx");
        std::process::exit(2);
    }
    let fail = |e: String| -> ! {
        eprintln!("onnx_clean: {e}");
        std::process::exit(1)
    };
    let (bytes, report) = triton_face::engine::onnx::cleaned_for_onnxruntime(Path::new(&args[1]))
        .unwrap_or_else(|e| fail(e.to_string()));
    std::fs::write(&args[2], bytes).unwrap_or_else(|e| fail(format!("{}: {e}", args[2])));
    println!("{}: {report}", args[2]);
}
