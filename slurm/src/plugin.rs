//! The SPANK ABI: exported symbols, the subset of <slurm/spank.h> used, and the callbacks, each
//! a dispatcher as pyxis's pyxis_dispatch.c: gather what its context gives (Slurm's items, the
//! environment, plugstack.conf's arguments), call the decision (step_start.rs, task.rs,
//! step_end.rs), perform what it returns. Left out of test builds: the `spank_*` symbols only
//! exist inside Slurm's processes.
//!
//! Undefined `spank_*`/`slurm_*` symbols resolve at dlopen() from libslurmfull.so, which srun,
//! sbatch, salloc, slurmd and slurmstepd all link; the plugin must not link libslurm (it does not
//! export them). rustc links cdylibs with BIND_NOW, so only APIs present in Slurm 22.05 are used.
#![allow(non_camel_case_types, non_upper_case_globals)]

use std::ffi::{c_char, c_int, c_uint, CStr, CString};
use std::os::unix::ffi::OsStrExt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use crate::holder::{self, Creds, Spec};
use crate::jobimage;
use crate::join;
use crate::named;
use crate::options::{self, ContainerOpts, PluginArgs, OPTIONS};
use crate::slurmd;
use crate::state::{self, EnvChange, Holder};
use crate::step_end::{self, Ended, Kind, StepIds};
use crate::step_start::{self, Container, Context, Node, Step, StepError, SLURM_BATCH_SCRIPT};
use crate::sys::seam::Linux;
use crate::task::{self, Entered};

include!(concat!(env!("OUT_DIR"), "/slurm_version.rs"));

// What SPANK_PLUGIN(gpurun, 1) defines. The loader reads the symbols' addresses as C strings,
// hence byte arrays; plugin_version must match the running Slurm's major.minor.
#[no_mangle]
pub static plugin_name: [u8; 7] = *b"gpurun\0";
#[no_mangle]
pub static plugin_type: [u8; 6] = *b"spank\0";
#[no_mangle]
pub static plugin_version: c_uint = SLURM_VERSION_NUMBER;
#[no_mangle]
pub static spank_plugin_version: c_uint = 1;

#[repr(C)]
pub struct spank_handle {
    _private: [u8; 0],
}
type spank_t = *mut spank_handle;
type spank_opt_cb_f = Option<unsafe extern "C" fn(c_int, *const c_char, c_int) -> c_int>;

#[repr(C)]
struct spank_option {
    name: *const c_char,
    arginfo: *const c_char,
    usage: *const c_char,
    has_arg: c_int,
    val: c_int,
    cb: spank_opt_cb_f,
}

// enum spank_context
const S_CTX_LOCAL: c_int = 1;
const S_CTX_REMOTE: c_int = 2;
const S_CTX_ALLOCATOR: c_int = 3;
// enum spank_item
const S_JOB_UID: c_int = 0;
const S_JOB_GID: c_int = 1;
const S_JOB_ID: c_int = 2;
const S_JOB_STEPID: c_int = 3;
const S_JOB_LOCAL_TASK_COUNT: c_int = 6;
const S_JOB_ARGV: c_int = 9;
const S_JOB_ENV: c_int = 10;
const S_TASK_ID: c_int = 11;
const S_JOB_SUPPLEMENTARY_GIDS: c_int = 19;
const ESPANK_SUCCESS: c_int = 0;

extern "C" {
    fn spank_option_register(sp: spank_t, opt: *const spank_option) -> c_int;
    fn spank_get_item(sp: spank_t, item: c_int, ...) -> c_int;
    fn spank_setenv(sp: spank_t, var: *const c_char, val: *const c_char, overwrite: c_int)
        -> c_int;
    fn spank_unsetenv(sp: spank_t, var: *const c_char) -> c_int;
    fn spank_context() -> c_int;
    fn slurm_error(fmt: *const c_char, ...);
    fn slurm_info(fmt: *const c_char, ...);
    fn slurm_debug(fmt: *const c_char, ...);
    fn slurm_spank_log(fmt: *const c_char, ...);
}

/// Exit status of a task that cannot be started in its container: "gpurun itself failed", as
/// from `gpurun exec`.
const GPURUN_FAILED: c_int = 125;

/// How long the holder gets to unmount after SIGTERM at step end.
const STOP_GRACE: Duration = Duration::from_secs(10);

