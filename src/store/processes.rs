//! The user's processes as /proc describes them (for `gpurun ps` and `gpurun cache gc`).

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// A process of this user, as /proc describes it.
#[derive(Debug, Clone)]
pub struct Proc {
    pub pid: u32,
    pub ppid: u32,
    pub cmdline: Vec<String>,
    /// Start time in clock ticks since boot.
    pub start_ticks: u64,
    pub is_gpurun: bool,
}

impl Proc {
    /// `exec`, `pull`…: the first argument that is not an option.
    pub fn subcommand(&self) -> Option<String> {
        self.cmdline
            .iter()
            .skip(1)
            .find(|a| !a.starts_with('-'))
            .cloned()
    }
}

/// `(ppid, start ticks)` from /proc/PID/stat; the command name may hold spaces and parentheses,
/// so fields are counted after its last ')'.
pub fn parse_stat(stat: &str) -> Option<(u32, u64)> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // f[0] is field 3 (state): ppid is field 4, starttime field 22.
    Some((f.get(1)?.parse().ok()?, f.get(19)?.parse().ok()?))
}

/// This user's processes.
pub fn own_processes(uid: u32) -> Vec<Proc> {
    let mut out = Vec::new();
    for e in fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let dir = e.path();
        if fs::metadata(&dir).map(|m| m.uid()).ok() != Some(uid) {
            continue;
        }
        let Some((ppid, start_ticks)) = fs::read_to_string(dir.join("stat"))
            .ok()
            .and_then(|s| parse_stat(&s))
        else {
            continue;
        };
        let cmdline: Vec<String> = fs::read(dir.join("cmdline"))
            .unwrap_or_default()
            .split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        let base = |p: &Path| p.file_name().map(|n| n.to_string_lossy().into_owned());
        let exe = fs::read_link(dir.join("exe")).ok();
        let is_gpurun = exe.as_deref().and_then(base).as_deref() == Some("gpurun")
            || cmdline
                .first()
                .map(|c| base(Path::new(c)).as_deref() == Some("gpurun"))
                == Some(true);
        out.push(Proc {
            pid,
            ppid,
            cmdline,
            start_ticks,
            is_gpurun,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields() {
        let s =
            "1234 (gpu run) (x)) S 99 1234 1234 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 777 1000 10";
        assert_eq!(parse_stat(s), Some((99, 777)));
        assert_eq!(parse_stat("garbage"), None);
    }
}
