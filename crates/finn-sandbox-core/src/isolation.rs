//! The sandbox's isolation: `SandboxConfig.isolation` validated once (default `{ mode: "auto" }`),
//! and per command the options the policy's topology (`policy/topology.rs`) derives from it: the
//! writable roots and the network are the topology's, everything else is the caller's.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use finn_audit::IsolationRecord;
use finn_job::isolation::{
  Access, IsolationOptions, Mode, NetworkOptions, OptionsError, Readable, default_deny_read,
};
use finn_policy::topology::{Network, Topology, Writes};

/// Fields the topology sets per command; a caller's value would be silently replaced, so it is
/// refused instead.
const PER_COMMAND: [(&str, &str); 2] = [
  (
    "fs.writable",
    "set per command by the sandbox (the jail, or nothing for read-only commands)",
  ),
  (
    "network",
    "set per command by the sandbox (only git fetch, clone and push get the network)",
  ),
];

/// What a program that reads only the jail (`Topology::reads_jail`) may read besides it: its
/// binary and libraries, locale, `/etc` (user names, time zone; the denied reads stay denied)
/// and the character devices every program may use (not `/dev` itself: `/dev/shm` holds other
/// processes' files). Missing ones are skipped.
const SYSTEM_READABLE: &[&str] = &[
  "/usr",
  "/bin",
  "/sbin",
  "/lib",
  "/lib32",
  "/lib64",
  "/libx32",
  "/etc",
  "/dev/null",
  "/dev/zero",
  "/dev/full",
  "/dev/random",
  "/dev/urandom",
];

#[derive(Debug, Clone, PartialEq)]
pub struct SandboxIsolation {
  options: IsolationOptions,
}

impl Default for SandboxIsolation {
  /// `{ mode: "auto" }`: the strongest layers the host allows.
  fn default() -> Self {
    SandboxIsolation::from_json(None).expect("the default options are valid")
  }
}

impl SandboxIsolation {
  /// `None` is `{ mode: "auto" }`; an object without `mode` is `auto` too. Errors name the
  /// field (`isolation.fs.writable: …`).
  pub fn from_json(value: Option<Value>) -> Result<Self, OptionsError> {
    let mut value = value.unwrap_or_else(|| json!({}));
    if let Some(obj) = value.as_object_mut() {
      obj.entry("mode").or_insert_with(|| json!("auto"));
    }
    for (field, reason) in PER_COMMAND {
      let mut at = Some(&value);
      for key in field.split('.') {
        at = at.and_then(|v| v.get(key));
      }
      if at.is_some() {
        return Err(OptionsError {
          field: field.into(),
          reason: reason.into(),
        });
      }
    }
    Ok(SandboxIsolation {
      options: IsolationOptions::from_json(value)?,
    })
  }

  pub fn mode(&self) -> Mode {
    self.options.mode
  }

  /// Refuses a policy's `network` that would run without its only route: with isolation off
  /// the command would reach the whole network, with `namespaces.net: false` none at all.
  /// `field` names the policy's `network` (`config.policies.npm.network`).
  pub fn check_listed(&self, field: &str) -> Result<(), String> {
    let mut probe = self.options.clone();
    probe.egress = Some(NetworkOptions::default());
    probe
      .validate()
      .map_err(|e| format!("{field}: {} (config.isolation.{})", e.reason, e.field))
  }

  /// The options for one command; `None` when isolation is off. `binary` is the program that
  /// runs (readable even where the topology narrows reads: it may live outside the system
  /// directories, as a Node from a version manager does). `hidden` (the audit directory) is
  /// added to the denied reads. `listed` is the command's policy's `network`: a command the
  /// topology gives no network reaches that list, and only through the egress proxy.
  pub fn for_command(
    &self,
    topology: Topology,
    jail_root: &Path,
    binary: &Path,
    hidden: &[PathBuf],
    hosts: &[String],
    listed: Option<&NetworkOptions>,
  ) -> Option<IsolationOptions> {
    if self.options.mode == Mode::Off {
      return None;
    }
    let mut o = self.options.clone();
    o.fs.writable = Some(match topology.writes {
      Writes::Nothing => Vec::new(),
      Writes::Jail => vec![jail_root.to_path_buf()],
    });
    o.network = match topology.network {
      Network::Deny => Access::Deny,
      Network::Allow => Access::Allow,
    };
    // A fetch or push to https remotes: only their hosts, through the pool's egress proxy,
    // where the job can get the route (a network namespace of its own); elsewhere the network
    // as the topology says, named in `degraded`.
    if topology.network == Network::Allow && !hosts.is_empty() && o.namespaces.net != Some(false) {
      o.egress = Some(NetworkOptions {
        allow: hosts.to_vec(),
        ..NetworkOptions::default()
      });
    }
    // A policy's list: never the whole network. Where no network namespace can be made the
    // plan runs the command with none (`auto`) or refuses it (`required`).
    if topology.network == Network::Deny
      && let Some(list) = listed
    {
      o.egress = Some(list.clone());
    }
    if topology.reads_jail && o.fs.readable == Readable::All {
      let mut roots = vec![jail_root.to_path_buf(), binary.to_path_buf()];
      roots.extend(SYSTEM_READABLE.iter().map(PathBuf::from));
      o.fs.readable = Readable::Paths(roots);
    }
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let mut deny = o
      .fs
      .deny_read
      .take()
      .unwrap_or_else(|| default_deny_read(home.as_deref()));
    deny.extend(hidden.iter().cloned());
    o.fs.deny_read = Some(deny);
    Some(o)
  }

