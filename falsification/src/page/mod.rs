//! `report.html`: one self-contained page per record (a case, a session, a comparison, a
//! trigger test), the page a team opens first. It is drawn from the record's files alone, at the
//! end of a run and by `falsification report DIR` for any record, older ones included, so the two
//! are the same page; what an older record lacks the page says it cannot show.
//!
//! Only this file and `read` do I/O; the pages (`case`, `session`, `compare`, `trigger`), their
//! shared parts (`html`) and the plots (`chart`, inline SVG) are pure. The page has no script
//! and references nothing outside itself: it opens from disk, at a phone's width, and prints.

mod case;
mod chart;
mod compare;
mod html;
mod read;
mod session;
mod trigger;

use std::path::{Path, PathBuf};

use crate::process::write_atomically;

pub use html::open_line;
use read::{CaseRecord, CompareRecord, Kind, SessionRecord, TriggerRecord};

/// The page's file name in a record.
pub const PAGE: &str = "report.html";

/// Writes `dir`'s page (atomically; a session's after each of its cases') and returns its path.
pub fn write(dir: &Path) -> anyhow::Result<PathBuf> {
    let page = match Kind::of(dir)? {
        Kind::Case => case_page(&CaseRecord::read(dir)?),
        Kind::Session => {
            let s = SessionRecord::read(dir)?;
            for c in &s.cases {
                write_atomically(&c.dir.join(PAGE), &case_page(c))?;
            }
            session::page(&s)
        }
        Kind::Compare => compare::page(&CompareRecord::read(dir)?),
        Kind::Trigger => {
            let (r, md) = TriggerRecord::read(dir)?;
            trigger::page(&r, md.as_deref())
        }
    };
    let path = dir.join(PAGE);
    write_atomically(&path, &page)?;
    Ok(path)
}

fn case_page(c: &CaseRecord) -> String {
    html::document(&c.name(), case::section(c, true))
}
