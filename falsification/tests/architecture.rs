//! The architecture's rules as tests: each rule ARCHITECTURE.md states and source reading can
//! check is a function over a source tree, run here on the workspace, and run again on a copy
//! with a violation planted to show it reports one. Rules read code, not comments or strings,
//! and skip `#[cfg(test)]` items (tests may build what the code may not).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde_json::{Value, json};

// ---------------------------------------------------------------------------------------------
// The rules.

/// Rule: clap only in command lines. A crate names clap where its policy says; anywhere else
/// the rule reports the line.
#[derive(Debug, Clone, Copy)]
enum ClapPolicy {
    /// Only in these files or folders (relative to the crate's `src`), and, when `derives`, in a
    /// `#[derive(.., clap::ValueEnum, ..)]` of a type a flag takes.
    Cli {
        files: &'static [&'static str],
        derives: bool,
    },
    /// The crate's whole purpose is rendering clap's names (kit-argv).
    Anywhere,
    /// A pure library: only inside `#[cfg_attr(feature = "clap", ..)]`. Every crate the table
    /// does not name is one.
    FeatureGated,
}

fn clap_policy(package: &str) -> ClapPolicy {
    match package {
        // The harness: its command line and its binary.
        "falsification" => ClapPolicy::Cli {
            files: &["cli/", "main.rs"],
            derives: false,
        },
        // The binaries' crates are their command lines: the binary, the flag module, and the
        // ValueEnum derives of their flags' types (a pod's drop mode, a schedule's shape).
        "loadgen" | "service" => ClapPolicy::Cli {
            files: &["main.rs", "config.rs"],
            derives: true,
        },
        "meter" => ClapPolicy::Cli {
            files: &["main.rs", "cli.rs"],
            derives: true,
        },
        "kit-argv" => ClapPolicy::Anywhere,
        _ => ClapPolicy::FeatureGated,
    }
}

fn clap_outside_command_lines(root: &Path, crates: &[Crate]) -> Vec<String> {
    let mut out = Vec::new();
    for c in crates {
        let policy = clap_policy(&c.name);
        for f in rust_files(root, &c.src) {
            let within = f
                .path
                .strip_prefix(&format!("{}/", c.src))
                .unwrap_or(&f.path);
            let allowed_here = match policy {
                ClapPolicy::Anywhere => true,
                ClapPolicy::Cli { files, .. } => files.iter().any(|p| within.starts_with(p)),
                ClapPolicy::FeatureGated => false,
            };
            if allowed_here {
                continue;
            }
            let attrs = attributes(&f.tokens);
            for (i, t) in f.tokens.iter().enumerate() {
                if t.text != "clap" {
                    continue;
                }
                let inside = attrs.iter().find(|a| a.span.contains(&i));
                let excused = match (policy, inside) {
                    (ClapPolicy::FeatureGated, Some(a)) => a.is_cfg_attr_feature(&f.tokens, "clap"),
                    (ClapPolicy::Cli { derives: true, .. }, Some(a)) => {
                        a.is_derive(&f.tokens)
                            && f.tokens[i + 1..].starts_with_texts(&["::", "ValueEnum"])
                    }
                    _ => false,
                };
                if !excused {
                    out.push(format!("{}:{}: names clap", f.path, t.line));
                }
            }
        }
    }
    out
}

/// Rule: `RunPlan::new` (runner/plan.rs) is the one place experiment time becomes run time. In
/// the harness's code no `.time_scaled(..)` is called and nothing is divided by a time scale
/// (a divisor `time_scale`, `x.time_scale`, or the runner's short `s`/`scale`) outside
/// runner/plan.rs. The other direction, a run read back in experiment time (`* time_scale` in
/// records, reports, the judge), is not conversion into run time and is free. One exception,
/// named: the one-machine cluster's controller flags, the cluster's own clock set when it is
/// made, before and outside any case.
const TIME_SCALED_ONLY_IN: &str = "falsification/src/runner/plan.rs";
const TIME_SCALE_EXCEPTIONS: &[(&str, &str)] =
    &[("falsification/src/kube/scale.rs", "LocalClusterFlags::new")];

fn time_scaled_outside_the_plan(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for f in rust_files(root, "falsification/src") {
        if f.path == TIME_SCALED_ONLY_IN {
            continue;
        }
        let fns = enclosing_fns(&f.tokens);
        let t = &f.tokens;
        for i in 0..t.len() {
            let call = t[i].text == "time_scaled"
                && i > 0
                && matches!(t[i - 1].text.as_str(), "." | "::")
                && t.get(i + 1).is_some_and(|n| n.text == "(");
            let division = t[i].text == "/" && divides_by_time_scale(&t[i + 1..]);
            if !(call || division) {
                continue;
            }
            let within = fns[i].as_deref().unwrap_or("");
            if TIME_SCALE_EXCEPTIONS.contains(&(f.path.as_str(), within)) {
                continue;
            }
            let what = if call {
                "calls time_scaled"
            } else {
                "divides by a time scale"
            };
            out.push(format!("{}:{}: {what} in `{within}`", f.path, t[i].line));
        }
    }
    out
}

