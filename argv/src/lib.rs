//! Renders a typed command line back into the argv its binary parses: one `--flag=value` per
//! element, switches as `--flag`, durations in a form humantime reads back exactly. What
//! `loadgen::Invocation`, `service::PodFlags` and `meter::MeterFlags` share, so the kit's three
//! command lines are written one way (each is round-trip tested against its binary's parser).

use std::fmt::Display;
use std::time::Duration;

/// An argv being built, after the program name.
#[derive(Debug, Default)]
pub struct Argv(Vec<String>);

impl Argv {
    pub fn new() -> Argv {
        Argv::default()
    }

    /// `--flag=value`.
    pub fn value(&mut self, flag: &str, v: impl Display) -> &mut Argv {
        self.0.push(format!("--{flag}={v}"));
        self
    }

    /// `--flag=value` when there is a value; the binary's default otherwise.
    pub fn opt(&mut self, flag: &str, v: Option<impl Display>) -> &mut Argv {
        if let Some(v) = v {
            self.value(flag, v);
        }
        self
    }

    /// `--flag` when on.
    pub fn switch(&mut self, flag: &str, on: bool) -> &mut Argv {
        if on {
            self.0.push(format!("--{flag}"));
        }
        self
    }

    /// A duration flag, in the largest unit that divides it.
    pub fn duration(&mut self, flag: &str, d: Option<Duration>) -> &mut Argv {
        self.opt(flag, d.map(duration))
    }

    /// A flag with a fixed set of values, by the name clap gives the value.
    pub fn choice(&mut self, flag: &str, v: Option<impl clap::ValueEnum>) -> &mut Argv {
        let name = v.and_then(|v| v.to_possible_value());
        self.opt(
            flag,
            name.as_ref().map(clap::builder::PossibleValue::get_name),
        )
    }

    pub fn into_vec(self) -> Vec<String> {
        self.0
    }
}

/// A duration as humantime reads it back exactly, in the largest unit that divides it
/// (`10s`, `1500ms`, `250us`, `7ns`).
pub fn duration(d: Duration) -> String {
    let ns = d.as_nanos();
    let (n, unit) = [(1_000_000_000, "s"), (1_000_000, "ms"), (1_000, "us")]
        .into_iter()
        .find(|&(per, _)| ns.is_multiple_of(per))
        .map_or((ns, "ns"), |(per, unit)| (ns / per, unit));
    format!("{n}{unit}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Copy, clap::ValueEnum)]
    enum Mode {
        DropExpired,
    }

    #[test]
    fn flags_render_as_the_binaries_parse_them() {
        let mut a = Argv::new();
        a.value("rate", 2.5)
            .opt("seed", None::<u64>)
            .opt("seed", Some(7))
            .switch("deadline", false)
            .switch("stdout-rows", true)
            .duration("timeout", Some(Duration::from_millis(1500)))
            .choice("abandoned", Some(Mode::DropExpired));
        assert_eq!(
            a.into_vec(),
            [
                "--rate=2.5",
                "--seed=7",
                "--stdout-rows",
                "--timeout=1500ms",
                "--abandoned=drop-expired"
            ]
        );
    }

    #[test]
    fn durations_read_back_exactly() {
        for d in [
            Duration::from_secs(30),
            Duration::from_millis(1500),
            Duration::from_micros(250),
            Duration::from_nanos(12_000_000_007),
            Duration::ZERO,
        ] {
            assert_eq!(humantime::parse_duration(&duration(d)).unwrap(), d);
        }
        assert_eq!(duration(Duration::from_secs(600)), "600s");
    }
}
