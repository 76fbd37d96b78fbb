//! The runner's output made into a `ToolResult`: the same text whichever runner ran it and
//! whichever of rg/fd or grep/find did. Names relative to the worktree, sorted bytewise; cut to
//! the call's limits on whole lines (a character is never split); `truncated` exactly when a
//! limit cut something, and the output then says which.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use super::args::ToolArgs;
use super::gitignore::Rules;
use super::plan::{Context, Target, check_target};
use super::text::bounded_lines;
use finn_job::TRUNCATION_MARKER;
use finn_job::limits::MAX_LS_ENTRIES;
use finn_policy::FilesystemJail;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolError {
  pub code: String,
  pub message: String,
}

/// What a tool call resolves with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolResult {
  /// False when the command failed (a non-zero exit) or the call was bad; a refusal (a path,
  /// command or flag) is `ok` with the explanation in `output`, for the model to read and retry.
  pub ok: bool,
  pub exit_code: i32,
  pub output: String,
  pub truncated: bool,
  pub error: Option<ToolError>,
}

impl ToolResult {
  /// Refused by the jail or the policy: nothing ran.
  pub fn refused(message: impl Into<String>) -> Self {
    ToolResult {
      ok: true,
      exit_code: 0,
      output: message.into(),
      truncated: false,
      error: None,
    }
  }

  /// Not run, or run and failed without an exit code of its own.
  pub fn failed(code: &str, message: impl Into<String>) -> Self {
    let message = message.into();
    ToolResult {
      ok: false,
      exit_code: 1,
      output: String::new(),
      truncated: false,
      error: Some(ToolError {
        code: code.into(),
        message,
      }),
    }
  }
}

/// A runner's result, as the ToolSandbox pipeline completed it (redacted).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunnerOutput {
  pub stdout: String,
  pub stderr: String,
  pub exit_code: i32,
  /// The runner cut the output at its cap (`TOOL_RUN_MAX_BUFFER`).
  pub truncated: bool,
  pub timed_out: bool,
}

/// Why output was cut, as the note names it.
const RUN_CAP: &str = "the runner's output cap";

