//! Each option's value parsed, by pyxis's rules: the image, a container's name, variable
//! names, namespaces, booleans.

use std::path::PathBuf;

use super::error::OptionError;

/// Where the image comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Image {
    /// A squashfs file; relative paths are taken from the job's working directory.
    File(PathBuf),
    /// A registry reference, always written `docker://…` for gpurun.
    Registry(String),
    /// `podman://IMAGE`: an image in the user's podman store on the node, which the holder's
    /// gpurun converts there (as pyxis has enroot import it on each node).
    Podman(String),
}

impl Image {
    /// The registry reference, for a registry image.
    pub fn registry(&self) -> Option<&str> {
        match self {
            Image::Registry(r) => Some(r),
            Image::File(_) | Image::Podman(_) => None,
        }
    }
}

/// The namespaces of `--container-unshare`, as pyxis's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unshare {
    /// Its own host name (the node's).
    Uts,
    /// Its own network, loopback only.
    Net,
    /// Its own System V IPC and POSIX message queues, and /dev/shm.
    Ipc,
}

impl Unshare {
    /// The namespace's name under /proc/PID/ns.
    pub fn proc_name(self) -> &'static str {
        match self {
            Unshare::Uts => "uts",
            Unshare::Net => "net",
            Unshare::Ipc => "ipc",
        }
    }

    /// The namespace's name in a sentence, as pyxis says it.
    pub fn title(self) -> &'static str {
        match self {
            Unshare::Uts => "UTS",
            Unshare::Net => "network",
            Unshare::Ipc => "IPC",
        }
    }
}

/// `--container-name=NAME[:FLAGS]`: the container's changes are kept on the node by that name
/// for the job's later steps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Named {
    pub name: String,
    /// `:create`: a container of that name must not exist yet.
    pub create: bool,
    /// Whether a step joins the container while another step runs in it.
    pub join: Join,
}

/// pyxis's flags for a running named container.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Join {
    /// `auto`, `create`: join it where it runs, else start it.
    IfRunning,
    /// `exec`: join it; an error where no step runs in it.
    Must,
    /// `no_exec`: start it anew from its kept state, never join.
    Never,
}

/// pyxis's rules: a path starts with `/` or `.`; `REGISTRY#IMAGE` is enroot's registry form;
/// anything else is a registry reference.
pub fn parse_image(s: &str) -> Result<Image, OptionError> {
    if s.starts_with('/') || s.starts_with('.') {
        return Ok(Image::File(PathBuf::from(s)));
    }
    if s.contains(char::is_whitespace) {
        return Err(OptionError::ImageSpace { value: s.into() });
    }
    if let Some((scheme, rest)) = s.split_once("://") {
        return match scheme {
            // enroot's URI form, docker://[REGISTRY#]IMAGE, as pyxis users write it too
            "docker" if rest.contains('#') => parse_image(rest),
            "docker" => Ok(Image::Registry(s.to_string())),
            "podman" if !rest.is_empty() => Ok(Image::Podman(s.to_string())),
            "podman" => Err(OptionError::ImagePodman { value: s.into() }),
            "dockerd" => Err(OptionError::ImageDockerd { value: s.into() }),
            _ => Err(OptionError::ImageScheme { value: s.into() }),
        };
    }
    match s.split_once('#') {
        Some((reg, _)) if reg.contains('@') => {
            Err(OptionError::ImageCredentials { value: s.into() })
        }
        Some((reg, img)) if !reg.is_empty() && !img.is_empty() => {
            Ok(Image::Registry(format!("docker://{reg}/{img}")))
        }
        Some(_) => Err(OptionError::ImageRegistry { value: s.into() }),
        None => Ok(Image::Registry(format!("docker://{s}"))),
    }
}

/// pyxis's `NAME[:FLAGS]`.
pub fn parse_name(s: &str) -> Result<Named, OptionError> {
    let (name, flag) = s.split_once(':').unwrap_or((s, "auto"));
    if name.is_empty() || name.contains('/') || name.contains("..") || name == "." {
        return Err(OptionError::Name { value: s.into() });
    }
    let (create, join) = match flag {
        "auto" => (false, Join::IfRunning),
        "create" => (true, Join::IfRunning),
        "exec" => (false, Join::Must),
        "no_exec" => (false, Join::Never),
        f => {
            return Err(OptionError::NameFlag {
                value: s.into(),
                flag: f.into(),
            })
        }
    };
    Ok(Named {
        name: name.to_string(),
        create,
        join,
    })
}

/// Variable names, comma separated; an empty one (`FOO,`) is an error, as in pyxis.
pub fn parse_env_names(s: &str) -> Result<Vec<String>, OptionError> {
    s.split(',')
        .map(str::trim)
        .map(|n| {
            let ok = !n.is_empty()
                && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !n.starts_with(|c: char| c.is_ascii_digit());
            if ok {
                Ok(n.to_string())
            } else if n.is_empty() {
                Err(OptionError::EnvEmpty { value: s.into() })
            } else {
                Err(OptionError::EnvName { name: n.into() })
            }
        })
        .collect()
}

/// `--container-unshare`'s namespaces: pyxis takes net, ipc and uts.
pub fn parse_unshare(s: &str) -> Result<Vec<Unshare>, OptionError> {
    let mut out = Vec::new();
    for ns in s.split(',').map(str::trim) {
        let one = match ns {
            "uts" => Unshare::Uts,
            "net" => Unshare::Net,
            "ipc" => Unshare::Ipc,
            "" => return Err(OptionError::UnshareEmpty { value: s.into() }),
            _ => {
                return Err(OptionError::UnshareUnknown {
                    value: s.into(),
                    ns: ns.into(),
                })
            }
        };
        if !out.contains(&one) {
            out.push(one);
        }
    }
    Ok(out)
}