  /// The paths a command that may write the jail (`Writes::Jail`) may not write, whatever
  /// this host can enforce: the sandbox's jail refuses them to host tools too.
  pub fn protected(&self, jail_root: &Path) -> Vec<PathBuf> {
    self.options.fs.protect_in(&[jail_root.to_path_buf()])
  }

  /// What the audit records when the runner reports no isolation of its own.
  pub fn unreported(&self) -> IsolationRecord {
    if self.options.mode == Mode::Off {
      return IsolationRecord {
        backend: "off".into(),
        applied: Vec::new(),
        degraded: Vec::new(),
      };
    }
    IsolationRecord {
      backend: "none".into(),
      applied: Vec::new(),
      degraded: vec![
        "isolation: the executor is not finn-sandbox's pool and reported none; nothing was applied"
          .into(),
      ],
    }
  }
}

/// `options` as the JSON `IsolationOptions` a JS executor can hand to `WorkerPool.exec`.
pub fn options_json(o: &IsolationOptions) -> Value {
  let mode = match o.mode {
    Mode::Off => "off",
    Mode::Auto => "auto",
    Mode::Native => "native",
    Mode::Bwrap => "bwrap",
  };
  let access = |a: Access| match a {
    Access::Deny => "deny",
    Access::Allow => "allow",
  };
  let mut fs = serde_json::Map::new();
  if let Some(w) = &o.fs.writable {
    fs.insert("writable".into(), json!(w));
  }
  fs.insert(
    "readable".into(),
    match &o.fs.readable {
      Readable::All => json!("all"),
      Readable::Paths(p) => json!(p),
    },
  );
  if let Some(d) = &o.fs.deny_read {
    fs.insert("denyRead".into(), json!(d));
  }
  if let Some(p) = &o.fs.protect {
    fs.insert("protect".into(), json!(p));
  }
  let mut limits = serde_json::Map::new();
  let l = o.limits;
  for (name, v) in [
    ("maxProcesses", l.max_processes),
    ("maxMemoryBytes", l.max_memory_bytes),
    ("cpuSeconds", l.cpu_seconds),
    ("maxFileBytes", l.max_file_bytes),
    ("maxOpenFiles", l.max_open_files),
  ] {
    if let Some(v) = v {
      limits.insert(name.into(), json!(v));
    }
  }
  let mut ns = serde_json::Map::new();
  let n = o.namespaces;
  for (name, v) in [("pid", n.pid), ("net", n.net), ("mount", n.mount)] {
    if let Some(v) = v {
      ns.insert(name.into(), json!(v));
    }
  }
  json!({
    "mode": mode,
    "required": o.required,
    "fs": fs,
    "network": match &o.egress {
      Some(list) => serde_json::to_value(list).expect("options always serialize"),
      None => access(o.network).into(),
    },
    "unixSockets": access(o.unix_sockets),
    "limits": limits,
    "namespaces": ns,
  })
}

#[cfg(test)]
mod tests {
  use super::*;

  use finn_policy::topology::{READ_ONLY_PROGRAM as READ, REMOTE as FETCH};

