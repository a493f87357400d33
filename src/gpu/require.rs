//! `NVIDIA_REQUIRE_*` constraints of an image, checked against the driver (pure).
//!
//! Grammar (libnvidia-container's `dsl.c`): a constraint is a list of alternatives separated by
//! spaces (any one may hold), each a list of `name OP value` terms separated by commas (all must
//! hold). Names: `cuda`, `driver`, `arch` (versions: digits and dots, `12.4` = `12.4.0`) and `brand`
//! (a word, case-insensitive, `=`/`!=` only). Operators: `=`, `!=`, `<`, `<=`, `>`, `>=`.
//! Every `NVIDIA_REQUIRE_*` variable must hold. `arch`/`brand` are checked on every selected GPU.

use std::cmp::Ordering;

/// What is known about the driver and one GPU. `None` = not known here (no NVML): such terms hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Facts {
    /// CUDA version the driver supports, e.g. `12.4`.
    pub cuda: Option<String>,
    /// Driver version, e.g. `550.54.14`.
    pub driver: Option<String>,
    /// Compute capability of the GPU, e.g. `9.0`.
    pub arch: Option<String>,
    /// Brand of the GPU, e.g. `tesla`, `geforce`.
    pub brand: Option<String>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RequireError {
    #[error("invalid expression {expr:?} in {var}={value:?} (expected NAME OP VALUE with NAME cuda|driver|arch|brand and OP =|!=|<|<=|>|>=); set NVIDIA_DISABLE_REQUIRE=1 to skip the check")]
    Invalid {
        var: String,
        value: String,
        expr: String,
    },
    #[error("the image needs {need} ({var}={value:?}) but this node has {have}; {fix}, or set NVIDIA_DISABLE_REQUIRE=1 to skip the check")]
    Unsatisfied {
        var: String,
        value: String,
        need: String,
        have: String,
        fix: String,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl Op {
    fn parse(s: &str) -> Option<Op> {
        Some(match s {
            "=" => Op::Eq,
            "!=" => Op::Ne,
            "<" => Op::Lt,
            "<=" => Op::Le,
            ">" => Op::Gt,
            ">=" => Op::Ge,
            _ => return None,
        })
    }
    fn holds(self, o: Ordering) -> bool {
        match self {
            Op::Eq => o == Ordering::Equal,
            Op::Ne => o != Ordering::Equal,
            Op::Lt => o == Ordering::Less,
            Op::Le => o != Ordering::Greater,
            Op::Gt => o == Ordering::Greater,
            Op::Ge => o != Ordering::Less,
        }
    }
}

/// Compare two versions made of digits and dots, numerically per component; missing components
/// are 0 (`12.4` = `12.4.0`). `None` when either is not such a version.
pub fn compare_versions(a: &str, b: &str) -> Option<Ordering> {
    fn parts(v: &str) -> Option<Vec<u64>> {
        if v.is_empty() || !v.bytes().all(|c| c.is_ascii_digit() || c == b'.') {
            return None;
        }
        let mut p: Vec<u64> = v
            .split('.')
            .filter(|s| !s.is_empty())
            .map(|s| s.parse().ok())
            .collect::<Option<_>>()?;
        if p.is_empty() {
            return None;
        }
        while p.len() > 1 && p.last() == Some(&0) {
            p.pop();
        }
        Some(p)
    }
    let (mut a, mut b) = (parts(a)?, parts(b)?);
    let n = a.len().max(b.len());
    a.resize(n, 0);
    b.resize(n, 0);
    Some(a.cmp(&b))
}

struct Term<'a> {
    name: &'a str,
    op: Op,
    value: &'a str,
}

fn parse_term(expr: &str) -> Option<Term<'_>> {
    let start = expr.find(['<', '>', '=', '!'])?;
    let rest = &expr[start..];
    let len = rest
        .find(|c: char| !"<>=!".contains(c))
        .unwrap_or(rest.len());
    let (name, op, value) = (&expr[..start], Op::parse(&rest[..len])?, &rest[len..]);
    if name.is_empty() || value.is_empty() {
        return None;
    }
    Some(Term { name, op, value })
}

