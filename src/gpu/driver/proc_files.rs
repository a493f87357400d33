//! The driver's /proc/driver/nvidia files: its version, each GPU's information, its params.

/// Driver version from /proc/driver/nvidia/version ("NVRM version: NVIDIA UNIX Open Kernel Module
/// for x86_64  580.159.04  Release Build …").
pub fn parse_proc_version(text: &str) -> Option<String> {
    let line = text.lines().find(|l| l.starts_with("NVRM version:"))?;
    line.split_whitespace()
        .find(|t| t.contains('.') && t.bytes().all(|c| c.is_ascii_digit() || c == b'.'))
        .map(str::to_string)
}

/// One GPU as `/proc/driver/nvidia/gpus/<bus id>/information` describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcGpu {
    pub minor: u32,
    pub uuid: String,
    pub bus_id: String,
    pub model: Option<String>,
}

/// Parse an `information` file (`Model:`, `GPU UUID:`, `Bus Location:`, `Device Minor:` lines);
/// `None` when the minor, UUID or bus id is missing.
pub fn parse_gpu_information(text: &str) -> Option<ProcGpu> {
    let get = |key: &str| {
        text.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k.trim() == key && !v.trim().is_empty()).then(|| v.trim().to_string())
        })
    };
    Some(ProcGpu {
        minor: get("Device Minor")?.parse().ok()?,
        uuid: get("GPU UUID")?,
        bus_id: get("Bus Location")?,
        model: get("Model"),
    })
}

/// /proc/driver/nvidia/params as the container must see it: `ModifyDeviceFiles: 0`, so the
/// driver's user-space libraries never try to create device nodes in the container.
pub fn params_without_modify(params: &str) -> String {
    let mut found = false;
    let mut out: String = params
        .lines()
        .map(|l| {
            if l.starts_with("ModifyDeviceFiles:") {
                found = true;
                "ModifyDeviceFiles: 0".to_string()
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    if !found {
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str("ModifyDeviceFiles: 0");
    }
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpu_information_from_proc() {
        let h200 = "Model: \t\t NVIDIA H200\nIRQ:   \t\t 0\nGPU UUID: \t GPU-5f4e1c2a-0000-1111-2222-333344445555\nVideo BIOS: \t 96.00.a5.00.01\nBus Type: \t PCIe\nDMA Size: \t 52 bits\nDMA Mask: \t 0xfffffffffffff\nBus Location: \t 0000:3b:00.0\nDevice Minor: \t 1\nGPU Excluded:\t No\n";
        type Want<'a> = Option<(u32, &'a str, &'a str, Option<&'a str>)>;
        let cases: [(&str, Want); 4] = [
            (
                h200,
                Some((
                    1,
                    "GPU-5f4e1c2a-0000-1111-2222-333344445555",
                    "0000:3b:00.0",
                    Some("NVIDIA H200"),
                )),
            ),
            (
                "GPU UUID: GPU-1\nBus Location: 0000:01:00.0\nDevice Minor: 0\n",
                Some((0, "GPU-1", "0000:01:00.0", None)),
            ),
            ("GPU UUID: GPU-1\nBus Location: 0000:01:00.0\n", None),
            (
                "Model: x\nGPU UUID: \nBus Location: 0000:01:00.0\nDevice Minor: 0\n",
                None,
            ),
        ];
        for (text, want) in cases {
            let got = parse_gpu_information(text);
            let got = got.as_ref().map(|g| {
                (
                    g.minor,
                    g.uuid.as_str(),
                    g.bus_id.as_str(),
                    g.model.as_deref(),
                )
            });
            assert_eq!(got, want, "{text:?}");
        }
    }

    #[test]
    fn proc_version_table() {
        let cases = [
            ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  (dvs-builder@U16)  Mon\nGCC version:  gcc version 12.3.0", Some("580.159.04")),
            ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.14  Thu Feb 22 01:44:30 UTC 2024\n", Some("550.54.14")),
            ("NVRM version: NVIDIA UNIX Kernel Module for aarch64  535.104.05  Sat Aug 19\n", Some("535.104.05")),
            ("GCC version: 12.2\n", None),
            ("", None),
        ];
        for (t, want) in cases {
            assert_eq!(parse_proc_version(t).as_deref(), want, "{t}");
        }
    }

    #[test]
    fn params_table() {
        assert_eq!(
            params_without_modify(
                "ResmanDebugLevel: 4294967295\nModifyDeviceFiles: 1\nDeviceFileUID: 0\n"
            ),
            "ResmanDebugLevel: 4294967295\nModifyDeviceFiles: 0\nDeviceFileUID: 0\n"
        );
        assert_eq!(
            params_without_modify("A: 1\n"),
            "A: 1\nModifyDeviceFiles: 0\n"
        );
        assert_eq!(params_without_modify(""), "ModifyDeviceFiles: 0\n");
    }
}
