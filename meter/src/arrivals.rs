//! A pod's `GET /arrivals?after=N` page (format: the service's
//! `service::arrivals` module doc and `service/README.md`), parsed strictly,
//! and the per-pod cursor the scrape loop keeps.
//!
//! ```text
//! next <NEXT> newest <NEWEST> lost <LOST> epoch <16 hex digits>
//! <ATTEMPT> <REQUEST-ID>
//! <ATTEMPT>
//! ```

use crate::distinct::{Arrival, IdKey};
use crate::exposition::ParseError;

/// Largest `/arrivals` body read: a service page is at most about 1.1 MiB
/// (8192 entries of a 10-digit attempt and a 128-byte id).
pub const MAX_BODY: usize = 2 << 20;

/// Most pages read from one pod in one round (8192 entries each): a pod
/// further behind catches up over the next rounds.
pub const MAX_PAGES: usize = 16;

/// Longest request id a pod may list (bytes).
pub const MAX_ID_BYTES: usize = 128;

/// `after` that lists nothing and learns where a log stands.
pub const PEEK: u64 = u64::MAX;

/// A page's first line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageHeader {
    pub next: u64,
    pub newest: u64,
    pub lost: u64,
    pub epoch: u64,
}

/// A parsed page.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Page {
    pub header: PageHeader,
    pub entries: Vec<Arrival>,
}

fn fail(line: usize, reason: impl Into<String>) -> ParseError {
    ParseError {
        line,
        reason: format!("/arrivals: {}", reason.into()),
    }
}

fn number(line: usize, what: &str, s: &str) -> Result<u64, ParseError> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(fail(line, format!("bad {what} {s:?}")));
    }
    s.parse()
        .map_err(|_| fail(line, format!("bad {what} {s:?}")))
}

/// Parses the page a pod answered to `after`.
pub fn parse_page(body: &str, after: u64) -> Result<Page, ParseError> {
    let Some(text) = body.strip_suffix('\n') else {
        return Err(fail(0, "body does not end with a newline"));
    };
    let mut lines = text.split('\n');
    let first = lines.next().unwrap_or_default();
    let words: Vec<&str> = first.split(' ').collect();
    let ["next", next, "newest", newest, "lost", lost, "epoch", epoch] = words[..] else {
        return Err(fail(
            1,
            format!("want \"next N newest N lost N epoch HEX\", got {first:?}"),
        ));
    };
    let header = PageHeader {
        next: number(1, "next", next)?,
        newest: number(1, "newest", newest)?,
        lost: number(1, "lost", lost)?,
        epoch: (epoch.len() == 16 && epoch.bytes().all(|b| b.is_ascii_hexdigit()))
            .then(|| u64::from_str_radix(epoch, 16).ok())
            .flatten()
            .ok_or_else(|| fail(1, format!("bad epoch {epoch:?}")))?,
    };
    if header.next > header.newest {
        return Err(fail(1, "next is past newest"));
    }
    let mut entries = Vec::new();
    for (i, line) in lines.enumerate() {
        let n = i + 2;
        let (attempt, id) = match line.split_once(' ') {
            Some((attempt, id)) => (attempt, Some(id)),
            None => (line, None),
        };
        let attempt = u32::try_from(number(n, "attempt", attempt)?)
            .map_err(|_| fail(n, format!("attempt {attempt} out of range")))?;
        let id = match id {
            None => None,
            Some(id)
                if !id.is_empty()
                    && id.len() <= MAX_ID_BYTES
                    && id.bytes().all(|b| b.is_ascii_graphic()) =>
            {
                Some(IdKey::of(id))
            }
            Some(id) => return Err(fail(n, format!("bad request id {id:?}"))),
        };
        entries.push(Arrival { attempt, id });
    }
    // Entries are the ones after `after`, up to `next`: no more than that many.
    if !entries.is_empty() && entries.len() as u64 > header.next.saturating_sub(after) {
        return Err(fail(
            0,
            format!(
                "{} entries after {after} up to next {}",
                entries.len(),
                header.next
            ),
        ));
    }
    Ok(Page { header, entries })
}

