//! Tiny command-line parser: `--flag value` / `--switch` pairs with
//! validation against the set of options a subcommand accepts.

use std::collections::HashMap;

pub struct Args {
    vals: HashMap<String, Option<String>>,
}

impl Args {
    /// Parse `argv` (without the subcommand). `with_value` lists options that
    /// take a value, `switches` those that do not.
    pub fn parse(argv: &[String], with_value: &[&str], switches: &[&str]) -> Result<Args, String> {
        let mut vals = HashMap::new();
        let mut it = argv.iter();
        while let Some(a) = it.next() {
            let name = a
                .strip_prefix("--")
                .ok_or_else(|| format!("unexpected argument '{a}'"))?;
            let (name, inline) = match name.split_once('=') {
                Some((n, v)) => (n, Some(v.to_string())),
                None => (name, None),
            };
            if with_value.contains(&name) {
                let v = match inline {
                    Some(v) => v,
                    None => it
                        .next()
                        .ok_or_else(|| format!("--{name} needs a value"))?
                        .clone(),
                };
                vals.insert(name.to_string(), Some(v));
            } else if switches.contains(&name) {
                vals.insert(name.to_string(), None);
            } else {
                return Err(format!("unknown option --{name}"));
            }
        }
        Ok(Args { vals })
    }

    pub fn has(&self, k: &str) -> bool {
        self.vals.contains_key(k)
    }

    pub fn str(&self, k: &str) -> Option<&str> {
        self.vals.get(k).and_then(|v| v.as_deref())
    }

    pub fn require(&self, k: &str) -> Result<&str, String> {
        self.str(k)
            .ok_or_else(|| format!("missing required option --{k}"))
    }

    /// Parse a number, accepting k/M/G suffixes (decimal) for convenience.
    pub fn f64(&self, k: &str) -> Result<Option<f64>, String> {
        match self.str(k) {
            None => Ok(None),
            Some(s) => parse_si(s)
                .map(Some)
                .ok_or_else(|| format!("--{k}: not a number: '{s}'")),
        }
    }

    pub fn u64(&self, k: &str) -> Result<Option<u64>, String> {
        match self.f64(k)? {
            None => Ok(None),
            Some(v) if v >= 0.0 && v.fract() == 0.0 && v < 1.8e19 => Ok(Some(v as u64)),
            Some(_) => Err(format!("--{k}: expected a non-negative integer")),
        }
    }
}

/// "1.5M" -> 1.5e6, "56k" -> 56000, "10" -> 10.
pub fn parse_si(s: &str) -> Option<f64> {
    let s = s.trim();
    let (num, mult) = match s.chars().last()? {
        'k' | 'K' => (&s[..s.len() - 1], 1e3),
        'm' | 'M' => (&s[..s.len() - 1], 1e6),
        'g' | 'G' => (&s[..s.len() - 1], 1e9),
        _ => (s, 1.0),
    };
    let v: f64 = num.parse().ok()?;
    if v.is_finite() {
        Some(v * mult)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    fn v(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }
    #[test]
    fn parses() {
        let a = Args::parse(
            &v(&["--rate", "10k", "--json", "--size=64"]),
            &["rate", "size"],
            &["json"],
        )
        .unwrap();
        assert_eq!(a.f64("rate").unwrap(), Some(10_000.0));
        assert_eq!(a.u64("size").unwrap(), Some(64));
        assert!(a.has("json"));
        assert!(Args::parse(&v(&["--bogus"]), &[], &[]).is_err());
        assert!(Args::parse(&v(&["--rate"]), &["rate"], &[]).is_err());
        assert!(Args::parse(&v(&["x"]), &[], &[]).is_err());
        let a = Args::parse(&v(&["--size", "1.5"]), &["size"], &[]).unwrap();
        assert!(a.u64("size").is_err());
        assert_eq!(parse_si("1.544M"), Some(1_544_000.0));
    }
}