/// Per-process plugin state. Each srun/sbatch/slurmstepd loads the plugin afresh; the forked
/// tasks of a step inherit slurmstepd's copy, which is how they find the holder.
#[derive(Default)]
struct Plugin {
    args: PluginArgs,
    opts: ContainerOpts,
    /// Set in user_init: the ready container, or why there is none.
    step: Option<Result<Step, StepError>>,
    /// In the job's extern step: the keeper of the job's image servers.
    keeper: Option<std::process::Child>,
    /// In srun: the job's registry image, pulled before the step (and whether srun sent it).
    pulled: Option<(jobimage::Pulled, bool)>,
    /// In slurmstepd: the step's tasks on this node that have exited.
    exited: u32,
    /// In slurmstepd: this node's slurmd has not loaded the plugin (slurmd.rs).
    slurmd_lacks_plugin: bool,
}

fn plugin() -> MutexGuard<'static, Plugin> {
    static P: OnceLock<Mutex<Plugin>> = OnceLock::new();
    // a panic is caught at the callback boundary; the state stays usable
    P.get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

/// Never let a panic unwind into Slurm's C frames (that would abort srun or slurmstepd).
fn guard(name: &str, f: impl FnOnce() -> c_int) -> c_int {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|_| {
        log_error(&format!("gpurun: internal error (panic) in {name}"));
        -1
    })
}

fn cstring(s: &str) -> CString {
    CString::new(s.replace('\0', " ")).unwrap_or_default()
}

// Messages are always passed as "%s" arguments, never as the format.
fn log_error(msg: &str) {
    let m = cstring(msg);
    // SAFETY: "%s" takes the one argument, a NUL-terminated string alive during the call.
    unsafe { slurm_error(c"%s".as_ptr(), m.as_ptr()) }
}
/// In srun/sbatch: a line on the user's terminal without Slurm's "error:".
fn log_warning(msg: &str) {
    let m = cstring(msg);
    // SAFETY: "%s" takes the one argument, a NUL-terminated string alive during the call.
    unsafe { slurm_info(c"%s".as_ptr(), m.as_ptr()) }
}
fn log_debug(msg: &str) {
    let m = cstring(msg);
    // SAFETY: "%s" takes the one argument, a NUL-terminated string alive during the call.
    unsafe { slurm_debug(c"%s".as_ptr(), m.as_ptr()) }
}
/// In a task this reaches the job's stderr as one line, without Slurm's "error:" noise.
fn log_user(msg: &str) {
    let m = cstring(msg);
    // SAFETY: "%s" takes the one argument, a NUL-terminated string alive during the call.
    unsafe { slurm_spank_log(c"%s".as_ptr(), m.as_ptr()) }
}

fn item_u32(sp: spank_t, item: c_int) -> Option<u32> {
    let mut v: u32 = 0;
    // SAFETY: the u32 items take one uint32_t* to write; `v` outlives the call.
    (unsafe { spank_get_item(sp, item, &mut v as *mut u32) } == ESPANK_SUCCESS).then_some(v)
}

/// The job's (or, in a task, the task's) environment.
fn job_env(sp: spank_t) -> Vec<String> {
    let mut env: *mut *mut c_char = std::ptr::null_mut();
    // SAFETY: S_JOB_ENV takes one char*** to write; `env` outlives the call.
    if unsafe { spank_get_item(sp, S_JOB_ENV, &mut env as *mut _) } != ESPANK_SUCCESS
        || env.is_null()
    {
        return Vec::new();
    }
    let mut out = Vec::new();
    // SAFETY: Slurm hands out its NULL-terminated env array, valid during the callback.
    unsafe {
        let mut p = env;
        while !(*p).is_null() {
            out.push(CStr::from_ptr(*p).to_string_lossy().into_owned());
            p = p.add(1);
        }
    }
    out
}

