//! Real `redis-server` processes for tests: a single node or a 3-master/3-replica Redis Cluster,
//! each on free loopback ports, owned by a value that stops them when dropped; and a
//! [`FaultyLink`], a proxy that puts latency, stalls, resets and partitions between a client
//! and one of them. [`llm::LlmStub`] stands in for an LLM API that reports usage, and
//! [`tollgate::Tollgate`] runs the `tollgate` binary itself.
//!
//! Every server is started under a small watchdog shell that kills it when the test process
//! exits, so a test that panics, or a cluster shared through a `static`, never leaves servers
//! behind. A missing `redis-server` is a panic with a clear message, never a skipped test.

mod cluster;
mod faults;
pub mod llm;
mod ports;
mod sentinel;
mod server;
mod tls;
pub mod tollgate;

pub use cluster::RedisCluster;
pub use faults::FaultyLink;
pub use ports::free_port;
pub use sentinel::{DATA_PASSWORD, MASTER_NAME, RedisSentinels, SENTINEL_PASSWORD};
pub use server::RedisServer;
pub use tls::Certificates;
