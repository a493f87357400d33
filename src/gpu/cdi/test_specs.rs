//! The tests' specs: nvidia-ctk's shape in YAML and JSON, and one-device specs.

use std::path::Path;

use super::spec::parse;
use super::types::{CdiError, Spec};

/// A spec of the shape `nvidia-ctk cdi generate` writes (YAML, two GPUs by index, UUID and
/// `all`; the control nodes, the driver's files and its hooks at the spec level).
pub(super) const NVIDIA_YAML: &str = r#"---
cdiVersion: 0.5.0
kind: nvidia.com/gpu
devices:
- name: "0"
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
- name: GPU-4cf8db2d-06c0-7d70-1a51-e59b25b2c16c
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
- name: "1"
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia1
- name: all
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
    - path: /dev/nvidia1
containerEdits:
  env:
  - NVIDIA_VISIBLE_DEVICES=void
  deviceNodes:
  - path: /dev/nvidiactl
  - path: /dev/nvidia-uvm
    hostPath: /dev/nvidia-uvm
  hooks:
  - hookName: createContainer
    path: /usr/bin/nvidia-cdi-hook
    args:
    - nvidia-cdi-hook
    - update-ldcache
    - --folder
    - /usr/lib/x86_64-linux-gnu
  mounts:
  - hostPath: /usr/lib/x86_64-linux-gnu/libcuda.so.550.54.14
    containerPath: /usr/lib/x86_64-linux-gnu/libcuda.so.550.54.14
    options:
    - ro
    - nosuid
    - nodev
    - bind
"#;

/// The same devices as JSON (what other vendors and `nvidia-ctk --format=json` write).
pub(super) const NVIDIA_JSON: &str = r#"{"cdiVersion":"0.5.0","kind":"nvidia.com/gpu",
      "devices":[
        {"name":"0","containerEdits":{"deviceNodes":[{"path":"/dev/nvidia0"}]}},
        {"name":"GPU-4cf8db2d-06c0-7d70-1a51-e59b25b2c16c","containerEdits":{"deviceNodes":[{"path":"/dev/nvidia0"}]}},
        {"name":"1","containerEdits":{"deviceNodes":[{"path":"/dev/nvidia1"}]}},
        {"name":"all","containerEdits":{"deviceNodes":[{"path":"/dev/nvidia0"},{"path":"/dev/nvidia1"}]}}],
      "containerEdits":{"env":["NVIDIA_VISIBLE_DEVICES=void"],
        "deviceNodes":[{"path":"/dev/nvidiactl"},{"path":"/dev/nvidia-uvm","hostPath":"/dev/nvidia-uvm"}],
        "hooks":[{"hookName":"createContainer","path":"/usr/bin/nvidia-cdi-hook",
          "args":["nvidia-cdi-hook","update-ldcache","--folder","/usr/lib/x86_64-linux-gnu"]}],
        "mounts":[{"hostPath":"/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.14",
          "containerPath":"/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.14",
          "options":["ro","nosuid","nodev","bind"]}]}}"#;

pub(super) fn yaml(text: &str) -> Result<Spec, CdiError> {
    parse(Path::new("/etc/cdi/x.yaml"), text, 0)
}

/// One device with `edits` (YAML lines under containerEdits), in a spec of `version`.
pub(super) fn spec_with(version: &str, kind: &str, name: &str, edits: &str) -> String {
    format!("cdiVersion: {version}\nkind: {kind}\ndevices:\n- name: \"{name}\"\n  containerEdits:\n{edits}")
}

pub(super) const NODE: &str = "    deviceNodes:\n    - path: /dev/x0\n";

pub(super) fn spec_at(path: &str, priority: usize, text: &str) -> Spec {
    parse(Path::new(path), text, priority).unwrap()
}
