//! The native limit: how fast can this machine start and reap `/bin/true` with no Node at all?
//!
//! `native-limit [--sequential N] [--warmup N] [--total N] [--concurrency N] [--program PATH]`
//!
//! Sequential: N times `posix_spawn` + `waitpid`, each timed (microseconds, spawn to reaped).
//! Throughput: `--total` runs shared by `--concurrency` threads, each thread spawning and
//! reaping one child at a time. Prints one JSON line:
//! `{"sequentialUs": [...], "throughputPerSec": x, "throughputElapsedMs": y, ...}`.

use std::ffi::CString;
use std::ptr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

extern "C" {
  static environ: *const *mut libc::c_char;
}

fn spawn_and_wait(program: &CString) -> Result<(), String> {
  let argv: [*mut libc::c_char; 2] = [program.as_ptr() as *mut _, ptr::null_mut()];
  let mut pid: libc::pid_t = 0;
  // SAFETY: program and argv are valid NUL-terminated strings / a NULL-terminated array that
  // outlive the call; NULL file actions and attributes are allowed by POSIX.
  let rc = unsafe {
    libc::posix_spawn(
      &mut pid,
      program.as_ptr(),
      ptr::null(),
      ptr::null(),
      argv.as_ptr(),
      environ,
    )
  };
  if rc != 0 {
    return Err(format!("posix_spawn: errno {rc}"));
  }
  let mut status = 0;
  loop {
    // SAFETY: pid is our own child; status is a valid out pointer.
    let r = unsafe { libc::waitpid(pid, &mut status, 0) };
    if r == pid {
      break;
    }
    if r < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
      return Err(format!("waitpid: {}", std::io::Error::last_os_error()));
    }
  }
  if !(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0) {
    return Err(format!("child ended with status {status}"));
  }
  Ok(())
}

fn arg(args: &[String], name: &str, default: usize) -> usize {
  args
    .iter()
    .position(|a| a == name)
    .and_then(|i| args.get(i + 1))
    .map(|v| v.parse().unwrap_or_else(|_| panic!("{name} needs a number")))
    .unwrap_or(default)
}

fn main() {
  let args: Vec<String> = std::env::args().collect();
  let sequential = arg(&args, "--sequential", 1000);
  let warmup = arg(&args, "--warmup", 20);
  let total = arg(&args, "--total", 1000);
  let concurrency = arg(&args, "--concurrency", 8).max(1);
  let program = args
    .iter()
    .position(|a| a == "--program")
    .and_then(|i| args.get(i + 1))
    .cloned()
    .unwrap_or_else(|| "/bin/true".to_string());
  let program = CString::new(program).expect("program without NUL");

  for _ in 0..warmup {
    spawn_and_wait(&program).unwrap_or_else(|e| panic!("{e}"));
  }

  let mut sequential_us = Vec::with_capacity(sequential);
  for _ in 0..sequential {
    let t = Instant::now();
    spawn_and_wait(&program).unwrap_or_else(|e| panic!("{e}"));
    sequential_us.push(t.elapsed().as_secs_f64() * 1e6);
  }

  let mut throughput_per_sec = 0.0;
  let mut elapsed_ms = 0.0;
  if total > 0 {
    let next = Arc::new(AtomicUsize::new(0));
    let program = Arc::new(program);
    let started = Instant::now();
    let threads: Vec<_> = (0..concurrency)
      .map(|_| {
        let next = Arc::clone(&next);
        let program = Arc::clone(&program);
        std::thread::spawn(move || {
          while next.fetch_add(1, Ordering::Relaxed) < total {
            spawn_and_wait(&program).unwrap_or_else(|e| panic!("{e}"));
          }
        })
      })
      .collect();
    for t in threads {
      t.join().expect("spawner thread panicked");
    }
    let elapsed = started.elapsed().as_secs_f64();
    elapsed_ms = elapsed * 1e3;
    throughput_per_sec = total as f64 / elapsed;
  }

  // CPU spent by this process (its spawner threads) and by the reaped children, per run.
  let runs = (sequential + warmup + total).max(1) as f64;
  let (self_us, children_us) = (cpu_us(libc::RUSAGE_SELF) / runs, cpu_us(libc::RUSAGE_CHILDREN) / runs);
  let us: Vec<String> = sequential_us.iter().map(|v| format!("{v:.1}")).collect();
  println!(
    "{{\"sequentialUs\":[{}],\"throughputPerSec\":{:.1},\"throughputElapsedMs\":{:.3},\"total\":{},\"concurrency\":{},\"parentCpuUsPerRun\":{:.1},\"childCpuUsPerRun\":{:.1},\"parentSleepsPerRun\":{:.2}}}",
    us.join(","),
    throughput_per_sec,
    elapsed_ms,
    total,
    concurrency,
    self_us,
    children_us,
    // Voluntary context switches of this process's threads (vfork and waitpid each sleep).
    rusage(libc::RUSAGE_SELF).ru_nvcsw as f64 / runs
  );
}

fn rusage(who: libc::c_int) -> libc::rusage {
  let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
  // SAFETY: a valid out pointer for getrusage.
  unsafe {
    libc::getrusage(who, ru.as_mut_ptr());
    ru.assume_init()
  }
}

fn cpu_us(who: libc::c_int) -> f64 {
  let ru = rusage(who);
  let tv = |t: libc::timeval| t.tv_sec as f64 * 1e6 + t.tv_usec as f64;
  tv(ru.ru_utime) + tv(ru.ru_stime)
}
