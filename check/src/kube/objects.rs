//! An object and its fields: typed reads that name the field and the value when they refuse it,
//! and the helpers the readers share (Go durations, quantities, budgets).

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use serde_json::Value;

use super::documents::{Located, cut, show};
use crate::layer::{Budget, InputError, Layer, Skipped, Source, Tries};

pub(super) static NULL: Value = Value::Null;

/// A field that may be absent, or an error naming it.
type Read<T> = Result<Option<T>, InputError>;

/// An object being read, and where it is: for sources, skips and errors.
pub(super) struct Obj<'a> {
    pub(super) file: &'a Path,
    pub(super) line: u32,
    pub(super) group: &'a str,
    pub(super) version: &'a str,
    pub(super) kind: &'a str,
    pub(super) name: &'a str,
    pub(super) value: &'a Value,
}

impl<'a> Obj<'a> {
    pub(super) fn new(file: &'a Path, l: &'a Located) -> Self {
        let text = |v: Option<&'a Value>| v.and_then(Value::as_str).unwrap_or("");
        let api = text(l.value.get("apiVersion"));
        let (group, version) = api.rsplit_once('/').unwrap_or(("", api));
        let name = text(l.value.get("metadata").and_then(|m| m.get("name")));
        Obj {
            file,
            line: l.line,
            group,
            version,
            kind: text(l.value.get("kind")),
            name: if name.is_empty() { "(unnamed)" } else { name },
            value: &l.value,
        }
    }

