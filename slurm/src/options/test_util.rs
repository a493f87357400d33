//! Helpers of the option tests.

use mount_grammar::pyxis::Mount;
use mount_grammar::Bind;

use super::error::OptionError;

pub(super) fn m(src: &str, dst: &str, readonly: bool) -> Mount {
    Mount::Bind(Bind::new(src, dst, readonly))
}

/// Each input is refused with one line that contains its text.
pub(super) fn refused<T: std::fmt::Debug>(
    parse: fn(&str) -> Result<T, OptionError>,
    table: &[(&str, &str)],
) {
    for (input, want) in table {
        let e = parse(input).unwrap_err().to_string();
        assert!(e.contains(want) && !e.contains('\n'), "{input}: {e}");
    }
}
