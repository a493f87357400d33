//! One pull per job for `--container-image=docker://…` (and `REGISTRY#IMAGE`).
//!
//! srun pulls the image once with the configured gpurun (`gpurun pull --into-cache`), after
//! parsing its options and before it asks for an allocation or a step (init_post_opt, as the
//! user), and tells the nodes the file through the step's environment ([`VAR`], set in
//! local_user_init, which srun copies into the step's environment after it); each node's
//! holder then runs that one file instead of pulling. A batch script with `#SBATCH
//! --container-image` has it pulled once before it starts (the batch step's task_init), for
//! all its steps: its sruns find [`VAR`] in their environment. How the nodes reach the file is
//! the site's choice (plugstack.conf `pull=`):
//!
//! * `shared`: they read it where it was put, in a cache on a file system all nodes share
//!   (`pull_cache=`, else gpurun's own cache setting). Later steps of the job reuse it.
//! * `sbcast`: Slurm's own broadcast copies it to node-local storage (`sbcast_dir=`): to all the
//!   job's nodes where the job exists already (srun in an allocation, the batch script), else to
//!   the step's nodes once srun has made the job. A copy srun sent is removed when its step ends,
//!   the batch script's by the job's epilog, which also removes what a step killed hard left.
//! * `node`: every node pulls for itself, as pyxis + enroot do.
//!
//! Pure decisions (arguments, the variable, names) and the few file and process operations.

use std::ffi::CStr;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};

use crate::sys::seam::{as_user, Creds};

/// srun → the step's nodes: which file the job's pull made. A name starting `SLURM` is kept by
/// Slurm releases whose `srun --export=NONE` passes only Slurm's variables.
pub const VAR: &str = "SLURM_SPANK_GPURUN_IMAGE";

/// Who pulls a registry image, and how the nodes get it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Each node pulls.
    Node,
    /// srun pulls into a cache every node reads.
    Shared,
    /// srun pulls, sbcast copies the file to each node of the step.
    Sbcast,
}

/// The plugstack.conf arguments of this module.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    pub mode: Mode,
    /// The cache srun pulls into (`GPURUN_CACHEDIR` of its gpurun), with `%u` (user name), `%U`
    /// (uid) and `%h` (home) replaced; `None`: gpurun's own setting.
    pub cache: Option<String>,
    /// Where sbcast puts the file on each node.
    pub sbcast_dir: PathBuf,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            mode: Mode::Sbcast,
            cache: None,
            sbcast_dir: PathBuf::from("/var/tmp"),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum JobImageError {
    /// A plugstack.conf argument of this module.
    #[error("{key}={value}: needs an absolute path")]
    NotAbsolute { key: String, value: String },
    #[error("pull={value}: one of shared, sbcast, node")]
    PullMode { value: String },
    #[error("pull_cache={pattern}: %{escape} is not %u, %U, %h or %%")]
    Pattern { pattern: String, escape: String },
    /// The file a step was told to run, refused for `reason`.
    #[error("the image srun sent with sbcast, {}: {reason}", path.display())]
    Sent {
        path: PathBuf,
        #[source]
        reason: Box<JobImageError>,
    },
    #[error("the image srun pulled, {}: {reason}; is it on a file system every node shares? \
             (plugstack.conf pull_cache=, or pull=sbcast)", path.display())]
    Pulled {
        path: PathBuf,
        #[source]
        reason: Box<JobImageError>,
    },
    /// lstat of that file (the path is the enclosing variant's).
    #[error("{}", io_text(source))]
    Stat { source: io::Error },
    #[error("not a regular file")]
    NotRegular,
    #[error("owned by uid {uid}, not the job's user")]
    NotOwner { uid: u32 },
    #[error("others may write it (mode {mode:04o})")]
    OthersWrite { mode: u32 },
    #[error("cannot start {}: {}", program.display(), io_text(source))]
    Start { program: PathBuf, source: io::Error },
    /// gpurun's last line, where no terminal saw its stderr.
    #[error("{line}")]
    PullFailed { line: String },
    #[error("{} pull --into-cache named no image file (is gpurun older than this plugin?)",
        gpurun.display())]
    NoImageFile { gpurun: PathBuf },
    #[error("sbcast of the job's image to {} failed ({status}); plugstack.conf sbcast_dir= names \
             the nodes' directory, pull=shared reads it from a shared file system", dest.display())]
    Sbcast { dest: PathBuf, status: ExitStatus },
    #[error("getrandom failed")]
    Random { source: io::Error },
    #[error("uid {uid} has no entry in the password database (pull_cache=)")]
    NoUser { uid: u32 },
}