fn job_creds(sp: spank_t) -> Result<Creds, StepError> {
    let item = |what| StepError::NoItem { what };
    let uid = item_u32(sp, S_JOB_UID).ok_or(item("the job's uid"))?;
    let gid = item_u32(sp, S_JOB_GID).ok_or(item("the job's gid"))?;
    let mut gids: *mut libc::gid_t = std::ptr::null_mut();
    let mut n: c_int = 0;
    let mut groups = Vec::new();
    // SAFETY: S_JOB_SUPPLEMENTARY_GIDS takes a gid_t** and an int*; both outlive the call.
    if unsafe {
        spank_get_item(
            sp,
            S_JOB_SUPPLEMENTARY_GIDS,
            &mut gids as *mut _,
            &mut n as *mut c_int,
        )
    } == ESPANK_SUCCESS
        && !gids.is_null()
    {
        // SAFETY: Slurm's array of n gids.
        groups.extend_from_slice(unsafe { std::slice::from_raw_parts(gids, n.max(0) as usize) });
    }
    if !groups.contains(&gid) {
        groups.push(gid);
    }
    Ok(Creds { uid, gid, groups })
}

/// The job and step where the step's tasks may run in a container (step_start.rs).
fn container_step(sp: spank_t) -> Option<(u32, u32)> {
    let job = item_u32(sp, S_JOB_ID)?;
    let step = item_u32(sp, S_JOB_STEPID)?;
    step_start::container_step(step).then_some((job, step))
}

/// Which SPANK context this is.
fn context() -> Context {
    // SAFETY: spank_context takes no arguments and only reads Slurm's own state.
    match unsafe { spank_context() } {
        S_CTX_LOCAL => Context::Local,
        S_CTX_REMOTE => Context::Remote,
        S_CTX_ALLOCATOR => Context::Allocator,
        _ => Context::Other,
    }
}

/// The step's program: in the batch step, the script in slurmd's spool directory.
fn job_argv0(sp: spank_t) -> Option<PathBuf> {
    let mut argc: c_int = 0;
    let mut argv: *mut *mut c_char = std::ptr::null_mut();
    // SAFETY: S_JOB_ARGV takes an int* and a char***; both outlive the call.
    let rc = unsafe { spank_get_item(sp, S_JOB_ARGV, &mut argc as *mut c_int, &mut argv) };
    if rc != ESPANK_SUCCESS || argc < 1 || argv.is_null() {
        return None;
    }
    // SAFETY: Slurm's argv of argc entries, valid during the callback.
    let first = unsafe { *argv };
    (!first.is_null()).then(|| {
        // SAFETY: checked non-null; Slurm's NUL-terminated argv[0], valid during the callback.
        let s = unsafe { CStr::from_ptr(first) };
        PathBuf::from(std::ffi::OsStr::from_bytes(s.to_bytes()))
    })
}

struct SyncOpts([spank_option; OPTIONS.len()]);
// SAFETY: read-only after construction: pointers to 'static C string literals and a function.
unsafe impl Sync for SyncOpts {}
// SAFETY: as Sync above: nothing in it is ever written or freed.
unsafe impl Send for SyncOpts {}

static SPANK_OPTIONS: OnceLock<SyncOpts> = OnceLock::new();

fn spank_options() -> &'static SyncOpts {
    SPANK_OPTIONS.get_or_init(|| {
        SyncOpts(std::array::from_fn(|i| {
            let o = &OPTIONS[i];
            spank_option {
                name: o.name.as_ptr(),
                arginfo: o.arginfo.map_or(std::ptr::null(), CStr::as_ptr),
                usage: o.usage.as_ptr(),
                has_arg: c_int::from(o.arginfo.is_some()),
                val: i as c_int,
                cb: Some(option_cb),
            }
        }))
    })
}

/// Runs in srun/sbatch/salloc while they parse the command line (errors end the command there,
/// before anything is submitted) and again in slurmstepd (remote = 1).
unsafe extern "C" fn option_cb(val: c_int, optarg: *const c_char, remote: c_int) -> c_int {
    guard("option", || {
        // SAFETY: checked non-null; Slurm's NUL-terminated argument, valid during the callback.
        let arg = (!optarg.is_null()).then(|| unsafe { CStr::from_ptr(optarg) }.to_string_lossy());
        match plugin().opts.set(val as usize, arg.as_deref()) {
            Ok(()) => 0,
            Err(e) => {
                if remote == 0 {
                    log_error(&format!("gpurun: {e}"));
                }
                -1
            }
        }
    })
}

fn plugin_args(ac: c_int, av: *mut *mut c_char) -> Vec<String> {
    (0..ac.max(0) as usize)
        .map(|i| {
            // SAFETY: Slurm's `ac` plugstack.conf arguments, NUL-terminated, valid during the callback.
            unsafe { CStr::from_ptr(*av.add(i)) }
                .to_string_lossy()
                .into_owned()
        })
        .collect()
}

