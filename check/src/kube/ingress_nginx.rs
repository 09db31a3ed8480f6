//! ingress-nginx Ingress annotations and the controller ConfigMap (controller v1.15): the
//! proxy_next_upstream settings of each Ingress, with the ConfigMap's as their defaults.

use std::collections::BTreeMap;
use std::fmt;

use serde_json::Value;

use super::objects::{NULL, Obj, get, timeout};
use crate::layer::{
    DefaultUsed, InputError, Layer, Parsed, RetryOn, Tier, Tries, nginx_read_timeout_s,
    retried_codes,
};

const NGINX_DEFAULTS: &str = "ingress-nginx controller v1.15.1 (the project retired in March 2026)";
const NGINX_REF: &str = "kubernetes/ingress-nginx \
    docs/user-guide/nginx-configuration/configmap.md; \
    internal/ingress/controller/config/config.go";
const NGINX_ANNOTATION: &str = "nginx.ingress.kubernetes.io/";

/// The controller ConfigMap's keys the kit reads; a ConfigMap with one of them, or with the
/// controller's name, sets the defaults of the Ingresses in the same input.
const NGINX_KEYS: [&str; 5] = [
    "proxy-next-upstream",
    "proxy-next-upstream-tries",
    "proxy-next-upstream-timeout",
    "proxy-read-timeout",
    "retry-non-idempotent",
];

pub(super) fn is_nginx_config(o: &Obj) -> bool {
    let data = get(o.value, "data").unwrap_or(&NULL);
    o.group.is_empty()
        && o.kind == "ConfigMap"
        && (o.name.ends_with("ingress-nginx-controller")
            || o.name == "nginx-configuration"
            || NGINX_KEYS.iter().any(|k| get(data, k).is_some()))
}

pub(super) fn ingress(o: &Obj, config: Option<&Obj>, out: &mut Parsed) -> Result<(), InputError> {
    let annotations = o.annotations();
    if let Some(why) = not_ingress_nginx(o, &annotations, config.is_some())? {
        out.skipped.push(o.skip(why));
        return Ok(());
    }
    let source = o.source(format!("Ingress {}", o.name));
    let mut layer = Layer::new("ingress-nginx", Tier::Edge, source);
    let mut from_config = Vec::new();
    let mut read = |key: &str, default: &str| {
        let setting = nginx_setting(o, &annotations, config, key, default)?;
        match &setting.1 {
            Origin::Default(..) => {
                let d = DefaultUsed::new(key, default, NGINX_DEFAULTS, NGINX_REF);
                layer.defaults.push(d);
            }
            Origin::Config(cm, _) => from_config.push(format!("{key} from ConfigMap {}", cm.name)),
            Origin::Annotation(..) => {}
        }
        Ok::<_, InputError>(setting)
    };
    let (tries, tries_at) = read("proxy-next-upstream-tries", "3")?;
    let (words, words_at) = read("proxy-next-upstream", "error timeout")?;
    let (read_timeout, read_at) = read("proxy-read-timeout", "60")?;
    let (overall, overall_at) = read("proxy-next-upstream-timeout", "0")?;
    let (non_idempotent, _) = read("retry-non-idempotent", "false")?;
    if !from_config.is_empty() {
        layer.notes.push(format!("read {}", from_config.join(", ")));
    }
    layer.tries = match whole(&tries, &tries_at)? {
        0 => {
            layer
                .notes
                .push("proxy-next-upstream-tries 0: no count limit".into());
            Tries::Unlimited
        }
        n => Tries::AtMost(u32::try_from(n).unwrap_or(u32::MAX)),
    };
    let (on, notes) = nginx_next_upstream(&words).map_err(|word| {
        words_at.bad(
            &words,
            format!("{word:?} is not a proxy_next_upstream case"),
        )
    })?;
    layer.retry_on = on;
    layer.notes.extend(notes);
    let read_s = whole(&read_timeout, &read_at)? as f64;
    layer.per_try_timeout_s =
        Some(nginx_read_timeout_s(read_s).map_err(|why| read_at.bad(&read_timeout, why))?);
    layer.overall_timeout_s = timeout(Some(whole(&overall, &overall_at)? as f64));
    nginx_notes(&words, &non_idempotent, &mut layer);
    out.layers.push(layer);
    Ok(())
}

