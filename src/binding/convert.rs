//! JS values to core types, with errors that name the offending field. Nothing here throws a
//! type error of napi's own: every check is ours, so every message says which field is wrong.

use napi::bindgen_prelude::{Array, Object, Unknown};
use napi::{JsValue, ValueType};

use crate::core::pool::{Lane, PoolError, RawJob};

pub type Checked<T> = Result<T, PoolError>;

fn invalid(msg: String) -> PoolError {
  PoolError::InvalidSpec(msg)
}

/// napi failures while reading a value (a throwing getter, say) are still the caller's input.
fn napi_err(field: &str) -> impl Fn(napi::Error) -> PoolError + '_ {
  move |e| invalid(format!("{field} could not be read: {}", e.reason))
}

fn type_of(value: &Unknown, field: &str) -> Checked<ValueType> {
  value.get_type().map_err(napi_err(field))
}

pub fn is_nullish(value: Option<&Unknown>) -> Checked<bool> {
  match value {
    None => Ok(true),
    Some(v) => Ok(matches!(
      type_of(v, "value")?,
      ValueType::Undefined | ValueType::Null
    )),
  }
}

pub fn string(value: &Unknown, field: &str) -> Checked<String> {
  if type_of(value, field)? != ValueType::String {
    return Err(invalid(format!("{field} must be a string")));
  }
  // SAFETY: the type was checked just above.
  unsafe { value.cast::<String>() }.map_err(napi_err(field))
}

pub fn object<'a>(value: &Unknown<'a>, field: &str) -> Checked<Object<'a>> {
  if type_of(value, field)? != ValueType::Object || value.is_array().map_err(napi_err(field))? {
    return Err(invalid(format!("{field} must be an object")));
  }
  // SAFETY: the type was checked just above.
  unsafe { value.cast::<Object>() }.map_err(napi_err(field))
}

pub fn get<'a>(obj: &Object<'a>, key: &str, field: &str) -> Checked<Option<Unknown<'a>>> {
  let value: Option<Unknown> = obj.get(key).map_err(napi_err(field))?;
  match &value {
    Some(v) if type_of(v, field)? == ValueType::Null => Ok(None),
    _ => Ok(value),
  }
}

pub fn required_string(obj: &Object, key: &str, field: &str) -> Checked<String> {
  match get(obj, key, field)? {
    Some(v) => string(&v, field),
    None => Err(invalid(format!("{field} is required (a string)"))),
  }
}

pub fn optional_string(obj: &Object, key: &str, field: &str) -> Checked<Option<String>> {
  get(obj, key, field)?.map(|v| string(&v, field)).transpose()
}

/// A non-negative integer no larger than 2^53 - 1 (JS's exact integers).
pub fn optional_uint(obj: &Object, key: &str, field: &str) -> Checked<Option<u64>> {
  let Some(value) = get(obj, key, field)? else {
    return Ok(None);
  };
  let bad = || invalid(format!("{field} must be a non-negative integer"));
  if type_of(&value, field)? != ValueType::Number {
    return Err(bad());
  }
  // SAFETY: the type was checked just above.
  let n: f64 = unsafe { value.cast::<f64>() }.map_err(napi_err(field))?;
  if !n.is_finite() || n < 0.0 || n.fract() != 0.0 || n > 9_007_199_254_740_991.0 {
    return Err(bad());
  }
  Ok(Some(n as u64))
}

pub fn string_array(value: &Unknown, field: &str) -> Checked<Vec<String>> {
  if type_of(value, field)? != ValueType::Object || !value.is_array().map_err(napi_err(field))? {
    return Err(invalid(format!("{field} must be an array of strings")));
  }
  // SAFETY: checked to be an array just above.
  let array: Array = unsafe { value.cast::<Array>() }.map_err(napi_err(field))?;
  (0..array.len())
    .map(|i| {
      let item: Option<Unknown> = array.get(i).map_err(napi_err(field))?;
      let item_field = format!("{field}[{i}]");
      match item {
        Some(v) => string(&v, &item_field),
        None => Err(invalid(format!("{item_field} must be a string"))),
      }
    })
    .collect()
}

