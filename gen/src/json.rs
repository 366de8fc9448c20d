//! Minimal JSON object writer for the one-line reports (no dependencies).

use std::fmt::Write;

#[derive(Default)]
pub struct Obj {
    s: String,
}

impl Obj {
    pub fn new() -> Obj {
        Obj { s: String::new() }
    }
    fn key(&mut self, k: &str) {
        self.s.push(if self.s.is_empty() { '{' } else { ',' });
        let _ = write!(self.s, "{}:", quote(k));
    }
    pub fn int(mut self, k: &str, v: u64) -> Obj {
        self.key(k);
        let _ = write!(self.s, "{v}");
        self
    }
    pub fn num(mut self, k: &str, v: f64) -> Obj {
        self.key(k);
        self.s.push_str(&fmt_f64(v));
        self
    }
    pub fn opt_num(self, k: &str, v: Option<f64>) -> Obj {
        match v {
            Some(x) => self.num(k, x),
            None => self.raw(k, "null"),
        }
    }
    pub fn str(mut self, k: &str, v: &str) -> Obj {
        self.key(k);
        self.s.push_str(&quote(v));
        self
    }
    pub fn bool(self, k: &str, v: bool) -> Obj {
        self.raw(k, if v { "true" } else { "false" })
    }
    pub fn raw(mut self, k: &str, v: &str) -> Obj {
        self.key(k);
        self.s.push_str(v);
        self
    }
    pub fn finish(mut self) -> String {
        if self.s.is_empty() {
            self.s.push('{');
        }
        self.s.push('}');
        self.s
    }
}

/// Format a float as JSON (non-finite values become null).
pub fn fmt_f64(v: f64) -> String {
    if !v.is_finite() {
        return "null".into();
    }
    if v == v.trunc() && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        // Rust's Display for f64 is the shortest round-trip form and never
        // uses exponent notation, so it is always valid JSON.
        format!("{v}")
    }
}

pub fn num_array(v: &[f64]) -> String {
    let items: Vec<String> = v.iter().map(|x| fmt_f64(*x)).collect();
    format!("[{}]", items.join(","))
}

pub fn quote(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            '\n' => o.push_str("\\n"),
            c if (c as u32) < 0x20 => {
                let _ = write!(o, "\\u{:04x}", c as u32);
            }
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn writes_object() {
        let s = Obj::new()
            .int("a", 3)
            .num("b", 1.5)
            .str("c", "x\"y")
            .bool("d", true)
            .opt_num("e", None)
            .finish();
        assert_eq!(s, r#"{"a":3,"b":1.5,"c":"x\"y","d":true,"e":null}"#);
        assert_eq!(Obj::new().finish(), "{}");
        assert_eq!(fmt_f64(f64::NAN), "null");
        assert_eq!(num_array(&[1.0, 0.25]), "[1,0.25]");
        assert_eq!(fmt_f64(1e-7), "0.0000001");
        assert_eq!(fmt_f64(-2.5), "-2.5");
    }
}
