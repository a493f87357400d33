//! A seccomp filter under which changing a file's owner, or the process's user and group ids,
//! succeeds and does nothing, as enroot's does. In a user namespace that maps one uid and one
//! gid (gpurun's --fakeroot, the SPANK plugin's --container-remap-root) the kernel refuses those
//! calls for any other id, and package managers stop at the first: dpkg's chown of a file a
//! package owns under another id, apt's drop to its `_apt` user, groupadd. Under the filter the
//! call is skipped and returns 0: no owner changes and no privilege is gained.
//!
//! The calls of x86_64, of i386 (int 0x80: 32-bit programs on x86_64) and of aarch64 are
//! filtered; those of any other ABI, x32's among them, run as they are. The filter never kills.

// Hand-written: seccompiler kills a process on a call of another ABI and has no i386 target;
// libseccomp would load a C library into every srun, which loads the SPANK plugin.

use std::io;
use std::mem::offset_of;

/// The faked calls of one ABI.
pub struct Abi {
    pub name: &'static str,
    /// `seccomp_data.arch` of its calls (AUDIT_ARCH_*, linux/audit.h).
    pub arch: u32,
    /// Each call's number and name, from the kernel's syscall table.
    pub calls: &'static [(u32, &'static str)],
}

/// arch/x86/entry/syscalls/syscall_64.tbl. An x32 call has bit 30 set in its number, so none
/// of these matches one.
pub const X86_64: Abi = Abi {
    name: "x86_64",
    arch: 0xc000_003e,
    calls: &[
        (92, "chown"),
        (93, "fchown"),
        (94, "lchown"),
        (260, "fchownat"),
        (105, "setuid"),
        (106, "setgid"),
        (113, "setreuid"),
        (114, "setregid"),
        (116, "setgroups"),
        (117, "setresuid"),
        (119, "setresgid"),
        (122, "setfsuid"),
        (123, "setfsgid"),
    ],
};

/// arch/x86/entry/syscalls/syscall_32.tbl: the calls with 16-bit ids under their plain names,
/// those with 32-bit ids as *32.
pub const I386: Abi = Abi {
    name: "i386",
    arch: 0x4000_0003,
    calls: &[
        (182, "chown"),
        (95, "fchown"),
        (16, "lchown"),
        (298, "fchownat"),
        (212, "chown32"),
        (207, "fchown32"),
        (198, "lchown32"),
        (23, "setuid"),
        (46, "setgid"),
        (70, "setreuid"),
        (71, "setregid"),
        (81, "setgroups"),
        (164, "setresuid"),
        (170, "setresgid"),
        (138, "setfsuid"),
        (139, "setfsgid"),
        (213, "setuid32"),
        (214, "setgid32"),
        (203, "setreuid32"),
        (204, "setregid32"),
        (206, "setgroups32"),
        (208, "setresuid32"),
        (210, "setresgid32"),
        (215, "setfsuid32"),
        (216, "setfsgid32"),
    ],
};

/// include/uapi/asm-generic/unistd.h: of the chown family aarch64 has fchown and fchownat only.
pub const AARCH64: Abi = Abi {
    name: "aarch64",
    arch: 0xc000_00b7,
    calls: &[
        (54, "fchownat"),
        (55, "fchown"),
        (146, "setuid"),
        (144, "setgid"),
        (145, "setreuid"),
        (143, "setregid"),
        (159, "setgroups"),
        (147, "setresuid"),
        (149, "setresgid"),
        (151, "setfsuid"),
        (152, "setfsgid"),
    ],
};

pub const ABIS: [&Abi; 3] = [&X86_64, &I386, &AARCH64];

// Classic BPF (linux/bpf_common.h): load a word of seccomp_data, compare, return.
pub const LD_W_ABS: u16 = 0x20;
pub const JEQ_K: u16 = 0x15;
pub const RET_K: u16 = 0x06;
pub const NR: u32 = offset_of!(libc::seccomp_data, nr) as u32;
pub const ARCH: u32 = offset_of!(libc::seccomp_data, arch) as u32;
pub const ALLOW: u32 = libc::SECCOMP_RET_ALLOW;
/// SECCOMP_RET_ERRNO with errno 0: the call is not run and returns 0.
pub const FAKE: u32 = libc::SECCOMP_RET_ERRNO;

/// Instructions: the arch load, one jump per ABI, allow; per ABI the number load, one jump per
/// call, allow; the one fake return.
const LEN: usize = {
    let (mut n, mut i) = (ABIS.len() + 3, 0);
    while i < ABIS.len() {
        n += ABIS[i].calls.len() + 2;
        i += 1;
    }
    n
};