/// pyxis's booleans (its variables and plugstack.conf arguments).
pub fn parse_bool(v: &str) -> Option<bool> {
    match v {
        "1" | "true" | "yes" | "y" => Some(true),
        "0" | "false" | "no" | "n" => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::super::container_opts::ContainerOpts;
    use super::super::table::NAME;
    use super::super::test_util::refused;
    use super::*;
    fn reg(s: &str) -> Result<Image, OptionError> {
        Ok(Image::Registry(s.into()))
    }

    fn file(s: &str) -> Result<Image, OptionError> {
        Ok(Image::File(s.into()))
    }

    fn podman(s: &str) -> Result<Image, OptionError> {
        Ok(Image::Podman(s.into()))
    }

    #[test]
    fn images() {
        let table: &[(&str, Result<Image, OptionError>)] = &[
            ("/scratch/pytorch.sqsh", file("/scratch/pytorch.sqsh")),
            ("./img.sqsh", file("./img.sqsh")),
            ("../img.sqsh", file("../img.sqsh")),
            ("ubuntu:22.04", reg("docker://ubuntu:22.04")),
            (
                "nvcr.io#nvidia/pytorch:24.05-py3",
                reg("docker://nvcr.io/nvidia/pytorch:24.05-py3"),
            ),
            (
                "docker://127.0.0.1:5000#nvidia/cuda:12.5",
                reg("docker://127.0.0.1:5000/nvidia/cuda:12.5"),
            ),
            (
                "docker://nvcr.io/nvidia/pytorch:24.05-py3",
                reg("docker://nvcr.io/nvidia/pytorch:24.05-py3"),
            ),
            ("alpine@sha256:abcd", reg("docker://alpine@sha256:abcd")),
            // As written: the node's gpurun converts it from the user's podman store there.
            (
                "podman://localhost/app:v1",
                podman("podman://localhost/app:v1"),
            ),
            ("podman://ubuntu", podman("podman://ubuntu")),
        ];
        for (input, want) in table {
            let want = want.as_ref().map_err(|e| e.to_string());
            assert_eq!(
                parse_image(input).as_ref().map_err(|e| e.to_string()),
                want,
                "{input}"
            );
        }
        for bad in [
            "user@nvcr.io#nvidia/pytorch",
            "#x",
            "nvcr.io#",
            "http://x/y",
            "a b",
            "podman://",
            "podman://a b",
        ] {
            assert!(parse_image(bad).is_err(), "{bad} accepted");
        }
        let e = parse_image("dockerd://ubuntu").unwrap_err().to_string();
        assert!(
            e.contains("Docker daemon") && e.contains("docker save"),
            "{e}"
        );
        let registry = |s: &str| parse_image(s).unwrap().registry().map(String::from);
        assert_eq!(registry("ubuntu"), Some("docker://ubuntu".into()));
        assert_eq!(registry("/x.sqsh"), None);
        // Not pulled by srun for the job: the store it is in is the node's.
        assert_eq!(registry("podman://localhost/app:v1"), None);
    }

    #[test]
    fn env_names() {
        assert_eq!(
            parse_env_names("PATH, LD_LIBRARY_PATH").unwrap(),
            ["PATH", "LD_LIBRARY_PATH"]
        );
        refused(
            parse_env_names,
            &[
                ("A-B", "not a variable name"),
                ("1X", "not a variable name"),
                ("A=B", "not a variable name"),
                ("FOO,", "an empty name"),
                (",FOO", "an empty name"),
                ("A,,B", "an empty name"),
            ],
        );
    }

    #[test]
    fn unshare() {
        assert_eq!(parse_unshare("uts").unwrap(), [Unshare::Uts]);
        assert_eq!(parse_unshare("uts,uts").unwrap(), [Unshare::Uts]);
        assert_eq!(
            parse_unshare("net, ipc,uts,net").unwrap(),
            [Unshare::Net, Unshare::Ipc, Unshare::Uts]
        );
        refused(
            parse_unshare,
            &[
                ("pid", "unknown namespace \"pid\""),
                ("uts,", "an empty namespace"),
            ],
        );
    }

    #[test]
    fn container_names() {
        let ok = |s: &str| {
            let named = parse_name(s).map_err(|e| e.to_string());
            named.map(|n| (n.name, n.create, n.join))
        };
        for (s, (name, create, join)) in [
            ("c1", ("c1", false, Join::IfRunning)),
            ("c1:auto", ("c1", false, Join::IfRunning)),
            ("c1:exec", ("c1", false, Join::Must)),
            ("c1:no_exec", ("c1", false, Join::Never)),
            ("c1:create", ("c1", true, Join::IfRunning)),
            ("my.box-2", ("my.box-2", false, Join::IfRunning)),
        ] {
            assert_eq!(ok(s), Ok((name.to_string(), create, join)), "{s}");
        }
        for (s, why) in [
            ("a/b", "a name with '/'"),
            ("..", "a name with '/'"),
            ("x..y", "a name with '/'"),
            (":create", "a name with '/'"),
            ("c1:bogus", "unknown flag \"bogus\""),
        ] {
            let e = ok(s).unwrap_err();
            assert!(e.starts_with(&format!("--container-name={s}: ")), "{e}");
            assert!(e.contains(why), "{s}: {e}");
        }
        let mut o = ContainerOpts::default();
        assert!(o.set(NAME, None).is_err());
        o.set(NAME, Some("c1")).unwrap();
        assert!(o.has_container_settings());
    }
}
