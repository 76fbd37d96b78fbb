//! Kernel-enforced isolation per command: limits, cgroup, namespaces, landlock,
//! seccomp. `prepare` builds everything before the fork; `Prepared::apply_in_child` applies it
//! between fork and exec in the supervisor's child.

mod bpf;
mod bwrap;
mod cgroup;
mod child;
pub mod egress;
mod error;
mod landlock;
mod mounts;
mod netns;
mod plan;
mod prepare;
mod probe;
mod release;
mod route;
mod seccomp;
mod userns;

pub use bpf::interpret::run as run_filter;
pub use bwrap::{
  Bwrapped, Isolated, VERIFY_BINDS_ARG, prepare_job, set_bind_verifier, verify_binds_main,
};
pub use cgroup::CgroupEvents;
pub use child::ChildFailed;
pub use error::{IsolationError, Layer, LayerFailed, PrepareError};
pub use finn_job::isolation::{
  Access, FsOptions, IsolationOptions, MAX_WRITABLE_ROOTS, Mode, NamespaceOptions, NetworkOptions,
  OptionsError, Readable, ResourceLimits, default_deny_read,
};
pub use landlock::{fence_tracing, scope_signals};
pub use netns::SharedNet;
pub use plan::{CheckedRoots, Layers, Plan, ResolvedLimits, open_checked};
pub use prepare::{IsolationReport, PidnsAtFork, Prepared, prepare};
pub use probe::{
  AbiMaxError, CgroupKind, Doctor, LANDLOCK_ABI_MAX_VAR, LANDLOCK_RIGHTS, LayerReport, Probe,
  doctor, landlock_abi_max, probe,
};
pub use route::{
  BindVerdict, ConnectVerdict, NetRoute, bind as route_bind, listen as route_listen,
  parse_sockaddr, sockaddr,
};
pub use seccomp::{guard_helpers, hand_over, seccomp_instructions};
