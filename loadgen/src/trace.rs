//! Arrival traces: first-attempt send times read from a file and replayed as they were.
//!
//! A trace file holds one time a line, seconds from the start of the run (`0.013`),
//! non-decreasing, finite and >= 0; blank lines and lines starting with `#` are skipped. A CSV
//! file with a header whose first column is `t_s` or `time_s` works too (the time is the first
//! column; the others are ignored). [`parse`] is the pure reader: bad input is one error naming
//! the file, the line and the value. [`read`] reads a file whole, refusing more than
//! [`MAX_FILE_BYTES`]; a trace holds at most [`MAX_ARRIVALS`].
//!
//! [`Selection`] picks what one loadgen sends of a trace and when: the arrivals of its
//! instance (`--instances`: every N-th by index), each kept with probability `--trace-sample`
//! (a seeded hash of the seed and the index, so the same seed keeps the same arrivals whatever
//! the instances), at `t / --trace-speed`. [`Replay`] is the result the run sends.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use kit_dist::trace::{MAX_ARRIVALS, MAX_FILE_BYTES, TraceError, parse, read, sampled};

/// What one loadgen sends of a trace, and when.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Selection {
    /// `--trace-speed` (> 0): trace time `t` is sent at `t / speed`.
    pub speed: f64,
    /// `--trace-sample` (in `(0, 1]`): each arrival is kept with this probability.
    pub sample: f64,
    /// Decides the sample (the run's `--seed`, the same for every instance).
    pub seed: u64,
    /// `--instances` and `--instance-index`: this one keeps the arrivals whose index (from 0,
    /// in file order) is `instance_index` modulo `instances`.
    pub instances: u32,
    pub instance_index: u32,
}

impl Selection {
    /// Whether this loadgen sends the trace's arrival at `index`.
    pub fn keeps(&self, index: usize) -> bool {
        let index = index as u64;
        index % u64::from(self.instances.max(1)) == u64::from(self.instance_index)
            && sampled(self.seed, index, self.sample)
    }

    /// The send times of the arrivals this loadgen keeps, seconds from the start (`t / speed`),
    /// those before `until` (`--duration`) only; reuses `times`.
    pub fn apply(&self, mut times: Vec<f64>, until: Option<f64>) -> Vec<f64> {
        let mut kept = 0;
        for i in 0..times.len() {
            let t = times[i] / self.speed;
            if until.is_some_and(|u| t >= u) {
                break;
            }
            if self.keeps(i) {
                times[kept] = t;
                kept += 1;
            }
        }
        times.truncate(kept);
        times
    }
}

/// A trace as one run replays it: this loadgen's send times and where they came from.
#[derive(Clone, PartialEq)]
pub struct Replay {
    pub file: PathBuf,
    /// Arrivals in the file.
    pub in_file: usize,
    /// When the file's last arrival is due at this speed, seconds from the start.
    pub last: f64,
    pub selection: Selection,
    /// This loadgen's send times, seconds from the start, non-decreasing.
    pub times: Arc<[f64]>,
}

impl Replay {
    /// Reads `file` and keeps what `selection` says, before `until`.
    pub fn load(
        file: &Path,
        selection: Selection,
        until: Option<f64>,
    ) -> Result<Replay, TraceError> {
        let all = read(file)?;
        let in_file = all.len();
        let last = all[in_file - 1] / selection.speed;
        Ok(Replay {
            file: file.to_path_buf(),
            in_file,
            last,
            selection,
            times: selection.apply(all, until).into(),
        })
    }

    /// Arrivals this loadgen sends.
    pub fn count(&self) -> usize {
        self.times.len()
    }

    /// Shard `k` of `n` (threads): its arrivals `k`, `k + n`, ... of this loadgen's.
    pub fn shard(&self, k: usize, n: usize) -> TraceShard {
        TraceShard {
            times: self.times.clone(),
            next: k,
            step: n.max(1),
        }
    }
}

impl fmt::Debug for Replay {
    /// Without the times (up to millions).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Replay")
            .field("file", &self.file)
            .field("in_file", &self.in_file)
            .field("last", &self.last)
            .field("selection", &self.selection)
            .field("count", &self.count())
            .finish()
    }
}

