use clap::Parser;

fn main() -> std::process::ExitCode {
    let cli = falsification::cli::Cli::parse();
    match falsification::cli::run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("falsification: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
