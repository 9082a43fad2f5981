//! What a KIND_GPU instance of the face backend decides at init, run outside
//! the server: `gpu_probe DEVICE MIN_CAPABILITY [--copy-from SOURCE_DEVICE]`.
//!
//! Prints `OK <device>` or `ERR <kind>: <message>` (exit 0 / 1): the same
//! `Gpu::open` the instance calls. `--copy-from` then copies a buffer "on"
//! SOURCE_DEVICE through `copy_to_host` (the path of inputs in CUDA shared
//! memory) and checks the bytes and that DEVICE is still the thread's current
//! device. The buffer is host memory: that copy is meant for the stand-in
//! driver of tests/fake_cuda, not for real hardware.
//! tests/test_gpu.py runs it without a driver and with the stand-in.

use triton_face::gpu::{copy_to_host, Gpu};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let number = |i: usize| args.get(i).and_then(|d| d.parse::<i32>().ok());
    let (Some(device), Some(min)) = (number(1), args.get(2).and_then(|m| m.parse().ok())) else {
        eprintln!("usage: gpu_probe DEVICE MIN_CAPABILITY [--copy-from SOURCE_DEVICE]");
        std::process::exit(2);
    };
    let copy_from = match args.get(3).map(String::as_str) {
        Some("--copy-from") => Some(number(4).unwrap_or(device)),
        _ => None,
    };
    match Gpu::open("gpu_probe", device, min) {
        Ok(gpu) => {
            gpu.bind().expect("bind the device to this thread");
            println!("OK {}", gpu.info);
            if let Some(source) = copy_from {
                let bytes: Vec<u8> = (0..=255).collect();
                let copy = copy_to_host(bytes.as_ptr(), bytes.len(), source.into())
                    .unwrap_or_else(|e| panic!("copy to host: {e}"));
                assert_eq!(copy, bytes, "copied bytes differ");
                let still = if gpu.is_current() { "still" } else { "NOT" };
                println!(
                    "COPY OK {} bytes from GPU {source}; GPU {device} {still} current",
                    copy.len()
                );
            }
        }
        Err(e) => {
            println!("ERR {:?}: {}", e.kind(), e.message());
            std::process::exit(1);
        }
    }
}