/// Why there is no image for the job.
#[derive(Debug)]
pub enum Failure {
    /// `gpurun pull` failed and said why, on srun's stderr (or the batch script's).
    Said,
    Other(JobImageError),
}

impl From<JobImageError> for Failure {
    fn from(e: JobImageError) -> Failure {
        Failure::Other(e)
    }
}

/// The argument names this module takes, for the message about an unknown one.
pub const ARGS: &str = "pull=shared|sbcast|node, pull_cache=DIR, sbcast_dir=DIR";

impl Settings {
    /// Take `key=value` if it is one of this module's arguments (`None`: not one of them).
    pub fn parse_arg(&mut self, key: &str, value: &str) -> Option<Result<(), JobImageError>> {
        let absolute = |v: &str| match v.starts_with('/') {
            true => Ok(v.to_string()),
            false => Err(JobImageError::NotAbsolute {
                key: key.to_string(),
                value: v.to_string(),
            }),
        };
        let r = match key {
            "pull" => match value {
                "node" => Ok(Mode::Node),
                "shared" => Ok(Mode::Shared),
                "sbcast" => Ok(Mode::Sbcast),
                _ => Err(JobImageError::PullMode {
                    value: value.to_string(),
                }),
            }
            .map(|m| self.mode = m),
            "pull_cache" => {
                let v = if value.starts_with("%h") {
                    Ok(value.to_string())
                } else {
                    absolute(value)
                };
                v.and_then(|v| expand(&v, "x", 0, Path::new("/h")).map(|_| v))
                    .map(|v| self.cache = Some(v))
            }
            "sbcast_dir" => absolute(value).map(|v| self.sbcast_dir = PathBuf::from(v)),
            _ => return None,
        };
        Some(r)
    }
}

/// `pattern` with `%u` (user name), `%U` (uid), `%h` (home directory) and `%%` replaced.
pub fn expand(pattern: &str, user: &str, uid: u32, home: &Path) -> Result<String, JobImageError> {
    let mut out = String::new();
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('u') => out.push_str(user),
            Some('U') => out.push_str(&uid.to_string()),
            Some('h') => out.push_str(&home.display().to_string()),
            Some('%') => out.push('%'),
            other => {
                return Err(JobImageError::Pattern {
                    pattern: pattern.to_string(),
                    escape: other.map(String::from).unwrap_or_default(),
                })
            }
        }
    }
    Ok(out)
}

/// What srun pulled for a job: the value of [`VAR`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pulled {
    pub job: u32,
    /// The step whose srun made it; `None`: made for the whole job (by its batch step).
    pub step: Option<u32>,
    /// Copied to the step's nodes by sbcast (else: in a cache every node reads).
    pub sent: bool,
    /// The image as the option gave it, `docker://…`.
    pub reference: String,
    pub path: PathBuf,
}

impl Pulled {
    pub fn encode(&self) -> String {
        let how = if self.sent { "sbcast" } else { "shared" };
        let step = self.step.map_or("job".to_string(), |s| s.to_string());
        format!(
            "1\t{}\t{step}\t{how}\t{}\t{}",
            self.job,
            self.reference,
            self.path.display()
        )
    }

    pub fn decode(s: &str) -> Option<Pulled> {
        let f: Vec<&str> = s.splitn(6, '\t').collect();
        let ["1", job, step, how, reference, path] = f[..] else {
            return None;
        };
        let sent = match how {
            "sbcast" => true,
            "shared" => false,
            _ => return None,
        };
        let step = match step {
            "job" => None,
            s => Some(s.parse().ok()?),
        };
        Some(Pulled {
            job: job.parse().ok()?,
            step,
            sent,
            reference: reference.to_string(),
            path: Some(PathBuf::from(path)).filter(|p| p.is_absolute())?,
        })
    }

