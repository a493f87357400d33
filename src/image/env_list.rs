//! An environment being built from assignments (an image's Env, env files, the host's): each
//! name once, in the order it was first set, with the last value set, as a shell or execve would
//! see it. Linear in the number of assignments: an image may carry hundreds of thousands.

use std::collections::HashMap;

#[derive(Debug, Default, Clone)]
pub struct EnvList {
    vars: Vec<(String, String)>,
    at: HashMap<String, usize>,
}

impl EnvList {
    pub fn new() -> EnvList {
        EnvList::default()
    }

    pub fn set(&mut self, k: &str, v: impl Into<String>) {
        match self.at.get(k) {
            Some(&i) => self.vars[i].1 = v.into(),
            None => {
                self.at.insert(k.to_string(), self.vars.len());
                self.vars.push((k.to_string(), v.into()));
            }
        }
    }

    pub fn get(&self, k: &str) -> Option<&str> {
        self.at.get(k).map(|&i| self.vars[i].1.as_str())
    }

    pub fn into_vec(self) -> Vec<(String, String)> {
        self.vars
    }
}

impl FromIterator<(String, String)> for EnvList {
    fn from_iter<I: IntoIterator<Item = (String, String)>>(it: I) -> EnvList {
        let mut e = EnvList::new();
        for (k, v) in it {
            e.set(&k, v);
        }
        e
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_order_last_value() {
        type Pairs<'a> = &'a [(&'a str, &'a str)];
        let cases: &[(Pairs, Pairs)] = &[
            (&[], &[]),
            (&[("A", "1"), ("B", "2")], &[("A", "1"), ("B", "2")]),
            (
                &[("A", "1"), ("B", "2"), ("A", "3")],
                &[("A", "3"), ("B", "2")],
            ),
            (&[("A", ""), ("A", "x")], &[("A", "x")]),
        ];
        for (sets, want) in cases {
            let e: EnvList = sets
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            let got: Vec<(&str, &str)> = e
                .vars
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            assert_eq!(got, *want, "{sets:?}");
        }
    }

    #[test]
    fn many_assignments() {
        let mut e = EnvList::new();
        for i in 0..200_000 {
            e.set(&format!("V{}", i % 100_000), i.to_string());
        }
        assert_eq!(e.get("V7"), Some("100007"));
        assert_eq!(e.into_vec().len(), 100_000);
    }
}
