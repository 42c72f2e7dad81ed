//! Compiles the trimmed Envoy protos with protox (pure Rust: no system protoc needed).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    let descriptors = protox::compile(
        [
            "envoy/service/ratelimit/v3/rls.proto",
            "envoy/service/rate_limit_quota/v3/rlqs.proto",
        ],
        ["proto"],
    )?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .compile_fds(descriptors)?;
    Ok(())
}
