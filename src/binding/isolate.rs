//! Isolation across napi: the options arrive as a JSON string (`index.js` stringifies the
//! caller's object, so serde names the field of any error), and the probe and doctor leave as
//! JSON that `index.js` parses (their `number | false` shapes have no napi object form).

use napi_derive::napi;

use super::convert::{Checked, invalid};
use crate::core::isolate::{self, IsolationOptions, IsolationReport};

/// `field` is where the JSON came from (`spec.isolation`, `config.isolation`).
pub fn options_from_json(json: &str, field: &str) -> Checked<IsolationOptions> {
  let value: serde_json::Value =
    serde_json::from_str(json).map_err(|e| invalid(format!("{field} must be an object: {e}")))?;
  IsolationOptions::from_json(value)
    .map_err(|e| invalid(format!("{}.{e}", field.trim_end_matches(".isolation"))))
}

/// `ExecResult.isolation`.
#[napi(object)]
pub struct IsolationInfo {
  /// `"native"` (the addon's own layers) or `"bwrap"` (bubblewrap).
  pub backend: String,
  /// The layers applied, cheapest first (`rlimits`, `privileges`, `cgroup`, `netns`, `pidns`,
  /// `mountns`, `protect`, `landlock`, `seccomp`).
  pub applied: Vec<String>,
  /// Layers this host could not apply, each with why.
  pub degraded: Vec<String>,
}

impl From<IsolationReport> for IsolationInfo {
  fn from(r: IsolationReport) -> Self {
    IsolationInfo {
      backend: r.backend.into(),
      applied: r.applied.iter().map(|s| (*s).to_owned()).collect(),
      degraded: r.degraded,
    }
  }
}

/// Starts the isolation probe on a thread of its own (`index.js` does at load): the first
/// `probeIsolation()` or `doctor()` then finds it done, or waits for it, instead of running it
/// on Node's thread.
#[napi]
pub fn probe_isolation_in_background() {
  // Without a thread (a process limit), the first caller probes on its own thread.
  let _ = std::thread::Builder::new()
    .name("finn-probe".into())
    .spawn(|| {
      isolate::probe();
    });
}

/// Machine facts (cached after the first call), as JSON: `index.js`'s `probeIsolation()`.
#[napi]
pub fn probe_isolation_json() -> String {
  let p = isolate::probe();
  serde_json::json!({
    "landlock": p.landlock.map_or(serde_json::Value::Bool(false), Into::into),
    "seccomp": p.seccomp,
    "userns": p.userns,
    "cgroup": p.cgroup.map_or(serde_json::Value::Bool(false), |k| k.as_str().into()),
    "bwrap": p.bwrap.as_ref().map_or(serde_json::Value::Bool(false), |b| b.to_string_lossy().into()),
    "sysAdmin": p.sys_admin,
    "uid": p.uid,
  })
  .to_string()
}

/// Per layer: available, why not, what fixes it, as JSON: `index.js`'s `doctor()`.
#[napi]
pub fn doctor_json() -> String {
  let d = isolate::doctor();
  let layers: Vec<serde_json::Value> = d
    .layers
    .iter()
    .map(|l| {
      let mut o = serde_json::json!({"name": l.name, "available": l.available});
      if let Some(r) = &l.reason {
        o["reason"] = r.clone().into();
      }
      if let Some(r) = &l.remedy {
        o["remedy"] = r.clone().into();
      }
      o
    })
    .collect();
  serde_json::json!({"backend": d.backend, "layers": layers, "ms": d.ms}).to_string()
}
