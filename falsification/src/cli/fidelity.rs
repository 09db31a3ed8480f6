//! `falsification fidelity RECORD...`: each record's measured figures beside every model's
//! prediction for the configuration that ran (`runner::fidelity`), as Markdown or JSON. A
//! session directory (a suite's or a run's, with its `index.md`) stands for its cases.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use clap::Args;

use super::Format;
use crate::runner::fidelity::{RecordSummary, Table};

#[derive(Debug, Args)]
pub struct FidelityArgs {
    /// Case records (directories with a summary.json) or sessions (their cases, in name order).
    #[arg(required = true)]
    pub records: Vec<PathBuf>,
    /// `text` is Markdown, as RESULTS.md holds it.
    #[arg(long, value_enum, default_value_t = Format::Text, env = "FALSIFICATION_FORMAT")]
    pub format: Format,
}

pub fn fidelity(args: &FidelityArgs) -> anyhow::Result<()> {
    let mut tables = Vec::new();
    for dir in args
        .records
        .iter()
        .map(|r| cases(r))
        .collect::<anyhow::Result<Vec<_>>>()?
        .concat()
    {
        let path = dir.join("summary.json");
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        let summary: RecordSummary = serde_json::from_str(&text)
            .with_context(|| format!("{}: not a complete record's summary", path.display()))?;
        tables.push(Table::of(&summary));
    }
    let out = match args.format {
        Format::Text => tables
            .iter()
            .map(Table::markdown)
            .collect::<Vec<_>>()
            .join("\n"),
        Format::Json => serde_json::to_string_pretty(&tables)? + "\n",
    };
    std::io::stdout().lock().write_all(out.as_bytes())?;
    Ok(())
}

/// A case record is itself; a session is its case records.
fn cases(path: &Path) -> anyhow::Result<Vec<PathBuf>> {
    if path.join("summary.json").is_file() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir(path)
        .with_context(|| format!("reading {}", path.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("summary.json").is_file())
        .collect();
    if found.is_empty() {
        bail!(
            "{}: neither a case record (no summary.json) nor a session of them",
            path.display()
        );
    }
    found.sort();
    Ok(found)
}
