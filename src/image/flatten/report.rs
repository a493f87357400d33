//! What the flattening dropped or changed, and the notes it keeps.

/// What the flattening dropped or changed, for one summary warning.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Report {
    pub entries: u64,
    pub devices_dropped: u64,
    pub setid_cleared: u64,
    pub unsupported_skipped: u64,
    /// One line per neutralised or refused entry (capped), naming layer and entry.
    pub notes: Vec<String>,
    pub notes_omitted: u64,
}

impl Report {
    pub(super) fn note(&mut self, line: String) {
        if self.notes.len() < 20 {
            self.notes.push(line);
        } else {
            self.notes_omitted += 1;
        }
    }
}
