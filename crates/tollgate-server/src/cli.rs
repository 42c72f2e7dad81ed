//! The command line: `serve`, `proxy`, `config check`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::proxy::ProxyArgs;
use crate::serve_args::ServeArgs;

/// Tollgate: a distributed rate limiter.
#[derive(Debug, Parser)]
#[command(name = "tollgate", version, about)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Log format: human or json.
    #[arg(long, global = true, env = "TOLLGATE_LOG_FORMAT", default_value = "human", value_parser = ["human", "json"])]
    log_format: String,
    /// How many threads the server runs on, beside any `--http-workers`. Default: one a core
    /// the process may use. Fewer than the cores keep the tail short on cores shared with
    /// other busy processes, at some of the rate.
    #[arg(long, global = true, env = "TOLLGATE_THREADS", value_parser = crate::runtime_threads::thread_count, value_name = "N")]
    threads: Option<usize>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve the HTTP check API and Envoy's rate limit service (gRPC).
    Serve(Box<ServeArgs>),
    /// Proxy to an upstream, applying the policies to every request.
    Proxy(Box<ProxyArgs>),
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

fn init_logging(
    format: &str,
    default_filter: &str,
    #[cfg(feature = "otel")] tracing: Option<&crate::otel::Tracing>,
) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("TOLLGATE_LOG")
        .unwrap_or_else(|_| default_filter.into());
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
        match tollgate_envoy::rls::RlsConfig::load_dir(directory) {
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

/// The command line, as given or, for a binary named `ratelimit` (the image's
/// `/bin/ratelimit`, which deployments of envoyproxy/ratelimit run), as `tollgate serve` with
/// envoyproxy/ratelimit's environment; and whether it is the latter.
fn command_line() -> (Vec<std::ffi::OsString>, bool) {
    let mut args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let as_upstream = args
        .first()
        .and_then(|program| std::path::Path::new(program).file_name())
        .is_some_and(|name| name == "ratelimit");
    if as_upstream {
        args.insert(1.min(args.len()), "serve".into());
    }
    (args, as_upstream)
}

/// For `serve`, envoyproxy/ratelimit's environment applied onto `args` when `--upstream-env`
/// asks for it (or the binary runs as `ratelimit`).
fn upstream_settings(
    args: &mut ServeArgs,
    matches: &clap::ArgMatches,
    command: &clap::Command,
    as_upstream: bool,
) -> Result<Option<(crate::upstream::Applied, String)>, Vec<String>> {
    use crate::serve_args::UpstreamMode;

    let lookup = |name: &str| std::env::var(name).ok();
    let why = match (args.upstream.upstream_env, as_upstream) {
        (UpstreamMode::Off, _) => return Ok(None),
        (_, true) => "the binary runs as ratelimit".to_owned(),
        (UpstreamMode::On, false) => "--upstream-env on".to_owned(),
        (UpstreamMode::Auto, false) => match crate::upstream::telling_variable(&lookup) {
            Some(name) => format!("{name} is set"),
            None => return Ok(None),
        },
    };
    let serve = command.find_subcommand("serve");
    // Given: on the command line, or by Tollgate's own variable (not OTEL_* and the like,
    // which upstream's settings decide over as upstream does).
    let given = |id: &str| match matches.value_source(id) {
        Some(clap::parser::ValueSource::CommandLine) => true,
        Some(clap::parser::ValueSource::EnvVariable) => serve
            .and_then(|serve| serve.get_arguments().find(|arg| arg.get_id() == id))
            .and_then(clap::Arg::get_env)
            .is_some_and(|env| env.to_string_lossy().starts_with("TOLLGATE_")),
        _ => false,
    };
    crate::upstream::apply(args, &given, &lookup).map(|applied| Some((applied, why)))
}

/// Says why envoyproxy/ratelimit's environment cannot be served, and exits with a usage error.
fn refuse_upstream(errors: &[String]) -> ExitCode {
    eprintln!("tollgate: envoyproxy/ratelimit's environment cannot be served as it is:");
    for error in errors {
        eprintln!("  {error}");
    }
    ExitCode::from(2)
}

/// The log format and default filter: the flag's, or those of envoyproxy/ratelimit's
/// environment when it is served (a format given on the command line or in the flag's own
/// variable still wins).
fn log_settings(
    matches: &clap::ArgMatches,
    cli: &Cli,
    upstream: Option<&(crate::upstream::Applied, String)>,
) -> (String, String) {
    let format_given = matches!(
        matches.value_source("log_format"),
        Some(clap::parser::ValueSource::CommandLine | clap::parser::ValueSource::EnvVariable)
    );
    match upstream {
        Some((applied, _)) => (
            applied
                .log_format
                .clone()
                .filter(|_| !format_given)
                .unwrap_or_else(|| cli.log_format.clone()),
            applied
                .log_filter
                .clone()
                .unwrap_or_else(|| "info".to_owned()),
        ),
        None => (cli.log_format.clone(), "info".to_owned()),
    }
}

/// Logs how envoyproxy/ratelimit's environment was read: why, what it set, and what it left
/// unused.
fn announce_upstream(applied: &crate::upstream::Applied, why: &str) {
    tracing::info!("reading envoyproxy/ratelimit's environment: {why}");
    for note in &applied.notes {
        tracing::info!("{note}");
    }
    for unused in &applied.unused {
        tracing::warn!("{unused}");
    }
}

/// Parses the command line and runs the command.
pub fn main() -> ExitCode {
    let (arguments, as_upstream) = command_line();
    let command = <Cli as clap::CommandFactory>::command();
    let matches = command
        .clone()
        .try_get_matches_from(&arguments)
        .unwrap_or_else(|error| error.exit());
    let mut cli = <Cli as clap::FromArgMatches>::from_arg_matches(&matches)
        .unwrap_or_else(|error| error.exit());
    let mut upstream = None;
    if let (Command::Serve(args), Some(serve_matches)) =
        (&mut cli.command, matches.subcommand_matches("serve"))
    {
        match upstream_settings(args, serve_matches, &command, as_upstream) {
            Ok(applied) => upstream = applied,
            Err(errors) => return refuse_upstream(&errors),
        }
    }
    if let Command::Config {
        action: ConfigAction::Check { files, rls },
    } = &cli.command
    {
        return config_check(files, rls.as_ref());
    }
    let runtime = match crate::runtime_threads::runtime(cli.threads) {
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
    let (log_format, default_filter) = log_settings(&matches, &cli, upstream.as_ref());
    init_logging(
        &log_format,
        &default_filter,
        #[cfg(feature = "otel")]
        tracing.as_ref(),
    );
    if let Some((applied, why)) = &upstream {
        announce_upstream(applied, why);
    }
    let result = runtime.block_on(async {
        match cli.command {
            Command::Serve(args) => crate::serve::run(*args).await,
            Command::Proxy(args) => crate::proxy::run(*args).await,
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
