//! Helpers shared by the end-to-end tests that start the kit's binaries.

use std::path::PathBuf;
use std::sync::Mutex;

/// The runs share two cores: one at a time.
pub static SERIAL: Mutex<()> = Mutex::new(());

/// Where cargo put this crate's binary, and so the other crates' binaries once built.
pub fn bin_dir() -> PathBuf {
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_falsification"));
    exe.parent().expect("binary has a directory").to_path_buf()
}