    pub(super) fn shown_kind(&self) -> &'a str {
        if self.kind.is_empty() {
            "(no kind)"
        } else {
            self.kind
        }
    }

    pub(super) fn spec(&self) -> &'a Value {
        get(self.value, "spec").unwrap_or(&NULL)
    }

    pub(super) fn source(&self, locator: String) -> Source {
        Source::new(self.file, Some(self.line), locator)
    }

    pub(super) fn skip(&self, why: impl Into<String>) -> Skipped {
        let what = format!("{} {}", self.shown_kind(), self.name);
        Skipped::new(self.file, what, Some(self.line), why)
    }

    /// A field with a value the kit will not read: the object, the field's path, the value.
    pub(super) fn bad(
        &self,
        path: &str,
        value: impl Into<String>,
        why: impl fmt::Display,
    ) -> InputError {
        let field = format!("{} {} {path}", self.shown_kind(), self.name);
        let why = format!("{why} (object at line {})", self.line);
        InputError::field(self.file, &field, &cut(value.into()), why)
    }

    /// `v.key` when present, as `read` takes it; refused, naming the field, when `read` cannot.
    fn field<T>(
        &self,
        v: &'a Value,
        at: &str,
        key: &str,
        expected: &str,
        read: impl Fn(&'a Value) -> Option<T>,
    ) -> Read<T> {
        let Some(x) = get(v, key) else {
            return Ok(None);
        };
        let bad = || self.bad(&join(at, key), show(x), expected);
        read(x).map(Some).ok_or_else(bad)
    }

    /// `v.key` that must be a mapping when present.
    pub(super) fn mapping(&self, v: &'a Value, at: &str, key: &str) -> Read<&'a Value> {
        self.field(v, at, key, "expected a mapping", |m| {
            m.is_object().then_some(m)
        })
    }

    /// `v.key` that must be a sequence when present; absent reads as empty.
    pub(super) fn list(
        &self,
        v: &'a Value,
        at: &str,
        key: &str,
    ) -> Result<&'a [Value], InputError> {
        let items = self.field(v, at, key, "expected a sequence", Value::as_array)?;
        Ok(items.map_or(&[], Vec::as_slice))
    }

    pub(super) fn string(&self, v: &'a Value, at: &str, key: &str) -> Read<&'a str> {
        self.field(v, at, key, "expected a string", Value::as_str)
    }

    pub(super) fn int(&self, v: &'a Value, at: &str, key: &str) -> Read<i64> {
        self.field(v, at, key, "expected an integer", as_int)
    }

    /// A count: an integer from 0 to 2^32-1.
    pub(super) fn count(&self, v: &'a Value, at: &str, key: &str) -> Read<u32> {
        let bad = |n: i64| {
            self.bad(
                &join(at, key),
                n.to_string(),
                "expected a count from 0 to 2^32-1",
            )
        };
        let n = self.int(v, at, key)?;
        n.map(|n| u32::try_from(n).map_err(|_| bad(n))).transpose()
    }

    pub(super) fn number(&self, v: &'a Value, at: &str, key: &str) -> Read<f64> {
        self.field(v, at, key, "expected a number", |x| {
            x.as_f64().filter(|f| f.is_finite())
        })
    }

    pub(super) fn boolean(&self, v: &'a Value, at: &str, key: &str) -> Read<bool> {
        self.field(v, at, key, "expected true or false", Value::as_bool)
    }

    /// A Go-style duration (`2s`, `300ms`, `1m30s`) in seconds.
    pub(super) fn duration(&self, v: &'a Value, at: &str, key: &str) -> Read<f64> {
        let why = "expected a duration like 2s, 300ms or 1m30s";
        let s = self.string(v, at, key)?;
        s.map(|s| go_duration(s).ok_or_else(|| self.bad(&join(at, key), s, why)))
            .transpose()
    }

    pub(super) fn required<T>(
        &self,
        value: Option<T>,
        at: &str,
        key: &str,
    ) -> Result<T, InputError> {
        value.ok_or_else(|| self.bad(&join(at, key), "(absent)", "required"))
    }

    /// `metadata.annotations`, values unread until asked for.
    pub(super) fn annotations(&self) -> BTreeMap<&'a str, &'a Value> {
        let annotations = self
            .value
            .get("metadata")
            .and_then(|m| get(m, "annotations"));
        match annotations {
            Some(Value::Object(map)) => map.iter().map(|(k, v)| (k.as_str(), v)).collect(),
            _ => BTreeMap::new(),
        }
    }

    /// One annotation's value: Kubernetes takes strings only, and so does the kit.
    pub(super) fn annotation(
        &self,
        annotations: &BTreeMap<&'a str, &'a Value>,
        key: &str,
    ) -> Result<Option<&'a str>, InputError> {
        match annotations.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(other) => Err(self.bad(
                &format!("annotations[{key:?}]"),
                show(other),
                "annotation values must be strings: quote it",
            )),
        }
    }

    /// An annotation read by `read` when present; refused, naming it, when `read` cannot.
    pub(super) fn annotation_as<T>(
        &self,
        annotations: &BTreeMap<&'a str, &'a Value>,
        key: &str,
        expected: &str,
        read: impl Fn(&'a str) -> Option<T>,
    ) -> Read<T> {
        let Some(v) = self.annotation(annotations, key)? else {
            return Ok(None);
        };
        let bad = || self.bad(&format!("annotations[{key:?}]"), v, expected);
        read(v).map(Some).ok_or_else(bad)
    }
}

/// `v.key`, null read as absent.
pub(super) fn get<'v>(v: &'v Value, key: &str) -> Option<&'v Value> {
    v.get(key).filter(|x| !x.is_null())
}

pub(super) fn join(at: &str, key: &str) -> String {
    if at.is_empty() {
        key.to_string()
    } else {
        format!("{at}.{key}")
    }
}

pub(super) fn as_int(v: &Value) -> Option<i64> {
    let Value::Number(n) = v else { return None };
    n.as_i64().or_else(|| {
        // YAML may hand `3.0` as a float: a whole number is still a whole number.
        n.as_f64()
            .filter(|f| f.fract() == 0.0 && f.abs() < 9.0e15)
            .map(|f| f as i64)
    })
}

