//! Code generated from the trimmed Envoy protos and envoyproxy/ratelimit's configuration proto
//! (see `build.rs`), nested by package as the generated code expects, with short aliases.

#![allow(missing_docs, unreachable_pub, clippy::all)]

/// The `envoy` packages.
pub mod envoy {
    pub mod service {
        pub mod ratelimit {
            pub mod v3 {
                tonic::include_proto!("envoy.service.ratelimit.v3");
            }
        }

        pub mod rate_limit_quota {
            pub mod v3 {
                tonic::include_proto!("envoy.service.rate_limit_quota.v3");
            }
        }

        pub mod discovery {
            pub mod v3 {
                tonic::include_proto!("envoy.service.discovery.v3");
            }
        }
    }

    pub mod extensions {
        pub mod common {
            pub mod ratelimit {
                pub mod v3 {
                    tonic::include_proto!("envoy.extensions.common.ratelimit.v3");
                }
            }
        }
    }

    pub mod r#type {
        pub mod v3 {
            tonic::include_proto!("envoy.r#type.v3");
        }
    }

    pub mod config {
        pub mod core {
            pub mod v3 {
                tonic::include_proto!("envoy.config.core.v3");
            }
        }
    }
}

/// envoyproxy/ratelimit's configuration as xDS resources.
pub mod ratelimit {
    pub mod config {
        pub mod ratelimit {
            pub mod v3 {
                tonic::include_proto!("ratelimit.config.ratelimit.v3");
            }
        }
    }
}

/// The `google.rpc` package: an xDS NACK's `error_detail`.
pub mod google {
    pub mod rpc {
        tonic::include_proto!("google.rpc");
    }
}

pub use envoy::config::core::v3 as core;
pub use envoy::extensions::common::ratelimit::v3 as common;
pub use envoy::service::discovery::v3 as discovery;
pub use envoy::service::rate_limit_quota::v3 as quota;
pub use envoy::service::ratelimit::v3 as service;
pub use envoy::r#type::v3 as types;
pub use ratelimit::config::ratelimit::v3 as rls_conf;
