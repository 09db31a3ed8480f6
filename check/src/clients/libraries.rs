//! The built-in libraries' defaults, each with the version it is for and where upstream writes it
//! down: AWS SDK standard retry mode before and after the 2026 update, botocore 1.43 legacy mode,
//! urllib3 2.x, requests 2.x, Go 1.26 net/http, OkHttp 5.x, Finagle and tower 0.5.

use kit_defense::{ClientDefenses, QuotaMode};

use super::{Setting, Settings};
use crate::layer::{Budget, RetryOn};

const AWS_GUIDE: &str = "AWS SDKs and Tools Reference Guide, \"Retry behavior\", \
                         https://docs.aws.amazon.com/sdkref/latest/guide/feature-retry-behavior.html";
const AWS_PRE_2026: &str = "AWS SDK standard retry mode before the 2026 update (without \
                            AWS_NEW_RETRIES_2026=true): aws-sdk-go-v2 aws/retry, botocore 1.43 \
                            retries/standard.py";
const AWS_2026: &str = "AWS SDK standard retry mode with AWS_NEW_RETRIES_2026=true (opt-in since \
                        May 2026: aws-sdk-java-v2 2.44.0, @aws-sdk/client-* 3.1048.0, botocore \
                        1.43; the announced default from no sooner than November 2026)";
const BOTOCORE: &str = "botocore 1.43.11 (boto3 1.43.11), legacy retry mode: its default unless \
                        retry_mode is set or AWS_NEW_RETRIES_2026=true";
const FINAGLE: &str = "Finagle finagle-core (twitter/finagle, RetryBudget.scala and Retries.scala)";
pub(super) const EVERY_CLASS: RetryOn = RetryOn {
    timeout: true,
    connect_failure: true,
    status_5xx: true,
};
pub(super) const CONNECT_ONLY: RetryOn = RetryOn {
    timeout: false,
    connect_failure: true,
    status_5xx: false,
};

/// A built-in library's defaults; `None`: not one (`kit-loadgen` and `grpc` read more than a
/// name and are built by their own functions).
pub(super) fn library_settings(name: &str) -> Option<Settings> {
    match name {
        "aws-sdk-standard" => Some(aws_standard()),
        "aws-sdk-standard-2026" => Some(aws_standard_2026()),
        "botocore-legacy" => Some(botocore_legacy()),
        "urllib3" => Some(urllib3()),
        "python-requests" => Some(python_requests()),
        "go-net-http" => Some(go_net_http()),
        "okhttp" => Some(okhttp()),
        "finagle" => Some(finagle()),
        "tower" => Some(tower()),
        _ => None,
    }
}

/// Standard mode's common part: three attempts, and what it retries (transient errors, among
/// them timeouts and connection errors, 500/502/503/504, and throttling).
fn aws_common(version: &str) -> Settings {
    Settings {
        tries: Some(3),
        retry_on: Some(EVERY_CLASS),
        defenses: ClientDefenses {
            quota: Some(QuotaMode::Standard),
            ..ClientDefenses::default()
        },
        ..Settings::default()
    }
    .default_used(
        Setting::Tries,
        "max_attempts",
        "3",
        version,
        &format!(
            "{AWS_GUIDE}; aws-sdk-go-v2 aws/retry/standard.go DefaultMaxAttempts; botocore \
                  retries/standard.py DEFAULT_MAX_ATTEMPTS"
        ),
    )
    .default_used(
        Setting::RetryOn,
        "retryable errors",
        "timeouts and connection errors, HTTP 500/502/503/504, throttling error codes",
        version,
        "aws-sdk-go-v2 aws/retry/standard.go DefaultRetryables, DefaultTimeouts; botocore \
         retries/standard.py TransientRetryableChecker",
    )
    .note(
        Some(Setting::Timeout),
        "no per-attempt timeout common to the AWS SDKs (botocore: read_timeout 60 s per socket \
         read; aws-sdk-go-v2: none): give timeout",
    )
    .note(
        Some(Setting::Budget),
        "the retry quota is one SDK client's bucket, not shared across clients, processes or hosts",
    )
}

/// A retry after a timeout costs 10 of the standard quota's 500 tokens: 50 retries, then none
/// while every attempt fails (a success refunds 1, or its retry's cost).
pub(super) const AWS_STANDARD_TIMEOUT_RETRIES: f64 = 50.0;