    /// Whether step `job.step` with image `reference` runs this file: one in a shared cache
    /// serves every step of its job, a copy sbcast made for one step only that step (other
    /// steps may run on other nodes), one made for the whole job every step.
    pub fn serves(&self, job: u32, step: u32, reference: &str) -> bool {
        let for_step = !self.sent || self.step.is_none_or(|s| s == step);
        self.job == job && self.reference == reference && for_step
    }

    /// The copy sbcast made for `step` alone, which that step removes at its end.
    pub fn copy_of_step(&self, step: u32) -> bool {
        self.sent && self.step == Some(step)
    }
}

/// What srun pulls for a step, given the step's registry reference (`Image::registry`): `None`
/// when nodes pull (a file image, `pull=node`).
pub fn registry_ref<'a>(s: &Settings, reference: Option<&'a str>) -> Option<&'a str> {
    reference.filter(|_| s.mode != Mode::Node)
}

/// The job's file for a step of a registry image (`reference`), if srun pulled one (from the
/// step's environment). Refused,
/// rather than used, when it is not a regular file of the job's user that only they may change.
pub fn for_step(
    env: &[String],
    reference: Option<&str>,
    job: u32,
    step: u32,
    uid: u32,
) -> Result<Option<Pulled>, JobImageError> {
    let Some(reference) = reference else {
        return Ok(None);
    };
    let prefix = format!("{VAR}=");
    let found = env
        .iter()
        .find_map(|e| e.strip_prefix(&prefix))
        .and_then(Pulled::decode)
        .filter(|p| p.serves(job, step, reference));
    let Some(p) = found else {
        return Ok(None);
    };
    let Err(reason) = own_file(&p.path, uid) else {
        return Ok(Some(p));
    };
    let (path, reason) = (p.path, Box::new(reason));
    Err(match p.sent {
        true => JobImageError::Sent { path, reason },
        false => JobImageError::Pulled { path, reason },
    })
}

/// `path` is a regular file (not a link) of `uid`'s that nobody else may write.
fn own_file(path: &Path, uid: u32) -> Result<(), JobImageError> {
    let md = std::fs::symlink_metadata(path).map_err(|source| JobImageError::Stat { source })?;
    if !md.file_type().is_file() {
        return Err(JobImageError::NotRegular);
    }
    if md.uid() != uid {
        return Err(JobImageError::NotOwner { uid: md.uid() });
    }
    if md.mode() & 0o022 != 0 {
        let mode = md.mode() & 0o7777;
        return Err(JobImageError::OthersWrite { mode });
    }
    Ok(())
}

/// An io::Error's text without its "(os error N)", as the user reads it.
fn io_text(e: &io::Error) -> String {
    let t = e.to_string();
    t.split(" (os error").next().unwrap_or(&t).to_string()
}

/// Whose a copy sbcast makes is: one step's, the whole job's (the batch step's pull), or the one
/// step of an srun inside an allocation, sent before that step has an id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CopyFor {
    Step(u32),
    Job,
    Srun,
}

/// The name of the copy sbcast makes for `job`: random, so that nobody can put a file there
/// first; the step's end and the job's epilog find it by its prefix.
pub fn sent_name(dir: &Path, job: u32, whose: CopyFor, random: u64) -> PathBuf {
    let tag = match whose {
        CopyFor::Step(s) => s.to_string(),
        CopyFor::Job => "job".into(),
        CopyFor::Srun => "srun".into(),
    };
    dir.join(format!("gpurun-job.{job}.{tag}.{random:016x}.sqsh"))
}

