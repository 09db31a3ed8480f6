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

use read::{CaseRecord, CompareRecord, Kind, SessionRecord, TriggerRecord};

/// The last line every command that writes a record prints: the page to open.
pub fn open_line(path: &Path) -> String {
    format!("open: {}", path.display())
}

/// Writes `dir`'s page and gives the line a command that wrote the record ends with: the page
/// to open, or why there is none. The page is drawn after the run from its files: failing to
/// draw it loses no result, so it is said, never raised.
pub fn write_and_say(dir: &Path) -> String {
    match write(dir) {
        Ok(page) => open_line(&page),
        Err(e) => format!("no page: {e:#} (the record is in {})", dir.display()),
    }
}

/// The page's file name in a record.
pub const PAGE: &str = "report.html";

/// Writes `dir`'s page (atomically; a session's after each of its cases', a comparison's after
/// both of its sessions') and returns its path.
pub fn write(dir: &Path) -> anyhow::Result<PathBuf> {
    let page = match Kind::of(dir)? {
        Kind::Case => case_page(&CaseRecord::read(dir)?),
        Kind::Session => return write_session(&SessionRecord::read(dir)?),
        Kind::Compare => {
            let c = CompareRecord::read(dir)?;
            for s in c.sessions.iter().flat_map(|(em, up)| [em, up]) {
                write_session(s)?;
            }
            compare::page(&c)
        }
        Kind::Trigger => {
            let (r, md) = TriggerRecord::read(dir)?;
            trigger::page(&r, md.as_deref())
        }
    };
    let path = dir.join(PAGE);
    write_atomically(&path, &page)?;
    Ok(path)
}

/// A session's page, each of its cases' first.
fn write_session(s: &SessionRecord) -> anyhow::Result<PathBuf> {
    for c in &s.cases {
        write_atomically(&c.dir.join(PAGE), &case_page(c))?;
    }
    let path = s.dir.join(PAGE);
    write_atomically(&path, &session::page(s))?;
    Ok(path)
}

fn case_page(c: &CaseRecord) -> String {
    html::document(&c.name(), case::section(c, true))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A copy of a checked-in record (tests/data/pages), to write pages into.
    fn copy_of(name: &str) -> tempfile::TempDir {
        fn copy(from: &Path, to: &Path) {
            std::fs::create_dir_all(to).unwrap();
            for e in std::fs::read_dir(from).unwrap().flatten() {
                if e.path().is_dir() {
                    copy(&e.path(), &to.join(e.file_name()));
                } else {
                    std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
                }
            }
        }
        let tmp = tempfile::tempdir().unwrap();
        let from = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data/pages")
            .join(name);
        copy(&from, &tmp.path().join(name));
        tmp
    }

    #[test]
    fn an_older_session_gets_its_page_and_each_case_its_own() {
        let tmp = copy_of("main-job");
        let dir = tmp.path().join("main-job");
        let path = write(&dir).unwrap();
        let page = std::fs::read_to_string(&path).unwrap();
        for case in ["F3 first-attempt", "F3 ingress"] {
            assert!(page.contains(case), "{case}");
        }
        assert!(
            page.contains("Achievable region"),
            "two stepped cases: the region"
        );
        // Written before models.csv: it says so instead of drawing nothing.
        assert!(page.contains("written before the models"));
        assert!(!page.contains("<script") && !page.contains("<link"));
        assert!(page.len() < 2_000_000, "{} bytes", page.len());
        for case in ["F3-first-attempt", "F3-ingress"] {
            assert!(dir.join(case).join(PAGE).is_file());
        }
    }

    #[test]
    fn the_hpa_decisions_are_events_on_the_time_axis() {
        let tmp = copy_of("main-job");
        let c = CaseRecord::read(&tmp.path().join("main-job/F3-ingress")).unwrap();
        let events = case::chart_events(&c);
        let labels: Vec<&str> = events.iter().map(|e| e.label.as_str()).collect();
        assert_eq!(
            labels,
            [
                "4→5", "5→9", "9→18", "18→36", "36→50", "50→36", "36→23", "23→22"
            ]
        );
        assert_eq!(events[5].kind, chart::EventKind::ScaleDown);
        assert_eq!(events[0].at, -22.5);
    }

    #[test]
    fn a_trigger_page_names_the_rule_that_fired() {
        let tmp = copy_of("trigger");
        let page = std::fs::read_to_string(write(&tmp.path().join("trigger")).unwrap()).unwrap();
        assert!(
            page.contains("goodput&lt;0.5 for 6s"),
            "rules are escaped text"
        );
        assert!(page.contains("<strong>fired</strong>"));
        assert!(page.contains("did not fire"), "the other rule");
        assert!(
            page.contains("trigger --target http://127.0.0.1:18086/work"),
            "the command"
        );
    }

    #[test]
    fn a_comparison_shows_both_hpas_pods_and_reads_its_older_shape() {
        let tmp = copy_of("main-job");
        let root = tmp.path();
        std::fs::rename(root.join("main-job"), root.join("s-emulated")).unwrap();
        let up = copy_of("main-job");
        std::fs::rename(up.path().join("main-job"), root.join("s-upstream")).unwrap();
        let figures = serde_json::json!([["ingress", [
            {"figure": "recovery", "emulated": "645 s", "upstream": "700 s", "within_band": true},
            {"figure": "final pods", "emulated": "22", "upstream": "30", "within_band": false},
        ]]]);
        let cmp = root.join("s-upstream-vs-emulated");
        std::fs::create_dir(&cmp).unwrap();
        // As the command writes it now: the sessions named as the run saw them.
        let now = serde_json::json!({
            "emulated": "runs/s-emulated", "upstream": "runs/s-upstream", "cases": figures,
            "command": ["falsification", "compare", "F3", "--time-scale", "5"],
        });
        std::fs::write(cmp.join("compare.json"), now.to_string()).unwrap();
        let page = std::fs::read_to_string(write(&cmp).unwrap()).unwrap();
        assert!(page.contains("1 of 2 figures outside the band"), "{page}");
        assert!(page.contains("Desired and ready pods under both autoscalers"));
        assert!(page.contains("falsification compare F3 --time-scale 5"));
        for session in ["s-emulated", "s-upstream"] {
            assert!(root.join(session).join(PAGE).is_file(), "{session}'s page");
            assert!(root.join(session).join("F3-ingress").join(PAGE).is_file());
        }
        // As older comparisons wrote it: the cases alone, no plot.
        std::fs::write(cmp.join("compare.json"), figures.to_string()).unwrap();
        let page = std::fs::read_to_string(write(&cmp).unwrap()).unwrap();
        assert!(page.contains("1 of 2 figures outside the band"));
        assert!(
            !page.contains("Desired and ready pods") && page.contains("not beside this comparison")
        );
    }

    #[test]
    fn a_directory_that_is_no_record_is_a_clear_error() {
        let tmp = tempfile::tempdir().unwrap();
        let e = write(tmp.path()).unwrap_err().to_string();
        assert!(e.contains("not a record"), "{e}");
    }
}