fn aws_standard() -> Settings {
    Settings {
        budget: Some(Budget::Quota {
            retries_paid: AWS_STANDARD_TIMEOUT_RETRIES,
        }),
        ..aws_common(AWS_PRE_2026)
    }
    .default_used(
        Setting::Budget,
        "retry quota",
        "500 tokens; a retry costs 10 after a timeout, 5 otherwise; a success refunds 1: 50 \
         timeout retries",
        AWS_PRE_2026,
        "aws-sdk-go-v2 aws/retry/standard.go DefaultRetryRateTokens, DefaultRetryCost, \
         DefaultRetryTimeoutCost; botocore retries/quota.py, retries/standard.py RetryQuotaChecker",
    )
    .note(
        Some(Setting::Budget),
        "aws-sdk-go-v2 and botocore charge 5 tokens for 5xx and connection failures: 100 \
         retries before the quota is empty (@aws-sdk/util-retry charges 10 for every transient \
         error)",
    )
    .note(
        None,
        "aws-sdk-java-v2, aws-sdk-cpp and boto3 default to their own legacy mode before the 2026 \
         update (boto3: library botocore-legacy); with AWS_NEW_RETRIES_2026=true use \
         aws-sdk-standard-2026",
    )
}

fn aws_standard_2026() -> Settings {
    Settings {
        // 14 tokens a transient retry, timeouts included: 35 whole retries out of 500.
        budget: Some(Budget::Quota { retries_paid: 35.0 }),
        ..aws_common(AWS_2026)
    }
    .default_used(
        Setting::Budget,
        "retry quota",
        "500 tokens; a retry costs 14 (5 after throttling); a success refunds 1: 35 retries",
        AWS_2026,
        &format!(
            "{AWS_GUIDE} (retry quota table); botocore 1.43.11 retries/standard.py \
                  RetryQuotaChecker._RETRY_COST_V2; aws-sdk-go-v2 pull request 3400"
        ),
    )
    .note(
        None,
        "DynamoDB and DynamoDB Streams clients make 4 attempts",
    )
}

fn botocore_legacy() -> Settings {
    Settings {
        tries: Some(5),
        retry_on: Some(EVERY_CLASS),
        per_try_timeout_s: Some(60.0),
        ..Settings::default()
    }
    .default_used(
        Setting::Tries,
        "max_attempts",
        "5",
        BOTOCORE,
        "botocore/data/_retry.json retry.__default__.max_attempts; botocore/configprovider.py \
         _DEFAULT_RETRY_MODE",
    )
    .default_used(
        Setting::RetryOn,
        "retry policies",
        "GENERAL_CONNECTION_ERROR (connection errors, read timeouts), HTTP 500/502/503/504/509, \
         throttling",
        BOTOCORE,
        "botocore/data/_retry.json retry.__default__.policies; botocore/retryhandler.py \
         EXCEPTION_MAP",
    )
    .default_used(
        Setting::Timeout,
        "read_timeout",
        "60s",
        BOTOCORE,
        "botocore/endpoint.py DEFAULT_TIMEOUT; botocore/config.py",
    )
    .note(
        Some(Setting::Timeout),
        "read_timeout is per socket read: a service that trickles bytes never fires it",
    )
    .note(None, "legacy mode has no retry quota")
}

fn urllib3() -> Settings {
    const V: &str = "urllib3 2.7.0 (2.x)";
    Settings {
        tries: Some(4),
        retry_on: Some(RetryOn {
            timeout: true,
            connect_failure: true,
            status_5xx: false,
        }),
        ..Settings::default()
    }
    .default_used(
        Setting::Tries,
        "Retry.DEFAULT",
        "Retry(3): 3 retries, 4 attempts",
        V,
        "src/urllib3/util/retry.py: Retry.DEFAULT = Retry(3)",
    )
    .default_used(
        Setting::RetryOn,
        "retried errors",
        "connection errors (NewConnectionError is a ConnectTimeoutError); read errors (timeouts, \
         resets) for HEAD, GET, PUT, DELETE, OPTIONS, TRACE; no status codes (status_forcelist \
         empty)",
        V,
        "src/urllib3/util/retry.py: Retry.increment, DEFAULT_ALLOWED_METHODS, is_retry",
    )
    .note(
        Some(Setting::Timeout),
        "no timeout by default (Timeout.DEFAULT_TIMEOUT: the socket default, none): give timeout \
         (the read timeout, per socket read)",
    )
    .note(
        Some(Setting::RetryOn),
        "a POST's read error is not retried; a 413, 429 or 503 with Retry-After is",
    )
}

