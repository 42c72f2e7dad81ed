//! The command line: `bench`, `simulate`, `regions`.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::bench::BenchArgs;
use crate::regions::RegionsArgs;
use crate::simulate::SimulateArgs;

/// Tollgate's load generator and demonstrations.
#[derive(Debug, Parser)]
#[command(name = "tollgate-tools", version, about)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Drive the HTTP API, the gRPC service or the proxy with load and report latencies.
    Bench(BenchArgs),
    /// Replay a traffic pattern through the algorithms and chart what each admits.
    Simulate(SimulateArgs),
    /// Run one global limit across three regions on this machine (Redis servers, `tollgate
    /// serve`s and delayed links to the global store as child processes) and report what it
    /// admitted.
    Regions(RegionsArgs),
}

/// Parses the command line and runs the command.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("tollgate-tools: cannot start the runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Bench(args) => crate::bench::run(args).await,
            Command::Simulate(args) => crate::simulate::run(args).await,
            Command::Regions(args) => crate::regions::run(args).await,
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("tollgate-tools: {error}");
            ExitCode::FAILURE
        }
    }
}
