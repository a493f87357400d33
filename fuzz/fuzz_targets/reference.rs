//! Image references: any string parses or is refused, and a parsed docker reference prints as
//! one that parses back to the same image.
#![no_main]
use gpurun::image::reference::{parse_docker, Source};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let _ = Source::parse(s);
    if let Ok(r) = parse_docker(s) {
        let shown = r.to_string();
        let again = parse_docker(shown.strip_prefix("docker://").expect("docker:// prefix"))
            .unwrap_or_else(|e| panic!("{s:?} parsed as {r} which does not parse: {e}"));
        assert_eq!(again, r, "{s:?}");
    }
});
