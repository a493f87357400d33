//! Whether this node's slurmd has loaded the plugin. srun, sbatch and each slurmstepd read
//! plugstack.conf afresh, but slurmd only when it starts: a plugin added without a restart of
//! slurmd runs in every step and never in the job's epilog, which removes what a job leaves on
//! the node (named containers, the batch step's image copy).

use std::path::{Path, PathBuf};

/// The shared object at `addr` in a /proc/PID/maps table.
pub fn object_at(maps: &str, addr: usize) -> Option<PathBuf> {
    maps.lines().find_map(|l| {
        let mut f = l.split_whitespace();
        let (lo, hi) = f.next()?.split_once('-')?;
        let (lo, hi) = (
            usize::from_str_radix(lo, 16).ok()?,
            usize::from_str_radix(hi, 16).ok()?,
        );
        let path = f.nth(4)?;
        ((lo..hi).contains(&addr) && path.starts_with('/')).then(|| PathBuf::from(path))
    })
}

/// Whether a /proc/PID/maps table maps the file `so`.
pub fn maps_file(maps: &str, so: &Path) -> bool {
    let so = so.to_string_lossy();
    maps.lines()
        .any(|l| l.split_whitespace().nth(5) == Some(so.as_ref()))
}

/// This plugin's own file, from this process's maps.
fn own_object() -> Option<PathBuf> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    object_at(&maps, own_object as fn() -> Option<PathBuf> as usize)
}

/// The pids of the processes called slurmd (there is one per node; a simulated cluster in
/// network namespaces has one per node too, each of which is this node's only in its own
/// namespace: all are asked).
fn slurmd_pids() -> Vec<i32> {
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    rd.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "slurmd")
        })
        .collect()
}

/// As root: Some(false) when a slurmd runs here and none of them has this plugin mapped; None
/// when that cannot be told (no slurmd, maps unreadable).
pub fn lacks_plugin() -> Option<bool> {
    let so = own_object()?;
    let maps: Vec<String> = slurmd_pids()
        .iter()
        .filter_map(|p| std::fs::read_to_string(format!("/proc/{p}/maps")).ok())
        .collect();
    (!maps.is_empty()).then(|| !maps.iter().any(|m| maps_file(m, &so)))
}

/// The one line a job gets where slurmd lacks the plugin.
pub fn restart_line(node: &str) -> String {
    format!(
        "gpurun: warning: slurmd on {node} was started before the gpurun plugin was added to plugstack.conf, so the job's epilog cannot remove what it leaves on the node (named containers, image copies); restart slurmd there"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAPS: &str = "\
55d0a0000000-55d0a0100000 r-xp 00000000 fd:01 100 /usr/sbin/slurmd
7f0000000000-7f0000010000 r-xp 00000000 fd:01 200 /usr/lib/slurm/spank_gpurun.so
7f0000010000-7f0000020000 rw-p 00000000 00:00 0
7fff00000000-7fff00001000 rw-p 00000000 00:00 0 [stack]
";

    #[test]
    fn objects_by_address() {
        let so = Path::new("/usr/lib/slurm/spank_gpurun.so");
        assert_eq!(object_at(MAPS, 0x7f0000000100).as_deref(), Some(so));
        assert_eq!(object_at(MAPS, 0x7f0000010100), None, "anonymous");
        assert_eq!(object_at(MAPS, 0x7fff00000010), None, "[stack]");
        assert!(maps_file(MAPS, so));
        assert!(!maps_file(
            MAPS,
            Path::new("/usr/lib/slurm/spank_gpurun.so.old")
        ));
        assert!(!maps_file(MAPS, Path::new("/usr/lib/slurm")));
    }

    #[test]
    fn this_library_is_found_in_its_own_maps() {
        let so = own_object().expect("the test binary maps itself");
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        assert!(maps_file(&maps, &so), "{}", so.display());
    }
}
