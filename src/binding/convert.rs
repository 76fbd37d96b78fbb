//! JS values to core types, with errors that name the offending field. Nothing here throws a
//! type error of napi's own: every check is ours, so every message says which field is wrong.

use napi::bindgen_prelude::{Array, Object, Unknown};
use napi::{JsValue, ValueType, sys};

use finn_pool::PoolError;

pub type Decoded<T> = Result<T, PoolError>;

pub(crate) fn invalid(msg: String) -> PoolError {
  PoolError::InvalidSpec(msg)
}

/// napi failures while reading a value (a throwing getter, say) are still the caller's input.
fn napi_err(field: &str) -> impl Fn(napi::Error) -> PoolError + '_ {
  move |e| invalid(format!("{field} could not be read: {}", e.reason))
}

/// [`napi_err`] for reads that run JS (getters, Proxy traps). What that JS threw stays pending
/// and would replace our error on return (as an uncoded error, a `WORKER_CRASHED` for
/// `index.js`), so it is cleared here: the caller sees the error that names the field.
fn read_err<'a>(
  value: &impl JsValue<'a>,
  field: &'a str,
) -> impl Fn(napi::Error) -> PoolError + 'a {
  let env = value.value().env;
  move |e| {
    let mut pending = false;
    // SAFETY: `env` is the env of the value being read, and this runs on its thread inside the
    // same napi call; both calls only inspect or drop the pending exception.
    let threw = unsafe {
      sys::napi_is_exception_pending(env, &mut pending) == sys::Status::napi_ok
        && pending
        && sys::napi_get_and_clear_last_exception(env, &mut std::ptr::null_mut())
          == sys::Status::napi_ok
    };
    if threw {
      invalid(format!("{field} could not be read: its getter threw"))
    } else {
      napi_err(field)(e)
    }
  }
}

fn type_of(value: &Unknown, field: &str) -> Decoded<ValueType> {
  value.get_type().map_err(napi_err(field))
}

pub fn is_nullish(value: Option<&Unknown>) -> Decoded<bool> {
  match value {
    None => Ok(true),
    Some(v) => Ok(matches!(
      type_of(v, "value")?,
      ValueType::Undefined | ValueType::Null
    )),
  }
}

pub fn string(value: &Unknown, field: &str) -> Decoded<String> {
  if type_of(value, field)? != ValueType::String {
    return Err(invalid(format!("{field} must be a string")));
  }
  // SAFETY: the type was checked just above.
  unsafe { value.cast::<String>() }.map_err(napi_err(field))
}

pub fn object<'a>(value: &Unknown<'a>, field: &str) -> Decoded<Object<'a>> {
  if type_of(value, field)? != ValueType::Object || value.is_array().map_err(napi_err(field))? {
    return Err(invalid(format!("{field} must be an object")));
  }
  // SAFETY: the type was checked just above.
  unsafe { value.cast::<Object>() }.map_err(napi_err(field))
}

pub fn get<'a>(obj: &Object<'a>, key: &str, field: &str) -> Decoded<Option<Unknown<'a>>> {
  let value: Option<Unknown> = obj.get(key).map_err(read_err(obj, field))?;
  match &value {
    Some(v) if type_of(v, field)? == ValueType::Null => Ok(None),
    _ => Ok(value),
  }
}

pub fn required_string(obj: &Object, key: &str, field: &str) -> Decoded<String> {
  match get(obj, key, field)? {
    Some(v) => string(&v, field),
    None => Err(invalid(format!("{field} is required (a string)"))),
  }
}

pub fn optional_string(obj: &Object, key: &str, field: &str) -> Decoded<Option<String>> {
  get(obj, key, field)?.map(|v| string(&v, field)).transpose()
}

/// A non-negative integer no larger than 2^53 - 1 (JS's exact integers).
pub fn optional_uint(obj: &Object, key: &str, field: &str) -> Decoded<Option<u64>> {
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

pub fn string_array(value: &Unknown, field: &str) -> Decoded<Vec<String>> {
  if type_of(value, field)? != ValueType::Object || !value.is_array().map_err(napi_err(field))? {
    return Err(invalid(format!("{field} must be an array of strings")));
  }
  // SAFETY: checked to be an array just above.
  let array: Array = unsafe { value.cast::<Array>() }.map_err(napi_err(field))?;
  (0..array.len())
    .map(|i| {
      let item: Option<Unknown> = array.get(i).map_err(read_err(&array, field))?;
      let item_field = format!("{field}[{i}]");
      match item {
        Some(v) => string(&v, &item_field),
        None => Err(invalid(format!("{item_field} must be a string"))),
      }
    })
    .collect()
}

/// `Record<string, string>`; `undefined` values are left out, as Node's child_process does.
pub fn string_map(value: &Unknown, field: &str) -> Decoded<Vec<(String, String)>> {
  let obj = object(value, field)?;
  let keys = Object::keys(&obj).map_err(read_err(&obj, field))?;
  let mut out = Vec::with_capacity(keys.len());
  for key in keys {
    let entry_field = format!("{field}.{key}");
    if let Some(v) = get(&obj, &key, &entry_field)? {
      out.push((key, string(&v, &entry_field)?));
    }
  }
  Ok(out)
}

pub fn optional_bool(obj: &Object, key: &str, field: &str) -> Decoded<Option<bool>> {
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
) -> Decoded<Option<serde_json::Number>> {
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

pub fn required_string_array(obj: &Object, key: &str, field: &str) -> Decoded<Vec<String>> {
  match get(obj, key, field)? {
    Some(v) => string_array(&v, field),
    None => Err(invalid(format!(
      "{field} is required (an array of strings)"
    ))),
  }
}
