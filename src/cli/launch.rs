//! The one place a launch's command line becomes the runtime's description of it (`Launch`):
//! the options, with the configuration's defaults and the global options. The options' own
//! `GPURUN_<FLAG>` variables are clap's (`flag_vars`); GPURUN_BIND comes in the config's binds.

use std::path::PathBuf;

use super::{split_target, ExecArgs, LaunchOpts, RunArgs, ShellArgs};
use crate::config::{Config, Origin, Sourced};
use crate::runtime::plan::{Action, Request};
use crate::runtime::start::{Launch, Settings};

/// What the configuration and the global options (--quiet, --verbose, --debug) say of every
/// launch.
pub fn settings(cfg: &Config, quiet: bool, verbose: bool, debug: bool) -> Settings {
    Settings {
        compression: cfg.compression.value.clone(),
        quiet,
        log: if debug { 2 } else { u8::from(verbose) },
        server_idle: cfg.server_idle(),
    }
}

impl LaunchOpts {
    /// The launch of `image` running `action`; `save` and `state` are the subcommand's own.
    pub fn launch(
        self,
        (image, action): (String, Action),
        save: Option<PathBuf>,
        state: Option<PathBuf>,
        cfg: &Config,
        settings: Settings,
    ) -> Launch {
        let gpu = (self.gpu).opts(&cfg.nv_driver_paths.value, cfg.cdi_spec_dirs());
        Launch {
            request: self.request(cfg),
            image,
            action,
            env_files: self.env_file,
            gpu,
            dry_run: self.dry_run,
            state,
            save,
            settings,
        }
    }

    /// The site's and user's default binds and GPURUN_BIND come first, --bind after (all
    /// apply). --containall is --contain and --cleanenv, in PID and IPC namespaces of its own.
    /// The config's writable_root and overlay_driver come with the request.
    fn request(&self, cfg: &Config) -> Request {
        let from_files = |b: &&Sourced<String>| !matches!(b.from, Origin::Env(_));
        let site_binds = cfg.binds.iter().filter(from_files).map(|b| b.value.clone());
        let env_binds = cfg.binds.iter().filter(|b| !from_files(b));
        let mut binds: Vec<String> = env_binds.map(|b| b.value.clone()).collect();
        binds.extend(self.bind.iter().cloned());
        Request {
            binds,
            // `hold --bind-json`'s, `--tmpfs-json`'s and `--home-json`'s, which main.rs adds
            parsed_binds: Vec::new(),
            parsed_tmpfs: Vec::new(),
            parsed_home: None,
            tmpfs: self.tmpfs.clone(),
            site_binds: site_binds.collect(),
            contain: self.contain || self.containall,
            no_home: self.no_home,
            home: self.home.clone(),
            no_mount: self.no_mount.clone(),
            hostname: self.hostname.clone(),
            pwd: self.pwd.clone(),
            cleanenv: self.cleanenv || self.containall,
            env: self.env.clone(),
            writable_tmpfs: self.writable_tmpfs,
            read_only: self.read_only,
            writable_by_default: cfg.writable_root.value,
            writable: self.writable,
            overlay: self.overlay.clone(),
            overlay_driver: cfg.overlay_driver(),
            own_pid: self.containall || self.pid,
            own_ipc: self.containall || self.ipc,
            net: self.net,
            network: self.network.clone(),
            fakeroot: self.fakeroot,
        }
    }
}

impl ExecArgs {
    /// `exec IMAGE COMMAND…`.
    pub fn launch(self, cfg: &Config, settings: Settings) -> Launch {
        let (image, command) = split_target(&self.target);
        let target = (image, Action::Exec(command));
        (self.opts).launch(target, self.save, None, cfg, settings)
    }
}

impl RunArgs {
    /// `run IMAGE [ARGS…]`.
    pub fn launch(self, cfg: &Config, settings: Settings) -> Launch {
        let (image, args) = split_target(&self.image.target);
        (self.opts).launch((image, Action::Run(args)), None, None, cfg, settings)
    }
}

impl ShellArgs {
    /// `shell IMAGE [ARGS…]`.
    pub fn launch(self, cfg: &Config, settings: Settings) -> Launch {
        let (image, args) = split_target(&self.image.target);
        let target = (image, Action::Shell(self.shell, args));
        (self.opts).launch(target, None, None, cfg, settings)
    }
}
