//! The `tollgate` server: an HTTP check API, Envoy's rate limit service, and a rate-limiting
//! reverse proxy, on the Tollgate library. The binary (`main.rs`) only parses flags and calls
//! in here.

pub mod rls;