/// Why an Ingress is not ingress-nginx's, if it is not: its class names another controller, or
/// nothing (class, nginx annotations, controller ConfigMap) says which serves it.
fn not_ingress_nginx(
    o: &Obj,
    annotations: &BTreeMap<&str, &Value>,
    config: bool,
) -> Result<Option<String>, InputError> {
    if annotations.keys().any(|k| k.starts_with("nginx.org/")) {
        return Ok(Some(
            "F5 NGINX Ingress Controller annotations (nginx.org/): not read".into(),
        ));
    }
    let class = match o.string(o.spec(), "", "ingressClassName")? {
        Some(c) => Some(c),
        None => o.annotation(annotations, "kubernetes.io/ingress.class")?,
    };
    Ok(match class {
        Some(c) if c.contains("nginx") => None,
        Some(c) => Some(format!("ingress class {c}: not ingress-nginx")),
        None if config || annotations.keys().any(|k| k.starts_with(NGINX_ANNOTATION)) => None,
        None => Some(
            "no ingress class and no ingress-nginx annotation: its controller is unknown".into(),
        ),
    })
}

/// Where an ingress-nginx setting came from (the object and key), for its errors and defaults.
enum Origin<'o> {
    Annotation(&'o Obj<'o>, String),
    Config(&'o Obj<'o>, String),
    Default(&'o Obj<'o>, String),
}

impl Origin<'_> {
    fn bad(&self, value: &str, why: impl fmt::Display) -> InputError {
        match self {
            Origin::Annotation(o, key) => o.bad(&format!("annotations[{key:?}]"), value, why),
            Origin::Config(cm, key) => cm.bad(&format!("data[{key:?}]"), value, why),
            Origin::Default(o, key) => o.bad(&format!("(default) {key}"), value, why),
        }
    }
}

/// An ingress-nginx setting: the Ingress's annotation, else the controller ConfigMap's key,
/// else the controller's default.
fn nginx_setting<'o>(
    o: &'o Obj<'o>,
    annotations: &BTreeMap<&'o str, &'o Value>,
    config: Option<&'o Obj<'o>>,
    key: &str,
    default: &str,
) -> Result<(String, Origin<'o>), InputError> {
    let annotation = format!("{NGINX_ANNOTATION}{key}");
    if let Some(v) = o.annotation(annotations, &annotation)? {
        return Ok((v.to_string(), Origin::Annotation(o, annotation)));
    }
    if let Some(cm) = config {
        let data = get(cm.value, "data").unwrap_or(&NULL);
        if let Some(v) = cm.string(data, "data", key)? {
            return Ok((v.to_string(), Origin::Config(cm, key.to_string())));
        }
    }
    Ok((default.to_string(), Origin::Default(o, key.to_string())))
}

/// A whole number of seconds or tries, as ingress-nginx reads one (`strconv.Atoi`).
fn whole(value: &str, at: &Origin) -> Result<u64, InputError> {
    value
        .trim()
        .parse::<u64>()
        .map_err(|_| at.bad(value, "expected a whole number, no unit"))
}

/// ingress-nginx `proxy-next-upstream` cases (nginx `proxy_next_upstream`) as failure classes;
/// the `http_NNN` cases go through [`retried_codes`].
fn nginx_next_upstream(words: &str) -> Result<(RetryOn, Vec<String>), String> {
    let mut on = RetryOn::NOTHING;
    let (mut notes, mut codes) = (Vec::new(), Vec::new());
    for word in words.split_whitespace() {
        match word {
            // nginx `error`: a connection error, or one passing the request or reading the
            // response header.
            "error" => on.connect_failure = true,
            "timeout" => on.timeout = true,
            "http_500" | "http_502" | "http_503" | "http_504" | "http_403" | "http_404"
            | "http_429" => codes.extend(word[5..].parse::<u32>().ok()),
            "invalid_header" => notes.push(format!("retries on {word}: not modelled")),
            "non_idempotent" | "off" => {}
            _ => return Err(word.to_string()),
        }
    }
    let (status_5xx, note) = retried_codes(&codes);
    on.status_5xx = status_5xx;
    notes.extend(note);
    Ok((on, notes))
}

