//! What the plugin decides as a step's tasks end, as the step ends and at the job's end, per
//! SPANK context: when task_exit stops the holder to save the container, and what exit
//! (slurmstepd) and job_epilog (slurmd) remove as root. Every removal is made of Slurm's items
//! (job, step, uid, gid) and plugstack.conf's directories alone: the job's environment and
//! options are no input of a path root acts on (docs/security.md, "What the plugin does as
//! root"); the tests hold that against hostile options.

use std::path::PathBuf;

use crate::jobimage::{self, CopyFor};
use crate::named;
use crate::options::{ContainerOpts, PluginArgs};
use crate::removal;

/// task_exit, in slurmstepd as each task exits: with --container-save, once the last task of
/// the node (`local_tasks`, Slurm's item) has exited, stop the holder so that it writes the
/// image. `exited` counts the step's exited tasks on the node.
pub fn save_now(opts: &ContainerOpts, exited: &mut u32, local_tasks: Option<u32>) -> bool {
    if opts.save.is_none() {
        return false;
    }
    *exited += 1;
    local_tasks == Some(*exited)
}

/// Slurm's items for a step: with plugstack.conf's arguments, all that what root removes is
/// made of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepIds {
    pub job: u32,
    pub step: u32,
    pub uid: u32,
    pub gid: u32,
}

/// What kind of entries a removal takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The user's regular files in a directory of root's (`sbcast_dir=`).
    Files,
    /// The user's directories, with all they hold, in the user's own directory of containers.
    Dirs,
}

/// Which names in the directory a removal takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Names {
    /// The copy sbcast made for `job.step` alone: named so, or, sent by an srun inside the
    /// allocation before the step had an id, the srun copy of the job's that the step ran
    /// (`srun_copy`: only ever one of the job's own srun copies, removed as the user).
    SentForStep {
        job: u32,
        step: u32,
        srun_copy: Option<String>,
    },
    /// Every copy sbcast made for the job, its steps' too.
    SentForJob { job: u32 },
    /// Every container of the job's: `JOB.*`.
    JobsContainers { job: u32 },
    /// An unnamed step's record, `JOB.JOB.STEP`.
    StepRecord { job: u32, step: u32 },
}

impl Names {
    pub fn accepts(&self, name: &str) -> bool {
        match *self {
            Names::SentForStep {
                job,
                step,
                ref srun_copy,
            } => {
                jobimage::is_sent(name, job, Some(CopyFor::Step(step)))
                    || (srun_copy.as_deref() == Some(name)
                        && jobimage::is_sent(name, job, Some(CopyFor::Srun)))
            }
            Names::SentForJob { job } => jobimage::is_sent(name, job, None),
            Names::JobsContainers { job } => named::is_jobs(name, job),
            Names::StepRecord { job, step } => name == named::step_record(job, step),
        }
    }
}

/// One removal root makes, in a thread whose file-system identity is `uid`/`gid`
/// (removal.rs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Removal {
    pub kind: Kind,
    pub dir: PathBuf,
    pub names: Names,
    pub uid: u32,
    pub gid: u32,
}

impl Removal {
    /// Remove what it names (removal.rs: through a handle on `dir`, never following a link,
    /// only the user's entries). Returns how many went.
    pub fn perform(&self) -> usize {
        let wanted = |n: &str| self.names.accepts(n);
        match self.kind {
            Kind::Files => removal::remove_files(&self.dir, self.uid, self.gid, wanted),
            Kind::Dirs => removal::remove_dirs(&self.dir, self.uid, (self.uid, self.gid), wanted),
        }
    }
}

/// How the ended step ran, as user_init left it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ended {
    /// The file name of the copy sbcast made of the job's image for this step alone.
    pub sent: Option<String>,
    /// The step started its own holder (it joined none).
    pub held: bool,
}

/// exit, in slurmstepd as root once the holder is stopped: the copy sbcast made for this step
/// alone, and the record of an unnamed step's container (no epilog needed for either). A named
/// container's record is the job's and stays for its later steps.
pub fn at_step_end(
    ids: StepIds,
    args: &PluginArgs,
    opts: &ContainerOpts,
    e: Ended,
) -> Vec<Removal> {
    let StepIds {
        job,
        step,
        uid,
        gid,
    } = ids;
    let mut out = Vec::new();
    if let Some(copy) = e.sent {
        out.push(Removal {
            kind: Kind::Files,
            dir: args.job_image.sbcast_dir.clone(),
            names: Names::SentForStep {
                job,
                step,
                srun_copy: Some(copy),
            },
            uid,
            gid,
        });
    }
    if e.held && opts.name.is_none() {
        out.push(Removal {
            kind: Kind::Dirs,
            dir: hold_state::named_containers_dir(&args.containers_dir, uid),
            names: Names::StepRecord { job, step },
            uid,
            gid,
        });
    }
    out
}