/// Finishes a call planned with `context` in `jail`, from what its runner returned.
pub fn finish(context: &Context, jail: &FilesystemJail, out: RunnerOutput) -> ToolResult {
  if out.timed_out {
    return ToolResult::failed("TIMED_OUT", out.stderr);
  }
  if let Some(target) = &context.target
    && let Err(refusal) = same_target(jail, target, context.planned_at)
  {
    return refusal;
  }
  let mut stdout = out.stdout;
  if out.truncated && stdout.ends_with(TRUNCATION_MARKER) {
    stdout.truncate(stdout.len() - TRUNCATION_MARKER.len());
  }
  let budget = context.max_output_bytes as usize;
  let done = |output: String, truncated: bool| ToolResult {
    ok: true,
    exit_code: out.exit_code,
    output,
    truncated,
    error: None,
  };
  let failure = |output: String, truncated: bool| {
    let message = out.stderr.trim_end();
    let message = if message.is_empty() {
      format!("exited with code {}", out.exit_code)
    } else {
      message.to_owned()
    };
    ToolResult {
      ok: false,
      exit_code: out.exit_code,
      output,
      truncated,
      error: Some(ToolError {
        code: "COMMAND_FAILED".into(),
        message,
      }),
    }
  };
  let target = context.target.as_ref();
  match &context.args {
    ToolArgs::Read { offset, limit, .. } => {
      let target = target.expect("read has a target");
      if stdout.contains('\0') {
        return ToolResult::failed(
          "BINARY_FILE",
          format!("read: {} is a binary file", target.rel),
        );
      }
      if out.exit_code != 0 {
        return failure(String::new(), false);
      }
      let (text, truncated) = read(&stdout, &target.rel, *offset, *limit, out.truncated, budget);
      done(text, truncated)
    }
    ToolArgs::Ls { .. } => {
      let mut entries: Vec<String> = records(&stdout, out.truncated)
        .filter_map(|r| {
          let (kind, name) = r.split_once(' ')?;
          Some(if kind == "d" {
            format!("{name}/")
          } else {
            name.to_owned()
          })
        })
        .collect();
      entries.sort_unstable();
      let (text, truncated) = listing(
        &entries,
        MAX_LS_ENTRIES as usize,
        "ls shows at most 1000 entries",
        out.truncated,
        budget,
      );
      if out.exit_code != 0 {
        return failure(text, truncated);
      }
      done(text, truncated)
    }
    ToolArgs::Find { max_results, .. } => {
      let prefix = rel_prefix(target);
      let mut rules = Rules::new(jail, &target.expect("find has a target").rel);
      let mut paths: Vec<String> = records(&stdout, out.truncated)
        .filter_map(|r| {
          let r = r.strip_prefix("./").unwrap_or(r);
          let (name, is_dir) = match r.strip_suffix('/') {
            Some(dir) => (dir, true),
            None => (r, false),
          };
          let path = format!("{prefix}{name}");
          (!rules.ignored(name, is_dir) && !host_owned(jail, &path)).then_some(path)
        })
        .collect();
      if let Some(why) = rules.refused() {
        return ToolResult::failed("TOOL_FAILED", format!("find: {why}"));
      }
      // Names below a directory that changed during the call (swapped for a symlink out and
      // back while the walk went through it) may be another directory's: withheld. Each
      // directory is looked at once.
      let from = &target.expect("find has a target").path;
      let mut dirs: std::collections::HashMap<String, bool> = std::collections::HashMap::new();
      let before = paths.len();
      paths.retain(|p| {
        let Some((dir, _)) = p.rsplit_once('/') else {
          return true;
        };
        let dir = dir.to_owned();
        !*dirs
          .entry(dir.clone())
          .or_insert_with(|| changed_since(from, &jail.root().join(&dir), context.planned_at))
      });
      let withheld = before - paths.len();
      paths.sort_unstable();
      let (mut text, truncated) = listing(
        &paths,
        *max_results as usize,
        "maxResults",
        out.truncated,
        budget,
      );
      if withheld > 0 {
        if !text.is_empty() {
          text.push('\n');
        }
        text.push_str(&format!(
          "[{withheld} entries below directories changed during the call withheld]"
        ));
      }
      if out.exit_code != 0 {
        return failure(text, truncated);
      }
      done(text, truncated)
    }
    ToolArgs::Grep {
      max_count,
      max_results,
      ..
    } => {
      let (text, truncated) = match grep(
        &stdout,
        jail,
        target.expect("grep has a target"),
        (*max_count, *max_results),
        out.truncated,
        budget,
        context.planned_at,
      ) {
        Ok(done) => done,
        Err(why) => return ToolResult::failed("TOOL_FAILED", format!("grep: {why}")),
      };
      // grep and rg: 0 matched, 1 matched nothing, 2 an error.
      match out.exit_code {
        0 | 1 => ToolResult {
          exit_code: 0,
          ..done(text, truncated)
        },
        _ => failure(text, truncated),
      }
    }
    ToolArgs::Git { .. } => {
      let lines: Vec<&str> = stdout.lines().collect();
      let (mut text, held) = bounded_lines(&lines, budget);
      let mut cut = Vec::new();
      if held < lines.len() {
        cut.push(format!("maxOutputBytes ({budget} bytes)"));
      }
      if out.truncated {
        cut.push(RUN_CAP.into());
      }
      note(
        &mut text,
        &cut,
        &format!("{held} of the output's lines shown"),
      );
      if out.exit_code != 0 {
        return failure(text, !cut.is_empty());
      }
      done(text, !cut.is_empty())
    }
  }
}

/// The path must still be what the plan checked: inside the jail, no symlink, the same file.
fn same_target(
  jail: &FilesystemJail,
  target: &Target,
  planned_at: std::time::SystemTime,
) -> Result<(), ToolResult> {
  let now = check_target(jail, &target.given)?;
  // The change time too: renamed away while a symlink out stood in its place (the runner's
  // chdir or open followed it) and renamed back, it is the same inode. A directory's also
  // changes when an entry is added or removed: its listing changed during the call as well.
  // So for each directory on the way: one swapped out and back while the runner opened the
  // path through it changed after the plan.
  let on_the_way = target
    .path
    .parent()
    .filter(|p| p.starts_with(jail.root()) && *p != jail.root());
  let changed = now.ctime != target.ctime
    || on_the_way.is_some_and(|p| changed_since(jail.root(), p, planned_at));
  if changed || (now.dev, now.ino, &now.path) != (target.dev, target.ino, &target.path) {
    return Err(ToolResult::refused(format!(
      "Path changed during the call: {} (its output is withheld)",
      target.given
    )));
  }
  Ok(())
}

