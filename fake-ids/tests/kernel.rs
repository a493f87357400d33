//! The filter in the running kernel, in forked children: each faked call returns 0 and changes
//! nothing for an unprivileged process (no_new_privs, no capability, not root), and the same
//! call unfiltered, as root, does what its name says, which holds every number against the
//! kernel's own table. i386 calls are made with int 0x80 where the kernel takes them.

use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use fake_ids::{Abi, AARCH64, I386, X86_64};

/// The id the calls ask for: the test's processes have it nowhere.
const ID: i64 = 4321;
/// Who the filtered children run as where the test runs as root.
const NOBODY: u32 = 65534;

fn is_root() -> bool {
    // SAFETY: geteuid only reads the process's id.
    unsafe { libc::geteuid() == 0 }
}

/// A file to chown, and the calls' pointer arguments, in a page below 4 GiB, where i386 calls
/// can point.
struct Fixture {
    path: PathBuf,
    fd: i32,
    page: *mut u8,
}

const PATH_AT: usize = 0;
const GROUPS16_AT: usize = 2048;
const GROUPS32_AT: usize = 3072;

impl Fixture {
    fn new(name: &str) -> Fixture {
        let path = std::env::temp_dir().join(format!("fake-ids.{}.{name}", std::process::id()));
        std::fs::write(&path, "x").unwrap();
        if is_root() {
            std::os::unix::fs::chown(&path, Some(NOBODY), Some(NOBODY)).unwrap();
        }
        let fd = std::fs::File::open(&path).map(std::os::fd::IntoRawFd::into_raw_fd);
        #[cfg(target_arch = "x86_64")]
        let low = libc::MAP_32BIT;
        #[cfg(not(target_arch = "x86_64"))]
        let low = 0;
        // SAFETY: a fresh anonymous mapping, written below within its 4096 bytes.
        let page = unsafe {
            let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | low;
            let rw = libc::PROT_READ | libc::PROT_WRITE;
            let p = libc::mmap(std::ptr::null_mut(), 4096, rw, flags, -1, 0) as *mut u8;
            assert_ne!(p as *mut libc::c_void, libc::MAP_FAILED);
            let bytes = path.as_os_str().as_bytes();
            assert!(bytes.len() < GROUPS16_AT);
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), p.add(PATH_AT), bytes.len());
            *(p.add(GROUPS16_AT) as *mut u16) = ID as u16;
            *(p.add(GROUPS32_AT) as *mut u32) = ID as u32;
            p
        };
        Fixture {
            path,
            fd: fd.unwrap(),
            page,
        }
    }

    /// The arguments of the call `name` of `abi`: the file, ID, and a list of one group, ID.
    fn args(&self, abi: &Abi, name: &str) -> [i64; 5] {
        let at = |off: usize| self.page as i64 + off as i64;
        match name.trim_end_matches("32") {
            "chown" | "lchown" => [at(PATH_AT), ID, ID, 0, 0],
            "fchown" => [self.fd as i64, ID, ID, 0, 0],
            "fchownat" => [libc::AT_FDCWD as i64, at(PATH_AT), ID, ID, 0],
            "setgroups" if abi.name == "i386" && !name.ends_with("32") => {
                [1, at(GROUPS16_AT), 0, 0, 0]
            }
            "setgroups" => [1, at(GROUPS32_AT), 0, 0, 0],
            "setuid" | "setgid" | "setfsuid" | "setfsgid" => [ID, 0, 0, 0, 0],
            "setreuid" | "setregid" => [ID, ID, 0, 0, 0],
            "setresuid" | "setresgid" => [ID, ID, ID, 0, 0],
            other => panic!("no arguments for {other}"),
        }
    }

    /// The file's owner and the process's ids and groups.
    fn state(&self) -> String {
        // SAFETY: fstat fills a zeroed struct.
        let st = unsafe {
            let mut st = std::mem::zeroed::<libc::stat>();
            assert_eq!(libc::fstat(self.fd, &mut st), 0);
            st
        };
        let status = std::fs::read_to_string("/proc/thread-self/status").unwrap();
        let ids = status
            .lines()
            .filter(|l| ["Uid:", "Gid:", "Groups:"].iter().any(|k| l.starts_with(k)));
        format!(
            "{}:{} {}",
            st.st_uid,
            st.st_gid,
            ids.collect::<Vec<_>>().join(" ")
        )
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Make call `nr` of `abi`: an i386 one through int 0x80.
fn call(abi: &Abi, nr: u32, a: [i64; 5]) -> i64 {
    if abi.name == "i386" {
        return int80(nr, a.map(|x| x as u32)) as i64;
    }
    // SAFETY: the calls of the test, with arguments that point into the fixture's page.
    unsafe { libc::syscall(nr as libc::c_long, a[0], a[1], a[2], a[3], a[4]) }
}

#[cfg(target_arch = "x86_64")]
fn int80(nr: u32, a: [u32; 5]) -> i32 {
    let ret: i32;
    // SAFETY: an i386 system call from this 64-bit process; ebx (which Rust keeps for itself)
    // is saved around it, and r8 to r11, which older kernels cleared, are marked as clobbered.
    unsafe {
        std::arch::asm!(
            "push rbx",
            "mov ebx, {b:e}",
            "int 0x80",
            "pop rbx",
            b = in(reg) a[0],
            inlateout("eax") nr => ret,
            in("ecx") a[1],
            in("edx") a[2],
            in("esi") a[3],
            in("edi") a[4],
            out("r8") _, out("r9") _, out("r10") _, out("r11") _,
        );
    }
    ret
}

#[cfg(not(target_arch = "x86_64"))]
fn int80(_: u32, _: [u32; 5]) -> i32 {
    unreachable!("i386 calls are made on x86_64 only")
}

/// Become an unprivileged process (where root: nobody, with no groups and no capability) and
/// install the filter as such a process must, after no_new_privs.
fn filtered() -> bool {
    // SAFETY: plain calls that change this forked child only.
    unsafe {
        if is_root()
            && (libc::setgroups(0, std::ptr::null()) != 0
                || libc::setgid(NOBODY) != 0
                || libc::setuid(NOBODY) != 0)
        {
            return false;
        }
        libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 && fake_ids::install().is_ok()
    }
}

/// The exit status of `child` run in a forked process (100 + the signal that killed it).
fn in_child(child: impl FnOnce() -> i32) -> i32 {
    // SAFETY: the child runs `child` and leaves with _exit; glibc's malloc works after fork.
    unsafe {
        match libc::fork() {
            0 => libc::_exit(child()),
            pid => {
                let mut status = 0;
                assert_eq!(libc::waitpid(pid, &mut status, 0), pid);
                match libc::WIFEXITED(status) {
                    true => libc::WEXITSTATUS(status),
                    false => 100 + libc::WTERMSIG(status),
                }
            }
        }
    }
}

/// What call `nr` of `abi` did in a child, filtered or not: 0 returned 0 and changed nothing,
/// 1 returned 0 and changed the file's owner or the process's ids, 2 and 3 failed so, 9 the
/// filter could not be installed.
fn outcome(f: &Fixture, abi: &Abi, nr: u32, name: &str, with_filter: bool) -> i32 {
    let got = in_child(|| {
        if with_filter && !filtered() {
            return 9;
        }
        let before = f.state();
        let r = call(abi, nr, f.args(abi, name));
        2 * (r != 0) as i32 + (f.state() != before) as i32
    });
    // the file's owner back, for the next call to change
    if is_root() {
        std::os::unix::fs::chown(&f.path, Some(NOBODY), Some(NOBODY)).unwrap();
    }
    got
}

/// The ABIs this machine's kernel takes: the native one, and i386 on x86_64 where int 0x80
/// works (run in a child: a kernel without ia32 emulation kills the process).
fn abis_here() -> Vec<&'static Abi> {
    let mut abis = Vec::new();
    if cfg!(target_arch = "x86_64") {
        abis.push(&X86_64);
        // SAFETY: getpid only reads the process's id.
        let getpid = in_child(|| (int80(20, [0; 5]) != unsafe { libc::getpid() }) as i32);
        match getpid {
            0 => abis.push(&I386),
            _ => eprintln!("SKIP i386: int 0x80 does not work here ({getpid})"),
        }
    } else if cfg!(target_arch = "aarch64") {
        abis.push(&AARCH64);
    }
    abis
}