/// Where the meter stands in one pod's log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cursor {
    pub epoch: u64,
    /// The `after` of the next read.
    pub next: u64,
    /// The meter's round in which the pod was last read.
    pub round: u64,
}

/// How a round's read relates to the cursor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadKind {
    /// No cursor (a pod new to the meter, or not read for a while): only
    /// where its log stands was learned, as a pod's first counter sample is
    /// only a baseline; what came before is not counted.
    Baseline,
    /// The entries after the cursor.
    Continued,
    /// The pod restarted (its epoch changed or its sequence went back): its
    /// whole new log, as a counter reset counts from zero.
    Restarted,
}

/// One pod's arrivals read in one round.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Read {
    pub kind: ReadKind,
    pub epoch: u64,
    /// The cursor's next `after`.
    pub next: u64,
    /// Entries the pod's ring overwrote before they were read.
    pub lost: u64,
    pub entries: Vec<Arrival>,
}

/// Whether a page answered to a cursor is from another life of the pod.
pub fn restarted(cursor: &Cursor, header: &PageHeader) -> bool {
    header.epoch != cursor.epoch || header.next < cursor.next
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEAD: &str = "next 3 newest 5 lost 1 epoch 00000000000000ab\n";

    #[test]
    fn parses_a_page() {
        let page = parse_page(&format!("{HEAD}0 r-1\n2 r-1\n0\n"), 0).unwrap();
        assert_eq!(
            page.header,
            PageHeader {
                next: 3,
                newest: 5,
                lost: 1,
                epoch: 0xab
            }
        );
        let id = Some(IdKey::of("r-1"));
        assert_eq!(
            page.entries,
            [
                Arrival { attempt: 0, id },
                Arrival { attempt: 2, id },
                Arrival {
                    attempt: 0,
                    id: None
                }
            ]
        );
        assert!(parse_page(HEAD, 3).unwrap().entries.is_empty());
    }

    #[test]
    fn rejects_anything_else_naming_the_line() {
        let long = format!("{HEAD}0 {}\n", "x".repeat(129));
        for (body, want) in [
            ("", "newline"),
            ("next 3 newest 5 lost 1\n", "line 1"),
            ("<html>\n", "line 1"),
            (
                "next 6 newest 5 lost 1 epoch 00000000000000ab\n",
                "past newest",
            ),
            ("next 3 newest 5 lost 1 epoch 0xab\n", "bad epoch"),
            (
                "next -3 newest 5 lost 1 epoch 00000000000000ab\n",
                "bad next",
            ),
            (&format!("{HEAD}0 r 1\n"), "line 2"),
            (&format!("{HEAD}x r\n"), "bad attempt"),
            (&format!("{HEAD}4294967296 r\n"), "out of range"),
            (&format!("{HEAD}0 \n"), "bad request id"),
            (&format!("{HEAD}\n"), "line 2"),
            (&long, "bad request id"),
            (&format!("{HEAD}0 a\n0 b\n0 c\n0 d\n"), "4 entries after 0"),
        ] {
            let err = parse_page(body, 0).unwrap_err().to_string();
            assert!(
                err.contains(want) && err.contains("/arrivals"),
                "{body:?}: {err}"
            );
        }
    }

    #[test]
    fn restart_is_a_new_epoch_or_a_sequence_going_back() {
        let cursor = Cursor {
            epoch: 1,
            next: 10,
            round: 0,
        };
        let header = |epoch, next| PageHeader {
            next,
            newest: next,
            lost: 0,
            epoch,
        };
        assert!(!restarted(&cursor, &header(1, 10)));
        assert!(!restarted(&cursor, &header(1, 12)));
        assert!(restarted(&cursor, &header(1, 9)));
        assert!(restarted(&cursor, &header(2, 12)));
    }
}
