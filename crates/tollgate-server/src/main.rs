//! The `tollgate` binary.

/// mimalloc, for the many small, short-lived allocations a server makes (see the module).
#[global_allocator]
static ALLOCATOR: tollgate_server::allocator::Allocator = tollgate_server::allocator::Allocator;

fn main() -> std::process::ExitCode {
    tollgate_server::cli::main()
}
