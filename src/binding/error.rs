//! Errors as JS receives them: an `Error` whose `code` property is set here (a `PoolErrorCode`,
//! `SANDBOX_ERROR` for a sandbox refusal, or an errno name), so `index.js` reads the code
//! structurally and never parses a message.

use napi::Env;
use napi::bindgen_prelude::JsError;
use napi_derive::napi;

use finn_pool::{PoolError, PoolErrorCode};
use finn_session::SessionErrorCode;

/// The `code` of a sandbox refusal (`index.js` turns it into a `SandboxError`).
pub const SANDBOX_ERROR: &str = "SANDBOX_ERROR";

/// napi writes an error's status as its `code`; this status is ours.
struct Code<'a>(&'a str);

impl AsRef<str> for Code<'_> {
  fn as_ref(&self) -> &str {
    self.0
  }
}

/// A JS `Error` with `code` and `message`, as the `napi::Error` a `#[napi]` function returns:
/// napi throws that very object.
pub fn coded(env: &Env, code: &str, message: impl ToString) -> napi::Error {
  let error = JsError::from(napi::Error::new(Code(code), bounded(message.to_string())));
  napi::Error::from(error.into_unknown(*env))
}

/// Messages quote the caller's values ("Path escapes jail: <path>"): past this many bytes the
/// rest is cut, so a 10 MB argument never becomes a 10 MB error.
const MAX_MESSAGE_BYTES: usize = 400;

fn bounded(message: String) -> String {
  if message.len() <= MAX_MESSAGE_BYTES {
    return message;
  }
  let mut cut = MAX_MESSAGE_BYTES - 40;
  while !message.is_char_boundary(cut) {
    cut -= 1;
  }
  format!("{}... ({} bytes)", &message[..cut], message.len())
}

pub fn pool_error(env: &Env, e: &PoolError) -> napi::Error {
  coded(env, e.code(), e)
}

pub fn sandbox_error(env: &Env, message: impl ToString) -> napi::Error {
  coded(env, SANDBOX_ERROR, message)
}

/// Every code an error of the addon can carry.
#[napi(object, object_from_js = false)]
pub struct ErrorCodes {
  /// `PoolErrorCode`, in its order.
  pub pool: Vec<&'static str>,
  /// `SessionErrorCode`, in its order.
  pub session: Vec<&'static str>,
  /// The code of a sandbox refusal.
  pub sandbox: &'static str,
}

/// The codes, read once by `index.js` (its `PoolErrorCode` and `SessionErrorCode` are built from
/// them).
#[napi]
pub fn error_codes() -> ErrorCodes {
  ErrorCodes {
    pool: PoolErrorCode::ALL.iter().map(|c| c.as_str()).collect(),
    session: SessionErrorCode::ALL.iter().map(|c| c.as_str()).collect(),
    sandbox: SANDBOX_ERROR,
  }
}