/// `Record<string, string>`; `undefined` values are left out, as Node's child_process does.
pub fn string_map(value: &Unknown, field: &str) -> Checked<Vec<(String, String)>> {
  let obj = object(value, field)?;
  let keys = Object::keys(&obj).map_err(napi_err(field))?;
  let mut out = Vec::with_capacity(keys.len());
  for key in keys {
    let entry_field = format!("{field}.{key}");
    if let Some(v) = get(&obj, &key, &entry_field)? {
      out.push((key, string(&v, &entry_field)?));
    }
  }
  Ok(out)
}

pub fn lane(value: Option<&Unknown>) -> Checked<Lane> {
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
) -> Checked<RawJob> {
  if is_nullish(Some(spec))? {
    return Err(invalid("spec is required (an ExecSpec object)".into()));
  }
  let obj = object(spec, "spec")?;
  let binary_path = required_string(&obj, "binaryPath", "spec.binaryPath")?;
  let args = match get(&obj, "args", "spec.args")? {
    Some(v) => string_array(&v, "spec.args")?,
    None => {
      return Err(invalid(
        "spec.args is required (an array of strings)".into(),
      ));
    }
  };
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
  })
}

pub fn optional_bool(obj: &Object, key: &str, field: &str) -> Checked<Option<bool>> {
  let Some(value) = get(obj, key, field)? else {
    return Ok(None);
  };
  if type_of(&value, field)? != ValueType::Boolean {
    return Err(invalid(format!("{field} must be a boolean")));
  }
  // SAFETY: the type was checked just above.
  unsafe { value.cast::<bool>() }
    .map(Some)
    .map_err(napi_err(field))
}

/// Any finite number, kept integral when it is one (so JSON shows `12`, not `12.0`).
pub fn optional_number(
  obj: &Object,
  key: &str,
  field: &str,
) -> Checked<Option<serde_json::Number>> {
  let Some(value) = get(obj, key, field)? else {
    return Ok(None);
  };
  if type_of(&value, field)? != ValueType::Number {
    return Err(invalid(format!("{field} must be a number")));
  }
  // SAFETY: the type was checked just above.
  let n: f64 = unsafe { value.cast::<f64>() }.map_err(napi_err(field))?;
  if n.fract() == 0.0 && n.abs() < 9_007_199_254_740_992.0 {
    return Ok(Some(serde_json::Number::from(n as i64)));
  }
  serde_json::Number::from_f64(n)
    .map(Some)
    .ok_or_else(|| invalid(format!("{field} must be a finite number")))
}

pub fn required_string_array(obj: &Object, key: &str, field: &str) -> Checked<Vec<String>> {
  match get(obj, key, field)? {
    Some(v) => string_array(&v, field),
    None => Err(invalid(format!(
      "{field} is required (an array of strings)"
    ))),
  }
}

/// The job as `index.js` packs it when every field already has the right JS type: one string
/// instead of a napi call per field and per env entry (which cost about 2.4 us per entry).
/// Fields are joined by NUL:
/// `v1, lane, jailRoot, binaryPath, cwd, timeoutMs, maxBuffer, sessionId, nArgs, nEnv,
/// args..., (key, value)...`, where an optional string is `+value` when present and empty when
/// absent, and an absent number is empty. A NUL inside any value changes the field count, so it
/// is refused here (and `index.js` then takes the field-by-field path, which names the field).
pub fn packed_job(packed: &str) -> Checked<RawJob> {
  let malformed = || invalid("packed spec is malformed".into());
  let fields: Vec<&str> = packed.split('\0').collect();
  if fields.len() < 10 || fields[0] != "v1" {
    return Err(malformed());
  }
  let count = |s: &str| s.parse::<usize>().map_err(|_| malformed());
  let (n_args, n_env) = (count(fields[8])?, count(fields[9])?);
  let args_end = 10usize.checked_add(n_args).ok_or_else(malformed)?;
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
    args: fields[10..args_end]
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
  })
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
