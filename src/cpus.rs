//! How many CPUs this process may use: the fewer of its affinity (the cores a Slurm step or
//! `taskset` gave it) and its cgroup's `cpu.max` quota (a container's or a job's share).

use std::path::Path;

/// The CPUs this process may use, at least 1.
pub fn usable() -> usize {
    let affinity = crate::sys::affinity_cpus()
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let limits = cgroup_dirs(&own, Path::new("/sys/fs/cgroup"))
        .iter()
        .filter_map(|d| std::fs::read_to_string(d.join("cpu.max")).ok())
        .collect::<Vec<_>>();
    bound(affinity, &limits)
}

/// The fewer of `affinity` and every `cpu.max` text in `limits` ("max 100000" is no limit,
/// "150000 100000" one and a half CPUs, rounded up: two threads still fill that share).
pub fn bound(affinity: usize, limits: &[String]) -> usize {
    let quota = |text: &str| -> Option<usize> {
        let mut words = text.split_whitespace();
        let q: u64 = words.next()?.parse().ok()?;
        let period: u64 = words.next().map_or(Some(100_000), |p| p.parse().ok())?;
        (period > 0).then(|| q.div_ceil(period) as usize)
    };
    let cap = limits.iter().filter_map(|l| quota(l)).min();
    affinity.min(cap.unwrap_or(usize::MAX)).max(1)
}

/// The cgroup v2 directories under `root` whose `cpu.max` bound this process: its own and
/// every parent's (a job's limit sits above its step's), from `/proc/self/cgroup`'s text.
pub fn cgroup_dirs(proc_cgroup: &str, root: &Path) -> Vec<std::path::PathBuf> {
    let Some(path) = proc_cgroup.lines().find_map(|l| l.strip_prefix("0::")) else {
        return Vec::new();
    };
    let mut dirs = Vec::new();
    let mut dir = root.join(path.trim().trim_start_matches('/'));
    while dir.starts_with(root) && dir != root {
        dirs.push(dir.clone());
        if !dir.pop() {
            break;
        }
    }
    dirs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fewest_cpus_win() {
        let l = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        for (affinity, limits, want) in [
            (16, l(&[]), 16),
            (16, l(&["max 100000\n"]), 16),
            (16, l(&["200000 100000\n"]), 2),
            (16, l(&["150000 100000"]), 2),
            (16, l(&["50000 100000"]), 1),
            (16, l(&["max 100000", "400000 100000", "800000 100000"]), 4),
            (2, l(&["800000 100000"]), 2),
            (4, l(&["garbage", "", "100000 0"]), 4),
            (0, l(&[]), 1),
        ] {
            assert_eq!(bound(affinity, &limits), want, "{affinity} {limits:?}");
        }
    }

    #[test]
    fn a_step_is_bound_by_its_job() {
        let root = Path::new("/sys/fs/cgroup");
        let own = "0::/system.slice/slurmstepd.scope/job_7/step_0/user/task_0\n";
        let dirs = cgroup_dirs(own, root);
        assert_eq!(dirs.first().unwrap(), &root.join(&own[4..own.len() - 1]));
        assert!(dirs.contains(&root.join("system.slice/slurmstepd.scope/job_7")));
        assert_eq!(dirs.last().unwrap(), &root.join("system.slice"));
        assert!(cgroup_dirs("0::/\n", root).is_empty());
        // cgroup v1 only: no unified line, no v2 quota to read.
        assert!(cgroup_dirs("4:cpu,cpuacct:/user.slice\n", root).is_empty());
    }
}
