//! Write dlib's ResNet face encoder as dlib's `net_to_xml` XML (its layers
//! and weights), which scripts/dlib_onnx.py turns into an ONNX embedder.
//!
//!     dlib_xml dlib_face_recognition_resnet_model_v1.dat OUT.xml
use std::path::Path;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 3 {
        eprintln!("usage: dlib_xml dlib_face_recognition_resnet_model_v1.dat OUT.xml");
        std::process::exit(2);
    }
    if let Err(e) = triton_face::engine::dlib::encoder_xml(Path::new(&args[1]), Path::new(&args[2]))
    {
        eprintln!("dlib_xml: {e}");
        std::process::exit(1);
    }
}
