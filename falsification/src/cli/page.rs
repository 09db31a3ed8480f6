//! `falsification report RECORD...`: writes each record's page (`report.html`), a session's and
//! each of its cases', for records of any age; the last line names the page to open.

use std::path::PathBuf;

use clap::Args;

use crate::page as record_page;

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// Record directories: a case's, a session's (a run's or a suite's), a comparison's or a
    /// trigger test's.
    #[arg(required = true)]
    pub records: Vec<PathBuf>,
}

pub fn report(args: &ReportArgs) -> anyhow::Result<()> {
    let mut pages = Vec::new();
    for dir in &args.records {
        pages.push(record_page::write(dir)?);
    }
    for p in &pages[..pages.len() - 1] {
        println!("page: {}", p.display());
    }
    println!("{}", record_page::open_line(&pages[pages.len() - 1]));
    Ok(())
}
