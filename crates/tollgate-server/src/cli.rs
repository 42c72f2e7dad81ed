//! The command line: `serve`, `proxy`, `config check`, `bench`, `simulate`, `regions`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::bench::BenchArgs;
use crate::proxy::ProxyArgs;
use crate::regions::RegionsArgs;
use crate::serve::ServeArgs;
use crate::simulate::SimulateArgs;

/// Tollgate: a distributed rate limiter.
#[derive(Debug, Parser)]
#[command(name = "tollgate", version, about)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Log format: human or json.
    #[arg(long, global = true, env = "TOLLGATE_LOG_FORMAT", default_value = "human", value_parser = ["human", "json"])]
    log_format: String,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve the HTTP check API and Envoy's rate limit service (gRPC).
    Serve(ServeArgs),
    /// Proxy to an upstream, applying the policies to every request.
    Proxy(ProxyArgs),
    /// Drive the HTTP API, the gRPC service or the proxy with load and report latencies.
    Bench(BenchArgs),
    /// Replay a traffic pattern through the algorithms and chart what each admits.
    Simulate(SimulateArgs),
    /// Run one global limit across three regions on this machine (Redis servers, servers and
    /// delayed links to the global store as child processes) and report what it admitted.
    Regions(RegionsArgs),
    /// Check configuration files and list every problem.
    Config {
        #[command(subcommand)]
        action: ConfigAction,
    },
}

#[derive(Debug, Subcommand)]
enum ConfigAction {
    /// Check policy files (and with --rls, a directory of envoyproxy/ratelimit files).
    Check {
        /// Policy files.
        files: Vec<PathBuf>,
        /// A directory of envoyproxy/ratelimit configuration files.
        #[arg(long, value_name = "DIR")]
        rls: Option<PathBuf>,
    },
}

fn init_logging(format: &str, #[cfg(feature = "otel")] tracing: Option<&crate::otel::Tracing>) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("TOLLGATE_LOG")
        .unwrap_or_else(|_| "info".into());
    // Colours only for a person at a terminal, not for log files and collectors.
    let colour = std::io::IsTerminal::is_terminal(&std::io::stderr());
    #[cfg(feature = "otel")]
    if let Some(tracing) = tracing {
        use tracing_subscriber::prelude::*;
        // The log filter applies to the log lines alone, so it neither hides the check spans
        // from the exporter nor shows them in the log.
        let logs = tracing_subscriber::fmt::layer()
            .with_ansi(colour)
            .with_writer(std::io::stderr);
        let logs = if format == "json" {
            logs.json().boxed()
        } else {
            logs.boxed()
        };
        tracing_subscriber::registry()
            .with(logs.with_filter(filter))
            .with(tracing.layer())
            .init();
        return;
    }
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(colour)
        .with_writer(std::io::stderr);
    if format == "json" {
        builder.json().init();
    } else {
        builder.init();
    }
}

fn config_check(files: &[PathBuf], rls: Option<&PathBuf>) -> ExitCode {
    let mut failed = false;
    for file in files {
        match crate::policies::load(Some(file)) {
            Ok(policies) => {
                println!(
                    "{}: ok ({} policies)",
                    file.display(),
                    policies.names().count()
                );
                if let Some(problem) = crate::policies::empty_by_omission(file, &policies) {
                    eprintln!("warning: {problem}; a running server refuses to reload it");
                }
            }
            Err(errors) => {
                eprintln!("{errors}");
                failed = true;
            }
        }
    }
    if let Some(directory) = rls {
        match crate::rls::RlsConfig::load_dir(directory) {
            Ok(config) => println!(
                "{}: ok ({} domains)",
                directory.display(),
                config.domains().count()
            ),
            Err(errors) => {
                eprintln!("{errors}");
                failed = true;
            }
        }
    }
    if files.is_empty() && rls.is_none() {
        eprintln!("tollgate config check: give policy files, --rls DIR, or both");
        return ExitCode::from(2);
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// Parses the command line and runs the command.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Command::Config {
        action: ConfigAction::Check { files, rls },
    } = &cli.command
    {
        return config_check(files, rls.as_ref());
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("tollgate: cannot start the runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    #[cfg(feature = "otel")]
    let tracing = {
        let flags = match &cli.command {
            Command::Serve(args) => Some(&args.otel),
            Command::Proxy(args) => Some(&args.otel),
            _ => None,
        };
        let _runtime = runtime.enter();
        match flags.map_or(Ok(None), crate::otel::Tracing::start) {
            Ok(tracing) => tracing,
            Err(error) => {
                eprintln!("tollgate: {error}");
                return ExitCode::FAILURE;
            }
        }
    };
    init_logging(
        &cli.log_format,
        #[cfg(feature = "otel")]
        tracing.as_ref(),
    );
    let result = runtime.block_on(async {
        match cli.command {
            Command::Serve(args) => crate::serve::run(args).await,
            Command::Proxy(args) => crate::proxy::run(args).await,
            Command::Bench(args) => crate::bench::run(args).await,
            Command::Simulate(args) => crate::simulate::run(args).await,
            Command::Regions(args) => crate::regions::run(args).await,
            Command::Config { .. } => Ok(()),
        }
    });
    #[cfg(feature = "otel")]
    if let Some(tracing) = tracing {
        tracing.shutdown();
    }
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("tollgate: {error}");
            ExitCode::FAILURE
        }
    }
}
