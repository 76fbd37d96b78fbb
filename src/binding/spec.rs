//! The one place where a job's spec crosses between JS and Rust: the field-by-field decoder
//! (any JS value, errors naming the field), the packed decoder (one string `index.js` builds
//! when every field already has the right JS type) with its field order, and the `ExecSpec`
//! handed to a JS executor. Both decoders yield a [`RawJob`]; every check of a value's range
//! (positive timeout, limits, NUL bytes, empty strings) is `JobSpec::new`'s, so both paths
//! refuse the same spec with the same message.

use napi::Env;
use napi::bindgen_prelude::{Object, Unknown};

use super::convert::{
  Decoded, get, invalid, is_nullish, object, optional_string, optional_uint, required_string,
  required_string_array, string, string_map,
};
use finn_pool::{Lane, RawJob};

fn lane(value: Option<&Unknown>) -> Decoded<Lane> {
  if is_nullish(value)? {
    return Ok(Lane::Interactive);
  }
  let value = value.expect("checked not nullish");
  match string(value, "lane")?.as_str() {
    "interactive" => Ok(Lane::Interactive),
    "system" => Ok(Lane::System),
    other => Err(invalid(format!(
      "lane must be \"interactive\" or \"system\", not {other:?}"
    ))),
  }
}

/// An `ExecSpec` plus `exec`'s lane and jailRoot arguments.
pub fn raw_job(
  spec: &Unknown,
  lane_arg: Option<&Unknown>,
  jail_root: Option<&Unknown>,
) -> Decoded<RawJob> {
  if is_nullish(Some(spec))? {
    return Err(invalid("spec is required (an ExecSpec object)".into()));
  }
  let obj = object(spec, "spec")?;
  let binary_path = required_string(&obj, "binaryPath", "spec.binaryPath")?;
  let args = required_string_array(&obj, "args", "spec.args")?;
  let cwd = required_string(&obj, "cwd", "spec.cwd")?;
  let env = match get(&obj, "env", "spec.env")? {
    Some(v) => string_map(&v, "spec.env")?,
    None => {
      return Err(invalid(
        "spec.env is required (an object of strings)".into(),
      ));
    }
  };
  let jail_root = if is_nullish(jail_root)? {
    None
  } else {
    Some(string(jail_root.expect("checked not nullish"), "jailRoot")?)
  };
  Ok(RawJob {
    binary_path,
    args,
    cwd,
    env,
    timeout_ms: optional_uint(&obj, "timeoutMs", "spec.timeoutMs")?,
    max_buffer: optional_uint(&obj, "maxBuffer", "spec.maxBuffer")?,
    session_id: optional_string(&obj, "sessionId", "spec.sessionId")?,
    jail_root,
    lane: Some(lane(lane_arg)?),
    // `index.js` hands it over as JSON (see binding/isolate.rs).
    isolation: optional_string(&obj, "isolation", "spec.isolation")?
      .map(|json| super::isolate::options_from_json(&json, "spec.isolation"))
      .transpose()?,
  })
}

/// The packed form's fields, joined by NUL, in this order: this header, then `nArgs` args, then
/// `nEnv` (key, value) pairs. An optional string is `+value` when present and empty when absent;
/// an absent number is empty. `index.js`'s `pack` writes the same order. A NUL inside any value
/// changes the field count, so it is refused here (and `index.js` then takes the field-by-field
/// path, which names the field).
pub const PACKED_HEADER: [&str; 10] = [
  "v1",
  "lane",
  "jailRoot",
  "binaryPath",
  "cwd",
  "timeoutMs",
  "maxBuffer",
  "sessionId",
  "nArgs",
  "nEnv",
];

