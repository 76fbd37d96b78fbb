//! One cgroup v1 group per job under the `pids` and `memory` controllers: the process limit that
//! holds for root (RLIMIT_NPROC does not) and a memory limit for the whole tree. Made and limited
//! before the fork; the child joins by writing "0" to each `cgroup.procs` (no pid formatting, no
//! allocation). Dropping the group kills whatever is left in it and removes it.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::probe::CGROUP_PARENT;

#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
  #[error("create cgroup {path}: {source}")]
  Create {
    path: PathBuf,
    source: std::io::Error,
  },
  #[error("write {value} to {path}: {source}")]
  Write {
    path: PathBuf,
    value: String,
    source: std::io::Error,
  },
}

/// The job's groups; the limits are already written.
#[derive(Debug)]
pub struct JobCgroup {
  dirs: Vec<PathBuf>,
  /// `<dir>/cgroup.procs` of each group, for the child.
  procs: Vec<CString>,
}

/// What the kernel counted while the job ran.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CgroupEvents {
  /// Forks refused because `pids.max` was reached.
  pub pids_max_hits: u64,
  /// Processes the memory controller's OOM killer ended.
  pub oom_kills: u64,
}

fn write(path: &Path, value: &str) -> Result<(), CgroupError> {
  std::fs::write(path, value).map_err(|source| CgroupError::Write {
    path: path.to_owned(),
    value: value.to_owned(),
    source,
  })
}

impl JobCgroup {
  /// Makes `finn-sandbox/<name>` under `pids` (always) and `memory` (when `memory_bytes`).
  pub fn create(
    name: &str,
    max_processes: u64,
    memory_bytes: Option<u64>,
  ) -> Result<Self, CgroupError> {
    let mut cg = JobCgroup {
      dirs: Vec::new(),
      procs: Vec::new(),
    };
    let mut make = |ctrl: &str| -> Result<PathBuf, CgroupError> {
      let dir = Path::new("/sys/fs/cgroup")
        .join(ctrl)
        .join(CGROUP_PARENT)
        .join(name);
      std::fs::create_dir_all(&dir).map_err(|source| CgroupError::Create {
        path: dir.clone(),
        source,
      })?;
      cg.dirs.push(dir.clone());
      let procs = dir.join("cgroup.procs");
      cg.procs
        .push(CString::new(procs.as_os_str().as_bytes()).expect("cgroup paths have no NUL"));
      Ok(dir)
    };
    let pids = make("pids")?;
    write(&pids.join("pids.max"), &max_processes.to_string())?;
    if let Some(bytes) = memory_bytes {
      let mem = make("memory")?;
      write(&mem.join("memory.limit_in_bytes"), &bytes.to_string())?;
      // Without swap accounting the limit could be dodged by swapping; absent file: no swap to dodge to.
      let memsw = mem.join("memory.memsw.limit_in_bytes");
      if memsw.exists() {
        write(&memsw, &bytes.to_string())?;
      }
    }
    Ok(cg)
  }

  /// The `cgroup.procs` files the child writes "0" to.
  pub fn procs_files(&self) -> &[CString] {
    &self.procs
  }

  pub fn events(&self) -> CgroupEvents {
    let mut ev = CgroupEvents::default();
    for dir in &self.dirs {
      if let Ok(s) = std::fs::read_to_string(dir.join("pids.events")) {
        ev.pids_max_hits = field(&s, "max");
      }
      if let Ok(s) = std::fs::read_to_string(dir.join("memory.oom_control")) {
        ev.oom_kills = field(&s, "oom_kill");
      }
    }
    ev
  }

  /// Pids still in the job's pids group.
  pub fn pids(&self) -> Vec<i32> {
    self.dirs.first().map_or_else(Vec::new, |d| read_pids(d))
  }

  /// SIGKILLs everything in the groups until they are empty, then removes them. A fork bomb
  /// refills nothing here: `pids.max` bounds it and each round kills what exists.
  pub fn kill_and_remove(&mut self) {
    for dir in &self.dirs {
      for _ in 0..1000 {
        let pids = read_pids(dir);
        if pids.is_empty() {
          break;
        }
        for pid in pids {
          let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
          );
        }
        std::thread::yield_now();
      }
    }
    // rmdir fails with EBUSY while a killed process is not yet reaped by its parent; retry briefly.
    for dir in self.dirs.drain(..) {
      for _ in 0..200 {
        if std::fs::remove_dir(&dir).is_ok() || !dir.exists() {
          break;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
      }
    }
  }
}

impl Drop for JobCgroup {
  fn drop(&mut self) {
    self.kill_and_remove();
  }
}

fn read_pids(dir: &Path) -> Vec<i32> {
  std::fs::read_to_string(dir.join("cgroup.procs"))
    .map(|s| s.lines().filter_map(|l| l.trim().parse().ok()).collect())
    .unwrap_or_default()
}

fn field(s: &str, name: &str) -> u64 {
  s.lines()
    .find_map(|l| {
      let mut it = l.split_whitespace();
      (it.next() == Some(name))
        .then(|| it.next()?.parse().ok())
        .flatten()
    })
    .unwrap_or(0)
}
