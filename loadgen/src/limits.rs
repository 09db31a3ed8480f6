//! Process limits: every attempt in flight holds a socket, so the open-files limit bounds
//! how many attempts can be in flight.

/// Raises `RLIMIT_NOFILE` towards `wanted` (the hard limit too, when privileged).
/// Returns the soft limit now in force.
pub fn raise_open_files_limit(wanted: u64) -> std::io::Result<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    if lim.rlim_cur >= wanted {
        return Ok(lim.rlim_cur);
    }
    if lim.rlim_max < wanted {
        // Only root (CAP_SYS_RESOURCE) may raise the hard limit; try, then fall back.
        let nr_open = std::fs::read_to_string("/proc/sys/fs/nr_open")
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .unwrap_or(wanted);
        let raised = libc::rlimit {
            rlim_cur: wanted.min(nr_open) as libc::rlim_t,
            rlim_max: wanted.min(nr_open) as libc::rlim_t,
        };
        // SAFETY: setrlimit only reads the struct.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            return Ok(raised.rlim_cur);
        }
    }
    let soft = libc::rlimit {
        rlim_cur: lim.rlim_max.min(wanted as libc::rlim_t),
        rlim_max: lim.rlim_max,
    };
    // SAFETY: as above.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &soft) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(soft.rlim_cur)
}

/// Peak resident memory of this process (`VmHWM`), where /proc tells.
pub fn max_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limit_is_at_least_what_was_there() {
        let before = raise_open_files_limit(0).unwrap();
        let after = raise_open_files_limit(before + 16).unwrap();
        assert!(after >= before);
        assert!(max_rss_bytes().unwrap() > 0);
    }
}