/// Evaluate one term: Some(true/false), or None when it is malformed.
fn eval_term(t: &Term, f: &Facts) -> Option<bool> {
    let version = |have: &Option<String>| -> Option<bool> {
        compare_versions(t.value, "0")?; // the required value must be a version
        match have {
            None => Some(true),
            Some(h) => Some(t.op.holds(compare_versions(h, t.value)?)),
        }
    };
    match t.name.to_ascii_lowercase().as_str() {
        "cuda" => version(&f.cuda),
        "driver" => version(&f.driver),
        "arch" => version(&f.arch),
        "brand" => {
            let eq = f.brand.as_ref().map(|b| b.eq_ignore_ascii_case(t.value));
            match (t.op, eq) {
                (Op::Eq | Op::Ne, None) => Some(true),
                (Op::Eq, Some(e)) => Some(e),
                (Op::Ne, Some(e)) => Some(!e),
                _ => None,
            }
        }
        _ => None,
    }
}

/// Check one constraint variable (`var=value`) against the facts of every GPU (or the driver
/// alone when `gpus` is empty).
pub fn check_one(
    var: &str,
    value: &str,
    gpus: &[Facts],
    driver: &Facts,
) -> Result<(), RequireError> {
    let single = [driver.clone()];
    let all = if gpus.is_empty() { &single[..] } else { gpus };
    for facts in all {
        let mut any = false;
        let mut alternatives = 0;
        for alt in value.split(' ').filter(|s| !s.is_empty()) {
            alternatives += 1;
            let mut ok = true;
            for expr in alt.split(',').filter(|s| !s.is_empty()) {
                let invalid = || RequireError::Invalid {
                    var: var.into(),
                    value: value.into(),
                    expr: expr.into(),
                };
                let term = parse_term(expr).ok_or_else(invalid)?;
                if !eval_term(&term, facts).ok_or_else(invalid)? {
                    ok = false;
                    break;
                }
            }
            if ok {
                any = true;
                break;
            }
        }
        if !any && alternatives > 0 {
            return Err(unsatisfied(var, value, facts));
        }
    }
    Ok(())
}

fn unsatisfied(var: &str, value: &str, f: &Facts) -> RequireError {
    let first = value.split(' ').find(|s| !s.is_empty()).unwrap_or(value);
    let cuda_term = first
        .split(',')
        .filter_map(parse_term)
        .find(|t| t.name.eq_ignore_ascii_case("cuda"));
    let unknown = "unknown".to_string();
    let driver = f.driver.as_ref().unwrap_or(&unknown);
    let (need, fix) = match cuda_term {
        Some(t) => (
            format!("CUDA {} {}", op_str(t.op), t.value),
            "update the NVIDIA driver or use an image built for an older CUDA".to_string(),
        ),
        None => (
            first.to_string(),
            "use a node or image that matches".to_string(),
        ),
    };
    let mut have = format!("driver {driver}");
    if let Some(c) = &f.cuda {
        have.push_str(&format!(" supporting CUDA {c}"));
    }
    if let Some(a) = &f.arch {
        have.push_str(&format!(", GPU arch {a}"));
    }
    if let Some(b) = &f.brand {
        have.push_str(&format!(", brand {b}"));
    }
    RequireError::Unsatisfied {
        var: var.into(),
        value: value.into(),
        need,
        have,
        fix,
    }
}

fn op_str(op: Op) -> &'static str {
    match op {
        Op::Eq => "=",
        Op::Ne => "!=",
        Op::Lt => "<",
        Op::Le => "<=",
        Op::Gt => ">",
        Op::Ge => ">=",
    }
}

/// Is the check turned off? `NVIDIA_DISABLE_REQUIRE` set to anything but empty/0/false/no.
pub fn disabled(env: &[(String, String)]) -> bool {
    env.iter().any(|(k, v)| {
        k == "NVIDIA_DISABLE_REQUIRE"
            && !matches!(
                v.trim().to_ascii_lowercase().as_str(),
                "" | "0" | "false" | "no"
            )
    })
}

