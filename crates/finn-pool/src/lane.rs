//! One lane: its slots, its FIFO queue, and round-robin across sessions when the queue is
//! more than half full.

use std::collections::{HashMap, VecDeque};

/// A lane's bookkeeping; `T` is whatever the pool queues.
#[derive(Debug)]
pub struct LaneQueue<T> {
  pub capacity: usize,
  pub active: usize,
  max_depth: usize,
  queue: VecDeque<(Option<String>, T)>,
  /// Session -> the dispatch tick it was last served at (0: never).
  last_served: HashMap<Option<String>, u64>,
  clock: u64,
}

pub enum Admit<T> {
  /// A slot was free: run it now.
  Run(T),
  Queued,
  Full(T),
}

impl<T> LaneQueue<T> {
  pub fn new(capacity: usize, max_depth: usize) -> Self {
    LaneQueue {
      capacity,
      active: 0,
      max_depth,
      queue: VecDeque::new(),
      last_served: HashMap::new(),
      clock: 0,
    }
  }

  pub fn queued(&self) -> usize {
    self.queue.len()
  }

  /// Takes a slot if one is free, else queues, else refuses.
  pub fn admit(&mut self, session: Option<String>, item: T) -> Admit<T> {
    if self.active < self.capacity {
      self.active += 1;
      self.mark_served(session);
      Admit::Run(item)
    } else if self.queue.len() >= self.max_depth {
      Admit::Full(item)
    } else {
      self.queue.push_back((session, item));
      Admit::Queued
    }
  }

  /// Frees a slot.
  pub fn release(&mut self) {
    self.active -= 1;
  }

  /// The next job for a free slot (taking the slot), FIFO unless the queue is more than half
  /// full, then the oldest job of the session served longest ago.
  pub fn dispatch_next(&mut self) -> Option<T> {
    if self.active >= self.capacity || self.queue.is_empty() {
      return None;
    }
    let index = if self.queue.len() * 2 > self.max_depth {
      self.fair_index()
    } else {
      0
    };
    let (session, item) = self.queue.remove(index)?;
    self.active += 1;
    self.mark_served(session);
    Some(item)
  }

  fn fair_index(&self) -> usize {
    let mut best: Option<(u64, usize)> = None;
    let mut seen: Vec<&Option<String>> = Vec::new();
    for (i, (session, _)) in self.queue.iter().enumerate() {
      if seen.contains(&session) {
        continue;
      }
      seen.push(session);
      let served = self.last_served.get(session).copied().unwrap_or(0);
      if best.is_none_or(|(b, _)| served < b) {
        best = Some((served, i));
      }
    }
    best.map_or(0, |(_, i)| i)
  }

  fn mark_served(&mut self, session: Option<String>) {
    self.clock += 1;
    self.last_served.insert(session, self.clock);
    if self.last_served.len() > 4096 {
      // Forget sessions with nothing queued; they start over as "never served".
      let queued: Vec<Option<String>> = self.queue.iter().map(|(s, _)| s.clone()).collect();
      self.last_served.retain(|s, _| queued.contains(s));
    }
  }

  /// Removes the queued item `pred` selects.
  pub fn remove_where(&mut self, mut pred: impl FnMut(&T) -> bool) -> Option<T> {
    let index = self.queue.iter().position(|(_, item)| pred(item))?;
    self.queue.remove(index).map(|(_, item)| item)
  }

  pub fn drain(&mut self) -> impl Iterator<Item = T> + '_ {
    self.queue.drain(..).map(|(_, item)| item)
  }
}

#[cfg(test)]
mod tests {
  use super::*;

  fn s(name: &str) -> Option<String> {
    Some(name.to_owned())
  }

  #[test]
  fn fifo_below_half_and_round_robin_above() {
    let mut lane = LaneQueue::new(1, 8);
    assert!(matches!(lane.admit(s("x"), "x0"), Admit::Run("x0")));
    for i in 0..5 {
      assert!(matches!(
        lane.admit(s("a"), ["a1", "a2", "a3", "a4", "a5"][i]),
        Admit::Queued
      ));
    }
    assert!(matches!(lane.admit(s("b"), "b1"), Admit::Queued));
    assert!(matches!(lane.admit(s("b"), "b2"), Admit::Queued));
    assert!(matches!(lane.admit(s("b"), "b3"), Admit::Queued));
    assert!(matches!(lane.admit(s("c"), "c1"), Admit::Full("c1")));
    let mut order = Vec::new();
    loop {
      lane.release();
      match lane.dispatch_next() {
        Some(item) => order.push(item),
        None => break,
      }
    }
    // 8 queued (> 4): a1, b1, a2, b2, a3 alternate; at 3 left (<= 4) FIFO resumes.
    assert_eq!(order, ["a1", "b1", "a2", "b2", "a3", "a4", "a5", "b3"]);
  }

  #[test]
  fn a_new_session_is_not_stuck_behind_a_dominant_one() {
    let mut lane = LaneQueue::new(1, 4);
    assert!(matches!(lane.admit(s("a"), 0), Admit::Run(0)));
    for i in 1..=3 {
      lane.admit(s("a"), i);
    }
    lane.admit(s("b"), 9);
    lane.release();
    assert_eq!(
      lane.dispatch_next(),
      Some(9),
      "b was never served, a just was"
    );
  }

  #[test]
  fn zero_depth_refuses_when_busy() {
    let mut lane = LaneQueue::new(1, 0);
    assert!(matches!(lane.admit(None, 1), Admit::Run(1)));
    assert!(matches!(lane.admit(None, 2), Admit::Full(2)));
  }
}
