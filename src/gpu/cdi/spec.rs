//! One spec file read and checked against the CDI schema of the version it declares: its kind,
//! its devices' names, and each container edit made plain data (or listed as skipped).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::de::IgnoredAny;
use serde::Deserialize;

use super::types::{
    CdiError, CdiMount, Device, DeviceNode, Edits, Skipped, Spec, SpecError, HOOK_NAMES, VERSIONS,
};

// The format, as the CDI schema and reference library define it: unknown fields are errors.

/// Enough of a spec to know whether it matters: specs of other kinds are not validated.
#[derive(Deserialize)]
struct Head {
    kind: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawSpec {
    cdi_version: String,
    kind: String,
    #[serde(default)]
    annotations: Option<BTreeMap<String, String>>,
    devices: Vec<RawDevice>,
    #[serde(default)]
    container_edits: Option<RawEdits>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawDevice {
    name: String,
    #[serde(default)]
    annotations: Option<BTreeMap<String, String>>,
    container_edits: RawEdits,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawEdits {
    #[serde(default)]
    env: Option<Vec<String>>,
    #[serde(default)]
    device_nodes: Option<Vec<RawNode>>,
    #[serde(default)]
    hooks: Option<Vec<RawHook>>,
    #[serde(default)]
    mounts: Option<Vec<RawMount>>,
    #[serde(default)]
    intel_rdt: Option<IgnoredAny>,
    #[serde(default)]
    additional_gids: Option<Vec<u32>>,
}

/// `major`, `minor`, `fileMode`, `uid` and `gid` are what a runtime with privilege makes the node
/// with; gpurun binds the host's node and reads them only to check their types.
#[allow(dead_code)]
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawNode {
    path: String,
    #[serde(default)]
    host_path: Option<String>,
    #[serde(default, rename = "type")]
    kind: Option<String>,
    #[serde(default)]
    major: Option<i64>,
    #[serde(default)]
    minor: Option<i64>,
    #[serde(default)]
    file_mode: Option<u32>,
    #[serde(default)]
    permissions: Option<String>,
    #[serde(default)]
    uid: Option<u32>,
    #[serde(default)]
    gid: Option<u32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawMount {
    host_path: String,
    container_path: String,
    #[serde(default)]
    options: Option<Vec<String>>,
    #[serde(default, rename = "type")]
    kind: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawHook {
    hook_name: String,
    path: String,
    #[serde(default)]
    args: Option<Vec<String>>,
    #[serde(default)]
    env: Option<Vec<String>>,
    #[serde(default)]
    timeout: Option<i64>,
}

/// Is this file a spec (by its name, as the CDI library decides)?
pub fn is_spec_file(name: &str) -> bool {
    name.ends_with(".json") || name.ends_with(".yaml")
}

/// Deserialize a spec's text, JSON or YAML by the file's name.
fn decode<T: serde::de::DeserializeOwned>(path: &Path, text: &str) -> Result<T, SpecError> {
    if path.extension().is_some_and(|e| e == "json") {
        Ok(serde_json::from_str(text)?)
    } else {
        let mut o = serde_saphyr::Options::default();
        o.with_snippet = false;
        serde_saphyr::from_str_with_options(text, o).map_err(|e| SpecError::Yaml(Box::new(e)))
    }
}

/// The kind a spec file declares (only that is read).
pub fn kind_of(path: &Path, text: &str) -> Result<String, CdiError> {
    decode::<Head>(path, text)
        .map(|h| h.kind)
        .map_err(|source| CdiError::Spec {
            path: path.to_path_buf(),
            source,
        })
}

/// A vendor or class: letters, digits, `_`, `-`, `.`; a letter first, a letter or digit last.
fn check_vendor_or_class(what: &'static str, s: &str, max: usize) -> Result<(), SpecError> {
    let b = s.as_bytes();
    let ok = match b {
        [] => false,
        [first, .., last] => {
            first.is_ascii_alphabetic()
                && last.is_ascii_alphanumeric()
                && b.iter()
                    .all(|c| c.is_ascii_alphanumeric() || b"_-.".contains(c))
        }
        [only] => only.is_ascii_alphabetic(),
    };
    if !ok {
        return Err(SpecError::VendorOrClass {
            what,
            word: s.to_string(),
        });
    }
    if s.len() > max {
        return Err(SpecError::TooLong {
            what,
            word: s.to_string(),
            max,
        });
    }
    Ok(())
}

/// A device name: letters, digits, `_`, `-`, `.`, `:`; a letter or digit first and last.
fn check_device_name(s: &str) -> Result<(), SpecError> {
    let b = s.as_bytes();
    let ends = |c: Option<&u8>| c.is_some_and(u8::is_ascii_alphanumeric);
    if !ends(b.first())
        || !ends(b.last())
        || !b
            .iter()
            .all(|c| c.is_ascii_alphanumeric() || b"_-.:".contains(c))
    {
        return Err(SpecError::DeviceName {
            name: s.to_string(),
        });
    }
    Ok(())
}

/// `VENDOR/CLASS`, checked.
fn split_kind(kind: &str) -> Result<(&str, &str), SpecError> {
    let (vendor, class) = kind.split_once('/').ok_or_else(|| SpecError::NotKind {
        kind: kind.to_string(),
    })?;
    check_vendor_or_class("vendor", vendor, 253)?;
    check_vendor_or_class("class", class, 63)?;
    Ok((vendor, class))
}

/// `VENDOR/CLASS=NAME` → (`VENDOR/CLASS`, `NAME`).
pub fn parse_name(given: &str) -> Result<(String, String), CdiError> {
    let err = |why| CdiError::Name {
        given: given.to_string(),
        why,
    };
    let (kind, name) = given
        .split_once('=')
        .ok_or_else(|| err(SpecError::NoEquals))?;
    split_kind(kind).map_err(err)?;
    check_device_name(name).map_err(err)?;
    Ok((kind.to_string(), name.to_string()))
}

/// The lowest spec version that has every feature `raw` uses, and the first such feature.
fn needed_version(raw: &RawSpec) -> (usize, &'static str) {
    let all_edits = || {
        raw.container_edits
            .iter()
            .chain(raw.devices.iter().map(|d| &d.container_edits))
    };
    let nodes = || all_edits().flat_map(|e| e.device_nodes.iter().flatten());
    let features: [(&str, &str, bool); 7] = [
        (
            "0.7.0",
            "intelRdt",
            all_edits().any(|e| e.intel_rdt.is_some()),
        ),
        (
            "0.7.0",
            "additionalGids",
            all_edits().any(|e| e.additional_gids.as_ref().is_some_and(|g| !g.is_empty())),
        ),
        (
            "0.6.0",
            "annotations",
            raw.annotations.as_ref().is_some_and(|a| !a.is_empty())
                || raw
                    .devices
                    .iter()
                    .any(|d| d.annotations.as_ref().is_some_and(|a| !a.is_empty())),
        ),
        (
            "0.6.0",
            "a '.' in the class",
            raw.kind
                .split_once('/')
                .is_some_and(|(_, c)| c.contains('.')),
        ),
        (
            "0.5.0",
            "a device name starting with a digit",
            raw.devices
                .iter()
                .any(|d| d.name.starts_with(|c: char| c.is_ascii_digit())),
        ),
        (
            "0.5.0",
            "hostPath in deviceNodes",
            nodes().any(|n| n.host_path.as_ref().is_some_and(|h| !h.is_empty())),
        ),
        (
            "0.4.0",
            "a mount type",
            all_edits()
                .flat_map(|e| e.mounts.iter().flatten())
                .any(|m| m.kind.as_ref().is_some_and(|t| !t.is_empty())),
        ),
    ];
    features
        .iter()
        .find(|(_, _, used)| *used)
        .map(|(v, what, _)| (version_index(v).unwrap_or(0), *what))
        .unwrap_or((0, ""))
}

fn version_index(v: &str) -> Option<usize> {
    let v = v.strip_prefix('v').unwrap_or(v);
    VERSIONS.iter().position(|k| *k == v)
}

fn check_version(raw: &RawSpec) -> Result<(), SpecError> {
    let declared = version_index(&raw.cdi_version).ok_or_else(|| SpecError::Version {
        declared: raw.cdi_version.clone(),
    })?;
    let (needed, feature) = needed_version(raw);
    if needed > declared {
        return Err(SpecError::TooOld {
            feature,
            needed: VERSIONS[needed],
            declared: raw.cdi_version.clone(),
        });
    }
    Ok(())
}

fn check_env(
    list: Option<Vec<String>>,
    what: &'static str,
) -> Result<Vec<(String, String)>, SpecError> {
    list.unwrap_or_default()
        .into_iter()
        .map(|kv| match kv.split_once('=') {
            Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
            _ => Err(SpecError::NotEnv { what, entry: kv }),
        })
        .collect()
}

fn absolute(p: &str, what: &'static str) -> Result<PathBuf, SpecError> {
    if p.starts_with('/') {
        Ok(PathBuf::from(p))
    } else {
        Err(SpecError::NotAbsolute {
            what,
            path: p.to_string(),
        })
    }
}

fn node(n: RawNode, from: &str) -> Result<DeviceNode, SpecError> {
    let path = absolute(&n.path, "deviceNodes path")?;
    let host_path = match n.host_path.as_deref() {
        None | Some("") => path.clone(),
        Some(h) => absolute(h, "deviceNodes hostPath")?,
    };
    if !matches!(n.kind.as_deref(), None | Some("" | "b" | "c" | "u" | "p")) {
        return Err(SpecError::NodeType {
            path: n.path,
            kind: n.kind.unwrap_or_default(),
        });
    }
    if let Some(p) = n.permissions.as_deref() {
        if p != "none" && !p.chars().all(|c| "rwm".contains(c)) {
            return Err(SpecError::NodePermissions {
                path: n.path,
                permissions: p.to_string(),
            });
        }
    }
    Ok(DeviceNode {
        path,
        host_path,
        from: from.to_string(),
    })
}

/// A bind mount, or the reason a mount of another type is skipped.
fn mount(m: RawMount, from: &str) -> Result<Result<CdiMount, Skipped>, SpecError> {
    if m.host_path.is_empty() {
        return Err(SpecError::NoHostPath {
            container_path: m.container_path,
        });
    }
    let dst = absolute(&m.container_path, "mount containerPath")?;
    let options = m.options.unwrap_or_default();
    let kind = m.kind.unwrap_or_default();
    let bind = matches!(kind.as_str(), "" | "bind" | "none")
        || options.iter().any(|o| o == "bind" || o == "rbind");
    // The source of another type (tmpfs, …) is no path.
    let src = if bind {
        absolute(&m.host_path, "mount hostPath")?
    } else {
        PathBuf::from(&m.host_path)
    };
    if !bind {
        return Ok(Err(Skipped {
            from: from.to_string(),
            edit: format!("{kind} mount at {}", dst.display()),
            why: "gpurun makes bind mounts only",
        }));
    }
    Ok(Ok(CdiMount {
        src,
        dst,
        options,
        from: from.to_string(),
    }))
}

fn hook(h: RawHook, from: &str) -> Result<Skipped, SpecError> {
    if !HOOK_NAMES.contains(&h.hook_name.as_str()) {
        return Err(SpecError::HookName { name: h.hook_name });
    }
    absolute(&h.path, "hook path")?;
    check_env(h.env, "hook env")?;
    if h.timeout.is_some_and(|t| t <= 0) {
        return Err(SpecError::HookTimeout { path: h.path });
    }
    let args = h.args.unwrap_or_default();
    let mut edit = format!("{} hook {}", h.hook_name, h.path);
    for a in args.iter().skip(1) {
        edit.push(' ');
        edit.push_str(a);
    }
    Ok(Skipped {
        from: from.to_string(),
        edit,
        why: "a hook runs with an OCI runtime's privileges on a writable root; gpurun runs none",
    })
}

fn edits(raw: RawEdits, from: &str) -> Result<Edits, SpecError> {
    let mut e = Edits {
        env: check_env(raw.env, "env")?,
        ..Edits::default()
    };
    for n in raw.device_nodes.unwrap_or_default() {
        e.nodes.push(node(n, from)?);
    }
    for m in raw.mounts.unwrap_or_default() {
        match mount(m, from)? {
            Ok(m) => e.mounts.push(m),
            Err(s) => e.skipped.push(s),
        }
    }
    for h in raw.hooks.unwrap_or_default() {
        e.skipped.push(hook(h, from)?);
    }
    let skip = |edit: String, why| Skipped {
        from: from.to_string(),
        edit,
        why,
    };
    if raw.intel_rdt.is_some() {
        e.skipped
            .push(skip("intelRdt".into(), "resctrl settings need privilege"));
    }
    let gids: Vec<String> = (raw.additional_gids.unwrap_or_default().iter())
        .filter(|g| **g != 0)
        .map(u32::to_string)
        .collect();
    if !gids.is_empty() {
        e.skipped.push(skip(
            format!("additionalGids {}", gids.join(",")),
            "a user namespace maps only the caller's own group",
        ));
    }
    Ok(e)
}

fn validate(raw: RawSpec, path: &Path, priority: usize) -> Result<Spec, SpecError> {
    split_kind(&raw.kind)?;
    check_version(&raw)?;
    if raw.devices.is_empty() {
        return Err(SpecError::NoDevices);
    }
    let kind = raw.kind;
    let mut devices: Vec<Device> = vec![];
    for d in raw.devices {
        check_device_name(&d.name)?;
        if devices.iter().any(|o| o.name == d.name) {
            return Err(SpecError::Twice { name: d.name });
        }
        let e = edits(d.container_edits, &format!("{kind}={}", d.name)).map_err(|e| {
            SpecError::Device {
                name: d.name.clone(),
                source: Box::new(e),
            }
        })?;
        if e.is_empty() {
            return Err(SpecError::NoEdits { name: d.name });
        }
        devices.push(Device {
            name: d.name,
            edits: e,
        });
    }
    Ok(Spec {
        path: path.to_path_buf(),
        priority,
        edits: edits(raw.container_edits.unwrap_or_default(), &kind)?,
        kind,
        devices,
    })
}

/// Parse and validate one spec file's text.
pub fn parse(path: &Path, text: &str, priority: usize) -> Result<Spec, CdiError> {
    let err = |source| CdiError::Spec {
        path: path.to_path_buf(),
        source,
    };
    let raw: RawSpec = decode(path, text).map_err(err)?;
    validate(raw, path, priority).map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::cdi::test_specs::*;

    fn detail(r: Result<Spec, CdiError>) -> String {
        match r {
            Err(CdiError::Spec { source, .. }) => source.to_string(),
            other => panic!("not a spec error: {other:?}"),
        }
    }

    #[test]
    fn yaml_and_json_read_alike() {
        let y = yaml(NVIDIA_YAML).unwrap();
        let j = parse(Path::new("/etc/cdi/x.json"), NVIDIA_JSON, 0).unwrap();
        assert_eq!(
            Spec {
                path: y.path.clone(),
                ..j
            },
            y
        );
        assert_eq!(y.kind, "nvidia.com/gpu");
        let names: Vec<&str> = y.devices.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(
            names,
            ["0", "GPU-4cf8db2d-06c0-7d70-1a51-e59b25b2c16c", "1", "all"]
        );
        assert_eq!(
            y.edits.nodes[1],
            DeviceNode {
                path: "/dev/nvidia-uvm".into(),
                host_path: "/dev/nvidia-uvm".into(),
                from: "nvidia.com/gpu".into(),
            }
        );
        assert!(y.edits.mounts[0].readonly());
        assert_eq!(
            y.edits.skipped[0].edit,
            "createContainer hook /usr/bin/nvidia-cdi-hook update-ldcache --folder /usr/lib/x86_64-linux-gnu"
        );
        assert_eq!(
            y.edits.env,
            [("NVIDIA_VISIBLE_DEVICES".to_string(), "void".to_string())]
        );
        // a name YAML reads as a number is the same name
        let bare = NVIDIA_YAML.replace("name: \"0\"", "name: 0");
        assert_eq!(yaml(&bare).unwrap(), y);
    }

    #[test]
    fn each_version_takes_its_features_only() {
        let host_path = "    deviceNodes:\n    - path: /dev/x0\n      hostPath: /dev/y0\n";
        let mount_type =
            "    mounts:\n    - hostPath: /a\n      containerPath: /b\n      type: bind\n";
        let gids = "    deviceNodes:\n    - path: /dev/x0\n    additionalGids: [44]\n";
        let rdt = "    deviceNodes:\n    - path: /dev/x0\n    intelRdt:\n      closID: c\n";
        // (version, kind, device name, edits, the version it needs)
        let cases: [(&str, &str, &str, &str, &str); 9] = [
            ("0.3.0", "vendor.com/dev", "a", NODE, "0.3.0"),
            ("0.3.0", "vendor.com/dev", "a", mount_type, "0.4.0"),
            ("0.4.0", "vendor.com/dev", "0", NODE, "0.5.0"),
            ("0.4.0", "vendor.com/dev", "a", host_path, "0.5.0"),
            ("0.5.0", "vendor.com/dev.x", "a", NODE, "0.6.0"),
            ("0.6.0", "vendor.com/dev", "a", gids, "0.7.0"),
            ("0.6.0", "vendor.com/dev", "a", rdt, "0.7.0"),
            ("0.8.0", "vendor.com/dev.x", "0", gids, "0.7.0"),
            ("1.0.0", "vendor.com/dev", "a", rdt, "0.7.0"),
        ];
        for (i, (_, kind, name, edits, needs)) in cases.iter().enumerate() {
            let need = version_index(needs).unwrap();
            for (v, version) in VERSIONS.iter().enumerate() {
                let r = yaml(&spec_with(version, kind, name, edits));
                if v >= need {
                    assert!(r.is_ok(), "case {i} at {version}: {r:?}");
                } else {
                    let d = detail(r);
                    assert!(
                        d.contains(&format!("needs cdiVersion {needs}")),
                        "case {i} at {version}: {d}"
                    );
                }
            }
        }
        // with or without a leading v; quoted or not
        assert!(yaml(&spec_with("v0.6.0", "a.com/b", "a", NODE)).is_ok());
        assert!(yaml(&spec_with("\"0.8.0\"", "a.com/b", "a", NODE)).is_ok());
        for v in ["0.2.0", "1.1.0", "0.5", "x"] {
            let d = detail(yaml(&spec_with(v, "a.com/b", "a", NODE)));
            assert!(
                d.contains("is not one gpurun reads (0.3.0 to 1.0.0)"),
                "{v}: {d}"
            );
        }
    }

    #[test]
    fn what_the_schema_refuses() {
        let ok = |e: &str| spec_with("0.8.0", "vendor.com/dev", "a", e);
        let cases: Vec<(String, &str)> = vec![
            ("kind: a.com/b\ndevices: []\n".into(), "missing field `cdiVersion`"),
            ("cdiVersion: 0.5.0\ndevices: []\n".into(), "missing field `kind`"),
            ("cdiVersion: 0.5.0\nkind: a.com/b\n".into(), "missing field `devices`"),
            ("cdiVersion: 0.5.0\nkind: a.com/b\ndevices: []\n".into(), "defines no devices"),
            (spec_with("0.5.0", "nvidia", "a", NODE), "is not VENDOR/CLASS"),
            (spec_with("0.5.0", "a.com/b/c", "a", NODE), "class \"b/c\""),
            (spec_with("0.5.0", "1a.com/b", "a", NODE), "vendor \"1a.com\""),
            (spec_with("0.5.0", "a.com/b-", "a", NODE), "class \"b-\""),
            (spec_with("0.5.0", &format!("a.com/{}", "b".repeat(64)), "a", NODE), "longer than 63"),
            (spec_with("0.5.0", "a.com/b", "-a", NODE), "device name \"-a\""),
            (spec_with("0.5.0", "a.com/b", "a/b", NODE), "device name \"a/b\""),
            (spec_with("0.5.0", "a.com/b", "a", "    env: []\n"), "has no containerEdits"),
            ("cdiVersion: 0.5.0\nkind: a.com/b\ndevices:\n- name: a\n".into(), "missing field `containerEdits`"),
            (ok("    deviceNodes:\n    - path: dev/x\n"), "deviceNodes path \"dev/x\" is not an absolute path"),
            (ok("    deviceNodes:\n    - path: /dev/x\n      hostPath: x\n"), "hostPath \"x\""),
            (ok("    deviceNodes:\n    - hostPath: /dev/x\n"), "missing field `path`"),
            (ok("    deviceNodes:\n    - path: /dev/x\n      type: z\n"), "use b, c, u or p"),
            (ok("    deviceNodes:\n    - path: /dev/x\n      permissions: rwx\n"), "permissions \"rwx\""),
            (ok("    deviceNodes:\n    - path: /dev/x\n      major: x\n"), "invalid i64 at line 8"),
            (ok("    mounts:\n    - hostPath: /a\n      containerPath: b\n"), "containerPath \"b\" is not an absolute path"),
            (ok("    mounts:\n    - hostPath: \"\"\n      containerPath: /b\n"), "has no hostPath"),
            (ok("    mounts:\n    - containerPath: /b\n"), "missing field `hostPath`"),
            (ok("    env: [\"=x\"]\n"), "env \"=x\" is not NAME=VALUE"),
            (ok("    env: [NOVALUE]\n"), "env \"NOVALUE\""),
            (ok("    hooks:\n    - hookName: preStart\n      path: /x\n"), "hook name \"preStart\""),
            (ok("    hooks:\n    - hookName: poststop\n      path: x\n"), "hook path \"x\""),
            (ok("    hooks:\n    - hookName: poststop\n      path: /x\n      timeout: 0\n"), "timeout"),
            (ok("    deviceNodes:\n    - path: /dev/x\n      pathz: /y\n"), "pathz"),
            (ok("    netDevices:\n    - hostInterfaceName: eth0\n      name: eth0\n"), "netDevices"),
            (format!("{}annotations: {{a: b}}\n", spec_with("0.5.0", "a.com/b", "a", NODE)), "annotations, which needs cdiVersion 0.6.0 or later, but declares 0.5.0"),
            ("cdiVersion: 0.5.0\nkind: a.com/b\ndevices:\n- name: a\n  containerEdits: {deviceNodes: [{path: /dev/a}]}\n- name: a\n  containerEdits: {deviceNodes: [{path: /dev/b}]}\n".into(), "device \"a\" is defined twice"),
            ("cdiVersion: 0.5.0\nkind: [\n".into(), "line"),
        ];
        for (text, want) in cases {
            let d = detail(yaml(&text));
            assert!(d.contains(want), "{text}\nwanted {want:?} in: {d}");
            assert!(!d.contains('\n'), "one line: {d}");
        }
        let e = parse(Path::new("/etc/cdi/x.json"), "{\"kind\": ", 0).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.starts_with("CDI spec /etc/cdi/x.json: ") && msg.contains("line 1"),
            "{msg}"
        );
        assert!(!msg.contains('\n'));
    }

    #[test]
    fn what_is_skipped_and_why() {
        let text = spec_with(
            "0.7.0",
            "vendor.com/dev",
            "a",
            "    deviceNodes:\n    - path: /dev/x0\n    mounts:\n    - hostPath: none\n      containerPath: /t\n      type: tmpfs\n      options: [nosuid]\n    - hostPath: /h\n      containerPath: /c\n      type: none\n      options: [rbind, rw]\n    additionalGids: [0, 44]\n    intelRdt: {closID: x}\n    hooks:\n    - hookName: startContainer\n      path: /bin/true\n",
        );
        let s = yaml(&text).unwrap();
        let e = &s.devices[0].edits;
        assert_eq!(e.mounts.len(), 1);
        assert!(!e.mounts[0].readonly());
        let skipped: Vec<String> = e.skipped.iter().map(|s| s.to_string()).collect();
        assert_eq!(
            skipped,
            [
                "CDI vendor.com/dev=a: tmpfs mount at /t skipped: gpurun makes bind mounts only",
                "CDI vendor.com/dev=a: startContainer hook /bin/true skipped: a hook runs with an OCI runtime's privileges on a writable root; gpurun runs none",
                "CDI vendor.com/dev=a: intelRdt skipped: resctrl settings need privilege",
                "CDI vendor.com/dev=a: additionalGids 44 skipped: a user namespace maps only the caller's own group",
            ]
        );
    }

    #[test]
    fn names() {
        let cases: [(&str, Option<(&str, &str)>); 9] = [
            ("nvidia.com/gpu=0", Some(("nvidia.com/gpu", "0"))),
            ("nvidia.com/gpu=all", Some(("nvidia.com/gpu", "all"))),
            ("nvidia.com/gpu=0:1", Some(("nvidia.com/gpu", "0:1"))),
            (
                "nvidia.com/gpu=GPU-4cf8db2d",
                Some(("nvidia.com/gpu", "GPU-4cf8db2d")),
            ),
            ("nvidia.com/gpu", None),
            ("gpu=0", None),
            ("/dev/nvidia0", None),
            ("nvidia.com/gpu=", None),
            ("nvidia.com/gpu=a b", None),
        ];
        for (given, want) in cases {
            let got = parse_name(given);
            match want {
                Some((k, n)) => {
                    assert_eq!(got.unwrap(), (k.to_string(), n.to_string()), "{given}")
                }
                None => {
                    let e = got.unwrap_err().to_string();
                    assert!(e.contains("write VENDOR/CLASS=NAME"), "{given}: {e}");
                }
            }
        }
    }
}
