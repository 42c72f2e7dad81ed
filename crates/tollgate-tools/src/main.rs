//! The `tollgate-tools` binary.

/// The load generator allocates as the server does (request bodies, answers, histograms), so
/// it uses the server's allocator and measures the server rather than its own allocations.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    tollgate_tools::cli::main()
}
