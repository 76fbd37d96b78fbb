//! Isolation across napi: the options arrive as a JSON string (`index.js` stringifies the
//! caller's object, so serde names the field of any error), and the probe and doctor leave as
//! JSON that `index.js` parses (their `number | false` shapes have no napi object form).

use napi_derive::napi;

use super::convert::{Decoded, invalid};
use finn_isolate::{self as isolate, IsolationOptions, IsolationReport};

/// `field` is where the JSON came from (`spec.isolation`, `config.isolation`).
pub fn options_from_json(json: &str, field: &str) -> Decoded<IsolationOptions> {
  let value: serde_json::Value =
    serde_json::from_str(json).map_err(|e| invalid(format!("{field} must be an object: {e}")))?;
  let options = IsolationOptions::from_json(value)
    .map_err(|e| invalid(format!("{}.{e}", field.trim_end_matches(".isolation"))))?;
  // The allowlist's entries, checked as the proxy reads them: a bad one fails the call here,
  // naming it (`spec.isolation.network.allow[1]: ...`), never the job at the proxy.
  if let Some(network) = &options.egress {
    finn_egress::Policy::new(network).map_err(|e| invalid(format!("{field}.{e}")))?;
  }
  Ok(options)
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
pub fn probe_isolation_json() -> napi::Result<String> {
  let p = capped_probe()?;
  Ok(serde_json::json!({
    "landlock": p.landlock.map_or(serde_json::Value::Bool(false), Into::into),
    "seccomp": p.seccomp,
    "seccompInstructions": isolate::seccomp_instructions(),
    "userns": p.userns,
    "cgroup": p.cgroup.map_or(serde_json::Value::Bool(false), |k| k.as_str().into()),
    "bwrap": p.bwrap.as_ref().map_or(serde_json::Value::Bool(false), |b| b.to_string_lossy().into()),
    "sysAdmin": p.sys_admin,
    "uid": p.uid,
    "landlockKernel": p.landlock_kernel.map_or(serde_json::Value::Bool(false), Into::into),
    "landlockRights": missing_rights(&p),
    "egress": egress_rung(&p),
  })
  .to_string())
}

/// Which rung of the network allowlist's ladder this host stands on: 1 where a job can get a
/// network namespace of its own (root, or user namespaces), whose only route out is the
/// proxy; 2 where it cannot but seccomp and landlock ABI 6 let its reaper make every TCP
/// connect of the job (`finn_isolate::route`); 3 otherwise, and an allowlist then means no
/// network (refused when `required`).
fn egress_rung(p: &isolate::Probe) -> u8 {
  if p.sys_admin || p.userns {
    1
  } else if p.seccomp && p.landlock.is_some_and(|abi| abi >= 6) {
    2
  } else {
    3
  }
}

/// The probe with `FINN_SANDBOX_LANDLOCK_ABI_MAX` applied; a bad value is an error naming it.
fn capped_probe() -> napi::Result<isolate::Probe> {
  let max = isolate::landlock_abi_max().map_err(|e| napi::Error::from_reason(e.to_string()))?;
  Ok(isolate::probe().capped(max))
}

/// Per landlock right of ABI 3 to 6 this host (or the cap) lacks: what its absence means.
fn missing_rights(p: &isolate::Probe) -> serde_json::Value {
  isolate::LANDLOCK_RIGHTS
    .iter()
    .filter(|r| p.landlock.is_none_or(|abi| abi < r.abi))
    .map(|r| serde_json::json!({"name": r.layer, "sinceAbi": r.abi, "missing": r.missing(p)}))
    .collect()
}

/// Per layer: available, why not, what fixes it, as JSON: `index.js`'s `doctor()`.
#[napi]
pub fn doctor_json() -> napi::Result<String> {
  let d = isolate::doctor(&capped_probe()?);
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
  let p = capped_probe()?;
  let egress = match egress_rung(&p) {
    1 => {
      serde_json::json!({"rung": 1, "reason": "a job with a network allowlist gets a network namespace of its own whose only route out is the pool's egress proxy"})
    }
    2 => serde_json::json!({
      "rung": 2,
      "reason": "no network namespace can be made (no CAP_SYS_ADMIN and no user namespaces): a job with a network allowlist makes TCP sockets only, and its reaper makes every connect, to the pool's egress proxy or nowhere (seccomp user notification, landlock)",
      "remedy": "nothing needed; user namespaces would give each job a network namespace of its own (rung 1)",
    }),
    _ => serde_json::json!({
      "rung": 3,
      "reason": "no network namespace can be made (no CAP_SYS_ADMIN and no user namespaces): a job with a network allowlist gets no network (refused with ISOLATION_UNAVAILABLE when required)",
      "remedy": "allow unprivileged user namespaces (user.max_user_namespaces > 0; in Docker, a seccomp profile that permits unshare and clone with CLONE_NEWUSER)",
    }),
  };
  Ok(
    serde_json::json!({"backend": d.backend, "layers": layers, "ms": d.ms, "egress": egress})
      .to_string(),
  )
}