/// `rel` (relative to the worktree) lies in a directory of the host's (the audit log's).
fn host_owned(jail: &FilesystemJail, rel: &str) -> bool {
  let path = jail.root().join(rel);
  jail.hidden().iter().any(|h| path.starts_with(h))
}

/// What a file whose lines a search printed is when the call finishes.
enum FileNow {
  /// Inside the worktree, reached through no symlink, a regular file with one name.
  Kept,
  /// A second name: its content may be a file's outside the worktree.
  HardLinked,
  /// Gone, no longer a regular file, or reached through a symlink swapped in for a directory
  /// on its path: what the search read may have been a file's outside the worktree.
  Changed,
  /// A name that is not UTF-8 reaches here with U+FFFD (the runner's lossy decoding): the file
  /// it names cannot be looked at (nor read by the model), and may be a hard link.
  NotUtf8,
}

/// Whether the file at `path`, or a directory on its way below `from`, changed (its ctime) at
/// or after `since`: a directory renamed away while a symlink out stood in its place (the
/// search went through it) and renamed back, or a hard link replaced by a plain file once
/// read, is the same name, changed. The plan waited until the kernel's coarse clock passed
/// `since` (`plan.rs`): every change while the runner ran is stamped after it, every change
/// before the plan at or before it.
fn changed_since(from: &Path, path: &Path, since: std::time::SystemTime) -> bool {
  let Ok(since) = since.duration_since(std::time::UNIX_EPOCH) else {
    return true;
  };
  let Ok(rest) = path.strip_prefix(from) else {
    return true;
  };
  let mut at = from.to_path_buf();
  for part in rest.components() {
    at.push(part);
    let Ok(meta) = std::fs::symlink_metadata(&at) else {
      return true;
    };
    let ctime = std::time::Duration::new(
      u64::try_from(meta.ctime()).unwrap_or(0),
      u32::try_from(meta.ctime_nsec()).unwrap_or(0),
    );
    if ctime >= since {
      return true;
    }
  }
  false
}

fn file_now(
  jail: &FilesystemJail,
  rel: &str,
  below: Option<(&Path, std::time::SystemTime)>,
) -> FileNow {
  match jail.validate_path(rel) {
    Ok(path) => match std::fs::symlink_metadata(&path) {
      Ok(meta)
        if meta.is_file()
          && meta.nlink() == 1
          && below.is_some_and(|(from, since)| changed_since(from, &path, since)) =>
      {
        FileNow::Changed
      }
      Ok(meta) if meta.is_file() && meta.nlink() == 1 => FileNow::Kept,
      Ok(meta) if meta.is_file() => FileNow::HardLinked,
      Err(_) if rel.contains('\u{FFFD}') => FileNow::NotUtf8,
      _ => FileNow::Changed,
    },
    Err(d) if d.message.starts_with("Hard-linked file rejected") => FileNow::HardLinked,
    Err(_) => FileNow::Changed,
  }
}

/// `rel/` for names printed relative to the target directory; empty at the worktree.
fn rel_prefix(target: Option<&Target>) -> String {
  match target {
    Some(t) if !t.rel.is_empty() => format!("{}/", t.rel),
    _ => String::new(),
  }
}

/// NUL-terminated records; when the runner cut the output, the last one may be partial and is
/// left out.
fn records(stdout: &str, cut: bool) -> impl Iterator<Item = &str> {
  let mut parts: Vec<&str> = stdout.split('\0').collect();
  // The piece after the last NUL: empty when complete, a partial record when cut.
  let last = parts.pop().unwrap_or("");
  if !cut && !last.is_empty() {
    parts.push(last);
  }
  parts.into_iter().filter(|r| !r.is_empty())
}

/// Appends `[truncated: <what>; cut by <limits>]` when any limit cut.
fn note(text: &mut String, limits: &[String], what: &str) {
  if limits.is_empty() {
    return;
  }
  if !text.is_empty() {
    text.push('\n');
  }
  text.push_str(&format!(
    "[truncated: {what}; cut by {}]",
    limits.join(" and ")
  ));
}

