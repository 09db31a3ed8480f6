//! `library = "kit-loadgen"`: the kit loadgen's flags, read by its own parser, with its defaults
//! for the retry flags left out.

use std::path::Path;

use kit_defense::QuotaMode;

use super::libraries::AWS_STANDARD_TIMEOUT_RETRIES;
use super::{Setting, Settings};
use crate::layer::{Budget, InputError, RetryOn};

/// Reads the kit loadgen's flags as `loadgen` would.
pub(super) fn loadgen_settings(
    file: &Path,
    at: &str,
    args: &[String],
) -> Result<Settings, InputError> {
    let (config, defaults) = loadgen::config::parse_argv(args).map_err(|e| {
        let shown = e.to_string();
        let first = shown
            .lines()
            .next()
            .unwrap_or("")
            .trim_start_matches("error: ");
        InputError::field(file, &format!("{at}.args"), &args.join(" "), first)
    })?;
    if let Some(r) = config.retry_budget
        && !(r.is_finite() && (0.0..=1000.0).contains(&r))
    {
        return Err(InputError::field(
            file,
            &format!("{at}.args"),
            &format!("--retry-budget {r}"),
            "retries per first attempt: from 0 to 1000",
        ));
    }
    // The loadgen's own defaults, for the flags the args leave out.
    const V: &str = concat!("kit loadgen ", env!("CARGO_PKG_VERSION"));
    let mut s = loadgen_figures(&config);
    let retry_on: Vec<&str> = config.retry_on.iter().map(|r| r.name()).collect();
    for (default, flag, about, value) in [
        (
            defaults.timeout,
            "--timeout",
            Setting::Timeout,
            humantime::format_duration(config.timeout).to_string(),
        ),
        (
            defaults.retries,
            "--retries",
            Setting::Tries,
            config.retries.to_string(),
        ),
        (
            defaults.retry_on,
            "--retry-on",
            Setting::RetryOn,
            retry_on.join(","),
        ),
    ] {
        if default {
            s = s.default_used(about, flag, &value, V, "loadgen/src/config.rs Config");
        }
    }
    Ok(s)
}