fn nginx_notes(words: &str, non_idempotent: &str, layer: &mut Layer) {
    if words.split_whitespace().any(|w| w == "off") {
        layer.tries = Tries::AtMost(1);
        layer.retry_on = RetryOn::NOTHING;
        layer
            .notes
            .push("proxy-next-upstream off: no retries".into());
        return;
    }
    if words.split_whitespace().any(|w| w == "non_idempotent") || non_idempotent.trim() == "true" {
        layer
            .notes
            .push("non-idempotent requests (POST, LOCK, PATCH) are retried too".into());
    } else {
        layer
            .notes
            .push("POST, LOCK and PATCH requests are not retried once sent".into());
    }
    layer.notes.push(
        "proxy-read-timeout bounds the wait between two reads, not a whole response; the Lua \
         balancer picks a pod for each try, the same one possibly"
            .into(),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kube::tests::*;

    #[test]
    fn ingress_nginx_defaults_are_recorded() {
        let parsed = ok(data!("ingress-nginx-docker-registry.yaml"));
        let [layer] = parsed.layers.as_slice() else {
            panic!()
        };
        assert_eq!(
            (layer.software.as_str(), layer.tier),
            ("ingress-nginx", Tier::Edge)
        );
        assert_eq!(layer.tries, Tries::AtMost(3));
        assert_eq!(layer.retry_on, on(true, true, false));
        assert_eq!(layer.per_try_timeout_s, Some(600.0));
        assert_eq!(layer.overall_timeout_s, None);
        let expected = [
            "proxy-next-upstream-tries",
            "proxy-next-upstream",
            "proxy-next-upstream-timeout",
            "retry-non-idempotent",
        ];
        assert_eq!(settings(layer), expected);
        assert!(layer.defaults[0].version.contains("v1.15"));
    }

    #[test]
    fn the_controller_configmap_sets_the_ingresses_defaults() {
        let parsed = ok(data!("ingress-nginx-configmap-and-ingresses.yaml"));
        let [registry, shop] = parsed.layers.as_slice() else {
            panic!()
        };
        // The annotation wins over the ConfigMap's 120.
        assert_eq!(registry.per_try_timeout_s, Some(600.0));
        assert_eq!(shop.per_try_timeout_s, Some(120.0));
        assert!(has_note(
            shop,
            "proxy-read-timeout from ConfigMap ingress-nginx-controller"
        ));
        assert_eq!(shop.tries, Tries::AtMost(5));
        assert_eq!(shop.overall_timeout_s, Some(30.0));
        assert_eq!(shop.retry_on, on(true, true, true));
        assert_eq!(settings(shop), ["retry-non-idempotent"]);
        assert!(parsed.skipped.is_empty());
        let alone = ok(data!("ingress-nginx-configmap.yaml"));
        assert!(alone.skipped[0].why.contains("no ingress-nginx Ingress"));
    }

    #[test]
    fn ingress_nginx_values() {
        let ingress = |annotations: &str, class: &str| {
            text(&format!(
                "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata:\n  name: i\n  \
                 annotations: {{{annotations}}}\nspec: {{{class}}}\n"
            ))
        };
        let key = "nginx.ingress.kubernetes.io/proxy-next-upstream-tries";
        let unlimited = ingress(&format!("{key}: '0'"), "ingressClassName: nginx").unwrap();
        assert_eq!(unlimited.layers[0].tries, Tries::Unlimited);
        let (field, value) = field_error(ingress(&format!("{key}: 3s"), ""));
        assert_eq!(field, format!("Ingress i annotations[{key:?}]"));
        assert_eq!(value, "3s");
        let (field, _) = field_error(ingress(&format!("{key}: 3"), ""));
        assert_eq!(field, format!("Ingress i annotations[{key:?}]"));
        let words = "nginx.ingress.kubernetes.io/proxy-next-upstream";
        let (_, value) = field_error(ingress(&format!("{words}: 'error sometimes'"), ""));
        assert_eq!(value, "error sometimes");
        let off = ingress(&format!("{words}: 'off'"), "").unwrap();
        assert_eq!(off.layers[0].tries, Tries::AtMost(1));
        // A retried 500 alone is noted, not the 5xx class (as nginx's own reader says).
        let five = ingress(&format!("{words}: 'error http_500'"), "").unwrap();
        assert_eq!(five.layers[0].retry_on, on(false, true, false));
        assert!(has_note(&five.layers[0], "500 outside"));
        let gateway = ingress(&format!("{words}: 'http_500 http_504'"), "").unwrap();
        assert!(gateway.layers[0].retry_on.status_5xx);
        // proxy-read-timeout 0: nginx times every try out at once; refused as the nginx reader does.
        let read = "nginx.ingress.kubernetes.io/proxy-read-timeout";
        match ingress(&format!("{read}: '0'"), "") {
            Err(InputError::Field { value, why, .. }) => {
                assert_eq!(value, "0");
                assert!(
                    why.starts_with(crate::layer::NGINX_ZERO_READ_TIMEOUT),
                    "{why}"
                );
            }
            other => panic!("{other:?}"),
        }
        let traefik = ingress("", "ingressClassName: traefik").unwrap();
        assert!(traefik.skipped[0].why.contains("ingress class traefik"));
        let unknown = ingress("", "").unwrap();
        assert!(unknown.skipped[0].why.contains("controller is unknown"));
    }
}