/// Sorted entries cut to `max` and to the byte budget.
fn listing(
  entries: &[String],
  max: usize,
  max_name: &str,
  run_cut: bool,
  budget: usize,
) -> (String, bool) {
  let shown = &entries[..entries.len().min(max)];
  let (mut text, held) = bounded_lines(shown, budget);
  let mut cut = Vec::new();
  if entries.len() > max {
    cut.push(format!("{max_name} ({max})"));
  }
  if held < shown.len() {
    cut.push(format!("maxOutputBytes ({budget} bytes)"));
  }
  if run_cut {
    cut.push(RUN_CAP.into());
  }
  let what = if run_cut {
    format!("{held} entries shown of more")
  } else {
    format!("{held} of {} entries shown", entries.len())
  };
  note(&mut text, &cut, &what);
  (text, !cut.is_empty())
}

/// `[File: rel]`, then lines `offset..` numbered as `cat -n` does, a page of `limit`.
fn read(
  stdout: &str,
  rel: &str,
  offset: u64,
  limit: u64,
  run_cut: bool,
  budget: usize,
) -> (String, bool) {
  let mut lines: Vec<&str> = stdout.split_inclusive('\n').collect();
  // A line the runner's cap cut is not shown (reading on from it shows it whole), unless it is
  // the only one: then it is shown cut to the budget.
  if run_cut && lines.len() > 1 && lines.last().is_some_and(|l| !l.ends_with('\n')) {
    lines.pop();
  }
  let more_lines = lines.len() as u64 > limit;
  lines.truncate(limit as usize);
  let numbered: Vec<String> = lines
    .iter()
    .enumerate()
    .map(|(i, l)| {
      let l = l.strip_suffix('\n').unwrap_or(l);
      format!(
        "{:>6}\t{}",
        offset + i as u64,
        l.strip_suffix('\r').unwrap_or(l)
      )
    })
    .collect();
  let header = format!("[File: {rel}]");
  let (body, held) = bounded_lines(&numbered, budget.saturating_sub(header.len() + 1));
  let mut text = header;
  if !body.is_empty() {
    text.push('\n');
    text.push_str(&body);
  }
  if lines.is_empty() && !run_cut {
    text.push_str(&format!(
      "\n[no lines at offset {offset}: the file is shorter]"
    ));
    return (text, false);
  }
  let mut cut = Vec::new();
  if more_lines && held == lines.len() {
    cut.push(format!("limit ({limit} lines)"));
  }
  // The runner's cap for `read` is the byte budget and a line more (`plan::READ_SLACK_BYTES`):
  // what it cut is what the budget cut.
  if held < lines.len() || (run_cut && !more_lines) {
    cut.push(format!("maxOutputBytes ({budget} bytes)"));
  }
  // A line too long for the budget is shown cut; reading on starts after it.
  let next = offset + held.max(1) as u64;
  let what = if held == 0 {
    format!("line {offset} shown cut")
  } else {
    format!("lines {offset}-{} shown", next - 1)
  };
  note(&mut text, &cut, &what);
  if !cut.is_empty() {
    text.push_str(&format!(" continue with offset={next}"));
  }
  (text, !cut.is_empty())
}

/// One match: the file relative to the worktree, the line number, the text.
struct Match<'a> {
  path: String,
  line: u64,
  text: &'a str,
}