/// The flags' figures: `connect` and `io` (a connection failing mid-exchange, before a response)
/// are both connection failures to `check`.
fn loadgen_figures(config: &loadgen::Config) -> Settings {
    use loadgen::config::RetryOn as Flag;
    let has = |f: Flag| config.retry_on.contains(&f);
    let mut s = Settings {
        tries: Some(config.retries.saturating_add(1)),
        retry_on: Some(RetryOn {
            timeout: has(Flag::Timeout),
            connect_failure: has(Flag::Connect) || has(Flag::Io),
            status_5xx: has(Flag::Status5xx),
        }),
        per_try_timeout_s: Some(config.timeout.as_secs_f64()),
        ..Settings::default()
    };
    if let Some(ratio) = config.retry_budget {
        s.budget = Some(Budget::Ratio { ratio });
        s = s.note(
            Some(Setting::Budget),
            &format!(
                "--retry-budget also allows {}/s over a {} window (--retry-budget-min, \
                 --retry-budget-ttl)",
                config.retry_budget_min,
                humantime::format_duration(config.retry_budget_ttl)
            ),
        );
    }
    if config.retry_quota.is_some() {
        if config.retry_budget.is_some() {
            s = s.note(
                Some(Setting::Budget),
                "--retry-budget and --retry-quota both: the quota, which empties while every \
                 attempt fails, sets the figures",
            );
        }
        s.budget = Some(Budget::Quota {
            retries_paid: AWS_STANDARD_TIMEOUT_RETRIES,
        });
        s.defenses.quota = Some(QuotaMode::Standard);
        s = s.note(
            Some(Setting::Budget),
            "--retry-quota aws-standard: 50 retries after timeouts (500 tokens, 10 each), 100 \
             after other failures (5 each)",
        );
    }
    if let Some(b) = config.backoff {
        s = s.note(
            None,
            &format!("--backoff {b}: retries wait; the counts do not change"),
        );
    }
    if config.deadline {
        s = s.note(
            None,
            "--deadline sends x-deadline-ms so the service can drop expired work: if it does, \
             say [service] abandoned = \"dropped\"",
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clients::libraries::CONNECT_ONLY;
    use crate::clients::tests::*;
    use crate::layer::Tries;

    #[test]
    fn kit_loadgen_args_as_f5() {
        let c = one(
            "[[client]]\nname = \"loadgen\"\nlibrary = \"kit-loadgen\"\n\
             args = [\"--timeout=10s\", \"--retries=2\", \"--retry-on=timeout,5xx\"]\n",
        );
        assert_eq!(c.tries, Tries::AtMost(3));
        assert_eq!(c.per_try_timeout_s, Some(10.0));
        assert_eq!(
            c.retry_on,
            RetryOn {
                timeout: true,
                connect_failure: false,
                status_5xx: true
            }
        );
        assert_eq!((c.budget, c.overall_timeout_s), (None, None));
        assert!(c.defaults.is_empty(), "{:?}", c.defaults);
    }

    #[test]
    fn kit_loadgen_defaults_budgets_and_deadline() {
        let c =
            one("[[client]]\nname = \"l\"\nlibrary = \"kit-loadgen\"\nargs = [\"--deadline\"]\n");
        assert_eq!(c.tries, Tries::AtMost(3));
        assert_eq!(
            c.retry_on,
            RetryOn {
                timeout: true,
                connect_failure: true,
                status_5xx: false
            }
        );
        let flags: Vec<(&str, &str)> = c
            .defaults
            .iter()
            .map(|d| (d.setting.as_str(), d.value.as_str()))
            .collect();
        assert_eq!(
            flags,
            [
                ("--timeout", "10s"),
                ("--retries", "2"),
                ("--retry-on", "timeout,connect")
            ]
        );
        assert!(
            c.notes
                .iter()
                .any(|n| n.contains("abandoned = \"dropped\"")),
            "{:?}",
            c.notes
        );
        let q = one("[[client]]\nname = \"l\"\nlibrary = \"kit-loadgen\"\n\
             args = [\"--retry-quota\", \"aws-standard\", \"--retry-on=io\", \"--backoff=exp:100ms,1s\"]\n");
        assert_eq!(q.budget, Some(Budget::Quota { retries_paid: 50.0 }));
        assert_eq!(q.retry_on, CONNECT_ONLY);
        let b = one(
            "[[client]]\nname = \"l\"\nlibrary = \"kit-loadgen\"\nargs = [\"--retry-budget=0.2\"]\n\
                     timeout = \"3s\"\n",
        );
        assert_eq!(b.budget, Some(Budget::Ratio { ratio: 0.2 }));
        assert_eq!(b.per_try_timeout_s, Some(3.0), "a field overrides the args");
        assert!(!b.defaults.iter().any(|d| d.setting == "--timeout"));
        for (args, needle) in [
            ("\"--retries=many\"", "many"),
            ("\"--retry-on=timeout,teapot\"", "teapot"),
            ("\"--frobnicate\"", "frobnicate"),
            ("\"--retry-budget=-1\"", "--retry-budget"),
        ] {
            let text =
                format!("[[client]]\nname = \"l\"\nlibrary = \"kit-loadgen\"\nargs = [{args}]\n");
            let (f, v, why) = field_of(parse(&text).unwrap_err());
            assert_eq!(f, "client[0].args");
            assert!(v.contains(needle) || why.contains(needle), "{v} / {why}");
            assert!(!why.contains("Usage"), "{why}");
        }
    }

    #[test]
    fn loadgen_flags_need_no_target() {
        let c = loadgen_settings(
            Path::new("s.toml"),
            "client[0]",
            &["--retries=1".to_string()],
        )
        .unwrap();
        assert_eq!(c.tries, Some(2));
    }
}