/// The filter. Each ABI's jump leads to its block, which compares the call's number with each
/// of its calls and jumps to the fake return on a match; everything else is allowed.
pub static PROGRAM: [libc::sock_filter; LEN] = program();

const fn op(code: u16, k: u32) -> libc::sock_filter {
    libc::sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

/// Jump `jt` instructions ahead when the loaded word is `k`, else on to the next.
const fn jeq(k: u32, jt: usize) -> libc::sock_filter {
    assert!(jt <= u8::MAX as usize, "a jump is 8 bits");
    libc::sock_filter {
        code: JEQ_K,
        jt: jt as u8,
        jf: 0,
        k,
    }
}

const fn program() -> [libc::sock_filter; LEN] {
    let mut p = [op(RET_K, ALLOW); LEN];
    let fake = LEN - 1;
    p[0] = op(LD_W_ABS, ARCH);
    p[fake] = op(RET_K, FAKE);
    let (mut block, mut i) = (ABIS.len() + 2, 0);
    while i < ABIS.len() {
        let calls = ABIS[i].calls;
        p[1 + i] = jeq(ABIS[i].arch, block - (i + 2));
        p[block] = op(LD_W_ABS, NR);
        let mut c = 0;
        while c < calls.len() {
            let at = block + 1 + c;
            p[at] = jeq(calls[c].0, fake - (at + 1));
            c += 1;
        }
        block += calls.len() + 2;
        i += 1;
    }
    p
}

/// Install the filter on the calling thread; the processes it starts inherit it. The thread
/// must have set no_new_privs (PR_SET_NO_NEW_PRIVS) first. Allocates nothing.
pub fn install() -> io::Result<()> {
    let prog = libc::sock_fprog {
        len: LEN as u16,
        filter: PROGRAM.as_ptr() as *mut libc::sock_filter,
    };
    // SPEC_ALLOW: a filter would otherwise turn on the speculative store bypass mitigation on
    // kernels before 5.16 (spec_store_bypass_disable=seccomp), slowing the container's code.
    // Kernels before 4.17 do not know the flag (EINVAL), nor that mitigation.
    let set = |flags: libc::c_ulong| {
        // SAFETY: the kernel copies the program, which `prog` points to, and keeps no pointer.
        let r = unsafe {
            libc::syscall(
                libc::SYS_seccomp,
                libc::SECCOMP_SET_MODE_FILTER,
                flags,
                &prog as *const libc::sock_fprog,
            )
        };
        match r {
            0 => Ok(()),
            _ => Err(io::Error::last_os_error()),
        }
    };
    set(libc::SECCOMP_FILTER_FLAG_SPEC_ALLOW).or_else(|e| match e.raw_os_error() {
        Some(libc::EINVAL) => set(0),
        _ => Err(e),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the kernel's seccomp would answer a call of `arch` numbered `nr`: the program run
    /// by a small interpreter of the three kinds of instruction it uses.
    fn verdict(arch: u32, nr: u32) -> u32 {
        let (mut pc, mut acc) = (0, 0);
        loop {
            let i = PROGRAM[pc];
            pc += 1;
            match (i.code, i.k) {
                (LD_W_ABS, NR) => acc = nr,
                (LD_W_ABS, ARCH) => acc = arch,
                (JEQ_K, k) => pc += usize::from(if acc == k { i.jt } else { i.jf }),
                (RET_K, k) => return k,
                other => panic!("instruction {} is {other:?}", pc - 1),
            }
        }
    }

    fn faked(abi: &Abi, name: &str) -> u32 {
        let found = abi.calls.iter().find(|(_, n)| *n == name);
        found
            .unwrap_or_else(|| panic!("{} has no {name}", abi.name))
            .0
    }

    #[test]
    fn each_abi_fakes_its_calls_and_allows_the_rest() {
        for abi in ABIS {
            for nr in 0..1024 {
                let want = match abi.calls.iter().any(|(n, _)| *n == nr) {
                    true => FAKE,
                    false => ALLOW,
                };
                assert_eq!(verdict(abi.arch, nr), want, "{} call {nr}", abi.name);
            }
        }
    }

    #[test]
    fn verdicts() {
        let (x86_64, i386, aarch64) = (X86_64.arch, I386.arch, AARCH64.arch);
        for (arch, nr, want, what) in [
            (x86_64, 92, FAKE, "chown"),
            (x86_64, 116, FAKE, "setgroups"),
            (x86_64, 90, ALLOW, "chmod"),
            (x86_64, 0, ALLOW, "read"),
            (x86_64, 212, ALLOW, "i386's chown32"),
            (i386, 212, FAKE, "chown32"),
            (i386, 182, FAKE, "chown with 16-bit ids"),
            (i386, 81, FAKE, "setgroups with 16-bit ids"),
            (i386, 92, ALLOW, "i386's truncate, x86_64's chown"),
            (i386, 20, ALLOW, "getpid"),
            (aarch64, 54, FAKE, "fchownat"),
            (aarch64, 159, FAKE, "setgroups"),
            (aarch64, 92, ALLOW, "aarch64's personality"),
            // x32: x86_64's arch, numbers with bit 30 set
            (x86_64, 0x4000_0000 | 92, ALLOW, "x32 chown"),
            (x86_64, 0x4000_0000 | 116, ALLOW, "x32 setgroups"),
            // another ABI (AUDIT_ARCH_ARM: 32-bit programs on aarch64), whatever the number
            (0x4000_0028, 212, ALLOW, "arm's chown32"),
            (0x4000_0028, 92, ALLOW, "arm"),
            (0, 92, ALLOW, "no arch"),
        ] {
            assert_eq!(verdict(arch, nr), want, "{arch:#x} {nr}: {what}");
        }
    }

    #[test]
    fn the_abis_name_every_call_of_the_family_once() {
        let family = [
            "chown",
            "fchown",
            "lchown",
            "fchownat",
            "setuid",
            "setgid",
            "setreuid",
            "setregid",
            "setresuid",
            "setresgid",
            "setfsuid",
            "setfsgid",
            "setgroups",
        ];
        for abi in ABIS {
            let mut nrs: Vec<u32> = abi.calls.iter().map(|(n, _)| *n).collect();
            let mut names: Vec<&str> = abi.calls.iter().map(|(_, n)| *n).collect();
            nrs.sort();
            nrs.dedup();
            names.sort();
            names.dedup();
            assert_eq!(nrs.len(), abi.calls.len(), "{}: a number twice", abi.name);
            assert_eq!(names.len(), abi.calls.len(), "{}: a name twice", abi.name);
        }
        for name in family {
            faked(&X86_64, name);
            faked(&I386, name);
            if name != "fchownat" {
                faked(&I386, &format!("{name}32"));
            }
            if !["chown", "lchown"].contains(&name) {
                faked(&AARCH64, name);
            }
        }
        let counts = ABIS.map(|a| a.calls.len());
        assert_eq!(counts, [13, 25, 11], "a call that is not of the family");
    }

    /// The native ABI's numbers against the libc crate's (the kernel's uapi headers).
    #[test]
    fn native_numbers_are_libcs() {
        #[cfg(target_arch = "x86_64")]
        let (abi, libc_nrs) = (
            &X86_64,
            [
                ("chown", libc::SYS_chown),
                ("fchown", libc::SYS_fchown),
                ("lchown", libc::SYS_lchown),
                ("fchownat", libc::SYS_fchownat),
                ("setuid", libc::SYS_setuid),
                ("setgid", libc::SYS_setgid),
                ("setreuid", libc::SYS_setreuid),
                ("setregid", libc::SYS_setregid),
                ("setgroups", libc::SYS_setgroups),
                ("setresuid", libc::SYS_setresuid),
                ("setresgid", libc::SYS_setresgid),
                ("setfsuid", libc::SYS_setfsuid),
                ("setfsgid", libc::SYS_setfsgid),
            ],
        );
        #[cfg(target_arch = "aarch64")]
        let (abi, libc_nrs) = (
            &AARCH64,
            [
                ("fchown", libc::SYS_fchown),
                ("fchownat", libc::SYS_fchownat),
                ("setuid", libc::SYS_setuid),
                ("setgid", libc::SYS_setgid),
                ("setreuid", libc::SYS_setreuid),
                ("setregid", libc::SYS_setregid),
                ("setgroups", libc::SYS_setgroups),
                ("setresuid", libc::SYS_setresuid),
                ("setresgid", libc::SYS_setresgid),
                ("setfsuid", libc::SYS_setfsuid),
                ("setfsgid", libc::SYS_setfsgid),
            ],
        );
        assert_eq!(libc_nrs.len(), abi.calls.len());
        for (name, nr) in libc_nrs {
            assert_eq!(faked(abi, name) as libc::c_long, nr, "{}", name);
        }
    }

    #[test]
    fn the_program_fits_a_kernel_filter() {
        // BPF_MAXINSNS; and the last instruction returns, so no path runs off the end
        assert!(PROGRAM.len() <= 4096);
        assert_eq!(PROGRAM[LEN - 1].code, RET_K);
    }
}