/// Seconds in a Go duration (`300ms`, `1m30s`, `1.5h`, `0`), the format of Istio's and Linkerd's
/// durations; Gateway API's (GEP-2257) is a subset. `None` if malformed or negative.
pub(super) fn go_duration(s: &str) -> Option<f64> {
    let s = s.trim();
    if s == "0" {
        return Some(0.0);
    }
    let (mut rest, mut total) = (s, 0.0);
    if rest.is_empty() {
        return None;
    }
    let is_number = |c: char| c.is_ascii_digit() || c == '.';
    while !rest.is_empty() {
        let end = rest.find(|c: char| !is_number(c)).unwrap_or(rest.len());
        let number: f64 = rest[..end].parse().ok()?;
        rest = &rest[end..];
        let end = rest.find(is_number).unwrap_or(rest.len());
        let scale = match &rest[..end] {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 1e-3,
            "us" | "µs" | "μs" => 1e-6,
            "ns" => 1e-9,
            _ => return None,
        };
        total += number * scale;
        rest = &rest[end..];
    }
    total.is_finite().then_some(total)
}

/// A Kubernetes quantity (`50`, `500m`, `1.5k`, `2Ki`, `1e3`), or a plain number.
pub(super) fn quantity(v: &Value) -> Option<f64> {
    let s = match v {
        Value::Number(n) => return n.as_f64().filter(|f| f.is_finite()),
        Value::String(s) => s.trim(),
        _ => return None,
    };
    let end = s
        .find(|c: char| !(c.is_ascii_digit() || matches!(c, '.' | '+' | '-')))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(end);
    let number: f64 = number.parse().ok()?;
    let binary = |power: i32| 2f64.powi(power);
    let scale = match suffix {
        "" => 1.0,
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => binary(10),
        "Mi" => binary(20),
        "Gi" => binary(30),
        "Ti" => binary(40),
        "Pi" => binary(50),
        "Ei" => binary(60),
        exponent => {
            let digits = exponent.strip_prefix(['e', 'E'])?;
            10f64.powi(digits.parse::<i32>().ok()?)
        }
    };
    Some(number * scale).filter(|x| x.is_finite())
}

/// Tries from a retry count, saturating.
pub(super) fn retries(n: u32) -> Tries {
    Tries::AtMost(n.saturating_add(1))
}

/// `0` (or `0s`) means no timeout in every source read here.
pub(super) fn timeout(seconds: Option<f64>) -> Option<f64> {
    seconds.filter(|s| *s > 0.0)
}

pub(super) fn push_unique(notes: &mut Vec<String>, note: String) {
    if !notes.contains(&note) {
        notes.push(note);
    }
}

/// Gives a route's layer the budget of its destinations that lets the most retries through (none
/// beats any ratio), with a note when the `destinations` differ.
pub(super) fn loosest(budgets: &[Option<Budget>], destinations: &str, layer: &mut Layer) {
    if budgets.windows(2).any(|w| w[0] != w[1]) {
        let note = format!("{destinations} differ in retry budget: the loosest is used");
        push_unique(&mut layer.notes, note);
    }
    let ratio = |b: &Option<Budget>| b.map_or(f64::INFINITY, Budget::failed_ratio);
    let loosest = budgets.iter().max_by(|a, b| ratio(a).total_cmp(&ratio(b)));
    layer.budget = loosest.copied().flatten();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_and_durations() {
        let q = |s: &str| quantity(&Value::String(s.into()));
        assert_eq!(q("50"), Some(50.0));
        assert_eq!(q("500m"), Some(0.5));
        assert_eq!(q("1k"), Some(1000.0));
        assert_eq!(q("2Ki"), Some(2048.0));
        assert_eq!(q("1.5M"), Some(1.5e6));
        assert_eq!(q("1e3"), Some(1000.0));
        for bad in ["", "5x", "k", "1e", "--1", "1e99999"] {
            assert_eq!(q(bad), None, "{bad}");
        }
        assert_eq!(quantity(&serde_json::json!(30)), Some(30.0));
        assert_eq!(go_duration("2s"), Some(2.0));
        assert_eq!(go_duration("300ms"), Some(0.3));
        assert_eq!(go_duration("1m30s"), Some(90.0));
        assert_eq!(go_duration("1.5h"), Some(5400.0));
        assert_eq!(go_duration("0"), Some(0.0));
        for bad in ["", "5", "-1s", "2 s", "1d", "s", "1..2s"] {
            assert_eq!(go_duration(bad), None, "{bad}");
        }
    }
}