fn python_requests() -> Settings {
    const V: &str = "requests 2.34.2 (2.x)";
    Settings {
        tries: Some(1),
        retry_on: Some(RetryOn::NOTHING),
        ..Settings::default()
    }
    .default_used(
        Setting::Tries,
        "HTTPAdapter max_retries",
        "0: Retry(0, read=False), 1 attempt",
        V,
        "src/requests/adapters.py: DEFAULT_RETRIES = 0, HTTPAdapter.__init__",
    )
    .note(
        None,
        "a mounted HTTPAdapter(max_retries=Retry(...)) retries as urllib3 does: describe it with \
         library = \"urllib3\" and attempts",
    )
}

fn go_net_http() -> Settings {
    const V: &str = "Go 1.26 net/http";
    Settings {
        tries: Some(2),
        retry_on: Some(CONNECT_ONLY),
        ..Settings::default()
    }
    .default_used(
        Setting::Tries,
        "Transport retry",
        "once more, on a new connection, when a reused connection fails before the response",
        V,
        "src/net/http/transport.go persistConn.shouldRetryRequest",
    )
    .note(
        Some(Setting::Tries),
        "never after a new connection's failure, a timeout or a 5xx; a request with a body only \
         if it can be rewound (GetBody) and, once written, is replayable (GET, HEAD, OPTIONS, \
         TRACE or an Idempotency-Key header: request.go isReplayable)",
    )
    .note(
        Some(Setting::OverallTimeout),
        "http.Client.Timeout is 0 (none) by default and spans the whole exchange: give \
         overall_timeout",
    )
}

fn okhttp() -> Settings {
    const V: &str = "OkHttp 5.x";
    Settings {
        tries: Some(2),
        retry_on: Some(CONNECT_ONLY),
        per_try_timeout_s: Some(10.0),
        ..Settings::default()
    }
    .default_used(
        Setting::Tries,
        "retryOnConnectionFailure",
        "true: a failed connection is tried again on the same route, then the host's other \
         routes; 2 attempts for a one-address host",
        V,
        "okhttp3/internal/http/RetryAndFollowUpInterceptor.kt recover(); \
         okhttp3/internal/connection/RealRoutePlanner.kt hasNext()",
    )
    .default_used(
        Setting::Timeout,
        "readTimeout",
        "10s",
        V,
        "okhttp3/OkHttpClient.kt Builder (readTimeout 10 s, callTimeout 0)",
    )
    .note(
        Some(Setting::Tries),
        "a host with N addresses (a headless Service) gets up to N+1 attempts: give attempts",
    )
    .note(
        Some(Setting::RetryOn),
        "a read timeout after the request was sent is never retried (isRecoverable); a 408, and \
         a 503 with Retry-After: 0, are repeated once",
    )
    .note(
        Some(Setting::Timeout),
        "readTimeout is per socket read: a service that trickles bytes never fires it",
    )
}

fn finagle() -> Settings {
    Settings {
        // Requeues are bounded by the budget (20% of its balance per request), not by a count;
        // any count of 2 or more gives the budget's factor.
        tries: Some(2),
        retry_on: Some(CONNECT_ONLY),
        budget: Some(Budget::Ratio { ratio: 0.2 }),
        ..Settings::default()
    }
    .default_used(
        Setting::Budget,
        "RetryBudget()",
        "20% of requests, plus 10 retries/s, over a 10 s ttl",
        FINAGLE,
        "finagle-core/src/main/scala/com/twitter/finagle/service/RetryBudget.scala apply()",
    )
    .default_used(
        Setting::RetryOn,
        "Retries.Policy",
        "RetryPolicy.Never: only requests never written (RetryableWriteException) are requeued",
        FINAGLE,
        "finagle-core/src/main/scala/com/twitter/finagle/service/Retries.scala",
    )
    .default_used(
        Setting::Tries,
        "requeues per request",
        "bounded by 20% of the budget's balance (MaxRequeuesPerReq): modelled as 2 attempts",
        FINAGLE,
        "finagle-core/src/main/scala/com/twitter/finagle/service/Retries.scala",
    )
    .note(
        None,
        "timeouts and application failures are retried only by a RetryPolicy or ResponseClassifier \
         of your own: describe it with attempts and retry_on",
    )
}