/// Whether the tokens after a `/` are a time scale: a path ending in `time_scale`, or a lone
/// `s` or `scale`, not called and not a field's owner.
fn divides_by_time_scale(after: &[Tok]) -> bool {
    let after = if after.first().is_some_and(|t| t.text == "=") {
        &after[1..]
    } else {
        after
    };
    let chain: Vec<&Tok> = after
        .iter()
        .take_while(|t| t.ident() || t.text == "." || t.text == "::")
        .collect();
    let Some(last) = chain.last() else {
        return false;
    };
    let called = after.get(chain.len()).is_some_and(|t| t.text == "(");
    let named = last.text == "time_scale"
        || (chain.len() == 1 && matches!(last.text.as_str(), "s" | "scale"));
    named && last.ident() && !called
}

/// Rule: the model and `check` are free of tokio, kube, k8s-openapi, reqwest, hyper and the
/// harness, through every normal dependency, as a build of the package alone resolves its
/// features (`cargo tree -p <package> -e normal`; `cargo metadata`'s resolve unifies features
/// across the workspace, so it would blame the model for the `clap` the harness turns on). A
/// package the list names must be one of the workspace's.
const PURE_PACKAGES: &[&str] = &["falsification-model", "kit-check"];
const FORBIDDEN_IN_PURE: &[&str] = &[
    "tokio",
    "kube",
    "k8s-openapi",
    "reqwest",
    "hyper",
    "falsification",
];

