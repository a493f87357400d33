//! The flattener on hostile layers: never a panic, and every entry of the merged stream (what
//! tar2sqfs gets) is a relative path without `..`, so nothing can land outside the image.
#![no_main]
use std::io::{Cursor, Read};

use gpurun::image::flatten::{flatten, Layer};
use libfuzzer_sys::fuzz_target;

fn layer(name: &str, data: Vec<u8>) -> Layer {
    Layer {
        name: name.into(),
        size: data.len() as u64,
        open: Box::new(move || Ok(Box::new(Cursor::new(data.clone())) as Box<dyn Read + Send>)),
        span: None,
    }
}

fuzz_target!(|data: &[u8]| {
    // The first byte splits the input into a top and a lower layer.
    let Some((&cut, rest)) = data.split_first() else {
        return;
    };
    let cut = (cut as usize * rest.len() / 255).min(rest.len());
    let layers = [
        layer("top", rest[..cut].to_vec()),
        layer("lower", rest[cut..].to_vec()),
    ];
    let mut out = Vec::new();
    if flatten(&layers, &[], &mut out, 1, &|_| {}).is_err() {
        return;
    }
    let mut ar = tar::Archive::new(Cursor::new(out));
    for e in ar.entries().expect("merged stream is a tar") {
        let e = e.expect("merged entry reads back");
        let p = e.path_bytes().into_owned();
        assert!(!p.is_empty() && p[0] != b'/', "absolute or empty {p:?}");
        assert!(
            !p.split(|&b| b == b'/').any(|c| c == b".."),
            "'..' in {:?}",
            String::from_utf8_lossy(&p)
        );
        if e.header().entry_type().is_hard_link() {
            let t = e.link_name_bytes().expect("link target").into_owned();
            assert!(!t.is_empty() && t[0] != b'/', "absolute link {t:?}");
            assert!(
                !t.split(|&b| b == b'/').any(|c| c == b".."),
                "'..' in link {t:?}"
            );
        }
    }
});
