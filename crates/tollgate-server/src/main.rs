//! The `tollgate` binary.

fn main() -> std::process::ExitCode {
    tollgate_server::cli::main()
}
