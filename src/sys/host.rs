//! What the host offers this process: its environment, file system kinds, CPUs.

use std::path::Path;

/// This process's variables whose names start with `prefix`: each name, and whether its value is
/// empty or blank. A walk of `environ` that copies only those: `std::env::vars_os` copies every
/// variable, ~0.15 µs apiece, and a cluster login's environment holds a hundred or more. gpurun
/// changes no variable of its own environment, so nothing writes `environ` meanwhile.
pub fn env_with_prefix(prefix: &str) -> Vec<(String, bool)> {
    extern "C" {
        static environ: *const *const libc::c_char;
    }
    let mut out = Vec::new();
    // SAFETY: `environ` is a null-terminated array of NUL-terminated strings, which nothing
    // changes while it is read (above).
    unsafe {
        let mut p = environ;
        while !p.is_null() && !(*p).is_null() {
            let var = std::ffi::CStr::from_ptr(*p).to_bytes();
            if let (true, Some(eq)) = (
                var.starts_with(prefix.as_bytes()),
                var.iter().position(|&b| b == b'='),
            ) {
                let name = String::from_utf8_lossy(&var[..eq]).into_owned();
                out.push((name, var[eq + 1..].trim_ascii().is_empty()));
            }
            p = p.add(1);
        }
    }
    out
}

/// Whether `path` is on a network or parallel file system (or another FUSE one, such as CVMFS),
/// where reads wait on I/O rather than on a CPU. False when it cannot be told.
pub fn on_network_fs(path: &Path) -> bool {
    // statfs(2) f_type magic numbers: NFS, SMB2, CIFS, Lustre, GPFS, BeeGFS, CephFS, FUSE, AFS,
    // 9p, OrangeFS/PVFS2.
    const NETWORK: [i64; 11] = [
        0x6969, 0xFE534D42, 0xFF534D42, 0x0BD00BD0, 0x47504653, 0x19830326, 0x00C36400, 0x65735546,
        0x5346414F, 0x01021997, 0x20030528,
    ];
    nix::sys::statfs::statfs(path)
        .map(|st| NETWORK.contains(&st.filesystem_type().0))
        .unwrap_or(false)
}

/// Whether `path` is on a file system mounted noexec (where execve says EACCES).
pub fn on_noexec_mount(path: &Path) -> bool {
    nix::sys::statvfs::statvfs(path)
        .is_ok_and(|st| st.flags().contains(nix::sys::statvfs::FsFlags::ST_NOEXEC))
}

/// How many CPUs this process's affinity mask allows (a Slurm step's own cores); `None` when
/// the kernel will not say.
pub fn affinity_cpus() -> Option<usize> {
    let set = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)).ok()?;
    let n = (0..nix::sched::CpuSet::count())
        .filter(|&i| set.is_set(i).unwrap_or(false))
        .count();
    (n > 0).then_some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variables_with_a_prefix() {
        // The test binary's environment, as std reads it.
        let want: Vec<(String, bool)> = std::env::vars_os()
            .filter(|(k, _)| k.as_encoded_bytes().starts_with(b"CARGO_"))
            .map(|(k, v)| {
                let blank = v.as_encoded_bytes().trim_ascii().is_empty();
                (k.to_string_lossy().into_owned(), blank)
            })
            .collect();
        assert!(!want.is_empty());
        assert_eq!(env_with_prefix("CARGO_"), want);
        assert!(env_with_prefix("GPURUN_NO_SUCH_VARIABLE_").is_empty());
    }
}