/// job_epilog, in slurmd as root (plugstack.conf's arguments come with this call alone): the
/// copies sbcast made for the job, also of steps that ended without their exit callback, and
/// the job's named containers. `gid` is the user's primary group (the epilog's items hold none).
pub fn at_job_end(job: u32, uid: u32, gid: u32, args: &PluginArgs) -> Vec<Removal> {
    vec![
        Removal {
            kind: Kind::Files,
            dir: args.job_image.sbcast_dir.clone(),
            names: Names::SentForJob { job },
            uid,
            gid,
        },
        Removal {
            kind: Kind::Dirs,
            dir: hold_state::named_containers_dir(&args.containers_dir, uid),
            names: Names::JobsContainers { job },
            uid,
            gid,
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::{parse_name, Image, Mount};
    use std::path::Path;

    #[test]
    fn the_last_task_saves() {
        let save = ContainerOpts {
            save: Some("out.sqsh".into()),
            ..Default::default()
        };
        // (save, tasks on the node) -> the answer at each task's exit
        #[rustfmt::skip]
        let table: [(&ContainerOpts, Option<u32>, &[bool]); 5] = [
            (&save, Some(3), &[false, false, true, false]),
            (&save, Some(1), &[true, false]),
            (&save, None, &[false, false]),
            (&ContainerOpts::default(), Some(1), &[false, false]),
            (&ContainerOpts::default(), Some(2), &[false, false]),
        ];
        for (o, tasks, want) in table {
            let mut exited = 0;
            let got: Vec<bool> = (want.iter())
                .map(|_| save_now(o, &mut exited, tasks))
                .collect();
            assert_eq!(got, want, "{:?} {tasks:?}", o.save);
            let counted = if o.save.is_some() { want.len() } else { 0 };
            assert_eq!(exited as usize, counted);
        }
    }

    #[test]
    fn names_each_removal_takes() {
        let sent = |j: u32, s: &str| format!("gpurun-job.{j}.{s}.0123456789abcdef.sqsh");
        let step = |copy: Option<String>| Names::SentForStep {
            job: 7,
            step: 3,
            srun_copy: copy,
        };
        let srun = Some(sent(7, "srun"));
        #[rustfmt::skip]
        let table = [
            (step(None), sent(7, "3"), true),
            (step(None), sent(7, "4"), false),
            (step(None), sent(7, "job"), false),
            (step(None), sent(70, "3"), false),
            (step(None), sent(7, "srun"), false),
            // an srun's copy, sent before its step had an id: the one this step ran only
            (step(srun.clone()), sent(7, "srun"), true),
            (step(srun.clone()), "gpurun-job.7.srun.fedcba9876543210.sqsh".into(), false),
            (step(Some(sent(7, "job"))), sent(7, "job"), false),
            (step(Some("passwd".into())), "passwd".into(), false),
            (Names::SentForJob { job: 7 }, sent(7, "job"), true),
            (Names::SentForJob { job: 7 }, sent(7, "4"), true),
            (Names::SentForJob { job: 7 }, sent(8, "job"), false),
            (Names::SentForJob { job: 7 }, "gpurun-job.7.job.x.sqsh".into(), false),
            (Names::JobsContainers { job: 7 }, "7.c1".into(), true),
            (Names::JobsContainers { job: 7 }, "7.7.3".into(), true),
            (Names::JobsContainers { job: 7 }, "70.c1".into(), false),
            (Names::JobsContainers { job: 7 }, "7.".into(), false),
            (Names::StepRecord { job: 7, step: 3 }, "7.7.3".into(), true),
            (Names::StepRecord { job: 7, step: 3 }, "7.7.30".into(), false),
            (Names::StepRecord { job: 7, step: 3 }, "7.c1".into(), false),
        ];
        for (names, name, want) in table {
            assert_eq!(names.accepts(&name), want, "{names:?} {name}");
        }
    }

    fn args() -> PluginArgs {
        let mut a = PluginArgs {
            containers_dir: "/var/lib/gpurun/containers".into(),
            ..Default::default()
        };
        a.job_image.sbcast_dir = "/var/tmp/sbcast".into();
        a
    }

    /// The copy an srun of the job sent before its step had an id.
    const COPY: &str = "gpurun-job.7.srun.0123456789abcdef.sqsh";

    const IDS: StepIds = StepIds {
        job: 7,
        step: 3,
        uid: 1000,
        gid: 100,
    };

    #[test]
    fn what_a_steps_end_removes() {
        let copy = Removal {
            kind: Kind::Files,
            dir: "/var/tmp/sbcast".into(),
            names: Names::SentForStep {
                job: 7,
                step: 3,
                srun_copy: Some(COPY.into()),
            },
            uid: 1000,
            gid: 100,
        };
        let record = Removal {
            kind: Kind::Dirs,
            dir: "/var/lib/gpurun/containers/1000".into(),
            names: Names::StepRecord { job: 7, step: 3 },
            uid: 1000,
            gid: 100,
        };
        let named = ContainerOpts {
            name: Some(parse_name("c1").unwrap()),
            ..Default::default()
        };
        let unnamed = ContainerOpts::default();
        #[rustfmt::skip]
        let table = [
            (&unnamed, false, true, vec![record.clone()]),
            (&unnamed, true, true, vec![copy.clone(), record.clone()]),
            // a joined step's record is the running step's
            (&unnamed, true, false, vec![copy.clone()]),
            (&unnamed, false, false, vec![]),
            // a named container's record stays for the job's later steps
            (&named, true, true, vec![copy]),
            (&named, false, true, vec![]),
        ];
        for (o, sent, held, want) in table {
            let e = Ended {
                sent: sent.then(|| COPY.to_string()),
                held,
            };
            let got = at_step_end(IDS, &args(), o, e);
            assert_eq!(got, want, "{:?} {sent} {held}", o.name);
        }
    }

    #[test]
    fn what_the_jobs_end_removes() {
        let got = at_job_end(7, 1000, 100, &args());
        let dirs: Vec<_> = got
            .iter()
            .map(|r| (r.kind, r.dir.as_path(), &r.names))
            .collect();
        assert_eq!(
            dirs,
            [
                (
                    Kind::Files,
                    Path::new("/var/tmp/sbcast"),
                    &Names::SentForJob { job: 7 }
                ),
                (
                    Kind::Dirs,
                    Path::new("/var/lib/gpurun/containers/1000"),
                    &Names::JobsContainers { job: 7 }
                ),
            ]
        );
        assert!(got.iter().all(|r| (r.uid, r.gid) == (1000, 100)));
    }

    /// Root acts only where plugstack.conf says, as the job's user, on names made of the job's
    /// ids: whatever paths and names the job's options hold (the job's environment is no input
    /// at all), nothing else is named.
    #[test]
    fn root_removes_only_what_slurm_and_plugstack_name() {
        let hostile = ContainerOpts {
            image: Some(Image::File("/etc/passwd".into())),
            mounts: vec![Mount::Umount("/".into())],
            workdir: Some("/root".into()),
            save: Some("/etc/shadow".into()),
            ..Default::default()
        };
        let mut named = hostile.clone();
        named.name = Some(parse_name("x").unwrap());
        let a = args();
        let own = [
            a.job_image.sbcast_dir.clone(),
            hold_state::named_containers_dir(&a.containers_dir, IDS.uid),
        ];
        let others = [
            "passwd",
            "shadow",
            "root",
            "8.c1",
            "7",
            "..",
            ".",
            "gpurun-job.8.job.0123456789abcdef.sqsh",
        ];
        let mut all = at_job_end(IDS.job, IDS.uid, IDS.gid, &a);
        for o in [&hostile, &named] {
            for (sent, held) in [(true, true), (true, false), (false, true)] {
                let sent = sent.then(|| "gpurun-job.7.srun.0123456789abcdef.sqsh".to_string());
                all.extend(at_step_end(IDS, &a, o, Ended { sent, held }));
            }
        }
        assert_eq!(all.len(), 2 + 4 + 2);
        for r in &all {
            assert!(own.contains(&r.dir), "{r:?}");
            assert_eq!((r.uid, r.gid), (IDS.uid, IDS.gid), "{r:?}");
            for n in others {
                assert!(!r.names.accepts(n), "{r:?} takes {n}");
            }
            let job = match r.names {
                Names::SentForStep { job, step, .. } | Names::StepRecord { job, step } => {
                    assert_eq!(step, IDS.step);
                    job
                }
                Names::SentForJob { job } | Names::JobsContainers { job } => job,
            };
            assert_eq!(job, IDS.job);
        }
    }

    /// The removals as performed (removal.rs, as the test's own user): only the job's
    /// directories go, and only the owner's.
    #[test]
    fn performed_in_the_users_directory() {
        // SAFETY: getuid and getgid only read the process's ids.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        let t = tempfile::tempdir().unwrap();
        let d = hold_state::named_containers_dir(t.path(), uid);
        for n in ["7.c1/overlay/upper", "7.7.3", "7.7.4", "8.c1"] {
            std::fs::create_dir_all(d.join(n)).unwrap();
        }
        let mut a = args();
        a.containers_dir = t.path().into();
        let left = || {
            let mut l: Vec<_> = (std::fs::read_dir(&d).unwrap())
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect();
            l.sort();
            l
        };
        let ids = StepIds { uid, gid, ..IDS };
        let unnamed = ContainerOpts::default();
        let ended = Ended {
            sent: None,
            held: true,
        };
        let [record] = &at_step_end(ids, &a, &unnamed, ended)[..] else {
            panic!("one removal")
        };
        assert_eq!(record.perform(), 1);
        assert_eq!(left(), ["7.7.4", "7.c1", "8.c1"]);
        let jobs = &at_job_end(7, uid, gid, &a)[1];
        let other_user = Removal {
            uid: uid + 1,
            ..jobs.clone()
        };
        assert_eq!(other_user.perform(), 0);
        assert_eq!(jobs.perform(), 2);
        assert_eq!(left(), ["8.c1"]);
    }

    /// As root, the attack on the one name a step's end takes from the job: a step whose
    /// environment names another file as the srun copy it ran (another job's copy, the batch
    /// step's, a link named like an srun copy) gets only this job's own srun copy of that name
    /// removed, never through a link, never another's file.
    #[test]
    fn a_forged_srun_copy_name_removes_nothing_else() {
        // SAFETY: geteuid only reads the process's id.
        if unsafe { libc::geteuid() } != 0 {
            return;
        }
        let (uid, gid) = (4242, 4242);
        // root's and sticky, as /var/tmp
        let sbcast = tempfile::tempdir().unwrap();
        use std::os::unix::fs::PermissionsExt;
        let sticky = std::fs::Permissions::from_mode(0o1777);
        std::fs::set_permissions(sbcast.path(), sticky).unwrap();
        let victim = tempfile::tempdir().unwrap();
        let victim_file = victim.path().join("keep.sqsh");
        std::fs::write(&victim_file, "x").unwrap();
        let name = |j: u32, tag: &str, r: &str| format!("gpurun-job.{j}.{tag}.{r}.sqsh");
        let own = name(7, "srun", "0123456789abcdef");
        let files = [
            own.clone(),
            name(8, "srun", "0123456789abcdef"),
            name(7, "job", "0123456789abcdef"),
        ];
        for f in &files {
            std::fs::write(sbcast.path().join(f), "x").unwrap();
            std::os::unix::fs::chown(sbcast.path().join(f), Some(uid), Some(gid)).unwrap();
        }
        let link = name(7, "srun", "fedcba9876543210");
        std::os::unix::fs::symlink(&victim_file, sbcast.path().join(&link)).unwrap();
        std::os::unix::fs::lchown(sbcast.path().join(&link), Some(uid), Some(gid)).unwrap();
        let mut a = args();
        a.job_image.sbcast_dir = sbcast.path().into();
        let ids = StepIds { uid, gid, ..IDS };
        let forged = [
            files[1].clone(),
            files[2].clone(),
            link.clone(),
            victim_file.display().to_string(),
            format!("../{}/keep.sqsh", victim.path().display()),
        ];
        for f in forged {
            let ended = Ended {
                sent: Some(f.clone()),
                held: false,
            };
            for r in at_step_end(ids, &a, &ContainerOpts::default(), ended) {
                assert_eq!(r.perform(), 0, "{f}");
            }
        }
        assert!(victim_file.exists());
        assert!(files.iter().all(|f| sbcast.path().join(f).exists()));
        let ended = Ended {
            sent: Some(own.clone()),
            held: false,
        };
        let [copy] = &at_step_end(ids, &a, &ContainerOpts::default(), ended)[..] else {
            panic!("one removal")
        };
        assert_eq!(copy.perform(), 1);
        assert!(!sbcast.path().join(&own).exists() && victim_file.exists());
    }
}