fn tower() -> Settings {
    Settings {
        budget: Some(Budget::Ratio { ratio: 0.2 }),
        ..Settings::default()
    }
    .default_used(
        Setting::Budget,
        "TpsBudget::default()",
        "20% of requests, plus 10 retries/s, over a 10 s ttl",
        "tower 0.5.3",
        "tower/src/retry/budget/tps_budget.rs impl Default for TpsBudget",
    )
    .note(
        Some(Setting::Budget),
        "the 10 retries/s floor lets a client with little traffic retry more than 20%",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clients::LIBRARIES;
    use crate::clients::tests::*;
    use crate::layer::Tries;

    #[test]
    fn aws_standard_with_an_overridden_timeout() {
        let c =
            one("[[client]]\nname = \"s3\"\nlibrary = \"aws-sdk-standard\"\ntimeout = \"2s\"\n");
        assert_eq!(c.tries, Tries::AtMost(3));
        assert_eq!(c.retry_on, EVERY_CLASS);
        assert_eq!(c.per_try_timeout_s, Some(2.0));
        assert_eq!(c.budget, Some(Budget::Quota { retries_paid: 50.0 }));
        let settings: Vec<&str> = c.defaults.iter().map(|d| d.setting.as_str()).collect();
        assert_eq!(
            settings,
            ["max_attempts", "retryable errors", "retry quota"]
        );
        assert!(
            c.defaults
                .iter()
                .all(|d| !d.version.is_empty() && !d.reference.is_empty())
        );
        assert!(
            !c.notes.iter().any(|n| n.contains("give timeout")),
            "the file gave the timeout: {:?}",
            c.notes
        );
        let new = one("[[client]]\nname = \"s3\"\nlibrary = \"aws-sdk-standard-2026\"\n");
        assert_eq!(new.budget, Some(Budget::Quota { retries_paid: 35.0 }));
        assert!(new.notes.iter().any(|n| n.contains("give timeout")));
        let over = one(
            "[[client]]\nname = \"s3\"\nlibrary = \"aws-sdk-standard\"\nattempts = 5\n\
                        budget = 0.1\n",
        );
        assert_eq!(over.tries, Tries::AtMost(5));
        assert_eq!(over.budget, Some(Budget::Ratio { ratio: 0.1 }));
        let left: Vec<&str> = over.defaults.iter().map(|d| d.setting.as_str()).collect();
        assert_eq!(left, ["retryable errors"]);
    }

    #[test]
    fn every_library_builds_a_layer_with_its_sources() {
        for lib in LIBRARIES {
            let extra = match lib {
                "tower" => "attempts = 2\n",
                _ => "",
            };
            let c = one(&format!(
                "[[client]]\nname = \"c\"\nlibrary = \"{lib}\"\n{extra}"
            ));
            assert!(c.tries.limit().is_none_or(|n| n >= 1), "{lib}");
            assert!(!c.defaults.is_empty(), "{lib}: no default named");
            for d in &c.defaults {
                assert!(
                    !d.version.is_empty() && !d.reference.is_empty(),
                    "{lib}: {d:?}"
                );
            }
        }
        let (f, _, why) =
            field_of(parse("[[client]]\nname = \"t\"\nlibrary = \"tower\"\n").unwrap_err());
        assert_eq!(f, "client[0].attempts");
        assert!(why.contains("tower has no attempt count"), "{why}");
        let req = one("[[client]]\nname = \"p\"\nlibrary = \"python-requests\"\n");
        assert_eq!(
            (req.tries, req.retry_on),
            (Tries::AtMost(1), RetryOn::NOTHING)
        );
        let u = one("[[client]]\nname = \"p\"\nlibrary = \"urllib3\"\n");
        assert_eq!(u.tries, Tries::AtMost(4));
        assert!(u.retry_on.timeout && u.retry_on.connect_failure && !u.retry_on.status_5xx);
        let go = one("[[client]]\nname = \"g\"\nlibrary = \"go-net-http\"\n");
        assert_eq!((go.tries, go.retry_on), (Tries::AtMost(2), CONNECT_ONLY));
        let f = one("[[client]]\nname = \"f\"\nlibrary = \"finagle\"\n");
        assert_eq!(f.budget, Some(Budget::Ratio { ratio: 0.2 }));
        let b = one("[[client]]\nname = \"b\"\nlibrary = \"botocore-legacy\"\n");
        assert_eq!(
            (b.tries, b.per_try_timeout_s, b.budget),
            (Tries::AtMost(5), Some(60.0), None)
        );
    }
}
