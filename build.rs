//! Generates Rust bindings for the Triton C API from the project's own header
//! (`triton-core-headers/`). The output lives in OUT_DIR and is never committed.

use std::env;
use std::path::{Path, PathBuf};

fn main() {
    let header = "triton-core-headers/triton_backend_api.h";
    println!("cargo:rerun-if-changed={header}");
    // Export only our TRITONBACKEND_* entry points: symbols that dependencies
    // (static archives: usearch's C++ core, SQLite) mark as public stay
    // inside the library.
    println!("cargo:rustc-cdylib-link-arg=-Wl,--exclude-libs,ALL");
    // The libraries the backend carries (scripts/portable_lib.sh puts them in
    // triton_face.libs/ beside it) are found there before the system's. An
    // RPATH, not a RUNPATH: it also serves what those libraries load
    // (libdlib's libpng, OpenBLAS's libgfortran), which name no path.
    println!("cargo:rustc-cdylib-link-arg=-Wl,--disable-new-dtags,-rpath,$ORIGIN/triton_face.libs");

    detect_dlib_cuda();
    build_huge_pages();
    build_dlib_shim();

    let out = PathBuf::from(env::var("OUT_DIR").unwrap());
    generate_types(header, &out.join("triton_types.rs"));
    for group in API_GROUPS {
        generate_api(header, group, &out.join(format!("{}.rs", group.name)));
    }
}

/// One set of server functions resolved together at run time. A group is
/// all or nothing: `TritonApi` is required (the backend refuses to load
/// without it), the others degrade on their own.
struct ApiGroup {
    name: &'static str,
    functions: &'static str,
}

/// Every server function we call belongs to exactly one group.
const API_GROUPS: &[ApiGroup] = &[
    // What it takes to say "no" to the server: without these no error can be
    // returned at all.
    ApiGroup {
        name: "ErrorApi",
        functions: "TRITONSERVER_Error(New|Code|Message|Delete)",
    },
    // Logging falls back to stderr.
    ApiGroup {
        name: "LogApi",
        functions: "TRITONSERVER_Log(IsEnabled|Message)",
    },
    // Custom metrics are optional: the gauge is skipped, with a warning.
    ApiGroup {
        name: "MetricsApi",
        functions: "TRITONSERVER_(Metric|Parameter).*",
    },
    ApiGroup {
        name: "TritonApi",
        functions: "TRITON(SERVER|BACKEND)_.*",
    },
];

/// Types and constants, once for all groups.
fn generate_types(header: &str, out: &Path) {
    bindgen::Builder::default()
        .header(header)
        .allowlist_type("TRITON(SERVER|BACKEND)_.*")
        .allowlist_var("TRITON(SERVER|BACKEND)_.*")
        // Plain integer constants: the enums are bit flags and codes, matched
        // against raw values coming back from the server.
        .default_enum_style(bindgen::EnumVariation::Consts)
        .prepend_enum_name(false)
        .layout_tests(false)
        .generate()
        .expect("bindgen failed on triton-core-headers/triton_backend_api.h")
        .write_to_file(out)
        .expect("cannot write Triton bindings");
}

/// A struct of function pointers for one group. Calls into the server are
/// resolved when tritonserver has loaded the library (dlsym on the process),
/// not at link time: unit tests link without a server, and a missing symbol
/// becomes an error naming it instead of a loader failure.
fn generate_api(header: &str, group: &ApiGroup, out: &Path) {
    // A function matched by an earlier group belongs to that group.
    let earlier: Vec<&str> = API_GROUPS
        .iter()
        .take_while(|g| g.name != group.name)
        .map(|g| g.functions)
        .collect();
    let mut builder = bindgen::Builder::default()
        .header(header)
        .allowlist_function(group.functions)
        .allowlist_recursively(false)
        .default_enum_style(bindgen::EnumVariation::Consts)
        .prepend_enum_name(false)
        .layout_tests(false)
        .dynamic_library_name(group.name)
        .dynamic_link_require_all(true)
        // The entry points are ours to define (src/lib.rs), not to call.
        .blocklist_function(
            "TRITONBACKEND_(Initialize|Finalize|ModelInitialize|ModelFinalize|\
             ModelInstanceInitialize|ModelInstanceFinalize|ModelInstanceExecute)",
        );
    for functions in earlier {
        builder = builder.blocklist_function(functions);
    }
    builder
        .generate()
        .expect("bindgen failed on triton-core-headers/triton_backend_api.h")
        .write_to_file(out)
        .expect("cannot write Triton bindings");
}

