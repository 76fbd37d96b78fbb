//! A [`Runner`] that records the jobs it is given and answers as scripted, so the pipeline is
//! tested without processes.

use std::sync::Mutex;

use super::runner::{Done, Output, RunOutcome, Runner, RunnerError};
use finn_job::RawJob;

/// What the recording runner does with the next job.
pub enum Script {
  /// Completes it at once with this output.
  Finish(Output),
  /// Completes it at once as timed out, with this message.
  TimeOut(String),
  /// Completes it at once as failed, with this code.
  Fail(&'static str),
  /// Refuses it from `run`, with this code.
  Refuse(&'static str),
}

#[derive(Debug, PartialEq, Eq)]
pub struct Code(pub &'static str);

impl RunnerError for Code {
  fn audit_code(&self) -> String {
    self.0.into()
  }
}

pub struct Recording {
  script: Mutex<Vec<Script>>,
  pub jobs: Mutex<Vec<RawJob>>,
}

impl Recording {
  /// Answers the jobs in `script` order.
  pub fn new(script: Vec<Script>) -> Self {
    Recording {
      script: Mutex::new(script.into_iter().rev().collect()),
      jobs: Mutex::default(),
    }
  }

  pub fn jobs(&self) -> Vec<RawJob> {
    self.jobs.lock().unwrap().clone()
  }
}

impl Runner for Recording {
  type Error = Code;

  fn run(&self, job: RawJob, done: Done<Code>) -> Result<u64, Code> {
    let id = {
      let mut jobs = self.jobs.lock().unwrap();
      jobs.push(job);
      jobs.len() as u64
    };
    let next = self
      .script
      .lock()
      .unwrap()
      .pop()
      .expect("a scripted answer");
    let outcome = match next {
      Script::Finish(output) => RunOutcome::Finished(output),
      Script::TimeOut(message) => RunOutcome::TimedOut(message),
      Script::Fail(code) => RunOutcome::Failed(Code(code)),
      Script::Refuse(code) => return Err(Code(code)),
    };
    done(id, outcome);
    Ok(id)
  }
}
