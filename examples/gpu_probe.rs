//! What a KIND_GPU instance of the face backend decides at init, run outside
//! the server: `gpu_probe DEVICE MIN_CAPABILITY [--copy]`.
//!
//! Prints `OK <device>` or `ERR <kind>: <message>` (exit 0 / 1), the same
//! `Gpu::open` the instance calls. `--copy` also copies a buffer through
//! `copy_to_host` (the path of inputs in CUDA shared memory) and checks it.
//! tests/test_gpu.py runs it without a driver and with tests/fake_cuda.

use triton_face::gpu::{copy_to_host, Gpu};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (Some(device), Some(min)) = (
        args.get(1).and_then(|d| d.parse::<i32>().ok()),
        args.get(2).and_then(|m| m.parse().ok()),
    ) else {
        eprintln!("usage: gpu_probe DEVICE MIN_CAPABILITY [--copy]");
        std::process::exit(2);
    };
    match Gpu::open("gpu_probe", device, min) {
        Ok(gpu) => {
            gpu.bind().expect("bind the device to this thread");
            println!("OK {}", gpu.info);
            if args.iter().any(|a| a == "--copy") {
                let source: Vec<u8> = (0..=255).collect();
                let copy = copy_to_host(source.as_ptr(), source.len(), device.into())
                    .expect("copy to host");
                assert_eq!(copy, source, "copied bytes differ");
                println!("COPY OK {} bytes", copy.len());
            }
        }
        Err(e) => {
            println!("ERR {:?}: {}", e.kind(), e.message());
            std::process::exit(1);
        }
    }
}
