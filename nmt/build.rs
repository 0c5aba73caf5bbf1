//! Compiles ONNX's `onnx.proto` (vendored in `proto/`) with protox (pure
//! Rust; no protoc) into prost messages: the engine reads and rewrites
//! decoder graphs (`cross_attention.rs`) and builds its cache-gather graph.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto_dir = std::path::PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?).join("../proto");
    let file = proto_dir.join("onnx.proto");
    println!("cargo:rerun-if-changed={}", file.display());
    let fds = protox::compile([&file], [&proto_dir])?;
    prost_build::Config::new().compile_fds(fds)?;
    Ok(())
}
