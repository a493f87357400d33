//! ld.so.cache files read without running ldconfig: both of glibc's formats.

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DriverError {
    #[error("{path}: not an ld.so.cache file (neither \"ld.so-1.7.0\" nor \"glibc-ld.so.cache1.1\" format)")]
    NotLdCache { path: String },
    #[error("{path}: truncated ld.so.cache ({what})")]
    Truncated { path: String, what: &'static str },
}

/// One entry of an ld.so.cache: flags (type and architecture), soname, path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheEntry {
    pub flags: i32,
    pub key: String,
    pub value: String,
}

const OLD_MAGIC: &[u8] = b"ld.so-1.7.0";

const NEW_MAGIC: &[u8] = b"glibc-ld.so.cache1.1";

const OLD_ENTRY: usize = 12; // int32 flags, uint32 key, uint32 value
const NEW_ENTRY: usize = 24; // + uint32 osversion, uint64 hwcap
const NEW_HEADER: usize = 48; // magic+version (20), nlibs, len_strings, 24 bytes of flags/ext/unused

/// Flags of an ELF libc6 library for the running architecture (glibc's ldconfig.h).
pub(super) const NATIVE_FLAGS: i32 = if cfg!(target_arch = "x86_64") {
    0x0303 // FLAG_ELF_LIBC6 | FLAG_X8664_LIB64
} else if cfg!(target_arch = "aarch64") {
    0x0a03 // FLAG_ELF_LIBC6 | FLAG_AARCH64_LIB64
} else if cfg!(target_arch = "powerpc64") {
    0x0503 // FLAG_ELF_LIBC6 | FLAG_POWERPC_LIB64
} else {
    0x0003
};

fn u32_at(b: &[u8], off: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(off..off + 4)?.try_into().ok()?))
}

/// The NUL-terminated bytes at `off`; None when they run past the end.
fn cstr_bytes(b: &[u8], off: usize) -> Option<&[u8]> {
    let s = b.get(off..)?;
    Some(&s[..s.iter().position(|&c| c == 0)?])
}

/// Parse an ld.so.cache in either format (see `for_each_ldcache_entry`) into owned entries.
pub fn parse_ldcache(b: &[u8], path: &str) -> Result<Vec<CacheEntry>, DriverError> {
    let mut out = Vec::new();
    for_each_ldcache_entry(b, path, |flags, key, value| {
        out.push(CacheEntry {
            flags,
            key: String::from_utf8_lossy(key).into_owned(),
            value: String::from_utf8_lossy(value).into_owned(),
        });
        true
    })?;
    Ok(out)
}

