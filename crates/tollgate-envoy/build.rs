//! Compiles the trimmed Envoy protos (the rate limit and quota services, and the xDS stream
//! that brings the rate limit configuration) with protox (pure Rust: no system protoc needed).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    let descriptors = protox::compile(
        [
            "envoy/service/ratelimit/v3/rls.proto",
            "envoy/service/rate_limit_quota/v3/rlqs.proto",
            "envoy/service/discovery/v3/ads.proto",
            "ratelimit/config/ratelimit/v3/rls_conf.proto",
        ],
        ["proto"],
    )?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .compile_fds(descriptors)?;
    Ok(())
}