#[test]
fn faked_calls_return_0_and_change_nothing() {
    let f = Fixture::new("faked");
    for abi in abis_here() {
        for &(nr, name) in abi.calls {
            let got = outcome(&f, abi, nr, name, true);
            assert_eq!(got, 0, "{} {name} ({nr}) under the filter", abi.name);
        }
    }
}

#[test]
fn unfiltered_each_number_is_its_call() {
    if !is_root() {
        eprintln!("SKIP unfiltered_each_number_is_its_call: needs root");
        return;
    }
    let f = Fixture::new("unfiltered");
    for abi in abis_here() {
        for &(nr, name) in abi.calls {
            let got = outcome(&f, abi, nr, name, false);
            assert_eq!(got, 1, "{} {name} ({nr}) without the filter", abi.name);
        }
    }
}

#[test]
fn other_calls_run_under_the_filter() {
    let abis = abis_here();
    let got = in_child(|| {
        if !filtered() {
            return 9;
        }
        // SAFETY: getpid only reads the process's id.
        let pid = unsafe { libc::getpid() } as i64;
        // getpid of each ABI: 39 on x86_64, 20 on i386, 172 on aarch64
        let nr = |abi: &Abi| match abi.name {
            "x86_64" => 39,
            "i386" => 20,
            _ => 172,
        };
        let wrong = abis.iter().filter(|a| call(a, nr(a), [0; 5]) != pid);
        wrong.count() as i32
    });
    assert_eq!(got, 0, "getpid under the filter");
}
