//! The gateway (HAProxy or nginx) as a child process of the embedded cluster: started with the
//! configuration [`crate::gateway`] renders, told the ready pods, read for its counters.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, Command};

use crate::gateway::{
    GatewayCounters, Slots, count_nginx_tries, haproxy_config, nginx_config, parse_haproxy_stats,
};
use crate::process::{self, spawn, stop};
use falsification_model::experiment::{Gateway, GatewayKind};

/// A running gateway process.
pub struct GatewayProcess {
    kind: GatewayKind,
    config: Gateway,
    dir: PathBuf,
    listen: SocketAddr,
    child: Option<Child>,
    slots: Slots,
    /// nginx: the upstream it was last given, and how far its access log has been read.
    upstream: Vec<SocketAddr>,
    log_read: u64,
    counters: GatewayCounters,
}

impl GatewayProcess {
    /// Starts the proxy with room for `slots` pods, logging to `log`; `dir` holds its files.
    pub async fn start(
        g: &Gateway,
        slots: usize,
        dir: &Path,
        log: &Path,
    ) -> anyhow::Result<GatewayProcess> {
        let listen = process::free_loopback_port()?;
        let (program, mut command) = match g.kind {
            GatewayKind::Haproxy => {
                let cfg = dir.join("haproxy.cfg");
                let text = haproxy_config(g, listen, &dir.join("admin.sock"), slots);
                process::write_atomically(&cfg, &text)?;
                let mut c = Command::new("haproxy");
                // Foreground, as a child the runner reaps.
                c.arg("-db").arg("-f").arg(&cfg);
                ("haproxy", c)
            }
            GatewayKind::Nginx => {
                let cfg = dir.join("nginx.conf");
                process::write_atomically(&cfg, &nginx_config(g, listen, dir, &[]))?;
                std::fs::write(dir.join("tries.log"), "")?;
                let mut c = Command::new("nginx");
                c.arg("-c").arg(&cfg).arg("-p").arg(dir);
                ("nginx", c)
            }
        };
        command.kill_on_drop(true);
        let child = spawn(command, Path::new(program), log)
            .with_context(|| format!("{program} is needed for `gateway.kind = {}`", g.kind))?;
        let mut gw = GatewayProcess {
            kind: g.kind,
            config: *g,
            dir: dir.to_path_buf(),
            listen,
            child: Some(child),
            slots: Slots::new(slots),
            upstream: Vec::new(),
            log_read: 0,
            counters: GatewayCounters::default(),
        };
        gw.wait_listening(Duration::from_secs(10), log).await?;
        Ok(gw)
    }

    async fn wait_listening(&mut self, within: Duration, log: &Path) -> anyhow::Result<()> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let ready = match self.kind {
                GatewayKind::Haproxy => self.admin("show info").await.is_ok(),
                GatewayKind::Nginx => tokio::net::TcpStream::connect(self.listen).await.is_ok(),
            };
            if ready {
                return Ok(());
            }
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                bail!(
                    "{} exited ({status}) at start; see {}",
                    self.kind,
                    log.display()
                );
            }
            if tokio::time::Instant::now() >= deadline {
                bail!("{} did not come up within {within:?}", self.kind);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The configuration file the proxy runs with (nginx's upstream list changes on a reload;
    /// its retry settings do not).
    pub fn config_file(&self) -> PathBuf {
        self.dir.join(match self.kind {
            GatewayKind::Haproxy => "haproxy.cfg",
            GatewayKind::Nginx => "nginx.conf",
        })
    }

    /// Where the clients send their requests.
    pub fn url(&self) -> String {
        format!("http://{}/work", self.listen)
    }

    /// One command on HAProxy's admin socket (`;` separates several); its answer.
    async fn admin(&self, command: &str) -> anyhow::Result<String> {
        let mut s = tokio::net::UnixStream::connect(self.dir.join("admin.sock")).await?;
        s.write_all(format!("{command}\n").as_bytes()).await?;
        let mut out = String::new();
        s.read_to_string(&mut out).await?;
        Ok(out)
    }

    /// Makes the backends the `ready` pods, as a Service's endpoints follow readiness.
    pub async fn follow(&mut self, ready: &[SocketAddr]) -> anyhow::Result<()> {
        match self.kind {
            GatewayKind::Haproxy => {
                let commands = self.slots.follow(ready);
                if !commands.is_empty() {
                    let answer = self.admin(&commands.join("; ")).await?;
                    // Each command answers nothing or a notice; a refusal names the command.
                    if answer.contains("No such") || answer.contains("Unknown") {
                        bail!(
                            "HAProxy refused `{}`: {}",
                            commands.join("; "),
                            answer.trim()
                        );
                    }
                }
            }
            GatewayKind::Nginx => {
                if self.upstream != ready {
                    let text = nginx_config(&self.config, self.listen, &self.dir, ready);
                    process::write_atomically(&self.dir.join("nginx.conf"), &text)?;
                    if let Some(pid) = self.child.as_ref().and_then(Child::id) {
                        // SAFETY: signalling our own child, which has not been reaped.
                        unsafe { libc::kill(pid as i32, libc::SIGHUP) };
                    }
                    self.upstream = ready.to_vec();
                }
            }
        }
        Ok(())
    }

    /// The counters so far; the last known ones if the proxy does not answer.
    pub async fn counters(&mut self) -> GatewayCounters {
        match self.kind {
            GatewayKind::Haproxy => {
                if let Some(c) = self
                    .admin("show stat")
                    .await
                    .ok()
                    .and_then(|csv| parse_haproxy_stats(&csv))
                {
                    self.counters = c;
                }
            }
            GatewayKind::Nginx => {
                if let Ok(text) = read_from(&self.dir.join("tries.log"), self.log_read) {
                    self.log_read += count_nginx_tries(&text, &mut self.counters) as u64;
                }
            }
        }
        self.counters
    }

    /// `haproxy -v` / `nginx -v`, first line.
    pub fn version(kind: GatewayKind) -> String {
        let (program, flag) = match kind {
            GatewayKind::Haproxy => ("haproxy", "-v"),
            GatewayKind::Nginx => ("nginx", "-v"),
        };
        std::process::Command::new(program)
            .arg(flag)
            .output()
            .ok()
            .map(|o| {
                // nginx prints its version on stderr.
                let text = [o.stdout, o.stderr].concat();
                String::from_utf8_lossy(&text)
                    .lines()
                    .next()
                    .unwrap_or("")
                    .trim()
                    .to_string()
            })
            .unwrap_or_else(|| format!("{program}: not found"))
    }

    /// Stops the proxy after the clients have stopped.
    pub async fn shutdown(&mut self) {
        if let Some(mut c) = self.child.take() {
            // nginx stops fast on SIGTERM, HAProxy (-db) too.
            stop(&mut c, Duration::from_secs(5)).await;
        }
    }
}

fn read_from(path: &Path, offset: u64) -> std::io::Result<String> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(path)?;
    f.seek(SeekFrom::Start(offset))?;
    let mut s = String::new();
    f.read_to_string(&mut s)?;
    Ok(s)
}