/// Every context. Registers the options (spank_option_register, unlike an exported table, also
/// works for sbatch and salloc) and reads the plugstack.conf arguments.
#[no_mangle]
pub unsafe extern "C" fn slurm_spank_init(sp: spank_t, ac: c_int, av: *mut *mut c_char) -> c_int {
    guard("init", || {
        let args = plugin_args(ac, av);
        match options::parse_plugin_args(args.iter().map(String::as_str)) {
            Ok(a) => plugin().args = a,
            Err(e) => {
                log_error(&format!("gpurun: plugstack.conf: {e}"));
                return -1;
            }
        }
        // SAFETY: spank_context takes no arguments and only reads Slurm's own state.
        let ctx = unsafe { spank_context() };
        if ![S_CTX_LOCAL, S_CTX_REMOTE, S_CTX_ALLOCATOR].contains(&ctx) {
            return 0;
        }
        for o in &spank_options().0 {
            // SAFETY: a handle Slurm gave this callback, and an option table that is never freed.
            if unsafe { spank_option_register(sp, o) } != ESPANK_SUCCESS {
                log_error(
                    "gpurun: cannot register the --container-* options (another plugin has them?)",
                );
                return -1;
            }
        }
        0
    })
}

/// After option parsing: the `PYXIS_CONTAINER_*` variables (step_start.rs `init_post_opt`);
/// then srun pulls the job's image, slurmstepd prepares the node.
#[no_mangle]
pub unsafe extern "C" fn slurm_spank_init_post_opt(
    sp: spank_t,
    _ac: c_int,
    _av: *mut *mut c_char,
) -> c_int {
    guard("init_post_opt", || {
        let mut p = plugin();
        let ctx = context();
        let job = (ctx == Context::Remote)
            .then(|| state::split_env(job_env(sp).iter().map(String::as_str)));
        let var = |k: &str| match &job {
            Some(env) => env.get(k).cloned(),
            None => std::env::var(k).ok(),
        };
        let after = match step_start::init_post_opt(ctx, &mut p.opts, &var) {
            Ok(after) => after,
            Err(line) => {
                log_error(&line.to_string());
                return -1;
            }
        };
        after.warnings.iter().for_each(|w| log_warning(w));
        match after.next {
            step_start::AfterOpts::Pull => srun_pull(&mut p),
            step_start::AfterOpts::PrepareNode => {
                prepare_containers_dir(sp, &p.args);
                p.slurmd_lacks_plugin = slurmd::lacks_plugin() == Some(true);
                0
            }
            step_start::AfterOpts::Nothing => 0,
        }
    })
}

/// In slurmstepd, as root, before the holder starts: the user's directory of named containers
/// and step records (named.rs `prepare`). Without it named containers fail with gpurun's line
/// and joins of unnamed steps are not offered; the step itself runs.
fn prepare_containers_dir(sp: spank_t, a: &PluginArgs) {
    let (Some(uid), Some(gid)) = (item_u32(sp, S_JOB_UID), item_u32(sp, S_JOB_GID)) else {
        return;
    };
    if let Err(e) = named::prepare(&a.containers_dir, uid, gid) {
        log_error(&format!("gpurun: plugstack.conf: {e}"));
    }
}

/// Remote context, once per step on each node, before any task exists (uid 0, euid = user):
/// join a running named container, or start the holder. The tasks wait for its container in
/// task_init, so it is built while slurmstepd prepares and forks the tasks (waiting here put
/// the whole build before them). A failure is kept and reported by the tasks (a failing
/// user_init makes srun print "launch failed" and still exit 0).
#[no_mangle]
pub unsafe extern "C" fn slurm_spank_user_init(
    sp: spank_t,
    _ac: c_int,
    _av: *mut *mut c_char,
) -> c_int {
    guard("user_init", || {
        let Some((job, step)) = container_step(sp) else {
            return 0;
        };
        let mut p = plugin();
        if !step_start::wants_container(&p.opts) {
            return 0;
        }
        let env = state::split_env(job_env(sp).iter().map(String::as_str));
        let uid = item_u32(sp, S_JOB_UID);
        let joined = step_start::join_running(&p.opts, &p.args, job, uid, env, &Host);
        let result = joined.unwrap_or_else(|| start_holder(sp, &p, job, step));
        if let Err(e) = &result {
            log_debug(&format!("gpurun: step {job}.{step}: {e}"));
        }
        p.step = Some(result);
        0
    })
}