/// The listed packages that are not the workspace's.
fn unknown_packages<'a>(metadata: &Value, packages: &[&'a str]) -> Vec<&'a str> {
    let members: Vec<&str> = metadata["workspace_members"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let names: BTreeSet<&str> = metadata["packages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["id"].as_str().is_some_and(|id| members.contains(&id)))
        .filter_map(|p| p["name"].as_str())
        .collect();
    packages
        .iter()
        .copied()
        .filter(|p| !names.contains(p))
        .collect()
}

/// The forbidden packages in `package`'s tree as `cargo tree --prefix depth --format {p}`
/// prints it (a line is its depth, then the package's name and version), each with the chain
/// that pulls it in.
fn forbidden_in_tree(package: &str, tree: &str) -> Vec<String> {
    let mut chain: Vec<&str> = Vec::new();
    let mut out = Vec::new();
    for line in tree.lines() {
        let digits = line.chars().take_while(char::is_ascii_digit).count();
        let (Ok(depth), Some(name)) = (
            line[..digits].parse::<usize>(),
            line[digits..].split_whitespace().next(),
        ) else {
            continue;
        };
        chain.truncate(depth);
        chain.push(name);
        if depth > 0 && FORBIDDEN_IN_PURE.contains(&name) {
            out.push(format!(
                "{package} depends on {name}: {}",
                chain.join(" -> ")
            ));
        }
    }
    out
}

/// `cargo tree` of one package's normal dependencies on this machine's platform.
fn cargo_tree(package: &str) -> String {
    let args = [
        "tree", "--locked", "-e", "normal", "--prefix", "depth", "--format", "{p}", "-p", package,
    ];
    String::from_utf8(cargo(&args)).unwrap()
}

/// Rule: no import circle between a crate's files. An edge is a file naming another through
/// `crate::`, `super::` or `self::` (in `use` or in a path); a module's references into its own
/// children are not edges (a parent declares, re-exports and calls into its children: they are
/// one unit seen from outside), while a child's reference to its parent, and every reference
/// between siblings or across folders, is.
fn import_circles(root: &Path, crates: &[Crate]) -> Vec<String> {
    let mut out = Vec::new();
    for c in crates {
        let files = rust_files(root, &c.src);
        let modules: BTreeMap<Vec<String>, String> = files
            .iter()
            .filter_map(|f| Some((module_of(&f.path, &c.src)?, f.path.clone())))
            .filter(|(m, p)| {
                !(m.is_empty()
                    && p.ends_with("main.rs")
                    && files.iter().any(|f| f.path.ends_with("src/lib.rs")))
            })
            .collect();
        let mut edges: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
        for f in &files {
            let Some(here) = module_of(&f.path, &c.src) else {
                continue;
            };
            for path in crate_paths(&f.tokens) {
                let Some(target) = resolve(&here, &path, &modules) else {
                    continue;
                };
                if target.starts_with(&here) {
                    continue;
                }
                edges.entry(&f.path).or_default().insert(&modules[&target]);
            }
        }
        for circle in circles(&edges) {
            out.push(format!("{}: {}", c.name, circle.join(" <-> ")));
        }
    }
    out
}

/// Rule: only `kube` knows kube-rs and k8s-openapi: outside falsification/src/kube/ the harness
/// names neither `k8s_openapi` nor the kube crate (`::kube::..`, or a bare `kube::..` in a
/// file that does not bring the harness's `crate::kube` module in as `kube`).
fn kube_outside_kube(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for f in rust_files(root, "falsification/src") {
        if f.path.starts_with("falsification/src/kube/") {
            continue;
        }
        let t = &f.tokens;
        // `use crate::kube;`, `use crate::kube::{self, ..}`, or a child `mod kube`.
        let module_in_scope = (0..t.len()).any(|i| {
            let w = &t[i..];
            w.starts_with_texts(&["crate", "::", "kube", ";"])
                || w.starts_with_texts(&["crate", "::", "kube", "::", "{", "self"])
                || w.starts_with_texts(&["mod", "kube"])
        });
        for i in 0..t.len() {
            let prev = i.checked_sub(1).map(|p| t[p].text.as_str());
            let before_prev = i.checked_sub(2).map(|p| t[p].text.as_str());
            let crate_path = t[i].text == "kube"
                && t.get(i + 1).is_some_and(|n| n.text == "::")
                && match prev {
                    Some("::") => !matches!(before_prev, Some("crate" | "super" | "self")),
                    _ => !module_in_scope,
                };
            if t[i].text == "k8s_openapi" || crate_path {
                out.push(format!("{}:{}: names {}", f.path, t[i].line, t[i].text));
            }
        }
    }
    out
}

/// Rule: the runner knows where cases run only through `runner::seam`: its code never names
/// `embedded` or `kube`.
fn runner_names_a_backend(root: &Path) -> Vec<String> {
    names_in(
        root,
        "falsification/src/runner",
        &["embedded", "kube"],
        |_| true,
    )
}

/// Rule: only `cli` is public in the `falsification` crate: lib.rs makes nothing else `pub`.
fn public_beyond_cli(root: &Path) -> Vec<String> {
    let Some(f) = rust_files(root, "falsification/src")
        .into_iter()
        .find(|f| f.path == "falsification/src/lib.rs")
    else {
        return vec!["falsification/src/lib.rs: missing".into()];
    };
    let t = &f.tokens;
    (0..t.len())
        .filter(|&i| t[i].text == "pub" && t.get(i + 1).is_none_or(|n| n.text != "("))
        .filter(|&i| !t[i + 1..].starts_with_texts(&["mod", "cli", ";"]))
        .map(|i| format!("{}:{}: public beyond cli", f.path, t[i].line))
        .collect()
}

/// Rule: the model does no I/O beyond reading an experiment's file (model experiment.rs) and the
/// arrival trace a case names (dist trace.rs), never touches the network, processes or the
/// environment, and reads the clock once (predict.rs, timing its own runs).
fn model_io(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let reads = ["falsification/model/src/experiment.rs", "dist/src/trace.rs"];
    for src in ["falsification/model/src", "dist/src"] {
        let io = [
            "std::net",
            "std::process",
            "std::env",
            "SystemTime",
            "tokio",
        ];
        out.extend(names_in(root, src, &io, |_| true));
        out.extend(names_in(root, src, &["std::fs", "File"], |p| {
            !reads.contains(&p)
        }));
        out.extend(names_in(root, src, &["Instant"], |p| {
            p != "falsification/model/src/predict.rs"
        }));
    }
    out
}

/// Rule: what decides in the trigger (measure.rs, stop.rs) reads neither the clock nor the
/// network nor files: run.rs hands it rows and readings.
fn trigger_deciders_do_io(root: &Path) -> Vec<String> {
    let io = [
        "Instant",
        "SystemTime",
        "tokio",
        "reqwest",
        "std::net",
        "std::process",
        "std::fs",
        "File",
    ];
    names_in(root, "falsification/src/trigger", &io, |p| {
        p.ends_with("/measure.rs") || p.ends_with("/stop.rs") || p.ends_with("/discipline.rs")
    })
}

/// Rule: a record's page is drawn from its files alone, so a page written at the end of a run
/// and one written later by `falsification report` are the same page: `page/` never names the
/// live state of a run (the runner's samples, measurements, plans and results, a backend), and
/// only mod.rs and read.rs do I/O.
fn page_beyond_the_record(root: &Path) -> Vec<String> {
    // The runner's own `Measured` and `Session` share their names with words the page uses
    // (a colour, a kind of record); what a run hands them is in these.
    let live = [
        "CaseResult",
        "Sample",
        "RunPlan",
        "Observation",
        "Environment",
        "embedded",
        "kube",
        "probe",
        "seam",
    ];
    let mut out = names_in(root, "falsification/src/page", &live, |_| true);
    let io = [
        "std::fs",
        "File",
        "std::process",
        "std::net",
        "Instant",
        "SystemTime",
        "tokio",
        "write_atomically",
    ];
    out.extend(names_in(root, "falsification/src/page", &io, |p| {
        !p.ends_with("/mod.rs") && !p.ends_with("/read.rs")
    }));
    out
}

// ---------------------------------------------------------------------------------------------
// The rules on this workspace.

#[test]
fn clap_only_in_command_lines_and_binaries() {
    let v = clap_outside_command_lines(&root(), &crates());
    assert!(
        v.is_empty(),
        "clap outside the command lines:\n{}",
        v.join("\n")
    );
}

#[test]
fn time_becomes_run_time_only_in_the_run_plan() {
    let v = time_scaled_outside_the_plan(&root());
    assert!(
        v.is_empty(),
        "time scaled outside RunPlan::new:\n{}",
        v.join("\n")
    );
}

#[test]
fn the_model_and_check_are_free_of_runtimes_and_clients() {
    let unknown = unknown_packages(metadata(), PURE_PACKAGES);
    assert!(
        unknown.is_empty(),
        "listed as pure, not packages of the workspace: {unknown:?}"
    );
    let v: Vec<String> = PURE_PACKAGES
        .iter()
        .flat_map(|p| forbidden_in_tree(p, &cargo_tree(p)))
        .collect();
    assert!(v.is_empty(), "{}", v.join("\n"));
}

#[test]
fn no_import_circle_in_any_crate() {
    let v = import_circles(&root(), &crates());
    assert!(v.is_empty(), "import circles:\n{}", v.join("\n"));
}

#[test]
fn only_kube_knows_kube_rs_and_k8s_openapi() {
    let v = kube_outside_kube(&root());
    assert!(v.is_empty(), "{}", v.join("\n"));
}

#[test]
fn the_runner_never_names_a_backend() {
    let v = runner_names_a_backend(&root());
    assert!(v.is_empty(), "{}", v.join("\n"));
}

#[test]
fn only_cli_is_public_in_the_harness() {
    let v = public_beyond_cli(&root());
    assert!(v.is_empty(), "{}", v.join("\n"));
}

#[test]
fn the_model_reads_only_its_files_and_one_clock() {
    let v = model_io(&root());
    assert!(v.is_empty(), "{}", v.join("\n"));
}

#[test]
fn the_trigger_decides_without_io() {
    let v = trigger_deciders_do_io(&root());
    assert!(v.is_empty(), "{}", v.join("\n"));
}

#[test]
fn the_page_is_drawn_from_the_record_alone() {
    let v = page_beyond_the_record(&root());
    assert!(v.is_empty(), "{}", v.join("\n"));
}

// ---------------------------------------------------------------------------------------------
// Each rule fails when broken: a copy of the files it reads, one violation planted.

/// A copy of `dirs` (relative to the workspace) with `planted` appended to `file`.
fn broken_copy(dirs: &[&str], file: &str, planted: &str) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    for d in dirs {
        copy_dir(&root().join(d), &tmp.path().join(d));
    }
    let target = tmp.path().join(file);
    let text = std::fs::read_to_string(&target).unwrap_or_default();
    std::fs::create_dir_all(target.parent().unwrap()).unwrap();
    std::fs::write(&target, format!("{text}\n{planted}\n")).unwrap();
    tmp
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &to.join(e.file_name()));
        } else {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

fn reported(v: &[String], at: &str, what: &str) -> bool {
    v.iter().any(|x| x.starts_with(at) && x.contains(what))
}

#[test]
fn the_clap_rule_fails_on_clap_in_the_runner_or_an_ungated_model() {
    let tmp = broken_copy(
        &[
            "falsification/src",
            "falsification/model/src",
            "loadgen/src",
        ],
        "falsification/src/runner/plan.rs",
        "#[derive(clap::ValueEnum)] enum Planted { A }",
    );
    std::fs::write(
        tmp.path().join("falsification/model/src/planted.rs"),
        "#[cfg_attr(feature = \"clap\", derive(clap::ValueEnum))] pub enum Gated { A }\n\
         #[derive(clap::ValueEnum)] pub enum Ungated { A }\n",
    )
    .unwrap();
    std::fs::write(
        tmp.path().join("loadgen/src/planted.rs"),
        "use clap::Parser;\n",
    )
    .unwrap();
    let v = clap_outside_command_lines(tmp.path(), &crates());
    assert!(
        reported(&v, "falsification/src/runner/plan.rs:", "clap"),
        "{v:?}"
    );
    assert!(
        reported(&v, "falsification/model/src/planted.rs:2:", "clap"),
        "{v:?}"
    );
    assert!(
        !reported(&v, "falsification/model/src/planted.rs:1:", "clap"),
        "{v:?}"
    );
    assert!(reported(&v, "loadgen/src/planted.rs:1:", "clap"), "{v:?}");
}

#[test]
fn the_time_rule_fails_on_a_grace_period_scaled_in_a_backend() {
    let tmp = broken_copy(
        &["falsification/src"],
        "falsification/src/kube/mod.rs",
        "fn grace(plan: &RunPlan) -> f64 { 30.0 / plan.time_scale }\n\
         fn run(se: &Scenario, s: f64) -> Scenario { let x = 60.0 / s; se.time_scaled(x) }",
    );
    let v = time_scaled_outside_the_plan(tmp.path());
    assert!(
        reported(
            &v,
            "falsification/src/kube/mod.rs:",
            "divides by a time scale in `grace`"
        ),
        "{v:?}"
    );
    assert!(
        reported(
            &v,
            "falsification/src/kube/mod.rs:",
            "divides by a time scale in `run`"
        ),
        "{v:?}"
    );
    assert!(
        reported(
            &v,
            "falsification/src/kube/mod.rs:",
            "calls time_scaled in `run`"
        ),
        "{v:?}"
    );
}

#[test]
fn the_dependency_rule_fails_on_a_model_over_tokio_or_a_package_missing() {
    let tree = "0falsification-model v0.1.0 (/kit/falsification/model)\n\
                1x v1.0.0\n\
                2tokio v1.54.0\n\
                1serde v1.0.0\n";
    assert_eq!(
        forbidden_in_tree("falsification-model", tree),
        ["falsification-model depends on tokio: falsification-model -> x -> tokio"]
    );
    let metadata = json!({
        "packages": [{"id": "model 0.1.0", "name": "falsification-model"}],
        "workspace_members": ["model 0.1.0"]
    });
    let listed = ["falsification-model", "kit-check"];
    assert_eq!(unknown_packages(&metadata, &listed), ["kit-check"]);
}

#[test]
fn the_circle_rule_fails_on_two_siblings_naming_each_other() {
    let tmp = broken_copy(
        &["falsification/src"],
        "falsification/src/trigger/stop.rs",
        "use super::run::Planted;",
    );
    let v = import_circles(tmp.path(), &crates());
    assert!(
        reported(
            &v,
            "falsification: ",
            "falsification/src/trigger/run.rs <-> falsification/src/trigger/stop.rs"
        ),
        "{v:?}"
    );
}

#[test]
fn the_kube_rule_fails_on_kube_rs_in_the_runner() {
    let tmp = broken_copy(
        &["falsification/src"],
        "falsification/src/runner/mod.rs",
        "use ::kube::Client;\nfn planted(_: k8s_openapi::api::core::v1::Pod) {}",
    );
    let v = kube_outside_kube(tmp.path());
    assert!(
        reported(&v, "falsification/src/runner/mod.rs:", "names kube"),
        "{v:?}"
    );
    assert!(
        reported(&v, "falsification/src/runner/mod.rs:", "names k8s_openapi"),
        "{v:?}"
    );
    // A file that brings the harness's module in may call it.
    assert!(
        !v.iter()
            .any(|x| x.starts_with("falsification/src/cli/run.rs")),
        "{v:?}"
    );
}

#[test]
fn the_backend_rule_fails_on_the_runner_naming_embedded() {
    let tmp = broken_copy(
        &["falsification/src"],
        "falsification/src/runner/judge.rs",
        "use crate::embedded::EmbeddedEnvironment;",
    );
    let v = runner_names_a_backend(tmp.path());
    assert!(
        reported(&v, "falsification/src/runner/judge.rs:", "embedded"),
        "{v:?}"
    );
}

#[test]
fn the_surface_rule_fails_on_a_public_runner() {
    let tmp = broken_copy(
        &["falsification/src"],
        "falsification/src/lib.rs",
        "pub use runner::RunPlan;",
    );
    let v = public_beyond_cli(tmp.path());
    assert!(
        reported(&v, "falsification/src/lib.rs:", "public beyond cli"),
        "{v:?}"
    );
}

#[test]
fn the_model_io_rule_fails_on_a_file_read_in_the_laws() {
    let tmp = broken_copy(
        &["falsification/model/src", "dist/src"],
        "falsification/model/src/laws.rs",
        "fn planted() { let _ = std::fs::read(\"x\"); let _ = std::time::Instant::now(); }",
    );
    let v = model_io(tmp.path());
    assert!(
        reported(&v, "falsification/model/src/laws.rs:", "fs"),
        "{v:?}"
    );
    assert!(
        reported(&v, "falsification/model/src/laws.rs:", "Instant"),
        "{v:?}"
    );
}

#[test]
fn the_trigger_rule_fails_on_a_clock_read_in_stop() {
    let tmp = broken_copy(
        &["falsification/src/trigger"],
        "falsification/src/trigger/stop.rs",
        "fn planted() -> std::time::Instant { std::time::Instant::now() }",
    );
    let v = trigger_deciders_do_io(tmp.path());
    assert!(
        reported(&v, "falsification/src/trigger/stop.rs:", "Instant"),
        "{v:?}"
    );
}

#[test]
fn the_page_rule_fails_on_a_run_result_or_a_file_read_in_a_pure_page() {
    let tmp = broken_copy(
        &["falsification/src/page"],
        "falsification/src/page/case.rs",
        "fn planted(r: &crate::runner::CaseResult) -> String { std::fs::read_to_string(&r.dir).unwrap() }",
    );
    let v = page_beyond_the_record(tmp.path());
    assert!(
        reported(&v, "falsification/src/page/case.rs:", "CaseResult")
            && reported(&v, "falsification/src/page/case.rs:", "std::fs"),
        "{v:?}"
    );
}

#[test]
fn code_is_read_without_comments_strings_or_tests() {
    let t = without_tests(tokenize(
        "/* clap /* nested */ clap */ let a = \"clap\\\"\"; let b = r#\"clap\"#; let c = '\\'';\n\
         let d = 'x'; fn f<'a>(x: &'a str) {} // clap\n\
         #[cfg(test)]\nmod tests { use clap; }\nuse kube;",
    ));
    let idents: Vec<&str> = t
        .iter()
        .filter(|t| t.ident())
        .map(|t| t.text.as_str())
        .collect();
    let expected = [
        "let", "a", "let", "b", "let", "c", "let", "d", "fn", "f", "x", "str", "use", "kube",
    ];
    assert_eq!(idents, expected);
    assert_eq!(t.last().unwrap().line, 5);
}

// ---------------------------------------------------------------------------------------------
// Reading the workspace.

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Runs cargo (the one running the tests) in the workspace; its standard output.
fn cargo(args: &[&str]) -> Vec<u8> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = std::process::Command::new(cargo)
        .args(args)
        .current_dir(root())
        .output()
        .expect("running cargo");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "cargo {args:?}: {stderr}");
    out.stdout
}

