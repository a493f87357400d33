//! CUDA_VISIBLE_DEVICES / NVIDIA_VISIBLE_DEVICES / Slurm lists against a fixed set of GPUs:
//! never a panic, and only allowed GPUs are ever chosen.
#![no_main]
use gpurun::gpu::devices::{request_from, select, GpuNode, MigInfo};
use libfuzzer_sys::fuzz_target;

fn gpus() -> Vec<GpuNode> {
    (0..4u32)
        .map(|i| GpuNode {
            minor: i * 2,
            nvml_index: Some(i),
            uuid: Some(format!("GPU-{i}a{i}b-0000-1111-2222-33334444{i:04}")),
            pci_bus_id: Some(format!("00000000:{:02X}:00.0", 0x17 + i)),
            mig: if i == 1 {
                vec![MigInfo {
                    uuid: "MIG-5d1b-aaaa".into(),
                    gi: Some(1),
                    ci: Some(0),
                }]
            } else {
                Vec::new()
            },
        })
        .collect()
}

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let allowed = gpus();
    for var in [
        "CUDA_VISIBLE_DEVICES",
        "NVIDIA_VISIBLE_DEVICES",
        "SLURM_STEP_GPUS",
        "SLURM_JOB_GPUS",
    ] {
        let env = vec![(var.to_string(), s.to_string())];
        for flag in [None, Some(s)] {
            let (req, src) = request_from(flag, &env, allowed.len());
            if let Ok(sel) = select(&allowed, &req, src) {
                for c in &sel.chosen {
                    assert!(allowed.iter().any(|g| g.minor == c.minor), "{s:?}: {c:?}");
                }
            }
        }
    }
});
