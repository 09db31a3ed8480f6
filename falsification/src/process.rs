//! Child processes and files, for both backends and the trigger: where the kit's binaries are,
//! starting a child that dies with the runner, stopping and reaping it, its CPU time, a free
//! loopback port, and writing a file atomically.

use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, bail};
use tokio::process::{Child, Command};

/// The three binaries of the kit the runner starts.
#[derive(Debug, Clone)]
pub struct Binaries {
    pub service: PathBuf,
    pub meter: PathBuf,
    pub loadgen: PathBuf,
}

impl Binaries {
    /// Next to the running executable (or in `dir`); an error names the first missing one.
    pub fn locate(dir: Option<&Path>) -> anyhow::Result<Binaries> {
        Ok(Binaries {
            service: Binaries::find(dir, "service")?,
            meter: Binaries::find(dir, "meter")?,
            loadgen: Binaries::find(dir, "loadgen")?,
        })
    }

    /// One kit binary, next to the running executable (or in `dir`).
    pub fn find(dir: Option<&Path>, name: &str) -> anyhow::Result<PathBuf> {
        let dir = match dir {
            Some(d) => d.to_path_buf(),
            None => {
                let exe = std::env::current_exe().context("locating this executable")?;
                let mut d = exe.parent().map(Path::to_path_buf).unwrap_or_default();
                // Test executables live in `target/<profile>/deps`.
                if d.file_name().is_some_and(|n| n == "deps") {
                    d.pop();
                }
                d
            }
        };
        let p = dir.join(name);
        if p.is_file() {
            Ok(p)
        } else {
            bail!(
                "missing {}: build the kit with `cargo build --release --workspace` \
                 (or pass --bin-dir)",
                p.display()
            )
        }
    }
}

pub fn spawn(command: Command, what: &Path, log: &Path) -> anyhow::Result<Child> {
    let log = std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
    spawn_child(command, log).with_context(|| format!("starting {}", what.display()))
}

/// SIGTERM, then up to `grace` for it to exit, then SIGKILL; always reaped.
pub async fn stop(child: &mut Child, grace: Duration) {
    sigterm(child);
    if tokio::time::timeout(grace, child.wait()).await.is_err() {
        let _ = child.kill().await;
    }
}

/// CPU seconds (user + system) of a process so far, from `/proc/<pid>/stat` (`self` for this
/// process, `thread-self` for the calling thread).
pub fn cpu_seconds(pid: &str) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces) start after the last ')'.
    let rest = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Some(ticks / hz)
}

/// Spawns a kit process quietly (`RUST_LOG=warn`, stderr to `log`, no stdin/stdout), killed
/// when dropped and when the runner dies.
pub fn spawn_child(command: Command, log: std::fs::File) -> std::io::Result<Child> {
    spawn_child_to(command, log, Stdio::null())
}

/// [`spawn_child`] with the child's stdout going to `stdout` (e.g. piped, to read it live).
pub fn spawn_child_to(
    mut command: Command,
    log: std::fs::File,
    stdout: Stdio,
) -> std::io::Result<Child> {
    die_with_parent(&mut command);
    command
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(Stdio::from(log))
        .kill_on_drop(true)
        .spawn()
}

/// Asks a child to stop gracefully (SIGTERM); a child already reaped has nothing to stop.
pub fn sigterm(child: &Child) {
    if let Some(pid) = child.id() {
        // SAFETY: plain kill(2) on our own child's pid, which has not been reaped yet.
        unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) };
    }
}

/// Makes the kernel kill the child if the runner dies without reaping it (SIGKILL, abort):
/// `kill_on_drop` covers errors and panics, this covers the rest. The signal follows the
/// *thread* that started the child: start children only from a thread that outlives them (a
/// case's own thread, which reaps them before it moves on), never from `spawn_blocking`.
fn die_with_parent(command: &mut Command) {
    // SAFETY: prctl is async-signal-safe and touches only the child being set up.
    unsafe {
        command.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
}

/// A port that was free a moment ago on 127.0.0.1. The pod binds it right after; the
/// window for a clash is tiny, and a pod that cannot bind is recorded as crashed.
pub fn free_loopback_port() -> std::io::Result<SocketAddr> {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?.local_addr()
}

/// Writes `contents` to `path` atomically, so a reader sees the old file or the new one, never
/// half of one: the loadgen's one way of doing it (a temporary file beside `path`, flushed to
/// disk, renamed over it), with the path named on error.
pub fn write_atomically(path: &Path, contents: &str) -> Result<(), WriteError> {
    loadgen::record::write_atomically(path, contents.as_bytes()).map_err(|source| WriteError {
        path: path.to_path_buf(),
        source,
    })
}

/// A file that could not be written, named.
#[derive(Debug, thiserror::Error)]
#[error("writing {}: {source}", path.display())]
pub struct WriteError {
    pub path: PathBuf,
    pub source: std::io::Error,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_binary_names_its_path_and_the_build_command() {
        let dir = tempfile::tempdir().unwrap();
        let e = Binaries::locate(Some(dir.path())).unwrap_err().to_string();
        assert!(
            e.contains("service") && e.contains("cargo build --release --workspace"),
            "{e}"
        );
    }
}
