//! Tools for measuring and showing Tollgate, kept out of the production `tollgate` binary:
//! a load generator for a running server ([`bench`]), a replay of traffic patterns through the
//! algorithms ([`simulate`]) and a three-region demonstration of one global limit ([`regions`]).
//! The binary (`main.rs`) only calls [`cli::main`].

pub mod bench;
pub mod cli;
pub mod regions;
pub mod simulate;
