//! `gpurun inspect docker://…` against a local registry: the manifest and config are read, no
//! layer is downloaded.

mod common;
mod support;

use common::*;
use support::{Comp, LayerTar, Layout, Registry};

#[test]
fn inspect_a_registry_image_without_its_layers() {
    let s = Scratch::new();
    let reg = Registry::start(&s.join("reg"), None);
    let mut l = Layout::new(&s.join("layout"));
    let layer = LayerTar::new().file("hello", &[1u8; 100_000]).finish();
    let img = l.image(
        "x",
        &[(layer, Comp::Gzip)],
        "amd64",
        None,
        serde_json::json!({
            "Env": ["PATH=/bin", "CUDA_VERSION=12.2.0"],
            "Cmd": ["python"],
            "WorkingDir": "/w",
            "Labels": {"org.test": "yes"}
        }),
    );
    reg.push(&l.dir, "x", "test/x:v1", "oci");
    s.chown_all();
    let cache = s.join("cache");
    let src = format!("docker://{}/test/x:v1", reg.addr());
    let o = run_ok(
        gpurun(&["inspect", "--json", &src])
            .env("GPURUN_CACHEDIR", &cache)
            .env("DOCKER_CONFIG", s.join("docker-config")),
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["format"], "registry");
    assert_eq!(v["manifest_digest"], img.digest);
    assert_eq!(v["platform"], "linux/amd64");
    assert_eq!(v["cmd"][0], "python");
    assert_eq!(v["working_dir"], "/w");
    assert_eq!(v["labels"]["org.test"], "yes");
    assert_eq!(v["cuda_requirement"]["NVIDIA_REQUIRE_CUDA"], "cuda>=12.2");
    let layer_size = img.manifest["layers"][0]["size"].as_u64().unwrap();
    assert_eq!(v["size_bytes"], layer_size);
    // Only the config blob came down.
    let blobs: Vec<String> = std::fs::read_dir(cache.join("blobs/sha256"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        blobs,
        vec![img.manifest["config"]["digest"].as_str().unwrap()[7..].to_string()]
    );

    // A missing tag: one line, pull's exit code for "not found".
    let o = gpurun(&["inspect", &format!("docker://{}/test/x:nope", reg.addr())])
        .env("GPURUN_CACHEDIR", &cache)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(20), "{}", stderr(&o));
    assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
}
