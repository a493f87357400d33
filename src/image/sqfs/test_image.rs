//! A small image for the reader's tests.

use super::archive::Archive;

/// A zstd image (mksquashfs) holding a 300 KB file /f, opened, and the file's bytes.
pub(super) fn image_of_f() -> (tempfile::TempDir, Archive, Vec<u8>) {
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir(&src).unwrap();
    std::fs::write(src.join("f"), &data).unwrap();
    let img = dir.path().join("i.sqsh");
    let st = std::process::Command::new("mksquashfs")
        .args([src.as_os_str(), img.as_os_str()])
        .args(["-noappend", "-quiet", "-no-progress", "-comp", "zstd"])
        .status()
        .expect("mksquashfs (squashfs-tools)");
    assert!(st.success());
    let ar = Archive::open(&img).unwrap();
    (dir, ar, data)
}
