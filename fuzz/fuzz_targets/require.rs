//! NVIDIA_REQUIRE_* expressions and version comparison: never a panic; comparison is antisymmetric.
#![no_main]
use gpurun::gpu::require::{check, compare_versions, Facts};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let facts = Facts {
        cuda: Some("12.4".into()),
        driver: Some("550.54.14".into()),
        arch: Some("9.0".into()),
        brand: Some("tesla".into()),
    };
    let env = vec![("NVIDIA_REQUIRE_CUDA".to_string(), s.to_string())];
    let _ = check(&env, &[facts.clone(), Facts::default()], &facts);
    let _ = check(&env, &[], &Facts::default());
    if let Some((a, b)) = s.split_once(' ') {
        if let (Some(x), Some(y)) = (compare_versions(a, b), compare_versions(b, a)) {
            assert_eq!(x, y.reverse(), "{a:?} vs {b:?}");
        }
    }
});