/// The node as the step-start decisions ask it: its file system and /proc.
struct Host;

impl Node for Host {
    fn is_dir(&self, p: &Path) -> bool {
        p.is_dir()
    }
    fn exists(&self, p: &Path) -> bool {
        p.exists()
    }
    fn image_kept(&self, base: &Path, uid: u32, name: &str) -> bool {
        named::image_kept(base, uid, name)
    }
    fn find_running(&self, base: &Path, uid: u32, name: &str) -> Option<Holder> {
        named::find_running(base, uid, name)
    }
    fn own_ns(&self, pid: i32, ns: &str) -> bool {
        join::own_ns(&Linux, pid, ns)
    }
}

/// Start the step's holder as the job's user, with what step_start.rs decides from the job's
/// environment, Slurm's items and the node.
fn start_holder(sp: spank_t, p: &Plugin, job: u32, step: u32) -> Result<Step, StepError> {
    let mut env = job_env(sp);
    let map = state::split_env(env.iter().map(String::as_str));
    if step_start::wants_pmix_dir(&map) {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
        if let Some(dir) = state::pmix_dir_in_maps(&maps, job, step) {
            env.push(format!("PMIX_SERVER_TMPDIR={dir}"));
        }
    }
    let creds = job_creds(sp)?;
    let batch = step == SLURM_BATCH_SCRIPT;
    let script = match batch {
        true => Some(job_argv0(sp).ok_or(StepError::NoItem {
            what: "the batch script's path",
        })?),
        false => None,
    };
    let opts = step_start::holder_opts(&p.opts, &p.args, script);
    let batch_image = match batch {
        true => batch_pull(sp, p, job, &creds, &mut env)?,
        false => None,
    };
    let found = jobimage::for_step(&env, registry(&opts), job, step, creds.uid)?;
    if let Some(f) = &found {
        log_debug(&format!(
            "gpurun: step {job}.{step}: the job's image {}",
            f.path.display()
        ));
    }
    let (opts, sent) = step_start::with_job_image(opts, &mut env, found.as_ref(), step);
    let base = &p.args.containers_dir;
    let kept = |name: &str| Host.image_kept(base, creds.uid, name);
    let (opts, sent) = step_start::named_registry_image(opts, sent, job, kept);
    let dir = holder::make_dir(Path::new("/tmp"), &format!("{job}.{step}"))
        .map_err(|source| StepError::StateDir { source })?;
    let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let facts = step_start::StepFacts {
        job,
        step,
        uid: creds.uid,
        env: &map,
        hostname: hostname.trim(),
        state: &holder::state_path(&dir),
        batch_image: batch_image.is_some(),
        slurmd_lacks_plugin: p.slurmd_lacks_plugin,
    };
    let inputs = match step_start::holder_inputs(&opts, &p.args, &facts, env, &Host) {
        Ok(i) => i,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&dir);
            return Err(e);
        }
    };
    let gpurun = &p.args.gpurun;
    log_debug(&format!(
        "gpurun: {} {}",
        gpurun.display(),
        inputs.args.join(" ")
    ));
    let spec = Spec {
        gpurun,
        args: &inputs.args,
        env: &inputs.env,
        cwd: &inputs.cwd,
        creds: &creds,
        dir: &dir,
        timeout: p.args.timeout,
        log_stdout: inputs.log_stdout,
    };
    match holder::start(&Linux, &spec) {
        Ok(running) => Ok(Step {
            container: Container::Held(running),
            env: map,
            sent,
            job_image: batch_image,
            notice: inputs.notice,
        }),
        Err(e) => {
            let _ = std::fs::remove_dir_all(&dir);
            Err(e.into())
        }
    }
}

/// The step's registry reference, for a registry image.
fn registry(opts: &ContainerOpts) -> Option<&str> {
    opts.image.as_ref().and_then(options::Image::registry)
}

