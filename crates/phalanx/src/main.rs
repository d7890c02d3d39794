//! `phalanx`: the operator binary and its read-only tools. See [`phalanx::entry`].

/// mimalloc returns freed memory to the system where glibc's malloc keeps it in per-thread arenas: the initial lists
/// of a large cluster leave far less behind (docs/benchmarks.md, "Memory").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    phalanx::entry::main()
}