impl fmt::Display for Replay {
    /// What `summary.json` names as the schedule:
    /// `trace FILE (SENT of IN_FILE arrivals, speed X, sample P)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "trace {} ({} of {} arrivals, speed {}, sample {})",
            self.file.display(),
            self.count(),
            self.in_file,
            self.selection.speed,
            self.selection.sample
        )
    }
}

/// One shard's arrivals of a [`Replay`].
#[derive(Debug, Clone)]
pub struct TraceShard {
    times: Arc<[f64]>,
    next: usize,
    step: usize,
}

impl Iterator for TraceShard {
    type Item = f64;

    fn next(&mut self) -> Option<f64> {
        let t = *self.times.get(self.next)?;
        self.next += self.step;
        Some(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> String {
        parse("t.txt", text.as_bytes()).unwrap_err().to_string()
    }

    fn all(seed: u64, sample: f64) -> Selection {
        Selection {
            speed: 1.0,
            sample,
            seed,
            instances: 1,
            instance_index: 0,
        }
    }

    #[test]
    fn parses_plain_times_comments_and_blank_lines() {
        let text = "# captured 2026-12-04\n\n0\n0.013\r\n  0.013  \n# a pause\n1.5\n2e0\n";
        assert_eq!(
            parse("t.txt", text.as_bytes()).unwrap(),
            [0.0, 0.013, 0.013, 1.5, 2.0]
        );
        assert_eq!(parse("t.txt", b"-0\n7").unwrap(), [0.0, 7.0]);
        assert!(parse("t.txt", b"-0").unwrap()[0].is_sign_positive());
    }

    #[test]
    fn parses_csv_with_a_t_s_or_time_s_header_and_other_columns() {
        let text = "\u{feff}t_s,route,status\n0.5,/a,200\n# comment\n\n0.75,/b,503\n1,/a,200\n";
        assert_eq!(parse("t.csv", text.as_bytes()).unwrap(), [0.5, 0.75, 1.0]);
        let text = "# from the gateway log\n\"time_s\" , bytes\n\"0.25\",10\n3,20\n";
        assert_eq!(parse("t.csv", text.as_bytes()).unwrap(), [0.25, 3.0]);
        assert_eq!(parse("t.csv", b"time_s\n4\n").unwrap(), [4.0]);
    }

    #[test]
    fn each_bad_input_is_one_error_naming_the_file_the_line_and_the_value() {
        for (text, expected) in [
            (
                "0\n1\n# c\n\n3.5\n\n3.2\n",
                "trace file t.txt line 7: time 3.2 is before the previous 3.5",
            ),
            (
                "0.1\n0.2\nabc\n",
                "trace file t.txt line 3: time `abc` is not a number of seconds",
            ),
            ("0.1\n-2\n", "trace file t.txt line 2: time -2 is negative"),
            (
                "1\ninf\n",
                "trace file t.txt line 2: time inf is not finite",
            ),
            ("NaN\n", "trace file t.txt line 1: time NaN is not finite"),
            (
                "# c\nseconds,route\n1,/a\n",
                "trace file t.txt line 2: `seconds,route` is neither a time in seconds nor a \
                 CSV header whose first column is `t_s` or `time_s`",
            ),
            (
                "0.5,/a\n",
                "trace file t.txt line 1: `0.5,/a` is neither a time in seconds nor a CSV \
                 header whose first column is `t_s` or `time_s`",
            ),
            (
                "t_s,route\n1,/a\n,/b\n",
                "trace file t.txt line 3: time `` is not a number of seconds",
            ),
            (
                "t_s,route\n2,/a\n1,/b\n",
                "trace file t.txt line 3: time 1 is before the previous 2",
            ),
            (
                "0.5\n1 2\n",
                "trace file t.txt line 2: time `1 2` is not a number",
            ),
            (
                "# nothing\n\n",
                "trace file t.txt: no arrivals (only blank lines, comments or a header)",
            ),
            (
                "t_s,route\n",
                "trace file t.txt: no arrivals (only blank lines, comments or a header)",
            ),
        ] {
            let e = err(text);
            assert!(e.starts_with(expected), "{text:?}: {e}");
            assert!(!e.contains('\n'), "{e}");
        }
        let e = parse("t.txt", b"0\n\xff1\n").unwrap_err().to_string();
        assert_eq!(e, "trace file t.txt line 2: not UTF-8 text");
    }

    #[test]
    fn read_names_a_missing_file_and_reads_a_real_one() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope.txt");
        let e = read(&missing).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!("trace file {}: ", missing.display())),
            "{e}"
        );
        let file = dir.path().join("t.txt");
        std::fs::write(&file, "0.5\n0.25\n").unwrap();
        let e = read(&file).unwrap_err().to_string();
        assert_eq!(
            e,
            format!(
                "trace file {} line 2: time 0.25 is before the previous 0.5",
                file.display()
            )
        );
    }

    #[test]
    fn speed_compresses_time_and_duration_cuts() {
        let times = vec![0.0, 1.0, 2.0, 3.0, 4.0];
        let fast = Selection {
            speed: 4.0,
            ..all(1, 1.0)
        };
        assert_eq!(fast.apply(times.clone(), None), [0.0, 0.25, 0.5, 0.75, 1.0]);
        let slow = Selection {
            speed: 0.5,
            ..all(1, 1.0)
        };
        assert_eq!(slow.apply(times.clone(), Some(5.0)), [0.0, 2.0, 4.0]);
        assert_eq!(all(1, 1.0).apply(times, None).len(), 5);
    }

    #[test]
    fn sampling_is_seeded_and_keeps_p_within_2_percent() {
        const N: usize = 100_000;
        let times: Vec<f64> = (0..N).map(|i| i as f64 / 1000.0).collect();
        for p in [0.1, 0.25, 0.5, 0.9] {
            for seed in [0, 7, u64::MAX] {
                let kept = all(seed, p).apply(times.clone(), None);
                let fraction = kept.len() as f64 / N as f64;
                assert!(
                    (fraction - p).abs() <= 0.02 * p,
                    "p {p} seed {seed}: kept {fraction}"
                );
                assert_eq!(
                    all(seed, p).apply(times.clone(), None),
                    kept,
                    "same seed, same kept set"
                );
                assert!(kept.windows(2).all(|w| w[1] >= w[0]));
            }
            assert_ne!(
                all(1, p).apply(times.clone(), None),
                all(2, p).apply(times.clone(), None),
                "another seed, another set"
            );
        }
        assert_eq!(all(3, 1.0).apply(times.clone(), None), times);
    }

    #[test]
    fn instances_split_the_trace_and_together_keep_what_one_keeps() {
        let times: Vec<f64> = (0..10_000).map(|i| i as f64 / 100.0).collect();
        let one = all(42, 0.3).apply(times.clone(), None);
        let mut together: Vec<f64> = (0..3)
            .flat_map(|i| {
                Selection {
                    instances: 3,
                    instance_index: i,
                    ..all(42, 0.3)
                }
                .apply(times.clone(), None)
            })
            .collect();
        together.sort_by(f64::total_cmp);
        assert_eq!(together, one);
        let second = Selection {
            instances: 3,
            instance_index: 1,
            ..all(0, 1.0)
        }
        .apply(times.clone(), None);
        assert_eq!(second[..3], [0.01, 0.04, 0.07]);
    }

    #[test]
    fn shards_take_every_nth_arrival_and_together_send_them_all() {
        let replay = Replay {
            file: PathBuf::from("t.txt"),
            in_file: 7,
            last: 6.0,
            selection: all(0, 1.0),
            times: (0..7).map(f64::from).collect::<Vec<_>>().into(),
        };
        assert_eq!(replay.shard(1, 3).collect::<Vec<_>>(), [1.0, 4.0]);
        let mut union: Vec<f64> = (0..3).flat_map(|k| replay.shard(k, 3)).collect();
        union.sort_by(f64::total_cmp);
        assert_eq!(union, *replay.times);
        assert_eq!(
            replay.to_string(),
            "trace t.txt (7 of 7 arrivals, speed 1, sample 1)"
        );
        let debug = format!("{replay:?}");
        assert!(
            debug.contains("count: 7") && !debug.contains("times"),
            "{debug}"
        );
    }
}