/// `cargo metadata` of the workspace without its dependencies (the members), read once.
fn metadata() -> &'static Value {
    static METADATA: OnceLock<Value> = OnceLock::new();
    METADATA.get_or_init(|| {
        let args = ["metadata", "--format-version", "1", "--locked", "--no-deps"];
        serde_json::from_slice(&cargo(&args)).expect("cargo metadata's JSON")
    })
}

/// A workspace crate: its package name and its `src` folder relative to the workspace.
struct Crate {
    name: String,
    src: String,
}

fn crates() -> Vec<Crate> {
    let m = metadata();
    let members: Vec<&str> = m["workspace_members"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let root = root();
    m["packages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["id"].as_str().is_some_and(|id| members.contains(&id)))
        .map(|p| {
            let manifest = Path::new(p["manifest_path"].as_str().unwrap());
            let dir = manifest.parent().unwrap().strip_prefix(&root).unwrap();
            Crate {
                name: p["name"].as_str().unwrap().into(),
                src: dir.join("src").to_string_lossy().into_owned(),
            }
        })
        .collect()
}

/// A source file: its path relative to the workspace and its code as tokens, without comments
/// and without `#[cfg(test)]` items.
struct SourceFile {
    path: String,
    tokens: Vec<Tok>,
}

/// The `.rs` files under `dir` (relative to `root`), sorted; none when it is absent.
fn rust_files(root: &Path, dir: &str) -> Vec<SourceFile> {
    let mut paths = Vec::new();
    let mut stack = vec![root.join(dir)];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                paths.push(p);
            }
        }
    }
    paths.sort();
    paths
        .into_iter()
        .map(|p| SourceFile {
            path: p.strip_prefix(root).unwrap().to_string_lossy().into_owned(),
            tokens: without_tests(tokenize(&std::fs::read_to_string(&p).unwrap())),
        })
        .collect()
}