/// `name\0line:text` records (`--null`) as `path:line:text`, sorted by path then line; a file's
/// matches cut to `max_count`, the whole to `max_results` and the byte budget. Lines from a
/// hard-linked file are withheld (its content may be a file's outside the worktree).
fn grep(
  stdout: &str,
  jail: &FilesystemJail,
  target: &Target,
  (max_count, max_results): (Option<u64>, u64),
  run_cut: bool,
  budget: usize,
  planned_at: std::time::SystemTime,
) -> Result<(String, bool), String> {
  let prefix = rel_prefix(Some(target));
  let mut lines: Vec<&str> = stdout.split_inclusive('\n').collect();
  if run_cut && lines.last().is_some_and(|l| !l.ends_with('\n')) {
    lines.pop();
  }
  let mut rules = Rules::new(jail, &target.rel);
  // A file name may hold a newline (`x\nsafe.txt`): the lines before its NUL are the start of
  // its name, never a record of their own, or the rest would pass for another file's name
  // (and that file's hard-link check would judge the match).
  let mut pending = String::new();
  let mut matches: Vec<Match> = lines
    .iter()
    .filter_map(|l| {
      let Some((head, rest)) = l.split_once('\0') else {
        pending.push_str(l);
        return None;
      };
      let name_owned = std::mem::take(&mut pending) + head;
      let name = name_owned.as_str();
      let rest = rest.strip_suffix('\n').unwrap_or(rest);
      let (n, text) = rest.split_once(':')?;
      let line = n.parse().ok()?;
      // A line that is not UTF-8 reaches here with U+FFFD (the runner's lossy decoding) from
      // rg, and not at all from grep, which reads it as binary in its UTF-8 locale: left out
      // on both paths.
      if text.contains('\u{FFFD}') {
        return None;
      }
      // A file named as the path is searched whatever the rules say; a directory's files
      // under its `.gitignore` rules.
      let path = if target.is_dir {
        let name = name.strip_prefix("./").unwrap_or(name);
        let path = format!("{prefix}{name}");
        if rules.ignored(name, false) || host_owned(jail, &path) {
          return None;
        }
        path
      } else {
        target.rel.clone()
      };
      Some(Match { path, line, text })
    })
    .collect();
  if let Some(why) = rules.refused() {
    return Err(why.to_owned());
  }
  matches.sort_by(|a, b| (&a.path, a.line).cmp(&(&b.path, b.line)));
  let mut cut = Vec::new();
  if let Some(max) = max_count {
    let before = matches.len();
    let mut kept: Vec<Match> = Vec::with_capacity(before);
    let mut run = 0;
    for m in matches {
      run = match kept.last() {
        Some(prev) if prev.path == m.path => run + 1,
        _ => 1,
      };
      if run <= max {
        kept.push(m);
      }
    }
    if kept.len() < before {
      cut.push(format!("maxCount ({max} per file)"));
    }
    matches = kept;
  }
  let total = matches.len();
  matches.truncate(max_results as usize);
  if total > matches.len() {
    cut.push(format!("maxResults ({max_results})"));
  }
  let mut withheld: Vec<String> = Vec::new();
  let mut changed: Vec<String> = Vec::new();
  let mut not_utf8: Vec<String> = Vec::new();
  // Matches are sorted by path: each file is looked at once.
  let mut last: Option<(String, bool)> = None;
  matches.retain(|m| match &last {
    Some((path, keep)) if *path == m.path => *keep,
    _ => {
      let below = target.is_dir.then_some((target.path.as_path(), planned_at));
      let keep = match file_now(jail, &m.path, below) {
        FileNow::Kept => true,
        FileNow::HardLinked => {
          withheld.push(m.path.clone());
          false
        }
        FileNow::Changed => {
          changed.push(m.path.clone());
          false
        }
        FileNow::NotUtf8 => {
          not_utf8.push(m.path.clone());
          false
        }
      };
      last = Some((m.path.clone(), keep));
      keep
    }
  });
  let rendered: Vec<String> = matches
    .iter()
    .map(|m| format!("{}:{}:{}", m.path, m.line, m.text))
    .collect();
  let (mut text, held) = bounded_lines(&rendered, budget);
  if held < rendered.len() {
    cut.push(format!("maxOutputBytes ({budget} bytes)"));
  }
  if run_cut {
    cut.push(RUN_CAP.into());
  }
  if !withheld.is_empty() {
    if !text.is_empty() {
      text.push('\n');
    }
    text.push_str(&format!(
      "[matches in hard-linked files withheld: {}]",
      withheld.join(", ")
    ));
  }
  for (files, why) in [
    (&changed, "changed during the call"),
    (&not_utf8, "with names that are not UTF-8"),
  ] {
    if !files.is_empty() {
      if !text.is_empty() {
        text.push('\n');
      }
      text.push_str(&format!(
        "[matches in files {why} withheld: {}]",
        files.join(", ")
      ));
    }
  }
  let what = if run_cut {
    format!("{held} matching lines shown of more")
  } else {
    format!("{held} of {total} matching lines shown")
  };
  note(&mut text, &cut, &what);
  Ok((text, !cut.is_empty()))
}

#[cfg(test)]
mod tests {
  use super::*;
  use crate::def::ToolName;
  use crate::plan::{Finders, Planned, plan};
  use serde_json::{Value, json};

