//! Merging the `stats` bodies of the replicas of a partitioned network (virtual-time
//! simulation on several threads, the real-time engine's partitions).
use serde_json::{json, Map, Value};

/// Add `b` into `a`: numbers add up, objects merge key by key, an empty list takes the other
/// replica's (a distribution's buckets are recorded by the one replica that runs the half
/// of the pipeline it measures, so its quantiles add to zeros and its buckets replace an
/// empty list), anything else stays `a`'s. Counters of a pipeline are split between the
/// replicas of its two halves.
pub fn add_values(a: &mut Value, b: &Value) {
    match (a, b) {
        (Value::Array(x), Value::Array(y)) if x.is_empty() => x.clone_from(y),
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                match a.get_mut(k) {
                    Some(x) => add_values(x, v),
                    None => {
                        a.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (Value::Number(x), Value::Number(y)) => {
            let sum = match (x.as_u64(), y.as_u64()) {
                (Some(p), Some(q)) => json!(p.saturating_add(q)),
                _ => json!(x.as_f64().unwrap_or(0.0) + y.as_f64().unwrap_or(0.0)),
            };
            *x = match sum {
                Value::Number(n) => n,
                _ => x.clone(),
            };
        }
        _ => {}
    }
}

/// Add replica body `m` into `acc` (see [`add_values`]); `now_ns` stays `acc`'s.
pub fn merge_body(acc: &mut Map<String, Value>, m: Map<String, Value>) {
    for (k, v) in m {
        match k.as_str() {
            "now_ns" => {}
            _ => match acc.get_mut(&k) {
                Some(x) => add_values(x, &v),
                None => {
                    acc.insert(k, v);
                }
            },
        }
    }
}
