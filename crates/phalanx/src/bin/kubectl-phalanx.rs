//! `kubectl-phalanx`: the same commands as `phalanx`, named so that kubectl finds it on `PATH` as the plugin
//! `kubectl phalanx` (e.g. `kubectl phalanx explain podgroup NAME`).

fn main() -> std::process::ExitCode {
    phalanx::entry::main()
}