/// Whether `name` is a copy sbcast made for `job`: for `whose` alone, or with None any of the
/// job's.
pub fn is_sent(name: &str, job: u32, whose: Option<CopyFor>) -> bool {
    let Some(rest) = name
        .strip_prefix(&format!("gpurun-job.{job}."))
        .and_then(|r| r.strip_suffix(".sqsh"))
    else {
        return false;
    };
    let Some((tag, random)) = rest.split_once('.') else {
        return false;
    };
    let whose = match whose {
        Some(CopyFor::Step(s)) => tag == s.to_string(),
        Some(CopyFor::Job) => tag == "job",
        Some(CopyFor::Srun) => tag == "srun",
        None => tag == "job" || tag == "srun" || tag.parse::<u32>().is_ok(),
    };
    whose && random.len() == 16 && random.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The job's image before its step exists, as the user: in srun's init_post_opt (before the
/// allocation, if srun makes one: `job` is then unknown), or in the batch step's user_init,
/// where slurmstepd is not yet the user and `user` says whom to run the pull as. Reused
/// from `env` where the batch step or an outer srun of the job left one that serves every step;
/// else pulled into the cache and, with sbcast and the job known, sent to all the job's nodes
/// (before any step: the launch of one waits for nothing). Also says whether this call sent it.
pub fn early(
    s: &Settings,
    gpurun: &Path,
    reference: &str,
    job: Option<u32>,
    env: &[(String, String)],
    user: Option<&Creds>,
) -> Result<(Pulled, bool), Failure> {
    let earlier = env.iter().find(|(k, _)| k == VAR);
    if let (Some(p), Some(job)) = (earlier.and_then(|(_, v)| Pulled::decode(v)), job) {
        if p.job == job && p.reference == reference && p.step.is_none() {
            return Ok((p, false));
        }
    }
    // SAFETY: plain getter.
    let uid = user.map_or_else(|| unsafe { libc::getuid() }, |c| c.uid);
    let cache = match &s.cache {
        Some(pattern) => {
            let (user, home) = user_and_home(uid)?;
            Some(PathBuf::from(expand(pattern, &user, uid, &home)?))
        }
        None => None,
    };
    let mut pulled = Pulled {
        job: job.unwrap_or(0),
        step: None,
        sent: false,
        reference: reference.to_string(),
        path: pull(gpurun, reference, cache.as_deref(), env, user)?,
    };
    let sent = s.mode == Mode::Sbcast && job.is_some();
    if sent {
        // the batch step's copy serves the whole job; an srun's, sent before its step has an
        // id, its one step
        let whose = if user.is_some() {
            CopyFor::Job
        } else {
            CopyFor::Srun
        };
        pulled.path = send(s, &pulled.path, pulled.job, whose, env, user)?;
        pulled.sent = true;
    }
    Ok((pulled, sent))
}

/// srun's local_user_init, step `job.step` created: what its nodes run. A copy [`early`] sent
/// becomes the step's (removed at its end); one the batch step sent stays the job's. Where srun
/// made the job itself, sbcast sends the file to the step's nodes now, while the step's launch
/// credential ages: Slurm refuses a launch after its `cred_expire` (120 s by default).
pub fn at_launch(
    s: &Settings,
    (mut p, sent_here): (Pulled, bool),
    job: u32,
    step: u32,
    env: &[(String, String)],
) -> Result<Pulled, Failure> {
    if p.sent && p.job == job {
        if sent_here {
            p.step = Some(step);
        }
        return Ok(p);
    }
    p.job = job;
    p.step = None;
    if s.mode == Mode::Sbcast {
        p.path = send(s, &p.path, job, CopyFor::Step(step), env, None)?;
        p.step = Some(step);
        p.sent = true;
    }
    Ok(p)
}

/// sbcast `src` to a new name in `sbcast_dir` on the nodes of `job.step` (of the job when the
/// copy is not a known step's).
fn send(
    s: &Settings,
    src: &Path,
    job: u32,
    whose: CopyFor,
    env: &[(String, String)],
    user: Option<&Creds>,
) -> Result<PathBuf, JobImageError> {
    let dest = sent_name(&s.sbcast_dir, job, whose, random()?);
    let step = match whose {
        CopyFor::Step(s) => Some(s),
        _ => None,
    };
    sbcast(src, &dest, job, step, env, user)?;
    Ok(dest)
}

/// `gpurun pull --into-cache REF`: the cached image's path. In slurmstepd (`user` given) no
/// terminal sees gpurun's stderr: its last line becomes the error the job's task says.
fn pull(
    gpurun: &Path,
    reference: &str,
    cache: Option<&Path>,
    env: &[(String, String)],
    user: Option<&Creds>,
) -> Result<PathBuf, Failure> {
    let mut cmd = Command::new(gpurun);
    if let Some(c) = user {
        as_user(&mut cmd, c);
    }
    cmd.args(["pull", "--into-cache", reference])
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(if user.is_some() {
            Stdio::piped()
        } else {
            Stdio::inherit()
        });
    if let Some(c) = cache {
        cmd.env("GPURUN_CACHEDIR", c);
    }
    let out = cmd.output().map_err(|source| JobImageError::Start {
        program: gpurun.to_path_buf(),
        source,
    })?;
    if !out.status.success() && user.is_some() {
        let line = last_line(&out.stderr);
        return Err(JobImageError::PullFailed { line }.into());
    }
    if !out.status.success() {
        return Err(Failure::Said);
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let path = PathBuf::from(text.lines().last().unwrap_or("").trim());
    if !path.is_absolute() {
        let gpurun = gpurun.to_path_buf();
        return Err(JobImageError::NoImageFile { gpurun }.into());
    }
    Ok(path)
}

/// Slurm's own broadcast: `src` to `dest` on every node of step `job.step` (of the job: `None`).
/// sbcast is taken from srun's directory, where Slurm installs both, else from PATH.
fn sbcast(
    src: &Path,
    dest: &Path,
    job: u32,
    step: Option<u32>,
    env: &[(String, String)],
    user: Option<&Creds>,
) -> Result<(), JobImageError> {
    let beside = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(|d| d.join("sbcast")))
        .filter(|p| p.is_file());
    let prog = beside.unwrap_or_else(|| PathBuf::from("sbcast"));
    let jobid = match step {
        Some(st) => format!("--jobid={job}.{st}"),
        None => format!("--jobid={job}"),
    };
    let mut cmd = Command::new(&prog);
    if let Some(c) = user {
        as_user(&mut cmd, c);
    }
    let st = cmd
        .arg(jobid)
        .arg(src)
        .arg(dest)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .status()
        .map_err(|source| JobImageError::Start {
            program: prog.clone(),
            source,
        })?;
    if !st.success() {
        let dest = dest.to_path_buf();
        return Err(JobImageError::Sbcast { dest, status: st });
    }
    Ok(())
}

/// The last line a program wrote, without gpurun's own prefix (the plugin adds it again).
fn last_line(text: &[u8]) -> String {
    let text = String::from_utf8_lossy(text);
    let line = text.lines().rev().find(|l| !l.trim().is_empty());
    let line = line.unwrap_or("gpurun pull failed").trim();
    line.strip_prefix("gpurun: ").unwrap_or(line).to_string()
}

fn random() -> Result<u64, JobImageError> {
    let mut b = [0u8; 8];
    // SAFETY: writes at most b.len() bytes into b.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    if n != b.len() as isize {
        let source = io::Error::last_os_error();
        return Err(JobImageError::Random { source });
    }
    Ok(u64::from_ne_bytes(b))
}

/// The user's name and home directory, from the password database.
fn user_and_home(uid: u32) -> Result<(String, PathBuf), JobImageError> {
    let mut buf = vec![0u8; 16384];
    // SAFETY: passwd is plain C data (integers and pointers); all zeroes is a valid value.
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let mut res: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: buffers owned here, sizes given; the strings are read before buf goes away.
    let rc =
        unsafe { libc::getpwuid_r(uid, &mut pw, buf.as_mut_ptr().cast(), buf.len(), &mut res) };
    if rc != 0 || res.is_null() {
        return Err(JobImageError::NoUser { uid });
    }
    // SAFETY: getpwuid_r filled these with NUL-terminated strings in `buf`, which outlives them.
    let s = |p: *const libc::c_char| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned();
    Ok((s(pw.pw_name), PathBuf::from(s(pw.pw_dir))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments() {
        let mut s = Settings::default();
        assert_eq!(s.mode, Mode::Sbcast);
        assert!(s.parse_arg("gpurun", "/x").is_none());
        for (k, v, mode) in [
            ("pull", "node", Mode::Node),
            ("pull", "sbcast", Mode::Sbcast),
            ("pull", "shared", Mode::Shared),
        ] {
            s.parse_arg(k, v).unwrap().unwrap();
            assert_eq!(s.mode, mode);
        }
        s.parse_arg("pull_cache", "%h/.cache/gpurun")
            .unwrap()
            .unwrap();
        assert_eq!(s.cache.as_deref(), Some("%h/.cache/gpurun"));
        s.parse_arg("pull_cache", "/lustre/%u/gpurun")
            .unwrap()
            .unwrap();
        s.parse_arg("sbcast_dir", "/local").unwrap().unwrap();
        assert_eq!(s.sbcast_dir, Path::new("/local"));
        for (k, v) in [
            ("pull", "srun"),
            ("pull_cache", "rel/%u"),
            ("pull_cache", "/x/%j"),
            ("pull_cache", "/x/%"),
            ("sbcast_dir", "tmp"),
        ] {
            assert!(s.parse_arg(k, v).unwrap().is_err(), "{k}={v} accepted");
        }
    }

    #[test]
    fn patterns() {
        let h = Path::new("/home/ann");
        assert_eq!(
            expand("/scratch/%u/%U%%", "ann", 1001, h).unwrap(),
            "/scratch/ann/1001%"
        );
        assert_eq!(
            expand("%h/.cache/gpurun", "ann", 1001, h).unwrap(),
            "/home/ann/.cache/gpurun"
        );
        assert!(expand("/x/%q", "ann", 1, h).is_err());
    }

    fn pulled(sent: bool) -> Pulled {
        Pulled {
            job: 42,
            step: Some(3),
            sent,
            reference: "docker://reg:5000/a/b:t".into(),
            path: "/var/tmp/gpurun-job.42.00ff.sqsh".into(),
        }
    }

    #[test]
    fn variable() {
        for sent in [true, false] {
            let mut p = pulled(sent);
            assert_eq!(Pulled::decode(&p.encode()), Some(p.clone()));
            p.step = None;
            assert_eq!(Pulled::decode(&p.encode()), Some(p));
        }
        let mut tabbed = pulled(false);
        tabbed.path = "/x/a\tb.sqsh".into();
        assert_eq!(Pulled::decode(&tabbed.encode()), Some(tabbed));
        for bad in [
            "",
            "1\t42\t3\tshared\tdocker://x",
            "2\t42\t3\tshared\tdocker://x\t/p",
            "1\tx\t3\tshared\tdocker://x\t/p",
            "1\t42\t3\tcopied\tdocker://x\t/p",
            "1\t42\t3\tshared\tdocker://x\trel",
        ] {
            assert_eq!(Pulled::decode(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn which_steps_a_file_serves() {
        let r = "docker://reg:5000/a/b:t";
        let shared = pulled(false);
        assert!(shared.serves(42, 3, r));
        assert!(
            shared.serves(42, 7, r),
            "a shared file serves the job's other steps"
        );
        assert!(!shared.serves(43, 3, r), "another job");
        assert!(
            !shared.serves(42, 3, "docker://reg:5000/a/b:u"),
            "another image"
        );
        let mut sent = pulled(true);
        assert!(sent.serves(42, 3, r));
        assert!(
            !sent.serves(42, 4, r),
            "a copy serves only the step it was sent for"
        );
        assert!(sent.copy_of_step(3) && !sent.copy_of_step(4) && !shared.copy_of_step(3));
        sent.step = None;
        assert!(
            sent.serves(42, 4, r),
            "a copy for the job serves all its steps"
        );
        assert!(!sent.copy_of_step(4), "and no step removes it");
    }

    #[test]
    fn at_launch_names_the_step_that_owns_a_copy() {
        let mut s = Settings::default();
        let env = [];
        // sent by this srun before the step (in an allocation): the step's, removed at its end
        let p = at_launch(&s, (pulled(true), true), 42, 5, &env).unwrap();
        assert_eq!(p.step, Some(5));
        assert!(p.copy_of_step(5));
        // sent by the batch step for the whole job: stays the job's
        let mut job_wide = pulled(true);
        job_wide.step = None;
        let p = at_launch(&s, (job_wide.clone(), false), 42, 5, &env).unwrap();
        assert_eq!(p, job_wide);
        // in a shared cache, pulled before the job existed: serves the job's every step
        s.mode = Mode::Shared;
        let mut cached = pulled(false);
        cached.job = 0;
        let p = at_launch(&s, (cached, false), 43, 1, &env).unwrap();
        assert_eq!((p.job, p.step, p.sent), (43, None, false));
        assert!(p.serves(43, 9, &p.reference));
    }

    #[test]
    fn only_registry_images_unless_nodes_pull() {
        let mut s = Settings::default();
        assert_eq!(registry_ref(&s, Some("docker://x")), Some("docker://x"));
        assert_eq!(registry_ref(&s, None), None);
        s.mode = Mode::Node;
        assert_eq!(registry_ref(&s, Some("docker://x")), None);
    }

    #[test]
    fn the_step_finds_its_file_and_checks_it() {
        let t = tempfile::tempdir().unwrap();
        // SAFETY: getuid only reads the process's id.
        let uid = unsafe { libc::getuid() };
        let r = "docker://reg:5000/a/b:t";
        let mut p = pulled(true);
        p.path = t.path().join("gpurun-job.42.1.sqsh");
        std::fs::write(&p.path, "sqsh").unwrap();
        let env = vec!["A=1".to_string(), format!("{VAR}={}", p.encode())];
        assert_eq!(
            for_step(&env, Some(r), 42, 3, uid).unwrap(),
            Some(p.clone())
        );
        assert_eq!(for_step(&env, Some(r), 42, 4, uid).unwrap(), None);
        assert_eq!(for_step(&env[..1], Some(r), 42, 3, uid).unwrap(), None);
        // a file image: no reference
        assert_eq!(for_step(&env, None, 42, 3, uid).unwrap(), None);
        // another user's, open to others, missing: refused with the reason
        let e = for_step(&env, Some(r), 42, 3, uid + 1)
            .unwrap_err()
            .to_string();
        assert!(e.contains("not the job's user"), "{e}");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&p.path, std::fs::Permissions::from_mode(0o666)).unwrap();
        let e = for_step(&env, Some(r), 42, 3, uid).unwrap_err().to_string();
        assert!(e.contains("others may write"), "{e}");
        std::fs::remove_file(&p.path).unwrap();
        let e = for_step(&env, Some(r), 42, 3, uid).unwrap_err().to_string();
        assert!(e.contains("sbcast") && e.contains("No such file"), "{e}");
    }

    /// A refused file keeps its path and the io::Error, and says the line users read.
    #[test]
    fn a_refused_file_keeps_its_cause() {
        let gone = io::Error::from_raw_os_error(libc::ENOENT);
        let e = JobImageError::Pulled {
            path: "/c/i.sqsh".into(),
            reason: Box::new(JobImageError::Stat { source: gone }),
        };
        assert_eq!(
            e.to_string(),
            "the image srun pulled, /c/i.sqsh: No such file or directory; is it on a file \
             system every node shares? (plugstack.conf pull_cache=, or pull=sbcast)"
        );
        let io = std::error::Error::source(&e).and_then(std::error::Error::source);
        let io = io.and_then(|s| s.downcast_ref::<io::Error>()).unwrap();
        assert_eq!(io.raw_os_error(), Some(libc::ENOENT));
    }

    #[test]
    fn sent_names() {
        let d = Path::new("/var/tmp");
        let a = sent_name(d, 42, CopyFor::Step(3), 0xabc);
        assert_eq!(a, d.join("gpurun-job.42.3.0000000000000abc.sqsh"));
        let j = sent_name(d, 42, CopyFor::Job, 7);
        assert_eq!(j, d.join("gpurun-job.42.job.0000000000000007.sqsh"));
        let r = sent_name(d, 42, CopyFor::Srun, 8);
        assert_eq!(r, d.join("gpurun-job.42.srun.0000000000000008.sqsh"));
        let name = |p: &PathBuf| p.file_name().unwrap().to_str().unwrap().to_string();
        let (step3, step4) = (Some(CopyFor::Step(3)), Some(CopyFor::Step(4)));
        for (n, job, whose, want) in [
            (name(&a), 42, step3, true),
            (name(&a), 42, step4, false),
            (name(&a), 42, None, true),
            (name(&a), 4, None, false),
            (name(&j), 42, None, true),
            (name(&j), 42, step3, false),
            (name(&j), 42, Some(CopyFor::Job), true),
            (name(&r), 42, Some(CopyFor::Srun), true),
            (name(&r), 42, Some(CopyFor::Job), false),
            (name(&r), 42, None, true),
            ("gpurun-job.42.3.link.sqsh".into(), 42, step3, false),
            (
                "gpurun-job.42.3.0000000000000abc.sqsh.x".into(),
                42,
                step3,
                false,
            ),
            (
                "gpurun-job.421.3.0000000000000abc.sqsh".into(),
                42,
                None,
                false,
            ),
            (
                "gpurun-job.42.x.0000000000000abc.sqsh".into(),
                42,
                None,
                false,
            ),
        ] {
            assert_eq!(is_sent(&n, job, whose), want, "{n} {job} {whose:?}");
        }
    }
}