/// srun, after its options, before it asks for an allocation or a step (so that neither waits
/// for the pull): a registry image pulled once for the job (jobimage.rs). A failure ends srun
/// before anything is submitted.
fn srun_pull(p: &mut Plugin) -> c_int {
    let Some(reference) = jobimage::registry_ref(&p.args.job_image, registry(&p.opts)) else {
        return 0;
    };
    // srun in an allocation (sbatch, salloc) runs its steps in that job
    let job = std::env::var("SLURM_JOB_ID")
        .ok()
        .and_then(|j| j.parse().ok());
    let env: Vec<(String, String)> = std::env::vars().collect();
    let a = &p.args;
    match jobimage::early(&a.job_image, &a.gpurun, reference, job, &env, None) {
        Ok(pulled) => {
            p.pulled = Some(pulled);
            0
        }
        Err(f) => {
            say_failure(f);
            -1
        }
    }
}

/// srun's one line for a job image it has not, unless gpurun's own line above said why.
fn say_failure(f: jobimage::Failure) {
    if let jobimage::Failure::Other(e) = f {
        log_error(&format!("gpurun: {e}"));
    }
}

/// Local context (srun, as the user), after the step is created and before its tasks launch:
/// name the job's image (srun_pull) in the step's environment, which srun copies after this
/// callback; sent to the step's nodes first where srun made the job itself. A failure ends srun
/// here ("Failure in local plugin stack").
#[no_mangle]
pub unsafe extern "C" fn slurm_spank_local_user_init(
    sp: spank_t,
    _ac: c_int,
    _av: *mut *mut c_char,
) -> c_int {
    guard("local_user_init", || {
        let mut p = plugin();
        let Some(pulled) = p.pulled.take() else {
            return 0;
        };
        let (Some(job), Some(step)) = (item_u32(sp, S_JOB_ID), item_u32(sp, S_JOB_STEPID)) else {
            log_error("gpurun: cannot get the job and step id for the job's image");
            return -1;
        };
        let env: Vec<(String, String)> = std::env::vars().collect();
        match jobimage::at_launch(&p.args.job_image, pulled, job, step, &env) {
            Ok(image) => {
                let value = image.encode();
                // SAFETY: srun's other threads do not read the environment during this callback
                // (srun itself sets variables here, in setup_env).
                unsafe {
                    libc::setenv(cstring(jobimage::VAR).as_ptr(), cstring(&value).as_ptr(), 1)
                };
                0
            }
            Err(f) => {
                say_failure(f);
                -1
            }
        }
    })
}

