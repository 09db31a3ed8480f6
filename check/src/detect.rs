//! A file's kind, from its content (never its name): Kubernetes YAML, an Envoy configuration, an
//! nginx or HAProxy configuration, or the kit's stack file.

/// What a file holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    Kubernetes,
    Envoy,
    Nginx,
    Haproxy,
    Stack,
}

/// Lines without comments and blank lines, trimmed.
fn lines(text: &str) -> impl Iterator<Item = &str> {
    text.lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .filter(|l| !l.is_empty())
}

/// Keys of an Envoy configuration (a bootstrap, a RouteConfiguration or a list of them, clusters,
/// an xDS or admin dump), in proto names and in the lowerCamelCase of JSON renderings such as
/// Envoy Gateway's.
const ENVOY_KEYS: [&str; 18] = [
    "static_resources",
    "staticResources",
    "dynamic_resources",
    "dynamicResources",
    "virtual_hosts",
    "virtualHosts",
    "route_config",
    "routeConfig",
    "dynamicRouteConfigs",
    "retry_policy",
    "retryPolicy",
    "circuit_breakers",
    "circuitBreakers",
    "cluster_manager",
    "filter_chains",
    "filterChains",
    "clusters",
    "resources",
];

/// Keys of the YAML or JSON documents (JSON is YAML), three levels deep through maps and lists;
/// `None` when the text is not YAML. The top level's keys come first, for `apiVersion`.
fn document_keys(text: &str) -> Option<(Vec<String>, Vec<String>)> {
    fn walk(v: &serde_json::Value, depth: u32, out: &mut Vec<String>) {
        if depth == 0 {
            return;
        }
        match v {
            serde_json::Value::Object(o) => {
                for (k, inner) in o {
                    out.push(k.clone());
                    walk(inner, depth - 1, out);
                }
            }
            serde_json::Value::Array(items) => {
                for item in items {
                    walk(item, depth, out);
                }
            }
            _ => {}
        }
    }
    let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(text).ok()?;
    let mut top = Vec::new();
    let mut deep = Vec::new();
    for d in &docs {
        if let Some(o) = d.as_object() {
            top.extend(o.keys().cloned());
        }
        walk(d, 3, &mut deep);
    }
    Some((top, deep))
}

/// The kind of a file, or why none fits.
pub fn detect(text: &str) -> Result<FileKind, String> {
    if lines(text).any(|l| l == "[[client]]" || l == "[service]" || l == "[metrics]") {
        return Ok(FileKind::Stack);
    }
    let yaml_ish = text.contains("apiVersion") || ENVOY_KEYS.iter().any(|k| text.contains(k));
    if yaml_ish {
        match document_keys(text) {
            Some((top, deep)) => {
                let at_top = |key: &str| top.iter().any(|k| k == key);
                if at_top("apiVersion") && at_top("kind") {
                    return Ok(FileKind::Kubernetes);
                }
                if deep.iter().any(|k| ENVOY_KEYS.contains(&k.as_str())) {
                    return Ok(FileKind::Envoy);
                }
            }
            // Broken YAML that names Kubernetes objects: its reader says where it breaks.
            None if text.lines().any(|l| l.starts_with("apiVersion:")) => {
                return Ok(FileKind::Kubernetes);
            }
            None => {}
        }
    }
    let first_word = |l: &str| l.split_whitespace().next().unwrap_or("").to_string();
    // HAProxy sections start at the line's start and open no block (its ACLs may hold `{ }` and
    // its headers `;`, which would otherwise pass for nginx).
    let haproxy_section = |l: &str| {
        matches!(
            first_word(l).as_str(),
            "global" | "defaults" | "frontend" | "backend" | "listen" | "resolvers" | "peers"
        ) && !l.trim_end().ends_with('{')
    };
    if text
        .lines()
        .filter(|l| !l.starts_with(char::is_whitespace))
        .map(|l| l.split('#').next().unwrap_or(""))
        .any(haproxy_section)
    {
        return Ok(FileKind::Haproxy);
    }
    if text.contains('{')
        && text.contains(';')
        && lines(text).any(|l| {
            matches!(
                first_word(l).as_str(),
                "http" | "server" | "location" | "upstream" | "events" | "proxy_pass"
            )
        })
    {
        return Ok(FileKind::Nginx);
    }
    if lines(text).any(|l| {
        matches!(
            first_word(l).as_str(),
            "global" | "defaults" | "frontend" | "backend" | "listen"
        )
    }) {
        return Ok(FileKind::Haproxy);
    }
    Err(
        "no apiVersion/kind, Envoy keys, nginx blocks, HAProxy sections or [[client]] tables"
            .into(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_come_from_content() {
        assert_eq!(
            detect("apiVersion: autoscaling/v2\nkind: HorizontalPodAutoscaler\n"),
            Ok(FileKind::Kubernetes)
        );
        assert_eq!(
            detect("{\"apiVersion\": \"v1\", \"kind\": \"List\", \"items\": []}"),
            Ok(FileKind::Kubernetes)
        );
        assert_eq!(
            detect("static_resources:\n  listeners: []\n"),
            Ok(FileKind::Envoy)
        );
        assert_eq!(
            detect("virtual_hosts:\n- name: a\n  routes: []\n"),
            Ok(FileKind::Envoy)
        );
        assert_eq!(
            detect("http {\n  server {\n    location / { proxy_pass http://a; }\n  }\n}\n"),
            Ok(FileKind::Nginx)
        );
        assert_eq!(
            detect("# gw\ndefaults\n    retries 2\nbackend pods\n"),
            Ok(FileKind::Haproxy)
        );
        assert_eq!(
            detect("[[client]]\nname = \"web\"\nattempts = 3\n"),
            Ok(FileKind::Stack)
        );
        assert!(detect("hello world\n").is_err());
        // An ACL's braces and a header's semicolon do not make HAProxy nginx.
        let haproxy = "frontend web\n    bind :80\n    http-request deny if { path_beg /admin }\n    \
                       http-response set-header Strict-Transport-Security \"max-age=1; includeSubDomains\"\n    \
                       default_backend app\nbackend app\n    server a 10.0.0.1:80\n";
        assert_eq!(detect(haproxy), Ok(FileKind::Haproxy));
    }

    /// Every real upstream example of the readers' test data is found by its content.
    #[test]
    fn the_readers_test_data_is_found_by_content() {
        let data = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
        for (dir, kind) in [
            ("haproxy", FileKind::Haproxy),
            ("nginx", FileKind::Nginx),
            ("envoy", FileKind::Envoy),
            ("kube", FileKind::Kubernetes),
        ] {
            let mut seen = 0;
            for entry in std::fs::read_dir(data.join(dir)).unwrap() {
                let path = entry.unwrap().path();
                if path.extension().is_some_and(|e| e == "md") {
                    continue;
                }
                let text = std::fs::read_to_string(&path).unwrap();
                assert_eq!(detect(&text), Ok(kind), "{}", path.display());
                seen += 1;
            }
            assert!(seen >= 3, "{dir}: {seen} files");
        }
        for entry in std::fs::read_dir(data.join("clients")).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "toml") {
                let text = std::fs::read_to_string(&path).unwrap();
                assert_eq!(detect(&text), Ok(FileKind::Stack), "{}", path.display());
            }
        }
    }
}