/// The constraints of an image: every `NVIDIA_REQUIRE_*`, sorted by name; an image with
/// `CUDA_VERSION` but no `NVIDIA_REQUIRE_CUDA` (legacy CUDA images) requires `cuda>=MAJOR.MINOR`.
pub fn constraints(image_env: &[(String, String)]) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = image_env
        .iter()
        .filter(|(k, _)| k.starts_with("NVIDIA_REQUIRE_"))
        .cloned()
        .collect();
    if !out.iter().any(|(k, _)| k == "NVIDIA_REQUIRE_CUDA") {
        if let Some((_, v)) = image_env.iter().find(|(k, _)| k == "CUDA_VERSION") {
            let mm: Vec<&str> = v.split('.').take(2).collect();
            if mm.len() == 2 && compare_versions(&mm.join("."), "0").is_some() {
                out.push((
                    "NVIDIA_REQUIRE_CUDA".into(),
                    format!("cuda>={}", mm.join(".")),
                ));
            }
        }
    }
    out.sort();
    out.dedup_by(|a, b| a.0 == b.0);
    out
}

/// Check every constraint of the image.
pub fn check(
    image_env: &[(String, String)],
    gpus: &[Facts],
    driver: &Facts,
) -> Result<(), RequireError> {
    for (k, v) in constraints(image_env) {
        check_one(&k, &v, gpus, driver)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(cuda: &str, driver: &str, arch: &str, brand: &str) -> Facts {
        let o = |s: &str| (!s.is_empty()).then(|| s.to_string());
        Facts {
            cuda: o(cuda),
            driver: o(driver),
            arch: o(arch),
            brand: o(brand),
        }
    }

    #[test]
    fn version_compare_table() {
        use Ordering::*;
        let cases = [
            ("12.4", "12.4", Some(Equal)),
            ("12.4", "12.4.0", Some(Equal)),
            ("12.4.0.0", "12.4", Some(Equal)),
            ("12.10", "12.9", Some(Greater)),
            ("12.9", "12.10", Some(Less)),
            ("550.54.14", "550.54.15", Some(Less)),
            ("580.159.04", "580.159.4", Some(Equal)),
            ("13", "12.9", Some(Greater)),
            ("12", "12.0.1", Some(Less)),
            ("0", "0.0", Some(Equal)),
            ("12.a", "12", None),
            ("", "1", None),
            ("1", "-1", None),
            ("..", "1", None),
        ];
        for (a, b, want) in cases {
            assert_eq!(compare_versions(a, b), want, "{a} vs {b}");
        }
    }

    #[test]
    fn grammar_table() {
        let h200 = facts("13.0", "580.159.04", "9.0", "nvidia");
        let cases: &[(&str, bool)] = &[
            ("cuda>=12.4", true),
            ("cuda>=13.0", true),
            ("cuda>=13.1", false),
            ("cuda>13.0", false),
            ("cuda<13.0", false),
            ("cuda<=13.0", true),
            ("cuda=13", true),
            ("cuda!=13.0", false),
            ("CUDA>=12.0", true),
            ("driver>=580", true),
            ("driver<580.159.05", true),
            ("driver>=581", false),
            ("arch>=8.0", true),
            ("arch=8.0", false),
            ("brand=NVIDIA", true),
            ("brand!=geforce", true),
            ("brand=tesla", false),
            // space = or
            ("cuda>=14.0 driver>=580", true),
            ("cuda>=14.0 driver>=600", false),
            // comma = and
            ("cuda>=12.0,driver>=580", true),
            ("cuda>=12.0,driver>=600", false),
            // a typical NVIDIA image line
            (
                "cuda>=13.1 brand=tesla,driver>=470,driver<471 brand=nvidia,driver>=580,driver<581",
                true,
            ),
            ("cuda>=13.1 brand=tesla,driver>=470,driver<471", false),
            ("  cuda>=12.0  ", true),
            ("", true),
        ];
        for (expr, want) in cases {
            let r = check_one(
                "NVIDIA_REQUIRE_CUDA",
                expr,
                std::slice::from_ref(&h200),
                &h200,
            );
            assert_eq!(r.is_ok(), *want, "{expr}: {r:?}");
        }
    }

    #[test]
    fn invalid_expressions() {
        let f = facts("12.4", "550.54.14", "", "");
        for bad in [
            "cuda",
            "cuda>=",
            ">=12",
            "cuda=>12",
            "cuda~12",
            "foo>=1",
            "cuda>=abc",
            "brand>=tesla",
            "cuda>=99 x",
        ] {
            let r = check_one("NVIDIA_REQUIRE_CUDA", bad, &[], &f);
            assert!(
                matches!(r, Err(RequireError::Invalid { .. })),
                "{bad}: {r:?}"
            );
        }
    }

    #[test]
    fn unknown_facts_hold() {
        let f = facts("", "550.54.14", "", "");
        assert!(check_one("X", "cuda>=99,arch>=9.0,brand=tesla", &[], &f).is_ok());
        assert!(check_one("X", "driver>=551", &[], &f).is_err());
    }

    #[test]
    fn every_gpu_must_match() {
        let d = facts("12.4", "550.54.14", "", "");
        let a = facts("12.4", "550.54.14", "8.0", "tesla");
        let b = facts("12.4", "550.54.14", "7.0", "tesla");
        assert!(check_one("X", "arch>=7.0", &[a.clone(), b.clone()], &d).is_ok());
        assert!(check_one("X", "arch>=8.0", std::slice::from_ref(&a), &d).is_ok());
        assert!(check_one("X", "arch>=8.0", &[a, b], &d).is_err());
    }

    #[test]
    fn error_names_cuda_and_driver() {
        let f = facts("12.4", "550.54.14", "", "");
        let e = check_one(
            "NVIDIA_REQUIRE_CUDA",
            "cuda>=12.8 brand=tesla,driver>=470,driver<471",
            &[],
            &f,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("CUDA >= 12.8"), "{e}");
        assert!(e.contains("driver 550.54.14 supporting CUDA 12.4"), "{e}");
        assert!(e.contains("NVIDIA_DISABLE_REQUIRE"), "{e}");
    }

    #[test]
    fn constraints_and_disable() {
        let env = |v: &[(&str, &str)]| -> Vec<(String, String)> {
            v.iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect()
        };
        assert_eq!(
            constraints(&env(&[("CUDA_VERSION", "12.4.1"), ("PATH", "/bin")])),
            env(&[("NVIDIA_REQUIRE_CUDA", "cuda>=12.4")])
        );
        assert_eq!(
            constraints(&env(&[
                ("CUDA_VERSION", "12.4.1"),
                ("NVIDIA_REQUIRE_CUDA", "cuda>=12.1"),
                ("NVIDIA_REQUIRE_ARCH", "arch>=8.0")
            ])),
            env(&[
                ("NVIDIA_REQUIRE_ARCH", "arch>=8.0"),
                ("NVIDIA_REQUIRE_CUDA", "cuda>=12.1")
            ])
        );
        assert!(constraints(&env(&[("CUDA_VERSION", "weird")])).is_empty());
        for (v, want) in [
            ("1", true),
            ("true", true),
            ("yes", true),
            ("", false),
            ("0", false),
            ("false", false),
        ] {
            assert_eq!(
                disabled(&env(&[("NVIDIA_DISABLE_REQUIRE", v)])),
                want,
                "{v}"
            );
        }
        assert!(!disabled(&[]));
        let f = facts("12.4", "550.54.14", "", "");
        assert!(check(
            &env(&[
                ("NVIDIA_REQUIRE_CUDA", "cuda>=12.0"),
                ("NVIDIA_REQUIRE_DRIVER", "driver>=560")
            ]),
            &[],
            &f
        )
        .is_err());
    }
}
