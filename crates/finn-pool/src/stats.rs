//! The pool's counters, shaped as loa-finn's `WorkerPoolStats`.

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Totals {
  /// Jobs that resolved with a result (non-zero exits and jail rejections included).
  pub completed: u64,
  /// Jobs that could not be spawned, and internal crashes.
  pub failed: u64,
  /// Jobs rejected with EXEC_TIMEOUT.
  pub timed_out: u64,
  pub total_exec_ms: f64,
  /// `round(total_exec_ms / completed)`, 0 before the first completion.
  pub avg_exec_ms: u64,
}

impl Totals {
  pub fn refresh_average(&mut self) {
    self.avg_exec_ms = if self.completed == 0 {
      0
    } else {
      (self.total_exec_ms / self.completed as f64).round() as u64
    };
  }
}

#[derive(Debug, Clone, PartialEq)]
pub struct LaneStats {
  pub active: usize,
  pub idle: usize,
  pub queued: usize,
}

#[derive(Debug, Clone, PartialEq)]
pub struct SystemStats {
  pub active: bool,
  pub queued: usize,
}

#[derive(Debug, Clone, PartialEq)]
pub struct PoolStats {
  pub interactive: LaneStats,
  pub system: SystemStats,
  pub totals: Totals,
}