/// A job `index.js` packed into one string instead of a napi call per field and per env entry
/// (which cost about 2.4 us per entry); see [`PACKED_HEADER`].
pub fn packed_job(packed: &str) -> Decoded<RawJob> {
  let malformed = || invalid("packed spec is malformed".into());
  let fields: Vec<&str> = packed.split('\0').collect();
  let header = PACKED_HEADER.len();
  if fields.len() < header || fields[0] != PACKED_HEADER[0] {
    return Err(malformed());
  }
  let count = |s: &str| s.parse::<usize>().map_err(|_| malformed());
  let (n_args, n_env) = (count(fields[8])?, count(fields[9])?);
  let args_end = header.checked_add(n_args).ok_or_else(malformed)?;
  let env_len = n_env.checked_mul(2).ok_or_else(malformed)?;
  if args_end.checked_add(env_len) != Some(fields.len()) {
    return Err(malformed());
  }
  let optional_string = |s: &str| match s.strip_prefix('+') {
    Some(value) => Ok(Some(value.to_owned())),
    None if s.is_empty() => Ok(None),
    None => Err(malformed()),
  };
  let optional_number = |s: &str| {
    if s.is_empty() {
      Ok(None)
    } else {
      s.parse::<u64>().map(Some).map_err(|_| malformed())
    }
  };
  let lane = match fields[1] {
    "interactive" => Lane::Interactive,
    "system" => Lane::System,
    _ => return Err(malformed()),
  };
  Ok(RawJob {
    binary_path: fields[3].to_owned(),
    args: fields[header..args_end]
      .iter()
      .map(|a| (*a).to_owned())
      .collect(),
    cwd: fields[4].to_owned(),
    env: fields[args_end..]
      .chunks_exact(2)
      .map(|kv| (kv[0].to_owned(), kv[1].to_owned()))
      .collect(),
    timeout_ms: optional_number(fields[5])?,
    max_buffer: optional_number(fields[6])?,
    session_id: optional_string(fields[7])?,
    jail_root: optional_string(fields[2])?,
    lane: Some(lane),
    // `index.js` never packs a spec that carries `isolation`.
    isolation: None,
  })
}

/// The `ExecSpec` a JS executor receives for `job`. A missing `timeoutMs` or `maxBuffer` is
/// left out, so the executor's own default applies.
pub fn exec_spec<'env>(env: &'env Env, job: &RawJob) -> napi::Result<Object<'env>> {
  let mut spec = Object::new(env)?;
  spec.set("binaryPath", job.binary_path.as_str())?;
  spec.set("args", job.args.clone())?;
  spec.set("cwd", job.cwd.as_str())?;
  if let Some(ms) = job.timeout_ms {
    spec.set("timeoutMs", ms as f64)?;
  }
  let mut env_obj = Object::new(env)?;
  for (k, v) in &job.env {
    env_obj.set(k, v.as_str())?;
  }
  spec.set("env", env_obj)?;
  if let Some(bytes) = job.max_buffer {
    spec.set("maxBuffer", bytes as f64)?;
  }
  if let Some(session) = &job.session_id {
    spec.set("sessionId", session.as_str())?;
  }
  Ok(spec)
}

#[cfg(test)]
mod tests {
  use super::*;

  fn pack(fields: &[&str]) -> String {
    fields.join("\0")
  }

  #[test]
  fn a_packed_job_round_trips() {
    let raw = packed_job(&pack(&[
      "v1",
      "system",
      "+/jail",
      "/bin/echo",
      "/tmp",
      "500",
      "",
      "+s1",
      "2",
      "1",
      "a",
      "",
      "PATH",
      "/bin",
    ]))
    .unwrap();
    assert_eq!(raw.lane, Some(Lane::System));
    assert_eq!(raw.jail_root.as_deref(), Some("/jail"));
    assert_eq!(raw.args, vec!["a".to_owned(), String::new()]);
    assert_eq!(raw.env, vec![("PATH".to_owned(), "/bin".to_owned())]);
    assert_eq!((raw.timeout_ms, raw.max_buffer), (Some(500), None));
    assert_eq!(raw.session_id.as_deref(), Some("s1"));
  }

  #[test]
  fn a_nul_inside_a_value_or_a_wrong_count_is_refused() {
    let good = [
      "v1",
      "interactive",
      "",
      "/bin/true",
      "/",
      "",
      "",
      "",
      "1",
      "0",
      "x",
    ];
    assert!(packed_job(&pack(&good)).is_ok());
    let corrupt = [
      (10, "x\0y"), // a NUL inside an arg adds a field
      (8, "2"),     // wrong count
      (1, "other"), // unknown lane
      (5, "-1"),    // not a count
      (7, "x"),     // optional string without its + marker
    ];
    for (at, value) in corrupt {
      let mut fields = good;
      fields[at] = value;
      assert!(packed_job(&pack(&fields)).is_err(), "{at}: {value:?}");
    }
    assert!(packed_job("v2").is_err());
  }
}