  #[test]
  fn the_default_is_auto_and_a_missing_mode_is_auto() {
    assert_eq!(SandboxIsolation::default().mode(), Mode::Auto);
    let limited = SandboxIsolation::from_json(Some(json!({"limits": {"cpuSeconds": 5}}))).unwrap();
    assert_eq!(limited.mode(), Mode::Auto);
    let off = SandboxIsolation::from_json(Some(json!({"mode": "off"}))).unwrap();
    assert_eq!(
      off.for_command(
        READ,
        Path::new("/j"),
        Path::new("/opt/node/bin/node"),
        &[],
        &[],
        None
      ),
      None
    );
    assert_eq!(off.unreported().backend, "off");
  }

  #[test]
  fn errors_name_the_field_and_per_command_fields_are_refused() {
    for (v, field) in [
      (json!({"network": "allow"}), "network"),
      (json!({"fs": {"writable": ["/tmp"]}}), "fs.writable"),
      (json!({"limits": {"cpuSeconds": 0}}), "limits.cpuSeconds"),
      (json!({"mode": "off", "required": true}), "required"),
    ] {
      let e = SandboxIsolation::from_json(Some(v.clone())).unwrap_err();
      assert_eq!(e.field, field, "{v}");
      assert!(
        e.to_string().starts_with(&format!("isolation.{field}: ")),
        "{e}"
      );
    }
    assert!(SandboxIsolation::from_json(Some(json!("auto"))).is_err());
  }

  #[test]
  fn the_topology_sets_writable_roots_and_network_and_the_hidden_dirs_are_denied() {
    let iso = SandboxIsolation::from_json(Some(
      json!({"required": true, "fs": {"denyRead": ["/secret"]}}),
    ))
    .unwrap();
    let read = iso
      .for_command(
        READ,
        Path::new("/j"),
        Path::new("/opt/node/bin/node"),
        &[PathBuf::from("/j/audit")],
        &[],
        None,
      )
      .unwrap();
    assert_eq!(read.fs.writable, Some(Vec::new()));
    assert_eq!(read.network, Access::Deny);
    // A program whose operands the jail checked reads the jail and the system only.
    match &read.fs.readable {
      Readable::Paths(p) => assert!(
        p[0] == Path::new("/j")
          && p.contains(&PathBuf::from("/usr"))
          && p.contains(&PathBuf::from("/opt/node/bin/node")),
        "{p:?}"
      ),
      Readable::All => panic!("readable: all"),
    }
    assert_eq!(
      read.fs.deny_read,
      Some(vec![PathBuf::from("/secret"), PathBuf::from("/j/audit")])
    );
    assert!(read.required);
    let fetch = iso
      .for_command(
        FETCH,
        Path::new("/j"),
        Path::new("/usr/bin/git"),
        &[],
        &[],
        None,
      )
      .unwrap();
    assert_eq!(fetch.fs.writable, Some(vec![PathBuf::from("/j")]));
    assert_eq!(fetch.network, Access::Allow);
    assert_eq!(fetch.egress, None, "no https remote, no list");
    // A fetch from https remotes: their hosts only, through the egress proxy (the network
    // itself stays "allow" for hosts where the route cannot be made).
    let hosts = ["github.com".to_string(), "git.example.com:8443".to_string()];
    let fetch = iso
      .for_command(
        FETCH,
        Path::new("/j"),
        Path::new("/usr/bin/git"),
        &[],
        &hosts,
        None,
      )
      .unwrap();
    assert_eq!(fetch.egress.as_ref().unwrap().allow, hosts);
    assert!(!fetch.egress.as_ref().unwrap().allow_local);
    assert_eq!(options_json(&fetch)["network"]["allow"], json!(hosts));
    // A read-only command gets no list, whatever hosts are passed.
    let read = iso
      .for_command(
        READ,
        Path::new("/j"),
        Path::new("/usr/bin/cat"),
        &[],
        &hosts,
        None,
      )
      .unwrap();
    assert_eq!((read.network, read.egress), (Access::Deny, None));
    // A command that may read everywhere keeps `readable: "all"`.
    assert_eq!(fetch.fs.readable, Readable::All);
  }

  #[test]
  fn the_json_form_parses_back_to_the_same_options() {
    let iso = SandboxIsolation::from_json(Some(json!({
      "mode": "native", "fs": {"readable": ["/usr"], "protect": [".git/hooks"]},
      "unixSockets": "allow", "limits": {"maxProcesses": 9}, "namespaces": {"pid": true}
    })))
    .unwrap();
    let o = iso
      .for_command(
        FETCH,
        Path::new("/j"),
        Path::new("/usr/bin/git"),
        &[],
        &[],
        None,
      )
      .unwrap();
    assert_eq!(IsolationOptions::from_json(options_json(&o)).unwrap(), o);
  }
}