/// Whether the dlib shim is compiled for AVX2+FMA: `FACE_SIMD=avx2` or
/// `baseline`; unset or `auto`: when the building CPU has both (as dlib's own
/// CMake build decides). The engine refuses to load on a CPU without them.
fn dlib_avx2() -> bool {
    println!("cargo:rerun-if-env-changed=FACE_SIMD");
    let target_x86 = env::var("CARGO_CFG_TARGET_ARCH").as_deref() == Ok("x86_64");
    match env::var("FACE_SIMD").as_deref() {
        Ok("avx2") => true,
        Ok("baseline") => false,
        Ok("auto") | Err(_) => target_x86 && host_has_avx2(),
        Ok(other) => panic!("FACE_SIMD must be auto, avx2 or baseline, not {other:?}"),
    }
}

#[cfg(target_arch = "x86_64")]
fn host_has_avx2() -> bool {
    std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
}

#[cfg(not(target_arch = "x86_64"))]
fn host_has_avx2() -> bool {
    false
}

/// usearch's arenas and lookup tables in huge pages (src/gallery/huge_pages.c):
/// its `mmap`, `munmap` and `aligned_alloc` calls go to `__wrap_*`, for every
/// target that links the library.
/// Whole-archive: the wrapper must be in the link before usearch asks for it.
fn build_huge_pages() {
    let file = "src/gallery/huge_pages.c";
    println!("cargo:rerun-if-changed={file}");
    cc::Build::new()
        .file(file)
        .link_lib_modifier("+whole-archive")
        .compile("triton_face_huge_pages");
    println!("cargo:rustc-link-arg=-Wl,--wrap=mmap,--wrap=munmap,--wrap=aligned_alloc");
}

/// Compiles our C++ fence around dlib (src/engine/dlib/shim.cpp), links it
/// with the system dlib and BLAS/LAPACK, and generates its Rust bindings.
fn build_dlib_shim() {
    let dir = "src/engine/dlib";
    println!("cargo:rerun-if-changed={dir}/shim.cpp");
    println!("cargo:rerun-if-changed={dir}/shim.h");
    let mut build = cc::Build::new();
    build
        .cpp(true)
        .file(format!("{dir}/shim.cpp"))
        .flag("-std=c++14")
        // dlib's headers are noisy; our own code is small and reviewed.
        .warnings(false)
        // A second dlib::fatal_error must not abort the process (see shim.cpp).
        .define("DLIB_NO_ABORT_ON_2ND_FATAL_ERROR", None);
    println!("cargo:rustc-check-cfg=cfg(face_dlib_avx2)");
    if dlib_avx2() {
        // dlib's HOG scan, shape predictor and chip extraction are header
        // templates compiled here; dlib picks their SIMD paths from these
        // macros (Debian's libdlib itself is baseline x86-64).
        build.flag("-mavx2").flag("-mfma");
        println!("cargo:rustc-cfg=face_dlib_avx2");
    }
    build.compile("triton_face_dlib_shim");
    for lib in ["dlib", "openblas", "lapack"] {
        println!("cargo:rustc-link-lib={lib}");
    }
    let bindings = bindgen::Builder::default()
        .header(format!("{dir}/shim.h"))
        .allowlist_function("tf_.*")
        .allowlist_type("tf_.*")
        .allowlist_var("TF_.*")
        .derive_default(true)
        .layout_tests(false)
        .generate()
        .expect("bindgen failed on src/engine/dlib/shim.h");
    let out = PathBuf::from(env::var("OUT_DIR").unwrap()).join("dlib_shim.rs");
    bindings
        .write_to_file(&out)
        .expect("cannot write dlib shim bindings");
}

/// Sets `cfg(dlib_cuda)` when the dlib headers we compile against say it was
/// built with CUDA (config.h defines DLIB_USE_CUDA; /usr/local first, where a
/// source build installs), so the backend can say in its log whether the
/// engine runs on the GPU. DLIB_CONFIG_H overrides the path.
fn detect_dlib_cuda() {
    println!("cargo::rustc-check-cfg=cfg(dlib_cuda)");
    println!("cargo:rerun-if-env-changed=DLIB_CONFIG_H");
    let candidates = env::var("DLIB_CONFIG_H")
        .map(|p| vec![p])
        .unwrap_or_else(|_| {
            [
                "/usr/local/include/dlib/config.h",
                "/usr/include/dlib/config.h",
            ]
            .map(String::from)
            .to_vec()
        });
    for path in candidates {
        if let Ok(text) = std::fs::read_to_string(&path) {
            println!("cargo:rerun-if-changed={path}");
            let cuda = text.lines().any(|line| {
                let mut words = line.split_whitespace();
                words.next() == Some("#define") && words.next() == Some("DLIB_USE_CUDA")
            });
            if cuda {
                println!("cargo:rustc-cfg=dlib_cuda");
            }
            return;
        }
    }
    if let Ok(path) = env::var("DLIB_CONFIG_H") {
        println!("cargo:warning=DLIB_CONFIG_H={path} is not readable: assuming dlib without CUDA");
    }
}
