//! [`ArrivalLog`]: the bounded log of `(x-request-id, x-attempt)` behind
//! `GET /arrivals`, from which the meter counts distinct requests.
//!
//! Why a log and not one more counter: a retrying gateway (HAProxy `retries`,
//! nginx `proxy_next_upstream`) resends the client's request bytes unchanged,
//! so its retries carry the client's `x-attempt: 0` and may land on other
//! pods. No header tells them from the original; only the request id does,
//! and only across all pods. So every pod lists what it saw and the meter
//! counts distinct ids.
//!
//! The log is a ring of the newest `--arrival-log-size` entries, each with a
//! sequence number (1, 2, ... in arrival order, never reused while the pod
//! lives). A reader pages through it with `after`; what the ring overwrote
//! before a reader got to it is reported as `lost`.
//!
//! ## Wire format of `GET /arrivals?after=N`
//!
//! `text/plain; charset=utf-8`, lines ending in `\n`. The first line:
//!
//! ```text
//! next <NEXT> newest <NEWEST> lost <LOST> epoch <EPOCH>
//! ```
//!
//! then one line per entry with a sequence number above `N`, oldest first, at
//! most [`PAGE_ENTRIES`] of them:
//!
//! ```text
//! <ATTEMPT> <REQUEST-ID>
//! <ATTEMPT>
//! ```
//!
//! - `ATTEMPT`: the request's `x-attempt` as sent (decimal, not capped);
//!   `REQUEST-ID`: its `x-request-id`, 1 to [`MAX_ID_BYTES`] visible ASCII
//!   characters (other ids are rejected with 400 on `/work`). A line with
//!   only the attempt is a request that carried no `x-request-id`: it is
//!   distinct from every other entry.
//! - `NEXT`: the sequence number of the last entry listed, or `NEWEST` when
//!   none is: pass it as `after` on the next call. `NEXT` < `N` means the
//!   caller's `N` is not from this pod's life (the pod restarted).
//! - `NEWEST`: the newest entry's sequence number (0 before any arrival).
//!   `NEXT` < `NEWEST`: more entries wait; call again at once.
//! - `LOST`: entries above `N` that the ring had already overwritten (the
//!   reader fell more than `--arrival-log-size` arrivals behind).
//! - `EPOCH`: 16 hex digits, random per pod start: a reader that sees it
//!   change knows the pod restarted and starts again from `after=0`.
//!
//! `after` (plain decimal digits, any `u64`; absent = 0) past `NEWEST`
//! lists nothing and answers `next <NEWEST>`: `after=18446744073709551615`
//! learns where the log stands without reading it.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::sync::{Mutex, PoisonError};

/// Most entries one `GET /arrivals` lists: with the longest ids a page is
/// at most about 1.1 MiB (see [`MAX_PAGE_BYTES`]).
pub const PAGE_ENTRIES: usize = 8192;

/// Longest accepted `x-request-id`, bytes.
pub const MAX_ID_BYTES: usize = 128;

/// Upper bound of a page's size in bytes: the first line plus
/// [`PAGE_ENTRIES`] lines of a 10-digit attempt, a space, the longest id and
/// a newline.
pub const MAX_PAGE_BYTES: usize = 128 + PAGE_ENTRIES * (10 + 1 + MAX_ID_BYTES + 1);

/// One arrival: 24 bytes inline plus the id's own allocation.
#[derive(Debug)]
struct Entry {
    attempt: u32,
    id: Option<Box<str>>,
}

#[derive(Debug)]
struct Ring {
    entries: VecDeque<Entry>,
    /// Sequence number of the newest entry (0: none yet).
    newest: u64,
}

/// The pod's arrival log: a mutex'd ring of the newest `capacity` entries.
#[derive(Debug)]
pub struct ArrivalLog {
    ring: Mutex<Ring>,
    capacity: usize,
    epoch: u64,
}

/// Why a request id is refused.
pub fn check_id(id: &[u8]) -> Result<&str, String> {
    if id.is_empty() || id.len() > MAX_ID_BYTES || !id.iter().all(|b| b.is_ascii_graphic()) {
        return Err(format!(
            "x-request-id: expected 1 to {MAX_ID_BYTES} visible ASCII characters, got {}",
            shown(id)
        ));
    }
    // Visible ASCII is UTF-8.
    Ok(std::str::from_utf8(id).unwrap_or_default())
}

/// The id as the error shows it: quoted, cut after 40 bytes.
fn shown(id: &[u8]) -> String {
    let cut = &id[..id.len().min(40)];
    let more = if id.len() > cut.len() {
        format!("... ({} bytes)", id.len())
    } else {
        String::new()
    };
    format!("{:?}{more}", String::from_utf8_lossy(cut))
}