  fn fixture() -> (tempfile::TempDir, FilesystemJail) {
    let dir = tempfile::tempdir().unwrap();
    let jail = FilesystemJail::new(dir.path().to_str().unwrap()).unwrap();
    std::fs::create_dir(jail.root().join("src")).unwrap();
    std::fs::write(jail.root().join("src/a.txt"), "x\n").unwrap();
    (dir, jail)
  }

  fn context(jail: &FilesystemJail, tool: ToolName, args: Value, budget: u64) -> Context {
    match plan(tool, &args, jail, Finders::portable(), budget) {
      Planned::Run(p) => p.context,
      Planned::Answered(a) => panic!("{a:?}"),
    }
  }

  fn ran(stdout: &str, exit_code: i32, truncated: bool) -> RunnerOutput {
    RunnerOutput {
      stdout: stdout.into(),
      stderr: String::new(),
      exit_code,
      truncated,
      timed_out: false,
    }
  }

  #[test]
  fn read_numbers_lines_and_says_how_to_read_on() {
    let (_d, jail) = fixture();
    let c = context(
      &jail,
      ToolName::Read,
      json!({"path": "src/a.txt", "offset": 3, "limit": 2}),
      1000,
    );
    let r = finish(&c, &jail, ran("c\nd\ne\n", 0, false));
    assert_eq!(
      r.output,
      "[File: src/a.txt]\n     3\tc\n     4\td\n[truncated: lines 3-4 shown; cut by limit (2 lines)] continue with offset=5"
    );
    assert!(r.ok && r.truncated);
    // Exactly `limit` lines: nothing was cut.
    let r = finish(&c, &jail, ran("c\nd", 0, false));
    assert_eq!(r.output, "[File: src/a.txt]\n     3\tc\n     4\td");
    assert!(!r.truncated);
    // The runner's cap cut a line: it is left for the next page.
    let r = finish(
      &c,
      &jail,
      ran(&format!("c\nd-partial{TRUNCATION_MARKER}"), 0, true),
    );
    assert!(r.truncated, "{}", r.output);
    assert!(r.output.ends_with("continue with offset=4"), "{}", r.output);
    let binary = finish(&c, &jail, ran("a\0b", 0, false));
    assert_eq!(binary.error.unwrap().code, "BINARY_FILE");
  }

  #[test]
  fn a_line_longer_than_the_budget_is_shown_cut_and_reading_on_skips_it() {
    let (_d, jail) = fixture();
    let c = context(&jail, ToolName::Read, json!({"path": "src/a.txt"}), 40);
    let long = format!("{}{TRUNCATION_MARKER}", "é".repeat(3000));
    let r = finish(&c, &jail, ran(&long, 0, true));
    assert!(r.truncated);
    assert_eq!(
      r.output,
      format!(
        "[File: src/a.txt]\n{}\n[truncated: line 1 shown cut; cut by maxOutputBytes (40 bytes)] continue with offset=2",
        crate::text::cut_utf8(&format!("     1\t{}", "é".repeat(30)), 40 - 18)
      )
    );
  }

  #[test]
  fn the_byte_budget_cuts_whole_lines_and_says_so() {
    let (_d, jail) = fixture();
    let c = context(&jail, ToolName::Read, json!({"path": "src/a.txt"}), 40);
    let r = finish(&c, &jail, ran("ééééé\nfffff\nggggg\n", 0, false));
    assert!(r.truncated);
    assert!(
      r.output
        .starts_with("[File: src/a.txt]\n     1\tééééé\n[truncated"),
      "{}",
      r.output
    );
    assert!(
      r.output.contains("maxOutputBytes (40 bytes)"),
      "{}",
      r.output
    );
  }

  #[test]
  fn grep_sorts_cuts_per_file_and_in_total_and_reports_which_limit() {
    let (_d, jail) = fixture();
    std::fs::write(jail.root().join("src/b.txt"), "x1\nx2\n").unwrap();
    let c = context(
      &jail,
      ToolName::Grep,
      json!({"pattern": "x", "path": "src", "maxCount": 1, "maxResults": 5}),
      1000,
    );
    let out = "b.txt\u{0}2:x2\nb.txt\u{0}1:x1\na.txt\u{0}1:x\nbinary file matches\n";
    let r = finish(&c, &jail, ran(out, 0, false));
    assert_eq!(
      r.output,
      "src/a.txt:1:x\nsrc/b.txt:1:x1\n[truncated: 2 of 2 matching lines shown; cut by maxCount (1 per file)]"
    );
    assert!(r.truncated && r.ok);
    let none = finish(&c, &jail, ran("", 1, false));
    assert_eq!(
      (none.ok, none.output.as_str(), none.truncated),
      (true, "", false)
    );
    let failed = finish(&c, &jail, ran("", 2, false));
    assert!(!failed.ok);
  }

