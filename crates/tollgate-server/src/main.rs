//! The `tollgate` binary.

/// A server answers with many small, short-lived allocations (request heads, JSON bodies,
/// header values); mimalloc serves them from per-thread free lists.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    tollgate_server::cli::main()
}
