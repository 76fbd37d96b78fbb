//! The caller's isolation request (`IsolationOptions`), validated once with errors that
//! name the field. Plain data: resolving it against the machine is `plan.rs`'s job.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// Which backend applies the layers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
  /// No isolation (containment by the supervisor still applies).
  #[default]
  Off,
  /// The strongest layers this host allows.
  Auto,
  /// The addon's own layers (landlock, seccomp, namespaces, cgroups, rlimits).
  Native,
  /// bubblewrap (`bwrap.rs`): the same layers as mounts, namespaces and the same seccomp filter.
  Bwrap,
}

/// Allow or deny; used for the network and for Unix sockets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Access {
  #[default]
  Deny,
  Allow,
}

// By hand: a derived unit enum also reads serde's externally tagged map form, so
// `{"allow": null}` would mean the whole network. Only the two strings are an `Access`.
impl<'de> Deserialize<'de> for Access {
  fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
    struct V;
    impl serde::de::Visitor<'_> for V {
      type Value = Access;
      fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("\"deny\" or \"allow\"")
      }
      fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Access, E> {
        match s {
          "deny" => Ok(Access::Deny),
          "allow" => Ok(Access::Allow),
          _ => Err(E::invalid_value(serde::de::Unexpected::Str(s), &self)),
        }
      }
    }
    d.deserialize_str(V)
  }
}

/// What the command may read: the issue's `"all" | string[]`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Readable {
  /// Everything except `denyRead`.
  #[default]
  All,
  Paths(Vec<PathBuf>),
}

