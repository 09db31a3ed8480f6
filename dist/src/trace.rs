//! Arrival traces: first-attempt send times, one per line, seconds from the start of a run
//! (`0.013`), non-decreasing, finite and >= 0; blank lines and lines starting with `#` are
//! skipped. A CSV file with a header whose first column is `t_s` or `time_s` works too (the time
//! is the first column; the others are ignored). [`parse`] is the pure reader: bad input is one
//! error naming the file, the line and the value; [`read`] reads a file whole, refusing more than
//! [`MAX_FILE_BYTES`]; a trace holds at most [`MAX_ARRIVALS`]. [`sampled`] is the seeded thinning
//! a scaled-down replay keeps. The loadgen replays traces and the request-level model predicts
//! them from here, so both see the same arrivals.

use std::path::Path;

/// The most arrivals a trace may hold (400 MB of send times).
pub const MAX_ARRIVALS: usize = 50_000_000;
/// The largest trace file read (it is read whole).
pub const MAX_FILE_BYTES: u64 = 2 << 30;

/// A trace file that cannot be read or makes no sense; names the file (and line and value).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TraceError {
    #[error("trace file {path} line {line}: {reason}")]
    Line {
        path: String,
        line: usize,
        reason: String,
    },
    #[error("trace file {path}: {reason}")]
    File { path: String, reason: String },
}

/// Reads a trace file whole: its send times, seconds from the start, non-decreasing.
pub fn read(path: &Path) -> Result<Vec<f64>, TraceError> {
    let shown = path.display().to_string();
    let file_err = |reason: String| TraceError::File {
        path: shown.clone(),
        reason,
    };
    let size = std::fs::metadata(path)
        .map_err(|e| file_err(e.to_string()))?
        .len();
    if size > MAX_FILE_BYTES {
        return Err(file_err(format!(
            "{size} bytes, more than the {MAX_FILE_BYTES} a trace file may have"
        )));
    }
    let bytes = std::fs::read(path).map_err(|e| file_err(e.to_string()))?;
    parse(&shown, &bytes)
}

/// Parses a trace (`path` only names it in errors): one time a line, or CSV with a `t_s` /
/// `time_s` first column; `#` comments and blank lines skipped; at least one arrival, at most
/// [`MAX_ARRIVALS`].
pub fn parse(path: &str, bytes: &[u8]) -> Result<Vec<f64>, TraceError> {
    parse_at_most(path, bytes, MAX_ARRIVALS)
}

fn parse_at_most(path: &str, bytes: &[u8], max: usize) -> Result<Vec<f64>, TraceError> {
    let line_err = |line: usize, reason: String| TraceError::Line {
        path: path.to_string(),
        line,
        reason,
    };
    let mut times = Vec::new();
    // Known at the first line that is neither blank nor a comment: CSV (a header) or plain.
    let mut csv = None;
    let mut previous: Option<(f64, &str)> = None;
    for (i, raw) in bytes.split(|&b| b == b'\n').enumerate() {
        let line = i + 1;
        let text = std::str::from_utf8(raw)
            .map_err(|_| line_err(line, "not UTF-8 text".into()))?
            .trim_start_matches('\u{feff}')
            .trim();
        if text.is_empty() || text.starts_with('#') {
            continue;
        }
        let value = match csv {
            Some(true) => first_column(text),
            Some(false) => text,
            None if text.parse::<f64>().is_ok() => {
                csv = Some(false);
                text
            }
            None => {
                let name = first_column(text);
                if name.eq_ignore_ascii_case("t_s") || name.eq_ignore_ascii_case("time_s") {
                    csv = Some(true);
                    continue;
                }
                return Err(line_err(
                    line,
                    format!(
                        "`{text}` is neither a time in seconds nor a CSV header whose first \
                         column is `t_s` or `time_s`"
                    ),
                ));
            }
        };
        let t: f64 = value
            .parse()
            .map_err(|_| line_err(line, format!("time `{value}` is not a number of seconds")))?;
        if !t.is_finite() {
            return Err(line_err(line, format!("time {value} is not finite")));
        }
        if t < 0.0 {
            return Err(line_err(line, format!("time {value} is negative")));
        }
        if let Some((before, shown)) = previous
            && t < before
        {
            return Err(line_err(
                line,
                format!("time {value} is before the previous {shown}"),
            ));
        }
        if times.len() == max {
            return Err(line_err(
                line,
                format!("more than {max} arrivals, the most a trace may hold"),
            ));
        }
        // `-0` is 0.
        times.push(t + 0.0);
        previous = Some((t, value));
    }
    if times.is_empty() {
        return Err(TraceError::File {
            path: path.to_string(),
            reason: "no arrivals (only blank lines, comments or a header)".into(),
        });
    }
    Ok(times)
}

/// A CSV line's first column, without surrounding quotes.
fn first_column(text: &str) -> &str {
    let field = text.split(',').next().unwrap_or("").trim();
    field
        .strip_prefix('"')
        .and_then(|f| f.strip_suffix('"'))
        .unwrap_or(field)
        .trim()
}

/// Whether the arrival at `index` is kept with probability `p`: the `index + 1`-th output of
/// SplitMix64 from `seed`, as a uniform draw in `[0, 1)`. Depends on the seed and the index
/// only, so the same seed keeps the same arrivals in every process that sees them.
pub fn sampled(seed: u64, index: u64, p: f64) -> bool {
    if p >= 1.0 {
        return true;
    }
    let mut z = seed.wrapping_add(index.wrapping_add(1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    ((z >> 11) as f64 / (1u64 << 53) as f64) < p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trace_holds_at_most_its_cap() {
        let e = parse_at_most("t.txt", b"0\n1\n# c\n2\n3\n", 3).unwrap_err();
        assert_eq!(
            e.to_string(),
            "trace file t.txt line 5: more than 3 arrivals, the most a trace may hold"
        );
        assert_eq!(parse_at_most("t.txt", b"0\n1\n2\n", 3).unwrap().len(), 3);
    }
}