/// Visit the entries of an ld.so.cache (flags, soname, path; borrowed from `b`) until `f` says
/// stop. Either format: the old "ld.so-1.7.0" (string offsets count from the end of its entry
/// table; glibc 2.2–2.31 append the new format there) or the new "glibc-ld.so.cache1.1" (string
/// offsets count from the new header). The new table wins when both are present. Host byte
/// order. Nothing is copied, so a hostile file (an image's) costs no more than its own size.
pub(super) fn for_each_ldcache_entry(
    b: &[u8],
    path: &str,
    mut f: impl FnMut(i32, &[u8], &[u8]) -> bool,
) -> Result<(), DriverError> {
    let trunc = |what| DriverError::Truncated {
        path: path.into(),
        what,
    };
    // (number of entries, where they start, entry size, where string offsets count from)
    let (nlibs, first, size, strings) = if b.starts_with(NEW_MAGIC) {
        let nlibs = u32_at(b, 20).ok_or_else(|| trunc("header"))? as usize;
        (nlibs, NEW_HEADER, NEW_ENTRY, 0)
    } else if b.starts_with(OLD_MAGIC) {
        // magic (11 bytes), then nlibs aligned to 4
        let nlibs = u32_at(b, 12).ok_or_else(|| trunc("header"))? as usize;
        let strings = nlibs
            .checked_mul(OLD_ENTRY)
            .and_then(|n| n.checked_add(16))
            .ok_or_else(|| trunc("header"))?;
        if strings > b.len() {
            return Err(trunc("entries"));
        }
        // a new-format table follows, aligned to 8
        let new_at = (strings + 7) & !7;
        if b.get(new_at..new_at + NEW_MAGIC.len()) == Some(NEW_MAGIC) {
            let nlibs = u32_at(b, new_at + 20).ok_or_else(|| trunc("header"))? as usize;
            (nlibs, new_at + NEW_HEADER, NEW_ENTRY, new_at)
        } else {
            (nlibs, 16, OLD_ENTRY, strings)
        }
    } else {
        return Err(DriverError::NotLdCache { path: path.into() });
    };
    for i in 0..nlibs {
        let e = first + i * size;
        let flags = u32_at(b, e).ok_or_else(|| trunc("entries"))? as i32;
        let key = u32_at(b, e + 4).ok_or_else(|| trunc("entries"))? as usize;
        let value = u32_at(b, e + 8).ok_or_else(|| trunc("entries"))? as usize;
        let key = cstr_bytes(b, strings + key).ok_or_else(|| trunc("strings"))?;
        let value = cstr_bytes(b, strings + value).ok_or_else(|| trunc("strings"))?;
        if !f(flags, key, value) {
            break;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Build a cache the way glibc's ldconfig lays it out.
    fn new_cache(entries: &[(i32, &str, &str)]) -> Vec<u8> {
        let mut strings = Vec::new();
        let base = NEW_HEADER + entries.len() * NEW_ENTRY;
        let mut table = Vec::new();
        for (flags, k, v) in entries {
            let ko = base + strings.len();
            strings.extend_from_slice(k.as_bytes());
            strings.push(0);
            let vo = base + strings.len();
            strings.extend_from_slice(v.as_bytes());
            strings.push(0);
            table.extend_from_slice(&flags.to_ne_bytes());
            table.extend_from_slice(&(ko as u32).to_ne_bytes());
            table.extend_from_slice(&(vo as u32).to_ne_bytes());
            table.extend_from_slice(&0u32.to_ne_bytes());
            table.extend_from_slice(&0u64.to_ne_bytes());
        }
        let mut b = NEW_MAGIC.to_vec();
        b.extend_from_slice(&(entries.len() as u32).to_ne_bytes());
        b.extend_from_slice(&(strings.len() as u32).to_ne_bytes());
        b.resize(NEW_HEADER, 0);
        b.extend(table);
        b.extend(strings);
        b
    }

    fn old_cache(entries: &[(i32, &str, &str)], append_new: bool) -> Vec<u8> {
        let mut strings = Vec::new();
        let mut table = Vec::new();
        for (flags, k, v) in entries {
            let ko = strings.len();
            strings.extend_from_slice(k.as_bytes());
            strings.push(0);
            let vo = strings.len();
            strings.extend_from_slice(v.as_bytes());
            strings.push(0);
            table.extend_from_slice(&flags.to_ne_bytes());
            table.extend_from_slice(&(ko as u32).to_ne_bytes());
            table.extend_from_slice(&(vo as u32).to_ne_bytes());
        }
        let mut b = OLD_MAGIC.to_vec();
        b.push(0);
        b.extend_from_slice(&(entries.len() as u32).to_ne_bytes());
        b.extend(table);
        if append_new {
            while !b.len().is_multiple_of(8) {
                b.push(0);
            }
            let n = new_cache(&[(NATIVE_FLAGS, "libnew.so.1", "/new/libnew.so.1")]);
            b.extend(n);
        } else {
            b.extend(strings);
        }
        b
    }

    #[test]
    fn ldcache_formats() {
        let e = [
            (NATIVE_FLAGS, "libcuda.so.1", "/usr/lib/libcuda.so.1"),
            (0x0003, "libcuda.so.1", "/usr/lib32/libcuda.so.1"),
        ];
        let want: Vec<CacheEntry> = e
            .iter()
            .map(|(f, k, v)| CacheEntry {
                flags: *f,
                key: k.to_string(),
                value: v.to_string(),
            })
            .collect();
        assert_eq!(parse_ldcache(&new_cache(&e), "c").unwrap(), want);
        assert_eq!(parse_ldcache(&old_cache(&e, false), "c").unwrap(), want);
        let both = parse_ldcache(&old_cache(&e, true), "c").unwrap();
        assert_eq!(
            both,
            vec![CacheEntry {
                flags: NATIVE_FLAGS,
                key: "libnew.so.1".into(),
                value: "/new/libnew.so.1".into()
            }]
        );
        assert_eq!(parse_ldcache(&new_cache(&[]), "c").unwrap(), vec![]);
        assert!(matches!(
            parse_ldcache(b"garbage", "c"),
            Err(DriverError::NotLdCache { .. })
        ));
        let mut t = new_cache(&e);
        t.truncate(60);
        assert!(matches!(
            parse_ldcache(&t, "c"),
            Err(DriverError::Truncated { .. })
        ));
        let mut t = old_cache(&e, false);
        t.truncate(20);
        assert!(matches!(
            parse_ldcache(&t, "c"),
            Err(DriverError::Truncated { .. })
        ));
        // a huge nlibs must not allocate or panic
        let mut t = new_cache(&[]);
        t[20..24].copy_from_slice(&u32::MAX.to_ne_bytes());
        assert!(parse_ldcache(&t, "c").is_err());
    }

    #[test]
    fn real_ldcache_of_this_machine() {
        // whatever this machine's ldconfig wrote must parse and contain libc
        if let Ok(b) = std::fs::read("/etc/ld.so.cache") {
            let e = parse_ldcache(&b, "/etc/ld.so.cache").unwrap();
            assert!(
                e.iter()
                    .any(|e| e.key == "libc.so.6" && e.flags == NATIVE_FLAGS),
                "{e:?}"
            );
        }
    }
}
