//! `phalanx`: the operator binary and its read-only tools. See [`phalanx::entry`].

fn main() -> std::process::ExitCode {
    phalanx::entry::main()
}