/// The batch step (user_init, before its container): with `#SBATCH
/// --container-image=docker://…`, pull the image once for all the job's steps, as the user (sent
/// to all its nodes with `pull=sbcast`), and name it in the script's environment, where its
/// sruns find it. Returns that value of `jobimage::VAR`.
fn batch_pull(
    sp: spank_t,
    p: &Plugin,
    job: u32,
    creds: &Creds,
    env: &mut Vec<String>,
) -> Result<Option<String>, StepError> {
    let Some(reference) = jobimage::registry_ref(&p.args.job_image, registry(&p.opts)) else {
        return Ok(None);
    };
    let pairs: Vec<(String, String)> = env
        .iter()
        .filter_map(|e| e.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let a = &p.args;
    let pulled = jobimage::early(
        &a.job_image,
        &a.gpurun,
        reference,
        Some(job),
        &pairs,
        Some(creds),
    );
    let value = match pulled {
        Ok((image, _)) => image.encode(),
        Err(jobimage::Failure::Said) => return Err(StepError::NotPulled),
        Err(jobimage::Failure::Other(e)) => return Err(e.into()),
    };
    // SAFETY: NUL-terminated strings that outlive the call; Slurm copies them.
    let rc = unsafe {
        spank_setenv(
            sp,
            cstring(jobimage::VAR).as_ptr(),
            cstring(&value).as_ptr(),
            1,
        )
    };
    if rc != ESPANK_SUCCESS {
        let var = jobimage::VAR;
        return Err(StepError::SetEnv { var, rc });
    }
    env.push(format!("{}={value}", jobimage::VAR));
    Ok(Some(value))
}

/// The job's epilog on each node (slurmd, as root; plugstack.conf arguments come with this call
/// alone): what step_end.rs `at_job_end` names.
#[no_mangle]
pub unsafe extern "C" fn slurm_spank_job_epilog(
    sp: spank_t,
    ac: c_int,
    av: *mut *mut c_char,
) -> c_int {
    guard("job_epilog", || {
        let args = plugin_args(ac, av);
        let Ok(a) = options::parse_plugin_args(args.iter().map(String::as_str)) else {
            return 0;
        };
        if let (Some(job), Some(uid)) = (item_u32(sp, S_JOB_ID), item_u32(sp, S_JOB_UID)) {
            // the epilog's items hold no gid: the user's own group, from the user database
            for r in step_end::at_job_end(job, uid, user_gid(uid), &a) {
                let n = r.perform();
                let what = match r.kind {
                    Kind::Files => "copies of its image",
                    Kind::Dirs => "named containers",
                };
                if n > 0 {
                    log_debug(&format!("gpurun: job {job}: removed {n} {what}"));
                }
            }
        }
        // never fail: a failing epilog drains the node
        0
    })
}

/// The primary group of user `uid` (the user database's; else the nobody group, which owns
/// nothing of the user's).
fn user_gid(uid: u32) -> u32 {
    nix::unistd::User::from_uid(uid.into())
        .ok()
        .flatten()
        .map_or(65534, |u| u.gid.as_raw())
}

/// Remote context, in each forked task, as the user, just before slurmstepd looks up and execs
/// the command: wait for the container, set its environment (task.rs) and move into it.
#[no_mangle]
pub unsafe extern "C" fn slurm_spank_task_init(
    sp: spank_t,
    _ac: c_int,
    _av: *mut *mut c_char,
) -> c_int {
    guard("task_init", || {
        let mut locked = plugin();
        let p = &mut *locked;
        // one line per node, not one per rank
        let first = || {
            let mut task: c_int = 0;
            // SAFETY: S_TASK_ID's one argument is an int* to write; `task` outlives the call.
            unsafe { spank_get_item(sp, S_TASK_ID, &mut task as *mut c_int) };
            task == 0
        };
        let step = match &mut p.step {
            None => return 0,
            Some(Ok(s)) => s,
            Some(Err(e)) => fail_task(first(), &e.to_string()),
        };
        let holder = match step.container.ready() {
            Ok(h) => h,
            Err(e) => fail_task(first(), &e.to_string()),
        };
        if first() {
            if let Some(n) = &step.notice {
                log_user(n);
            }
            if let (true, Container::Held(r)) = (p.opts.entrypoint_log, &step.container) {
                r.output().lines().for_each(log_user);
            }
            record_named(sp, &p.args, &p.opts, &step.container, &holder);
        }
        let task_env = state::split_env(job_env(sp).iter().map(String::as_str));
        let job_image = step.job_image.as_deref();
        let changes = task::env_changes(
            &step.env,
            &holder.env,
            &task_env,
            job_image,
            &p.opts,
            &p.args,
        );
        set_task_env(sp, changes);
        match task::after_enter(&join::enter(&Linux, &holder), &p.opts, &holder.cwd) {
            Entered::Run => {}
            Entered::Warn(line) => log_user(&line),
            Entered::Fail { line, every_task } => fail_task(every_task || first(), &line),
        }
        0
    })
}

/// Apply `changes` to the task's environment; a failure ends the task.
fn set_task_env(sp: spank_t, changes: Vec<EnvChange>) {
    for c in changes {
        let rc = match &c {
            // SAFETY: NUL-terminated strings that outlive the call; Slurm copies them.
            EnvChange::Set(k, v) => unsafe {
                spank_setenv(sp, cstring(k).as_ptr(), cstring(v).as_ptr(), 1)
            },
            // SAFETY: as above, one string.
            EnvChange::Unset(k) => unsafe { spank_unsetenv(sp, cstring(k).as_ptr()) },
        };
        if rc != ESPANK_SUCCESS {
            fail_task(
                true,
                &format!("cannot set the task environment ({c:?}): error {rc}"),
            );
        }
    }
}

/// The first task of a step on a node: say that its container runs, for later steps to join
/// (named.rs) by its name, or an unnamed step's by `JOB.STEP` as with pyxis. A failure only
/// costs that join, so it is said, not fatal.
fn record_named(sp: spank_t, args: &PluginArgs, opts: &ContainerOpts, c: &Container, h: &Holder) {
    let Container::Held(_) = c else {
        return;
    };
    let ids = (
        item_u32(sp, S_JOB_ID),
        item_u32(sp, S_JOB_STEPID),
        item_u32(sp, S_JOB_UID),
    );
    let (Some(job), Some(step), Some(uid)) = ids else {
        return;
    };
    let name = step_start::record_name(opts, job, step);
    if let Err(e) = named::record_running(&args.containers_dir, uid, &name, h) {
        log_user(&format!("gpurun: warning: {e}"));
    }
}

/// End a task that cannot run in its container with gpurun's own exit status, after saying
/// why in one line on the job's stderr. Returning -1 instead would add Slurm's lines
/// ("task_init() failed", "Failed to invoke spank plugin stack") and exit status 1.
fn fail_task(say: bool, msg: &str) -> ! {
    if say {
        log_user(&format!("gpurun: {msg}"));
    }
    // SAFETY: this is the forked task, about to exec; nothing of slurmstepd's needs unwinding
    unsafe { libc::_exit(GPURUN_FAILED) }
}

/// Remote, in the job's extern step (`PrologFlags=contain`; with `task_id` -1): start the keeper
/// of the job's image servers, so that one server per image serves every step of the job on
/// this node and ends with it (runtime/image_server/job_keeper.rs in gpurun). Without an extern step each step's
/// holder starts a server of the step's own.
#[no_mangle]
pub unsafe extern "C" fn slurm_spank_task_post_fork(
    sp: spank_t,
    _ac: c_int,
    _av: *mut *mut c_char,
) -> c_int {
    guard("task_post_fork", || {
        let (Some(job), Some(step_start::SLURM_EXTERN_CONT)) =
            (item_u32(sp, S_JOB_ID), item_u32(sp, S_JOB_STEPID))
        else {
            return 0;
        };
        let mut p = plugin();
        let started =
            job_creds(sp).and_then(|creds| Ok(holder::start_keeper(&p.args.gpurun, job, &creds)?));
        match started {
            Ok(child) => p.keeper = Some(child),
            Err(e) => log_debug(&format!(
                "gpurun: job {job}: no keeper of image servers: {e}"
            )),
        }
        0
    })
}

/// Remote, in slurmstepd as each task exits: with --container-save, stop the holder after the
/// node's last task (step_end.rs `save_now`) and let it write the image. slurmstepd kills what
/// is left in the step (the holder too) before it calls `slurm_spank_exit`.
#[no_mangle]
pub unsafe extern "C" fn slurm_spank_task_exit(
    sp: spank_t,
    _ac: c_int,
    _av: *mut *mut c_char,
) -> c_int {
    guard("task_exit", || {
        let mut locked = plugin();
        let p = &mut *locked;
        let local_tasks = item_u32(sp, S_JOB_LOCAL_TASK_COUNT);
        if !step_end::save_now(&p.opts, &mut p.exited, local_tasks) {
            return 0;
        }
        if let Some(Ok(s)) = p.step.as_mut() {
            s.container.stop(p.args.timeout);
        }
        0
    })
}

/// What a step's end removes as root (step_end.rs `at_step_end`): made of Slurm's items and
/// plugstack.conf's arguments alone.
fn step_leftovers(sp: spank_t, p: &Plugin, s: &Step) {
    let ids = (
        item_u32(sp, S_JOB_ID),
        item_u32(sp, S_JOB_STEPID),
        item_u32(sp, S_JOB_UID),
        item_u32(sp, S_JOB_GID),
    );
    let (Some(job), Some(step), Some(uid), Some(gid)) = ids else {
        return;
    };
    let ids = StepIds {
        job,
        step,
        uid,
        gid,
    };
    let ended = Ended {
        sent: s.sent.clone(),
        held: matches!(s.container, Container::Held(_)),
    };
    for r in step_end::at_step_end(ids, &p.args, &p.opts, ended) {
        r.perform();
    }
}

/// Remote: after the step's tasks have exited, stop the holder (it unmounts the image); in the
/// extern step, at the job's end, the keeper (its servers end with it).
#[no_mangle]
pub unsafe extern "C" fn slurm_spank_exit(sp: spank_t, _ac: c_int, _av: *mut *mut c_char) -> c_int {
    guard("exit", || {
        if context() != Context::Remote {
            return 0;
        }
        let mut p = plugin();
        if let Some(Ok(mut s)) = p.step.take() {
            s.container.stop(STOP_GRACE);
            step_leftovers(sp, &p, &s);
        }
        if let Some(mut k) = p.keeper.take() {
            // SAFETY: a signal to our own child, not yet reaped.
            unsafe { libc::kill(k.id() as libc::pid_t, libc::SIGTERM) };
            let _ = k.wait();
        }
        0
    })
}
