fn main() -> std::process::ExitCode {
    wstune::cli::main()
}