/// Where the `checked` files under `dir` name any of `names` (an identifier, or a path such as
/// `std::fs`).
fn names_in(root: &Path, dir: &str, names: &[&str], checked: impl Fn(&str) -> bool) -> Vec<String> {
    let mut out = Vec::new();
    for f in rust_files(root, dir)
        .into_iter()
        .filter(|f| checked(&f.path))
    {
        for (i, t) in f.tokens.iter().enumerate() {
            for name in names {
                let mut parts = Vec::new();
                for (k, part) in name.split("::").enumerate() {
                    if k > 0 {
                        parts.push("::");
                    }
                    parts.push(part);
                }
                if t.ident() && f.tokens[i..].starts_with_texts(&parts) {
                    out.push(format!("{}:{}: names {name}", f.path, t.line));
                }
            }
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Rust as tokens: enough to tell code from comments and strings, and to follow paths.

#[derive(Debug, Clone, PartialEq)]
struct Tok {
    text: String,
    line: usize,
    /// A string, character or number literal (its text is not code).
    literal: bool,
}

impl Tok {
    fn ident(&self) -> bool {
        !self.literal
            && self
                .text
                .starts_with(|c: char| c.is_alphabetic() || c == '_')
    }
}

trait Texts {
    fn starts_with_texts(&self, texts: &[&str]) -> bool;
}

impl Texts for [Tok] {
    fn starts_with_texts(&self, texts: &[&str]) -> bool {
        self.len() >= texts.len() && self.iter().zip(texts).all(|(t, s)| t.text == *s)
    }
}

fn tokenize(text: &str) -> Vec<Tok> {
    let c: Vec<char> = text.chars().collect();
    let (mut i, mut line, mut out) = (0, 1, Vec::new());
    let at = |i: usize, s: &str| s.chars().enumerate().all(|(k, x)| c.get(i + k) == Some(&x));
    while i < c.len() {
        let start_line = line;
        let start = i;
        let mut literal = false;
        if c[i] == '\n' {
            line += 1;
            i += 1;
            continue;
        } else if c[i].is_whitespace() {
            i += 1;
            continue;
        } else if at(i, "//") {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
            continue;
        } else if at(i, "/*") {
            let end = block_comment_end(&c, i);
            line += c[i..end].iter().filter(|x| **x == '\n').count();
            i = end;
            continue;
        } else if let Some(hashes) = raw_string_at(&c, i) {
            // r"..", r#".."#, br"..", cr"..": up to the quote and as many hashes.
            while c[i] != '"' {
                i += 1;
            }
            i += 1;
            let close: String = std::iter::once('"')
                .chain(std::iter::repeat_n('#', hashes))
                .collect();
            while i < c.len() && !at(i, &close) {
                line += usize::from(c[i] == '\n');
                i += 1;
            }
            i += close.len();
            literal = true;
        } else if c[i] == '"' || ((c[i] == 'b' || c[i] == 'c') && c.get(i + 1) == Some(&'"')) {
            i += if c[i] == '"' { 1 } else { 2 };
            while i < c.len() && c[i] != '"' {
                line += usize::from(c[i] == '\n');
                i += if c[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            literal = true;
        } else if c[i] == '\'' || (c[i] == 'b' && c.get(i + 1) == Some(&'\'')) {
            let q = if c[i] == 'b' { i + 1 } else { i };
            if c.get(q + 1) == Some(&'\\') {
                i = q + 3;
                while i < c.len() && c[i] != '\'' {
                    i += 1;
                }
                i += 1;
                literal = true;
            } else if c.get(q + 2) == Some(&'\'') {
                i = q + 3;
                literal = true;
            } else {
                // A lifetime or a label.
                i = q + 1;
                while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                    i += 1;
                }
            }
        } else if c[i].is_ascii_digit() {
            while i < c.len()
                && (c[i].is_alphanumeric()
                    || c[i] == '_'
                    || (c[i] == '.' && c.get(i + 1).is_some_and(char::is_ascii_digit)))
            {
                i += 1;
            }
            literal = true;
        } else if c[i].is_alphabetic() || c[i] == '_' {
            if at(i, "r#") {
                i += 2;
            }
            while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                i += 1;
            }
        } else if at(i, "::") {
            i += 2;
        } else {
            i += 1;
        }
        let text: String = c[start..i.min(c.len())].iter().collect();
        out.push(Tok {
            text: text.trim_start_matches("r#").to_string(),
            line: start_line,
            literal,
        });
    }
    out
}

/// Past the end of the (nested) block comment starting at `i`.
fn block_comment_end(c: &[char], mut i: usize) -> usize {
    let mut depth = 0;
    while i < c.len() {
        match (c[i], c.get(i + 1)) {
            ('/', Some('*')) => depth += 1,
            ('*', Some('/')) => depth -= 1,
            _ => {
                i += 1;
                continue;
            }
        }
        i += 2;
        if depth == 0 {
            break;
        }
    }
    i
}

/// The number of hashes of a raw string starting at `i`, if one does.
fn raw_string_at(c: &[char], i: usize) -> Option<usize> {
    if i > 0 && (c[i - 1].is_alphanumeric() || c[i - 1] == '_') {
        return None;
    }
    let mut k = i;
    if matches!(c.get(k), Some('b' | 'c')) {
        k += 1;
    }
    if c.get(k) != Some(&'r') {
        return None;
    }
    k += 1;
    let hashes = c[k..].iter().take_while(|x| **x == '#').count();
    (c.get(k + hashes) == Some(&'"')).then_some(hashes)
}

/// The tokens without each `#[cfg(test)]` item (its other attributes, then up to its `;` or
/// its closing brace).
fn without_tests(t: Vec<Tok>) -> Vec<Tok> {
    let mut out = Vec::with_capacity(t.len());
    let mut i = 0;
    while i < t.len() {
        if !t[i..].starts_with_texts(&["#", "[", "cfg", "(", "test", ")", "]"]) {
            out.push(t[i].clone());
            i += 1;
            continue;
        }
        i += 7;
        let mut depth = 0;
        while i < t.len() {
            match t[i].text.as_str() {
                "{" | "[" | "(" => depth += 1,
                "}" | "]" | ")" => {
                    depth -= 1;
                    if depth == 0 && t[i].text == "}" {
                        i += 1;
                        break;
                    }
                }
                ";" if depth == 0 => {
                    i += 1;
                    break;
                }
                _ => {}
            }
            i += 1;
        }
    }
    out
}

/// An attribute `#[..]` or `#![..]`: the token indices it spans.
struct Attribute {
    span: std::ops::Range<usize>,
}

impl Attribute {
    /// `#[cfg_attr(feature = "<feature>", ..)]`.
    fn is_cfg_attr_feature(&self, t: &[Tok], feature: &str) -> bool {
        let body = &t[self.span.start + 2..];
        body.starts_with_texts(&["cfg_attr", "(", "feature", "="])
            && body
                .get(4)
                .is_some_and(|s| s.text == format!("\"{feature}\""))
    }

    fn is_derive(&self, t: &[Tok]) -> bool {
        t[self.span.start + 2..].starts_with_texts(&["derive", "("])
    }
}

fn attributes(t: &[Tok]) -> Vec<Attribute> {
    let mut out = Vec::new();
    for i in 0..t.len() {
        let open = match (t[i].text.as_str(), t.get(i + 1).map(|x| x.text.as_str())) {
            ("#", Some("[")) => i + 1,
            ("#", Some("!")) if t.get(i + 2).is_some_and(|x| x.text == "[") => i + 2,
            _ => continue,
        };
        let mut depth = 0;
        for (k, tok) in t.iter().enumerate().skip(open) {
            match tok.text.as_str() {
                "[" => depth += 1,
                "]" => {
                    depth -= 1;
                    if depth == 0 {
                        out.push(Attribute { span: i..k + 1 });
                        break;
                    }
                }
                _ => {}
            }
        }
    }
    out
}

/// For each token, the function whose body holds it (`Type::name` inside an `impl Type`).
fn enclosing_fns(t: &[Tok]) -> Vec<Option<String>> {
    let mut out = Vec::with_capacity(t.len());
    // Open braces: what each opened (a function's name, an impl's type, or nothing).
    let mut open: Vec<Option<(bool, String)>> = Vec::new();
    let mut pending: Option<(bool, String)> = None;
    for (i, tok) in t.iter().enumerate() {
        match tok.text.as_str() {
            "fn" if t.get(i + 1).is_some_and(Tok::ident) => {
                pending = Some((true, t[i + 1].text.clone()))
            }
            "impl" if pending.is_none() => {
                // The implemented type: the last plain name before the brace (`impl X for Y`).
                let ty = t[i + 1..]
                    .iter()
                    .take_while(|x| x.text != "{")
                    .filter(|x| x.ident() && !matches!(x.text.as_str(), "for" | "where"))
                    .last()
                    .map(|x| x.text.clone());
                pending = ty.map(|ty| (false, ty));
            }
            ";" if open
                .last()
                .is_none_or(|o| o.as_ref().is_none_or(|(f, _)| !f)) =>
            {
                pending = None
            }
            "{" => open.push(pending.take()),
            "}" => {
                open.pop();
            }
            _ => {}
        }
        let f = open
            .iter()
            .flatten()
            .rev()
            .find(|(is_fn, _)| *is_fn)
            .map(|(_, name)| name.clone());
        let ty = open
            .iter()
            .flatten()
            .rev()
            .find(|(is_fn, _)| !*is_fn)
            .map(|(_, name)| name.clone());
        out.push(f.map(|f| ty.map_or(f.clone(), |ty| format!("{ty}::{f}"))));
    }
    out
}

/// Every path a file names from `crate`, `super` or `self`, use-groups expanded.
fn crate_paths(t: &[Tok]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for i in 0..t.len() {
        let starts = matches!(t[i].text.as_str(), "crate" | "super" | "self")
            && t.get(i + 1).is_some_and(|n| n.text == "::")
            && (i == 0 || !matches!(t[i - 1].text.as_str(), "::" | "{" | ","));
        if starts {
            path_tree(t, i, Vec::new(), &mut out);
        }
    }
    out
}

/// The paths of the use tree at `i`, after `prefix`; the index past it.
fn path_tree(
    t: &[Tok],
    mut i: usize,
    mut prefix: Vec<String>,
    out: &mut Vec<Vec<String>>,
) -> usize {
    loop {
        match t.get(i) {
            Some(tok) if tok.ident() => {
                prefix.push(tok.text.clone());
                i += 1;
                if t.get(i).is_some_and(|n| n.text == "::") {
                    i += 1;
                    continue;
                }
                out.push(prefix);
                return i;
            }
            Some(tok) if tok.text == "{" => {
                i += 1;
                while i < t.len() && t[i].text != "}" {
                    i = path_tree(t, i, prefix.clone(), out);
                    while i < t.len() && !matches!(t[i].text.as_str(), "," | "}") {
                        i += 1;
                    }
                    if t.get(i).is_some_and(|n| n.text == ",") {
                        i += 1;
                    }
                }
                return i + 1;
            }
            _ => {
                out.push(prefix);
                return i;
            }
        }
    }
}

/// The module path of a file under a crate's `src` (`a/b.rs` and `a/b/mod.rs` are `[a, b]`).
fn module_of(path: &str, src: &str) -> Option<Vec<String>> {
    let rel = path
        .strip_prefix(src)?
        .trim_start_matches('/')
        .strip_suffix(".rs")?;
    let mut m: Vec<String> = rel.split('/').map(String::from).collect();
    if matches!(m.as_slice(), [only] if only == "lib" || only == "main")
        || m.last().is_some_and(|l| l == "mod")
    {
        m.pop();
    }
    Some(m)
}

/// The deepest module a path from `here` reaches, if it leaves the crate's files at all.
fn resolve(
    here: &[String],
    path: &[String],
    modules: &BTreeMap<Vec<String>, String>,
) -> Option<Vec<String>> {
    let mut at = here.to_vec();
    let mut segments = path.iter().peekable();
    match segments.next()?.as_str() {
        "crate" => at.clear(),
        "super" => {
            at.pop()?;
        }
        _ => {}
    }
    while let Some(s) = segments.next_if(|s| *s == "super" || *s == "self") {
        if s == "super" {
            at.pop()?;
        }
    }
    for s in segments {
        let mut next = at.clone();
        next.push(s.clone());
        if !modules.contains_key(&next) {
            break;
        }
        at = next;
    }
    (at != here && modules.contains_key(&at)).then_some(at)
}

/// The import circles of a graph: each group of two or more files that reach one another.
fn circles(edges: &BTreeMap<&str, BTreeSet<&str>>) -> Vec<Vec<String>> {
    let reach = |from: &str| {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from];
        while let Some(n) = stack.pop() {
            for &m in edges.get(n).into_iter().flatten() {
                if seen.insert(m) {
                    stack.push(m);
                }
            }
        }
        seen
    };
    let reaches: BTreeMap<&str, BTreeSet<&str>> = edges.keys().map(|&n| (n, reach(n))).collect();
    let mut out: BTreeSet<Vec<String>> = BTreeSet::new();
    for (&n, r) in &reaches {
        if !r.contains(n) {
            continue;
        }
        let group: Vec<String> = r
            .iter()
            .filter(|&&m| reaches.get(m).is_some_and(|back| back.contains(n)))
            .map(|m| (*m).to_string())
            .collect();
        out.insert(group);
    }
    out.into_iter().collect()
}