// By hand rather than `untagged` (STYLE.md): the error then says what was expected.
impl<'de> Deserialize<'de> for Readable {
  fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
    struct V;
    impl<'de> serde::de::Visitor<'de> for V {
      type Value = Readable;
      fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("\"all\" or an array of paths")
      }
      fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Readable, E> {
        if s == "all" {
          Ok(Readable::All)
        } else {
          Err(E::invalid_value(serde::de::Unexpected::Str(s), &self))
        }
      }
      fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Readable, A::Error> {
        let mut v = Vec::new();
        while let Some(p) = seq.next_element::<PathBuf>()? {
          v.push(p);
        }
        Ok(Readable::Paths(v))
      }
    }
    d.deserialize_any(V)
  }
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct FsOptions {
  /// Writable roots; `None` means `[cwd]`.
  pub writable: Option<Vec<PathBuf>>,
  pub readable: Readable,
  /// Paths never readable; `None` means [`default_deny_read`].
  pub deny_read: Option<Vec<PathBuf>>,
  /// Read-only inside the writable roots; relative entries are taken in each writable root.
  /// `None` means `.git/hooks` and `.git/config`.
  pub protect: Option<Vec<PathBuf>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct ResourceLimits {
  /// Processes (and threads) in the command's tree; default 256.
  pub max_processes: Option<u64>,
  /// Memory of the tree (cgroup) or address space per process (RLIMIT_AS); default 2 GiB.
  pub max_memory_bytes: Option<u64>,
  pub cpu_seconds: Option<u64>,
  pub max_file_bytes: Option<u64>,
  pub max_open_files: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct NamespaceOptions {
  /// `None`: where the host permits (auto), `Some(true)`: requested, `Some(false)`: never.
  pub pid: Option<bool>,
  pub net: Option<bool>,
  pub mount: Option<bool>,
}

/// `isolation.network` as an object: an allowlist that the pool's egress proxy enforces
/// (`finn-egress` validates its entries and checks every connection against them).
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct NetworkOptions {
  pub allow: Vec<String>,
  pub allow_plain_http: bool,
  pub allow_local: bool,
  /// Static name -> address entries used instead of DNS.
  pub hosts: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct IsolationOptions {
  pub mode: Mode,
  /// Refuse to run when a requested layer cannot be applied.
  pub required: bool,
  pub fs: FsOptions,
  /// `Deny` also when `egress` is set: the command's only way out is then the proxy.
  pub network: Access,
  /// `network` given as a `NetworkOptions` object: the command reaches the network only through
  /// the pool's egress proxy, which allows what this lists.
  #[serde(skip)]
  pub egress: Option<NetworkOptions>,
  pub unix_sockets: Access,
  pub limits: ResourceLimits,
  pub namespaces: NamespaceOptions,
}

pub const DEFAULT_MAX_PROCESSES: u64 = 256;
pub const DEFAULT_MAX_MEMORY_BYTES: u64 = 2 << 30;

/// Secrets a command never needs to read. `home` is the user's home directory.
/// Writable roots per job: each travels to the reaper as an `O_PATH` fd (`Plan::checked`).
pub const MAX_WRITABLE_ROOTS: usize = 16;

pub fn default_deny_read(home: Option<&Path>) -> Vec<PathBuf> {
  // With the copies shadow's tools and Debian's daily cron leave beside them (`shadow-`, the
  // previous file, holds the same hashes), and the host's SSH private keys.
  let mut v: Vec<PathBuf> = [
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
    "/etc/sudoers",
    "/etc/sudoers.d",
    "/var/backups/shadow.bak",
    "/var/backups/gshadow.bak",
    "/etc/ssh/ssh_host_rsa_key",
    "/etc/ssh/ssh_host_ecdsa_key",
    "/etc/ssh/ssh_host_ed25519_key",
    "/etc/ssh/ssh_host_dsa_key",
  ]
  .iter()
  .map(PathBuf::from)
  .collect();
  if let Some(home) = home {
    for rel in [
      ".ssh",
      ".aws",
      ".gnupg",
      ".netrc",
      ".git-credentials",
      ".docker",
      ".kube",
      ".config/gcloud",
      ".config/gh",
      ".npmrc",
    ] {
      v.push(home.join(rel));
    }
  }
  v
}

/// `.git/config.worktree` too: git reads it under `extensions.worktreeConfig` (which
/// `git sparse-checkout init` sets), and it can hold `core.fsmonitor` like `.git/config`.
pub fn default_protect() -> Vec<PathBuf> {
  vec![
    PathBuf::from(".git/hooks"),
    PathBuf::from(".git/config"),
    PathBuf::from(".git/config.worktree"),
  ]
}

impl FsOptions {
  /// The protected paths as absolute paths: relative entries (the default's) taken in each of
  /// `roots`. What a command may not write, and what the sandbox's jail refuses a host tool.
  pub fn protect_in(&self, roots: &[PathBuf]) -> Vec<PathBuf> {
    let relative = self.protect.clone().unwrap_or_else(default_protect);
    relative
      .iter()
      .flat_map(|p| {
        if p.is_absolute() {
          vec![p.clone()]
        } else {
          roots.iter().map(|r| r.join(p)).collect()
        }
      })
      .collect()
  }
}

/// Bad isolation options; the message names the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("isolation.{field}: {reason}")]
pub struct OptionsError {
  pub field: String,
  pub reason: String,
}

impl OptionsError {
  fn new(field: impl Into<String>, reason: impl Into<String>) -> Self {
    OptionsError {
      field: field.into(),
      reason: reason.into(),
    }
  }
}

impl IsolationOptions {
  /// Parses and validates a JSON value, naming the field on error.
  pub fn from_json(mut v: serde_json::Value) -> Result<Self, OptionsError> {
    // An allowlist object is taken out first and read on its own: serde would read
    // `{"allow": null}` as the externally tagged `Access::Allow`, the whole network.
    let egress = match v.get("network") {
      Some(n @ serde_json::Value::Object(_)) => {
        let n = n.clone();
        v.as_object_mut().map(|o| o.remove("network"));
        Some(
          serde_json::from_value::<NetworkOptions>(n)
            .map_err(|e| OptionsError::new("network", e.to_string()))?,
        )
      }
      _ => None,
    };
    // serde's error cannot say which field; these two are the ones a caller may try to give
    // another form (a socket list is not built).
    for (field, want) in [
      ("network", "\"deny\", \"allow\" or a NetworkOptions object"),
      (
        "unixSockets",
        "\"deny\" or \"allow\" (a list of sockets is not supported yet)",
      ),
    ] {
      if let Some(x) = v.get(field)
        && !matches!(x.as_str(), Some("deny" | "allow"))
      {
        return Err(OptionsError::new(field, format!("must be {want}, got {x}")));
      }
    }
    let mut opts: IsolationOptions =
      serde_json::from_value(v).map_err(|e| OptionsError::new("*", e.to_string()))?;
    opts.egress = egress;
    opts.validate()?;
    Ok(opts)
  }

  /// Fails closed on anything that would silently mean less isolation than asked for.
  pub fn validate(&self) -> Result<(), OptionsError> {
    let check_abs = |field: &str, paths: &[PathBuf]| -> Result<(), OptionsError> {
      for (i, p) in paths.iter().enumerate() {
        if !p.is_absolute() {
          return Err(OptionsError::new(
            format!("{field}[{i}]"),
            format!("must be an absolute path, got {p:?}"),
          ));
        }
        if p.components().any(|c| c == std::path::Component::ParentDir) {
          return Err(OptionsError::new(
            format!("{field}[{i}]"),
            "must not contain `..`",
          ));
        }
      }
      Ok(())
    };
    if let Some(w) = &self.fs.writable {
      check_abs("fs.writable", w)?;
      if w.len() > MAX_WRITABLE_ROOTS {
        return Err(OptionsError::new(
          "fs.writable",
          format!(
            "at most {MAX_WRITABLE_ROOTS} roots (each is passed to the job's reaper as an open fd)"
          ),
        ));
      }
      if w.iter().any(|p| p == Path::new("/")) {
        return Err(OptionsError::new(
          "fs.writable",
          "`/` as a writable root isolates nothing",
        ));
      }
    }
    if let Readable::Paths(r) = &self.fs.readable {
      check_abs("fs.readable", r)?;
    }
    if let Some(d) = &self.fs.deny_read {
      check_abs("fs.denyRead", d)?;
    }
    if let Some(p) = &self.fs.protect {
      for (i, p) in p.iter().enumerate() {
        if p.as_os_str().is_empty() || p.components().any(|c| c == std::path::Component::ParentDir)
        {
          return Err(OptionsError::new(
            format!("fs.protect[{i}]"),
            "must be a non-empty path without `..`",
          ));
        }
      }
    }
    let l = &self.limits;
    for (name, v) in [
      ("maxProcesses", l.max_processes),
      ("maxMemoryBytes", l.max_memory_bytes),
      ("cpuSeconds", l.cpu_seconds),
      ("maxFileBytes", l.max_file_bytes),
      ("maxOpenFiles", l.max_open_files),
    ] {
      if v == Some(0) {
        return Err(OptionsError::new(
          format!("limits.{name}"),
          "must be at least 1",
        ));
      }
    }
    if l.max_open_files.is_some_and(|n| n < 3) {
      return Err(OptionsError::new(
        "limits.maxOpenFiles",
        "must be at least 3 (stdin, stdout, stderr)",
      ));
    }
    if self.egress.is_some() && self.mode == Mode::Off {
      return Err(OptionsError::new(
        "network",
        "an allowlist needs isolation (`mode: \"auto\"` or `\"native\"`): without it the \
         command would reach the whole network",
      ));
    }
    if self.egress.is_some() && self.namespaces.net == Some(false) {
      return Err(OptionsError::new(
        "namespaces.net",
        "`false` with a network allowlist: its only route is a network namespace of the job's own",
      ));
    }
    if self.mode == Mode::Off && self.required {
      return Err(OptionsError::new(
        "required",
        "`required: true` with `mode: \"off\"` asks for nothing",
      ));
    }
    Ok(())
  }
}

#[cfg(test)]
mod tests {
  use super::*;
  use serde_json::json;

  #[test]
  fn defaults_are_off_and_deny() {
    let o = IsolationOptions::from_json(json!({})).unwrap();
    assert_eq!(o.mode, Mode::Off);
    assert_eq!(o.network, Access::Deny);
    assert_eq!(o.fs.readable, Readable::All);
  }

  #[test]
  fn full_shape_parses() {
    let o = IsolationOptions::from_json(json!({
      "mode": "native", "required": true,
      "fs": {"writable": ["/tmp/j"], "readable": ["/usr"], "denyRead": ["/etc/shadow"], "protect": [".git/hooks"]},
      "network": "allow", "unixSockets": "allow",
      "limits": {"maxProcesses": 10, "maxMemoryBytes": 1, "cpuSeconds": 1, "maxFileBytes": 1, "maxOpenFiles": 16},
      "namespaces": {"pid": true, "net": false, "mount": true}
    }))
    .unwrap();
    assert_eq!(o.fs.readable, Readable::Paths(vec!["/usr".into()]));
    assert_eq!(o.namespaces.net, Some(false));
  }

  /// A network object is an allowlist, never serde's externally tagged enum (`{"allow": null}`
  /// would otherwise mean the whole network); a socket list is not built and is refused naming
  /// the field.
  #[test]
  fn an_access_object_or_list_is_refused_naming_the_field() {
    for (v, field) in [
      (json!({"network": {"allow": null}}), "network"),
      (json!({"network": {"deny": null}}), "network"),
      (json!({"unixSockets": {"allow": null}}), "unixSockets"),
      (json!({"unixSockets": ["/run/docker.sock"]}), "unixSockets"),
      (json!({"network": true}), "network"),
    ] {
      let e = IsolationOptions::from_json(v.clone()).unwrap_err();
      assert_eq!(e.field, field, "{v}: {e}");
    }
  }

  /// An allowlist keeps `network` denied: the proxy is the only way out.
  #[test]
  fn a_network_object_is_an_allowlist_with_the_network_denied() {
    let o = IsolationOptions::from_json(json!({
      "mode": "auto",
      "network": {"allow": ["github.com"], "allowLocal": true, "hosts": {"a.test": "127.0.0.1"}}
    }))
    .unwrap();
    assert_eq!(o.network, Access::Deny);
    let e = o.egress.unwrap();
    assert_eq!(e.allow, ["github.com"]);
    assert!(e.allow_local && !e.allow_plain_http);
    assert_eq!(e.hosts["a.test"], "127.0.0.1");
  }

  #[test]
  fn errors_name_the_field() {
    let cases = [
      (json!({"fs": {"writable": ["rel"]}}), "fs.writable[0]"),
      (json!({"fs": {"writable": ["/"]}}), "fs.writable"),
      (
        json!({"fs": {"denyRead": ["/a", "/b/../c"]}}),
        "fs.denyRead[1]",
      ),
      (json!({"fs": {"protect": ["../x"]}}), "fs.protect[0]"),
      (json!({"limits": {"cpuSeconds": 0}}), "limits.cpuSeconds"),
      (
        json!({"limits": {"maxOpenFiles": 2}}),
        "limits.maxOpenFiles",
      ),
      (json!({"required": true}), "required"),
      // An allowlist without isolation would be the whole network.
      (json!({"network": {"allow": ["a.test"]}}), "network"),
      (
        json!({"mode": "auto", "network": {"allow": ["a.test"]}, "namespaces": {"net": false}}),
        "namespaces.net",
      ),
      (
        json!({"mode": "auto", "network": {"allow": "a.test"}}),
        "network",
      ),
      (
        json!({"mode": "auto", "network": {"allowed": []}}),
        "network",
      ),
    ];
    for (v, field) in cases {
      let e = IsolationOptions::from_json(v.clone()).unwrap_err();
      assert_eq!(e.field, field, "{v}");
    }
    for v in [
      json!({"mode": "strong"}),
      json!({"fs": {"readable": "some"}}),
      json!({"nope": 1}),
    ] {
      let e = IsolationOptions::from_json(v.clone()).unwrap_err();
      assert!(e.to_string().starts_with("isolation."), "{v}: {e}");
    }
  }
}