impl ArrivalLog {
    /// An empty log keeping the newest `capacity` entries (at least 1), with
    /// this pod start's `epoch`.
    pub fn new(capacity: usize, epoch: u64) -> Self {
        let capacity = capacity.max(1);
        Self {
            ring: Mutex::new(Ring {
                // Grows as arrivals come; a pod that sees few never pays for the cap.
                entries: VecDeque::with_capacity(capacity.min(1024)),
                newest: 0,
            }),
            capacity,
            epoch,
        }
    }

    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Ring> {
        self.ring.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Appends an arrival (`id` already checked by [`check_id`]).
    pub fn record(&self, attempt: u32, id: Option<&str>) {
        let entry = Entry {
            attempt,
            id: id.map(Box::from),
        };
        let evicted = {
            let mut ring = self.lock();
            let evicted = if ring.entries.len() == self.capacity {
                ring.entries.pop_front()
            } else {
                None
            };
            ring.entries.push_back(entry);
            ring.newest += 1;
            evicted
        };
        // Freed outside the lock.
        drop(evicted);
    }

    /// The `GET /arrivals?after=<after>` body (format in the module doc).
    pub fn page(&self, after: u64) -> String {
        let ring = self.lock();
        let len = ring.entries.len() as u64;
        let oldest = ring.newest - len + 1; // sequence of entries[0]
        let lost = (oldest - 1).saturating_sub(after);
        let from = after.saturating_add(1).max(oldest);
        let listed = if from > ring.newest {
            0
        } else {
            (ring.newest - from + 1).min(PAGE_ENTRIES as u64)
        };
        let next = if listed == 0 {
            ring.newest
        } else {
            from + listed - 1
        };
        let mut out = String::with_capacity(64 + listed as usize * 24);
        let _ = writeln!(
            out,
            "next {next} newest {} lost {lost} epoch {:016x}",
            ring.newest, self.epoch
        );
        if listed > 0 {
            let skip = (from - oldest) as usize;
            for e in ring.entries.range(skip..skip + listed as usize) {
                let _ = match &e.id {
                    Some(id) => writeln!(out, "{} {id}", e.attempt),
                    None => writeln!(out, "{}", e.attempt),
                };
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(text: &str) -> Vec<&str> {
        text.lines().collect()
    }

    #[test]
    fn pages_list_entries_after_the_cursor() {
        let log = ArrivalLog::new(8, 0xab);
        assert_eq!(
            lines(&log.page(0)),
            ["next 0 newest 0 lost 0 epoch 00000000000000ab"]
        );
        log.record(0, Some("r1"));
        log.record(0, None);
        log.record(2, Some("r1"));
        assert_eq!(
            lines(&log.page(0)),
            [
                "next 3 newest 3 lost 0 epoch 00000000000000ab",
                "0 r1",
                "0",
                "2 r1"
            ]
        );
        assert_eq!(
            lines(&log.page(2)),
            ["next 3 newest 3 lost 0 epoch 00000000000000ab", "2 r1"]
        );
        assert_eq!(
            lines(&log.page(3)),
            ["next 3 newest 3 lost 0 epoch 00000000000000ab"]
        );
        // A cursor from another life of the pod: nothing, and `next` goes back.
        assert_eq!(
            lines(&log.page(u64::MAX)),
            ["next 3 newest 3 lost 0 epoch 00000000000000ab"]
        );
    }

    #[test]
    fn the_ring_overwrites_the_oldest_and_reports_them_lost() {
        let log = ArrivalLog::new(3, 1);
        for i in 0..5 {
            log.record(i, Some(&format!("id{i}")));
        }
        // Entries 1 and 2 are gone; 3, 4, 5 remain.
        assert_eq!(
            lines(&log.page(0)),
            [
                "next 5 newest 5 lost 2 epoch 0000000000000001",
                "2 id2",
                "3 id3",
                "4 id4"
            ]
        );
        assert_eq!(
            lines(&log.page(1))[0],
            "next 5 newest 5 lost 1 epoch 0000000000000001"
        );
        assert_eq!(
            lines(&log.page(2))[0],
            "next 5 newest 5 lost 0 epoch 0000000000000001"
        );
        assert_eq!(
            lines(&log.page(4)),
            ["next 5 newest 5 lost 0 epoch 0000000000000001", "4 id4"]
        );
    }

    #[test]
    fn a_page_is_capped_and_the_rest_follows() {
        let log = ArrivalLog::new(PAGE_ENTRIES * 2, 7);
        for i in 0..PAGE_ENTRIES + 5 {
            log.record(0, Some(&format!("r{i}")));
        }
        let first = log.page(0);
        let first = lines(&first);
        assert_eq!(first.len(), PAGE_ENTRIES + 1);
        assert_eq!(
            first[0],
            format!(
                "next {PAGE_ENTRIES} newest {} lost 0 epoch 0000000000000007",
                PAGE_ENTRIES + 5
            )
        );
        let rest = log.page(PAGE_ENTRIES as u64);
        assert_eq!(lines(&rest).len(), 6);
        assert_eq!(lines(&rest)[1], format!("0 r{PAGE_ENTRIES}"));
    }

    #[test]
    fn ids_must_be_short_visible_ascii() {
        assert_eq!(check_id(b"a1b2-3"), Ok("a1b2-3"));
        assert_eq!(
            check_id(&[b'x'; MAX_ID_BYTES]).map(str::len),
            Ok(MAX_ID_BYTES)
        );
        for bad in [&b""[..], b"a b", b"caf\xc3\xa9", b"tab\there"] {
            let err = check_id(bad).unwrap_err();
            assert!(err.starts_with("x-request-id: expected"), "{err}");
        }
        let err = check_id(&[b'x'; 300]).unwrap_err();
        assert!(err.ends_with("... (300 bytes)") && err.len() < 140, "{err}");
    }

    #[test]
    fn longest_page_fits_the_published_bound() {
        let log = ArrivalLog::new(PAGE_ENTRIES, u64::MAX);
        let id = "x".repeat(MAX_ID_BYTES);
        for _ in 0..PAGE_ENTRIES {
            log.record(u32::MAX, Some(&id));
        }
        assert!(log.page(0).len() <= MAX_PAGE_BYTES);
    }
}
