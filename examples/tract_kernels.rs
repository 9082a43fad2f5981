//! Each of our tract ops (engine/onnx/tract_ops) against tract's own path for
//! the same stage, side by side in one run: every sample model is loaded on
//! tract with all our kernels, with each one switched off in turn (tract's own
//! op there, e.g. its matrix product for the 1x1 convolutions), and with none;
//! the loads run in interleaved rounds on one thread, nodes timed one by one.
//!
//! A stage's time with our op is what its nodes take (with the activation
//! folded into them); with tract's, that plus how much longer the whole model
//! takes without ours. An op earns its place at 1.3x or more.
//!
//! `cargo run --release --example tract_kernels -- [MODELS_DIR] [ROUNDS]`
//! (default assets/onnx, 40 rounds).

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use triton_face::engine::onnx::{Kernels, TractBench};

const MODELS: [&str; 3] = ["fr_detect.onnx", "fr_landmark.onnx", "fr_feature.onnx"];

/// Each op of ours: its name in the bench, its node names, and the kernels
/// without it.
fn ops() -> Vec<(&'static str, &'static [&'static str], Kernels)> {
    let all = Kernels::ALL;
    vec![
        (
            "depthwise",
            &["FaceDepthwiseConv"],
            Kernels {
                depthwise: false,
                ..all
            },
        ),
        (
            "pointwise (1x1)",
            &["FaceGemmConv1x1"],
            Kernels {
                pointwise: false,
                ..all
            },
        ),
        (
            "im2col",
            &["FaceGemmConvIm2col"],
            Kernels {
                im2col: false,
                ..all
            },
        ),
        (
            "softmax",
            &["FaceShortSoftmax"],
            Kernels {
                softmax: false,
                ..all
            },
        ),
        (
            "prelu",
            &["FaceChannelPrelu"],
            Kernels {
                prelu: false,
                ..all
            },
        ),
    ]
}

/// Values in [-1, 1], the same every run (splitmix64).
fn input(len: usize) -> Vec<f32> {
    (0..len as u64)
        .map(|i| {
            let mut z = i.wrapping_add(0x9E37_79B9_7F4A_7C15);
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            ((z ^ (z >> 31)) >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect()
}

fn p50(times: &mut [Duration]) -> f64 {
    times.sort();
    times[times.len() / 2].as_secs_f64() * 1e3
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let dir = PathBuf::from(args.first().map_or("assets/onnx", String::as_str));
    let rounds: usize = args.get(1).map_or(40, |r| r.parse().expect("ROUNDS"));
    let ops = ops();
    println!("tract 0.23.9; {rounds} rounds, one thread");
    // Per op over a one-face frame (each model once): ours, tract's.
    let mut frame = vec![(0.0, 0.0); ops.len()];
    for model in MODELS {
        let path = dir.join(model);
        let mut configs = vec![("all ours", Kernels::ALL)];
        configs.extend(ops.iter().map(|(name, _, k)| (*name, *k)));
        configs.push(("none (tract alone)", Kernels::NONE));
        let nets: Vec<TractBench> = configs
            .iter()
            .map(|(_, k)| TractBench::load(&path, *k).expect("load"))
            .collect();
        let data = input(nets[0].shape().iter().product());
        let mut times = vec![Vec::new(); nets.len()];
        let mut ours_by_op = HashMap::new();
        for round in 0..rounds + 3 {
            for (i, net) in nets.iter().enumerate() {
                let mut by_op = HashMap::new();
                let t = net.run(&data, &mut by_op).expect("run");
                if round >= 3 {
                    times[i].push(t);
                    if i == 0 {
                        for (op, d) in by_op {
                            *ours_by_op.entry(op).or_insert(Duration::ZERO) += d;
                        }
                    }
                }
            }
        }
        let p: Vec<f64> = times.iter_mut().map(|t| p50(t)).collect();
        println!(
            "\n{model}: model p50 {:.2} ms with all ours, {:.2} ms with none",
            p[0],
            p[p.len() - 1]
        );
        println!(
            "  {:<18} {:>10} {:>12} {:>14} {:>7}",
            "op", "nodes ms", "model ms", "stage tract ms", "ratio"
        );
        for (i, (name, nodes, _)) in ops.iter().enumerate() {
            let ours: f64 = nodes
                .iter()
                .filter_map(|n| ours_by_op.get(*n))
                .map(|d| d.as_secs_f64() * 1e3 / rounds as f64)
                .sum();
            let extra = p[i + 1] - p[0];
            let prelus = nets[0].own.prelu;
            if ours == 0.0 && (*name != "prelu" || prelus == 0) {
                println!("  {name:<18} {:>10} (not in this model)", "-");
                continue;
            }
            if ours == 0.0 {
                // PRelu runs folded into our convolutions' output pass: no
                // node of its own; tract's costs the model `extra`.
                println!(
                    "  {name:<18} {:>10} {:>12.2} ({prelus} folded into convolutions; model {:+.2} ms, {:.2}x)",
                    "-",
                    p[i + 1],
                    extra,
                    p[i + 1] / p[0]
                );
                continue;
            }
            let theirs = ours + extra;
            frame[i].0 += ours;
            frame[i].1 += theirs;
            println!(
                "  {name:<18} {ours:>10.2} {:>12.2} {theirs:>14.2} {:>6.2}x",
                p[i + 1],
                theirs / ours
            );
        }
    }
    println!("\none-face frame (the three models once each):");
    println!(
        "  {:<18} {:>10} {:>14} {:>7}",
        "op", "ours ms", "tract's ms", "ratio"
    );
    for ((name, _, _), (ours, theirs)) in ops.iter().zip(frame) {
        if ours > 0.0 {
            println!(
                "  {name:<18} {ours:>10.2} {theirs:>14.2} {:>6.2}x",
                theirs / ours
            );
        }
    }
}
