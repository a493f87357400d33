//! Sizes and ages as users write them (`--max-size 20G`, `--older-than 30d`) and read them
//! (1.5 GiB).

use std::time::Duration;

/// A size, age or idle time as the user wrote it, refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnitsError {
    #[error("'{0}': unknown unit; use a size like 500M, 20G or 1T")]
    SizeUnit(String),
    #[error("'{0}' is not a size; use a size like 500M, 20G or 1T")]
    NotSize(String),
    #[error("'{0}' is not an age; use e.g. 30d, 12h, 90m or 2w")]
    NotAge(String),
    #[error("'{0}' is not an idle time; use 0 (off) or e.g. 90s, 10m, 2h")]
    NotIdle(String),
}

/// `20G`, `500M`, `1.5T`, `4096` (bytes); powers of 1024.
pub fn parse_size(s: &str) -> Result<u64, UnitsError> {
    let t = s.trim();
    let (num, unit) = t.split_at(t.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(t.len()));
    let mult: u64 = match unit
        .to_ascii_uppercase()
        .trim_end_matches("IB")
        .trim_end_matches('B')
    {
        "" => 1,
        "K" => 1 << 10,
        "M" => 1 << 20,
        "G" => 1 << 30,
        "T" => 1 << 40,
        _ => return Err(UnitsError::SizeUnit(s.to_string())),
    };
    let n: f64 = num
        .trim()
        .parse()
        .ok()
        .filter(|n: &f64| n.is_finite() && *n >= 0.0)
        .ok_or_else(|| UnitsError::NotSize(s.to_string()))?;
    Ok((n * mult as f64) as u64)
}

/// `30d`, `12h`, `90m`, `2w`, `45s`, also `1.5d` or `1h 30m` (humantime's durations).
pub fn parse_age(s: &str) -> Result<Duration, UnitsError> {
    let t = s.trim();
    // humantime takes a bare 0 for no time; an age needs its unit.
    let age = (t != "0").then(|| humantime::parse_duration(t).ok());
    age.flatten()
        .ok_or_else(|| UnitsError::NotAge(s.to_string()))
}

/// An idle time: 0 (off), or an age such as 90s, 10m, 2h.
pub fn parse_idle(s: &str) -> Result<Duration, UnitsError> {
    match s.trim() {
        "0" => Ok(Duration::ZERO),
        t => parse_age(t).map_err(|_| UnitsError::NotIdle(s.to_string())),
    }
}

/// Human-readable size: 1.5 GiB.
pub fn human_size(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        let ok: &[(&str, u64)] = &[
            ("4096", 4096),
            ("20G", 20 << 30),
            ("20GiB", 20 << 30),
            ("500m", 500 << 20),
            ("1.5T", 3 << 39),
            ("0", 0),
            ("1k", 1024),
        ];
        for (s, want) in ok {
            assert_eq!(parse_size(s), Ok(*want), "{s}");
        }
        for bad in ["", "G", "20X", "-1G", "1.2.3M"] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn ages() {
        let ok: &[(&str, u64)] = &[
            ("30d", 30 * 86400),
            ("12h", 43200),
            ("90m", 5400),
            ("2w", 1209600),
            ("45s", 45),
            ("1.5d", 36 * 3600),
            ("1h 30m", 5400),
            ("2days", 2 * 86400),
        ];
        for (s, want) in ok {
            assert_eq!(parse_age(s), Ok(Duration::from_secs(*want)), "{s}");
        }
        for bad in ["", "0", "30", "d", "3x", "-1d", "1.5x", "12 parsecs"] {
            assert!(parse_age(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn idle_times() {
        let cases: &[(&str, Result<u64, UnitsError>)] = &[
            ("0", Ok(0)),
            (" 0 ", Ok(0)),
            ("90s", Ok(90)),
            ("10m", Ok(600)),
            ("soon", Err(UnitsError::NotIdle("soon".into()))),
            ("5", Err(UnitsError::NotIdle("5".into()))),
        ];
        for (s, want) in cases {
            let want = want.clone().map(Duration::from_secs);
            assert_eq!(parse_idle(s), want, "{s}");
        }
        assert_eq!(
            UnitsError::NotIdle("5".into()).to_string(),
            "'5' is not an idle time; use 0 (off) or e.g. 90s, 10m, 2h"
        );
    }

    #[test]
    fn human_sizes() {
        assert_eq!(human_size(512), "512 B");
        assert_eq!(human_size(1536), "1.5 KiB");
        assert_eq!(human_size(20 << 30), "20.0 GiB");
    }
}
