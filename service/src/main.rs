//! `service`: parse the flags, log to stderr, serve until SIGTERM / Ctrl-C.

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;
use service::{Config, Error};
use tracing_subscriber::EnvFilter;

#[tokio::main]
async fn main() -> ExitCode {
    let config = Config::parse();
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    match serve(config).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("service: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(config: Config) -> Result<(), Error> {
    let listener = service::bind(config.listen).await?;
    let shutdown = service::shutdown_signal()?;
    service::run(listener, config, shutdown).await;
    Ok(())
}
