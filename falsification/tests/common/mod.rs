//! Helpers shared by the end-to-end tests that start the kit's binaries.
// Each test file compiles this module and uses only some of it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The runs share two cores: one at a time.
pub static SERIAL: Mutex<()> = Mutex::new(());

/// Where cargo put this crate's binary, and so the other crates' binaries once built.
pub fn bin_dir() -> PathBuf {
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_falsification"));
    exe.parent().expect("binary has a directory").to_path_buf()
}

/// `cargo test -p falsification` does not build the other crates' binaries: builds those of
/// `names` that are missing, in the profile of this test (`--release` beside a release test).
pub fn ensure_binaries(names: &[&str]) {
    let dir = bin_dir();
    if names.iter().all(|b| dir.join(b).is_file()) {
        return;
    }
    let mut cargo = std::process::Command::new(env!("CARGO"));
    cargo.args(["build", "--locked"]);
    if dir.ends_with("release") {
        cargo.arg("--release");
    }
    for name in names {
        cargo.args(["-p", name]);
    }
    let status = cargo.status().expect("running cargo build");
    assert!(status.success(), "building {names:?} failed");
}

/// The single session directory a run wrote under `out`.
pub fn session_dir(out: &Path) -> PathBuf {
    std::fs::read_dir(out)
        .unwrap()
        .next()
        .expect("a session directory")
        .unwrap()
        .path()
}

/// Panics if any file under `dir` (a record: plan, rows, logs, report) holds `secret`.
pub fn assert_nowhere(dir: &Path, secret: &str) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            assert_nowhere(&path, secret);
        } else {
            let text = String::from_utf8_lossy(&std::fs::read(&path).unwrap()).into_owned();
            assert!(
                !text.contains(secret),
                "{} holds the secret",
                path.display()
            );
        }
    }
}