  #[test]
  fn find_and_ls_normalize_both_programs_output() {
    let (_d, jail) = fixture();
    let c = context(
      &jail,
      ToolName::Find,
      json!({"pattern": "*", "path": "src", "maxResults": 2}),
      1000,
    );
    let fd = finish(&c, &jail, ran("./b/\0./a.txt\0./c\0", 0, false));
    let find = finish(&c, &jail, ran("./c\0./a.txt\0./b/\0", 0, false));
    assert_eq!(fd, find);
    assert_eq!(
      fd.output,
      "src/a.txt\nsrc/b\n[truncated: 2 of 3 entries shown; cut by maxResults (2)]"
    );
    let c = context(&jail, ToolName::Ls, json!({}), 1000);
    let r = finish(&c, &jail, ran("f b\0d a\0f .x\0", 0, false));
    assert_eq!(r.output, ".x\na/\nb");
    assert!(!r.truncated);
  }

  #[test]
  fn matches_in_files_gone_or_reached_through_a_symlink_at_the_finish_are_withheld() {
    let (_d, jail) = fixture();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("s.txt"), "x secret\n").unwrap();
    let c = context(&jail, ToolName::Grep, json!({"pattern": "x"}), 1000);
    // src/sub was a directory when the search went through it, a symlink out by the finish;
    // gone.txt was removed (a hard link to a file outside, unlinked once read).
    std::os::unix::fs::symlink(outside.path(), jail.root().join("src/sub")).unwrap();
    let out = "src/a.txt\u{0}1:x\nsrc/sub/s.txt\u{0}1:x secret\ngone.txt\u{0}1:x secret\n";
    let r = finish(&c, &jail, ran(out, 0, false));
    // src itself changed during the call (the symlink added to it): src/a.txt's match may be
    // withheld too, unless the change's coarse stamp fell before the plan's clock.
    assert!(!r.output.contains("secret"), "{}", r.output);
    assert!(
      r.output
        .starts_with("[matches in files changed during the call withheld: gone.txt, ")
        || r.output.starts_with(
          "src/a.txt:1:x\n[matches in files changed during the call withheld: gone.txt, "
        ),
      "{}",
      r.output
    );
    assert!(r.output.ends_with("src/sub/s.txt]"), "{}", r.output);
    // Nothing changed since the plan: shown.
    let c = context(
      &jail,
      ToolName::Grep,
      json!({"pattern": "x", "path": "src"}),
      1000,
    );
    let r = finish(&c, &jail, ran("a.txt\u{0}1:x\n", 0, false));
    assert_eq!(r.output, "src/a.txt:1:x");
  }

  #[test]
  fn a_target_swapped_for_a_symlink_after_the_plan_withholds_the_output() {
    let (_d, jail) = fixture();
    let c = context(&jail, ToolName::Read, json!({"path": "src/a.txt"}), 1000);
    std::fs::remove_file(jail.root().join("src/a.txt")).unwrap();
    std::os::unix::fs::symlink("/etc/hostname", jail.root().join("src/a.txt")).unwrap();
    let r = finish(&c, &jail, ran("secret\n", 0, false));
    assert_eq!(r.output, "Symlink rejected: src/a.txt");
    let c2 = {
      std::fs::remove_file(jail.root().join("src/a.txt")).unwrap();
      std::fs::write(jail.root().join("src/a.txt"), "x\n").unwrap();
      context(&jail, ToolName::Read, json!({"path": "src/a.txt"}), 1000)
    };
    // Another file renamed over it (a file inside the worktree reusing the inode would be
    // harmless: it is still the worktree's).
    std::fs::write(jail.root().join("src/b.txt"), "other\n").unwrap();
    std::fs::rename(jail.root().join("src/b.txt"), jail.root().join("src/a.txt")).unwrap();
    let r = finish(&c2, &jail, ran("other\n", 0, false));
    assert!(
      r.output.starts_with("Path changed during the call"),
      "{}",
      r.output
    );
  }
}
