//! A call planned: its path checked inside the worktree by the jail before anything runs (the
//! same check whichever runner is injected), and the argv it runs. No argv passes through a
//! shell, and nothing the model wrote can become an option: patterns follow `-e` or `--`,
//! paths are the jail's canonical absolute paths or the directory the command runs from.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::args::ToolArgs;
use super::def::ToolName;
use super::finish::ToolResult;
use finn_policy::command::{MISSING_BINARY_DIR, default_policies, resolve_binary};
use finn_policy::topology::{self, Writes};
use finn_policy::{CommandPolicy, FilesystemJail};

/// The programs the tools run, as ToolSandbox policies: git with the sandbox's own git policy
/// (its denied flags, its option allowlist per subcommand) narrowed to
/// [`allowed_git_commands`](crate::def::allowed_git_commands); the search and read programs with
/// no path check of the policy's (each path was checked here, and patterns are no paths).
pub fn policies(path_var: &str) -> BTreeMap<String, CommandPolicy> {
  let mut out = BTreeMap::new();
  let mut git = default_policies(path_var)
    .remove("git")
    .expect("the default policies include git");
  git.subcommands = crate::def::allowed_git_commands()
    .into_iter()
    .map(str::to_owned)
    .collect();
  out.insert("git".to_owned(), git);
  for name in ["rg", "fd", "fdfind", "grep", "find", "tail"] {
    out.insert(
      name.to_owned(),
      CommandPolicy {
        binary: resolve_binary(name, path_var),
        subcommands: Vec::new(),
        denied_flags: Vec::new(),
        validate_paths: false,
      },
    );
  }
  out
}

/// Which search programs run: `rg` and `fd` (Debian's `fdfind`) where installed, else `grep` and
/// `find`. Both pairs give the same output (`finish.rs` normalizes it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Finders {
  pub rg: bool,
  /// `fd` or `fdfind`, as installed.
  pub fd: Option<&'static str>,
}

impl Finders {
  /// What `path_var` offers.
  pub fn detect(path_var: &str) -> Self {
    let found = |name| !resolve_binary(name, path_var).starts_with(MISSING_BINARY_DIR);
    Finders {
      rg: found("rg"),
      fd: ["fd", "fdfind"].into_iter().find(|n| found(n)),
    }
  }

  /// `grep` and `find` only.
  pub fn portable() -> Self {
    Finders {
      rg: false,
      fd: None,
    }
  }
}

/// A path the call named, as checked: finishing the call checks it again and refuses the output
/// when it no longer names the same file (a symlink or another file swapped in meanwhile).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
  /// As the call wrote it.
  pub given: String,
  /// Canonical, inside the worktree.
  pub path: PathBuf,
  /// Relative to the worktree; empty for the worktree itself.
  pub rel: String,
  pub dev: u64,
  pub ino: u64,
  pub is_dir: bool,
  /// A regular file (not a FIFO, socket or device, which a read would block on or never end).
  pub is_file: bool,
  /// The inode's change time (seconds, nanoseconds): a rename away and back (a symlink out
  /// swapped in while the command read, then undone) changes it, where device and inode stay.
  pub ctime: (i64, i64),
}

/// What finishing needs to know of the call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Context {
  pub args: ToolArgs,
  pub target: Option<Target>,
  pub max_output_bytes: u64,
  /// When the call was planned (after the target's check): a file a search printed, or a
  /// directory on its way, whose change time is later changed during the call.
  pub planned_at: std::time::SystemTime,
}

/// The argv to run through the ToolSandbox pipeline (`binary` is the name its policies give).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
  pub binary: &'static str,
  pub args: Vec<String>,
  /// The directory the command runs from (checked inside the worktree); `None`: the worktree.
  pub cwd: Option<PathBuf>,
  /// Added to the sandbox's environment.
  pub env: Vec<(String, String)>,
  /// A cap on the runner's output below the sandbox's (`read`: what one page can show).
  pub max_buffer: Option<u64>,
  pub context: Context,
}

/// What `read` lets its runner print beyond the page's byte budget: room for the line that
/// tells a cut page from a whole one.
pub const READ_SLACK_BYTES: u64 = 4096;

/// A call's plan, or its answer without running anything.
#[derive(Debug)]
pub enum Planned {
  Run(Box<Plan>),
  Answered(ToolResult),
}

/// A UTF-8 locale every glibc has (the builtin one), for grep's multibyte matching.
const UTF8_LOCALE: &str = "C.UTF-8";

/// Plans `tool` with `args` in `jail` (the worktree). `max_output_bytes` bounds the result's
/// output.
pub fn plan(
  tool: ToolName,
  args: &Value,
  jail: &FilesystemJail,
  finders: Finders,
  max_output_bytes: u64,
) -> Planned {
  let args = match ToolArgs::parse(tool, args) {
    Ok(a) => a,
    Err(e) => return Planned::Answered(ToolResult::failed("INVALID_ARGUMENT", e.to_string())),
  };
  match plan_checked(args, jail, finders, max_output_bytes) {
    Ok(p) => Planned::Run(Box::new(p)),
    Err(answer) => Planned::Answered(answer),
  }
}

/// The jail's verdict on `given`, with what the path is now.
pub fn check_target(jail: &FilesystemJail, given: &str) -> Result<Target, ToolResult> {
  let path = jail
    .validate_path(given)
    .map_err(|d| ToolResult::refused(d.message))?;
  let meta = match std::fs::symlink_metadata(&path) {
    Ok(m) => m,
    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
      return Err(ToolResult::failed(
        "NOT_FOUND",
        format!("No such file or directory: {given}"),
      ));
    }
    Err(e) => {
      return Err(ToolResult::refused(format!(
        "Path cannot be read: {given} ({e})"
      )));
    }
  };
  let rel = path
    .strip_prefix(jail.root())
    .unwrap_or(Path::new(""))
    .to_string_lossy()
    .into_owned();
  Ok(Target {
    given: given.to_owned(),
    path,
    rel,
    dev: meta.dev(),
    ino: meta.ino(),
    is_dir: meta.is_dir(),
    is_file: meta.is_file(),
    ctime: (meta.ctime(), meta.ctime_nsec()),
  })
}

/// The host's directories (the audit log's) below `dir`, relative to it: a search from `dir` must
/// not enter them (an isolated runner cannot read them and the search would fail; an unisolated
/// one would show the host's files).
fn hidden_below(jail: &FilesystemJail, dir: &Path) -> Vec<PathBuf> {
  jail
    .hidden()
    .iter()
    .filter_map(|h| h.strip_prefix(dir).ok())
    .filter(|rel| !rel.as_os_str().is_empty())
    .map(Path::to_path_buf)
    .collect()
}

/// `rel` as a glob (rg's `--glob`, fd's `--exclude`, find's `-path`) matching itself only.
fn literal_glob(rel: &Path) -> String {
  let mut out = String::new();
  for c in rel.to_string_lossy().chars() {
    if matches!(c, '*' | '?' | '[' | ']' | '{' | '}' | '\\' | '!') {
      out.push('\\');
    }
    out.push(c);
  }
  out
}

/// grep has no option that skips one path (`--exclude-dir` matches base names): with a host
/// directory below `cwd`, grep gets as operands the entries of `cwd` instead, each ancestor of a
/// host directory replaced by its own entries, the host directory left out. Hidden names,
/// symlinks, FIFOs and devices are left out, as grep's recursion leaves them. `None`: no host
/// directory below, or a name that is not UTF-8 on the way (an argv is text): grep then
/// searches `cwd` recursively itself.
fn grep_operands(cwd: &Path, hidden: &[PathBuf]) -> Option<Vec<String>> {
  fn expand(cwd: &Path, rel: &Path, hidden: &[PathBuf], out: &mut Vec<String>) -> Option<()> {
    let mut names: Vec<_> = std::fs::read_dir(cwd.join(rel))
      .ok()?
      .filter_map(Result::ok)
      .map(|e| e.file_name())
      .collect();
    names.sort();
    for name in names {
      let name = name.into_string().ok()?;
      if name.starts_with('.') {
        continue;
      }
      let p = rel.join(&name);
      if hidden.contains(&p) {
        continue;
      }
      // grep follows a symlink and reads a FIFO or a device named on its command line, and
      // skips them below: only directories and regular files are named.
      let Ok(meta) = std::fs::symlink_metadata(cwd.join(&p)) else {
        continue;
      };
      if meta.is_dir() && hidden.iter().any(|h| h.starts_with(&p)) {
        expand(cwd, &p, hidden, out)?;
      } else if meta.is_dir() || meta.is_file() {
        out.push(p.to_str()?.to_owned());
      }
    }
    Some(())
  }
  if hidden.is_empty() {
    return None;
  }
  let mut out = Vec::new();
  expand(cwd, Path::new(""), hidden, &mut out)?;
  Some(out)
}

/// Whether `pattern` holds a literal newline (`\n`, `\x0A`, `[\n]`, or the character itself):
/// rg refuses it ("the literal '\n' is not allowed"), grep reads a newline in a pattern as
/// the separator of two patterns. Classes may hold it (both drop it: no line has one).
fn matches_a_newline(pattern: &str) -> bool {
  use regex_syntax::hir::{Hir, HirKind};
  fn walk(h: &Hir) -> bool {
    match h.kind() {
      HirKind::Literal(l) => l.0.contains(&b'\n'),
      HirKind::Concat(v) | HirKind::Alternation(v) => v.iter().any(walk),
      HirKind::Repetition(r) => walk(&r.sub),
      HirKind::Capture(c) => walk(&c.sub),
      HirKind::Empty | HirKind::Class(_) | HirKind::Look(_) => false,
    }
  }
  regex_syntax::parse(pattern).is_ok_and(|h| walk(&h))
}

/// `pattern` (valid for Rust's regex) as grep's `-P` reads it alike, or why it cannot be:
/// syntax of Rust's alone (class set operations `&&`, `--`, `~~`, a class nested in a class,
/// the `R` and `u` flags, a negated ASCII class `[[:^alpha:]]`, and `(?<name>`, which rg before
/// 14 refuses) is refused; the ASCII classes
/// (`[[:alpha:]]`), which PCRE's `(*UCP)` widens to Unicode as grep's UTF-8 locale does for
/// `-E`, are written out as the ASCII ranges Rust reads them as.
fn perl_pattern(pattern: &str) -> Result<String, String> {
  use regex_syntax::ast::{
    Ast, ClassAscii, ClassAsciiKind as K, ClassSetBinaryOp, ClassSetItem, Flag, GroupKind, Visitor,
    parse::Parser, visit,
  };
  struct Classes(Vec<ClassAscii>);
  impl Visitor for Classes {
    type Output = Vec<ClassAscii>;
    type Err = String;
    fn finish(self) -> Result<Self::Output, String> {
      Ok(self.0)
    }
    fn visit_pre(&mut self, ast: &Ast) -> Result<(), String> {
      // rg before 14 (Debian 12's) refuses `(?<name>`; every version reads `(?P<name>`.
      if let Ast::Group(g) = ast
        && matches!(
          g.kind,
          GroupKind::CaptureName {
            starts_with_p: false,
            ..
          }
        )
      {
        return Err("(?<name>...), not read by every rg (write (?P<name>...))".into());
      }
      let flags = match ast {
        Ast::Flags(f) => Some(&f.flags),
        Ast::Group(g) => match &g.kind {
          GroupKind::NonCapturing(f) => Some(f),
          _ => None,
        },
        _ => None,
      };
      if let Some(f) = flags {
        for (flag, name) in [(Flag::CRLF, "R"), (Flag::Unicode, "u")] {
          if f.flag_state(flag).is_some() {
            return Err(format!("the {name} flag"));
          }
        }
      }
      Ok(())
    }
    fn visit_class_set_item_pre(&mut self, item: &ClassSetItem) -> Result<(), String> {
      match item {
        ClassSetItem::Bracketed(_) => Err("a class nested in a class".into()),
        ClassSetItem::Ascii(a) if a.negated => Err("a negated ASCII class ([:^...:])".into()),
        ClassSetItem::Ascii(a) => {
          self.0.push(a.clone());
          Ok(())
        }
        _ => Ok(()),
      }
    }
    fn visit_class_set_binary_op_pre(&mut self, _: &ClassSetBinaryOp) -> Result<(), String> {
      Err("a class set operation (&&, -- or ~~)".into())
    }
  }
  let ast = Parser::new().parse(pattern).map_err(|e| e.to_string())?;
  let classes = visit(&ast, Classes(Vec::new()))?;
  let mut out = String::with_capacity(pattern.len());
  let mut at = 0;
  for c in classes {
    let ranges = match c.kind {
      K::Alnum => "0-9A-Za-z",
      K::Alpha => "A-Za-z",
      K::Ascii => "\\x00-\\x7F",
      K::Blank => "\\t\\x20",
      K::Cntrl => "\\x00-\\x1F\\x7F",
      K::Digit => "0-9",
      K::Graph => "!-~",
      K::Lower => "a-z",
      K::Print => "\\x20-~",
      K::Punct => "!-/:-@\\[-`{-~",
      K::Space => "\\t\\n\\x0B\\f\\r\\x20",
      K::Upper => "A-Z",
      K::Word => "0-9A-Za-z_",
      K::Xdigit => "0-9A-Fa-f",
    };
    out.push_str(&pattern[at..c.span.start.offset]);
    out.push_str(ranges);
    at = c.span.end.offset;
  }
  out.push_str(&pattern[at..]);
  Ok(out)
}

fn want_dir(target: &Target, tool: &str) -> Result<(), ToolResult> {
  if target.is_dir {
    return Ok(());
  }
  Err(ToolResult::failed(
    "NOT_A_DIRECTORY",
    format!("{tool}: not a directory: {}", target.given),
  ))
}

fn plan_checked(
  args: ToolArgs,
  jail: &FilesystemJail,
  finders: Finders,
  max_output_bytes: u64,
) -> Result<Plan, ToolResult> {
  let s = |v: &str| v.to_owned();
  let abs = |t: &Target| t.path.to_string_lossy().into_owned();
  let mut env = Vec::new();
  let mut cwd = None;
  let mut max_buffer = None;
  let (binary, argv, target): (&'static str, Vec<String>, Option<Target>) = match &args {
    ToolArgs::Read { path, offset, .. } => {
      let t = check_target(jail, path)?;
      if t.is_dir {
        return Err(ToolResult::failed(
          "NOT_A_FILE",
          format!("read: is a directory: {path} (use ls)"),
        ));
      }
      if !t.is_file {
        return Err(ToolResult::failed(
          "NOT_A_FILE",
          format!("read: not a regular file: {path}"),
        ));
      }
      let argv = vec![s("-n"), format!("+{offset}"), s("--"), abs(&t)];
      // Numbering only adds bytes: a page never shows more of the file than its budget.
      max_buffer = Some(max_output_bytes + READ_SLACK_BYTES);
      ("tail", argv, Some(t))
    }
    ToolArgs::Ls { path } => {
      let t = check_target(jail, path)?;
      want_dir(&t, "ls")?;
      cwd = Some(t.path.clone());
      let argv = [
        ".",
        "-mindepth",
        "1",
        "-maxdepth",
        "1",
        "-printf",
        "%y %f\\0",
      ]
      .map(s)
      .to_vec();
      ("find", argv, Some(t))
    }
    ToolArgs::Find { pattern, path, .. } => {
      let t = check_target(jail, path)?;
      want_dir(&t, "find")?;
      cwd = Some(t.path.clone());
      let hidden = hidden_below(jail, &t.path);
      // fd's globs match bytes (`?` is one byte of `ü`): find in the C locale does too.
      env.push((s("LC_ALL"), s("C")));
      // fd refuses a pattern that starts with a dot ("only matches hidden files") where find
      // prints nothing: find runs it, with the same (empty) answer.
      let fd = finders.fd.filter(|_| !pattern.starts_with('.'));
      match fd {
        Some(fd) => {
          // Hidden entries skipped (fd's default), ignore files not read (find reads none),
          // case-sensitive as `find -name` is.
          let mut argv: Vec<String> = [
            "--glob",
            "--no-ignore",
            "--case-sensitive",
            "--color=never",
            "--print0",
          ]
          .map(s)
          .to_vec();
          for h in &hidden {
            argv.push(format!("--exclude=/{}", literal_glob(h)));
          }
          argv.extend([s("--"), pattern.clone()]);
          (fd, argv, Some(t))
        }
        None => {
          // Hidden names and the host's directories pruned.
          let mut argv: Vec<String> = [".", "-mindepth", "1", "(", "-name", ".*"].map(s).to_vec();
          for h in &hidden {
            argv.extend([s("-o"), s("-path"), format!("./{}", literal_glob(h))]);
          }
          let rest = [
            "-prune", ")", "-o", "-name", pattern,
            // Directories end with `/`, as fd prints them: `.gitignore`'s `dir/` patterns
            // match directories only.
            "(", "-type", "d", "-printf", "%p/\\0", "-o", "-print0", ")",
          ];
          argv.extend(rest.map(s));
          ("find", argv, Some(t))
        }
      }
    }
    ToolArgs::Grep {
      pattern,
      path,
      glob,
      ignore_case,
      word,
      max_count,
      ..
    } => {
      if let Err(e) = regex::Regex::new(pattern) {
        return Err(ToolResult::failed(
          "BAD_PATTERN",
          format!("args.pattern is not a valid regular expression: {e}"),
        ));
      }
      // Checked whichever program runs, so that both refuse it alike.
      let perl = perl_pattern(pattern).map_err(|why| {
        ToolResult::failed(
          "BAD_PATTERN",
          format!("args.pattern uses {why}, which grep and rg read differently"),
        )
      })?;
      if matches_a_newline(pattern) {
        return Err(ToolResult::failed(
          "BAD_PATTERN",
          "args.pattern must not match a newline (\\n): lines are searched one by one",
        ));
      }
      let t = check_target(jail, path)?;
      if !t.is_dir && !t.is_file {
        // A FIFO would hold the search until its timeout, a device never end.
        return Err(ToolResult::failed(
          "NOT_A_FILE",
          format!("grep: not a regular file or directory: {path}"),
        ));
      }
      let hidden = if t.is_dir {
        hidden_below(jail, &t.path)
      } else {
        Vec::new()
      };
      // A directory is searched from inside it (names come out relative to it, and grep's
      // hidden-name exclusions never match the directory itself); a file by its path.
      let operand = if t.is_dir {
        cwd = Some(t.path.clone());
        None
      } else {
        Some(abs(&t))
      };
      // One more than asked, so that finishing knows whether the limit cut a file's matches.
      let per_file = max_count.map(|n| (n + 1).to_string());
      let mut argv = Vec::new();
      let binary = if finders.rg {
        argv.extend(
          [
            "--no-config",
            "--no-ignore",
            "--color=never",
            "--no-heading",
            "--with-filename",
            "--line-number",
            "--null",
            "--no-messages",
          ]
          .map(s),
        );
        if *ignore_case {
          argv.push(s("--ignore-case"));
        }
        if *word {
          argv.push(s("--word-regexp"));
        }
        if let Some(n) = per_file {
          argv.push(format!("--max-count={n}"));
        }
        if let Some(g) = glob {
          argv.push(format!("--glob={g}"));
          // rg searches a hidden name a glob matches: hidden names excluded after it, as grep's
          // `--exclude=.*` does (the directory searched is never judged by it).
          if t.is_dir {
            argv.push(s("--glob=!.*"));
          }
        }
        for h in &hidden {
          argv.push(format!("--glob=!/{}", literal_glob(h)));
        }
        argv.extend([s("-e"), pattern.clone()]);
        "rg"
      } else {
        env.push((s("LC_ALL"), s(UTF8_LOCALE)));
        // Perl syntax where the pattern uses an escape or a group option ERE lacks, or POSIX
        // classes (which ERE widens to Unicode in a UTF-8 locale; Rust's are ASCII).
        let dialect = if pattern.contains('\\') || pattern.contains("(?") || pattern.contains("[:")
        {
          "-P"
        } else {
          "-E"
        };
        argv.extend(
          [
            "-r",
            "-n",
            "-H",
            "--null",
            "-I",
            "-s",
            "--color=never",
            dialect,
          ]
          .map(s),
        );
        if *ignore_case {
          argv.push(s("-i"));
        }
        // PCRE's `\w`, `\d`, `\b` and `\s` are ASCII unless `(*UCP)` opens the pattern; Rust's
        // (and rg's) are Unicode. grep's `-w` would wrap the pattern before the verb: the
        // same wrapping (grep's own for `-P -w`) is written here instead.
        let pattern = match (dialect, *word) {
          ("-P", true) => format!("(*UCP)(?<!\\w)(?:{perl})(?!\\w)"),
          ("-P", false) => format!("(*UCP){perl}"),
          (_, true) => {
            argv.push(s("-w"));
            pattern.clone()
          }
          _ => pattern.clone(),
        };
        if let Some(n) = per_file {
          argv.push(format!("--max-count={n}"));
        }
        // The include first: then a name matching no option is left out (grep's rule), and a
        // hidden name matching both is left out by the exclusion after it.
        if let Some(g) = glob {
          argv.push(format!("--include={g}"));
        }
        if t.is_dir {
          argv.extend([s("--exclude=.*"), s("--exclude-dir=.*")]);
        }
        argv.extend([s("-e"), pattern]);
        "grep"
      };
      // rg without a path reads a stdin that is a pipe (a JS runner's may be): it always gets
      // one. grep's recursion without one searches `.` and names files without `./`.
      match operand {
        Some(operand) => argv.extend([s("--"), operand]),
        None if binary == "rg" => argv.extend([s("--"), s(".")]),
        None => {
          if let Some(operands) = grep_operands(&t.path, &hidden) {
            // /dev/null keeps an empty list from reading stdin; it never matches.
            argv.extend([s("--"), s("/dev/null")]);
            argv.extend(operands);
          }
        }
      }
      (binary, argv, Some(t))
    }
    ToolArgs::Git { command, args } => {
      let mut argv = vec![command.clone()];
      argv.extend(args.iter().cloned());
      // Every tool is read-only: `branch` runs only as its listing forms.
      let writes = topology::topology("git", &argv).is_none_or(|t| t.writes != Writes::Nothing);
      if writes {
        return Err(ToolResult::refused(format!(
          "Subcommand not allowed: git {command} with these arguments (the git tool only reads; {command} may only list: {})",
          "--list, -a, -r, -v, --show-current"
        )));
      }
      ("git", argv, None)
    }
  };
  // A change made before now is stamped at or before now: from the fine clock, from the coarse
  // one (which lags it), or from a multigrain floor (a fine reading handed out earlier). A
  // change made after now may be stamped from the coarse clock, up to a tick before now: a swap
  // made within that tick passed (1 leak in some thousand racing searches). So the plan waits
  // until the coarse clock has passed now; every change after that (while the runner runs) is
  // stamped after now.
  let planned_at = std::time::SystemTime::now();
  coarse_clock_past(planned_at);
  Ok(Plan {
    binary,
    args: argv,
    cwd,
    env,
    max_buffer,
    context: Context {
      args,
      target,
      max_output_bytes,
      planned_at,
    },
  })
}

/// `CLOCK_REALTIME_COARSE`: the clock the kernel stamps file changes from.
fn coarse_now() -> std::time::SystemTime {
  let mut ts = libc::timespec {
    tv_sec: 0,
    tv_nsec: 0,
  };
  // SAFETY: clock_gettime writes one timespec through a valid pointer.
  if unsafe { libc::clock_gettime(libc::CLOCK_REALTIME_COARSE, &mut ts) } != 0 {
    // Unavailable: the fine clock, which is never behind it.
    return std::time::SystemTime::now();
  }
  std::time::UNIX_EPOCH
    + std::time::Duration::new(
      u64::try_from(ts.tv_sec).unwrap_or(0),
      u32::try_from(ts.tv_nsec).unwrap_or(0),
    )
}

/// Waits (a tick at most, off Node's thread: `executeTool` plans on a blocking thread) until
/// the coarse clock reads later than `instant`. Gives up after 50 ms.
fn coarse_clock_past(instant: std::time::SystemTime) {
  for _ in 0..200 {
    if coarse_now() > instant {
      return;
    }
    std::thread::sleep(std::time::Duration::from_micros(250));
  }
}

#[cfg(test)]
mod tests {
  use super::*;
  use serde_json::json;

  fn fixture() -> (tempfile::TempDir, FilesystemJail) {
    let dir = tempfile::tempdir().unwrap();
    let jail = FilesystemJail::new(dir.path().to_str().unwrap()).unwrap();
    std::fs::create_dir(jail.root().join("src")).unwrap();
    std::fs::write(jail.root().join("src/a.rs"), "fn a() {}\n").unwrap();
    (dir, jail)
  }

  fn run(tool: ToolName, args: Value, jail: &FilesystemJail, finders: Finders) -> Plan {
    match plan(tool, &args, jail, finders, 1000) {
      Planned::Run(p) => *p,
      Planned::Answered(a) => panic!("answered: {a:?}"),
    }
  }

  fn answer(tool: ToolName, args: Value, jail: &FilesystemJail) -> ToolResult {
    match plan(tool, &args, jail, Finders::portable(), 1000) {
      Planned::Run(p) => panic!("planned: {p:?}"),
      Planned::Answered(a) => a,
    }
  }

  #[test]
  fn a_pattern_that_starts_with_a_dash_stays_a_pattern() {
    let (_d, jail) = fixture();
    let rg = Finders {
      rg: true,
      fd: Some("fdfind"),
    };
    for finders in [rg, Finders::portable()] {
      let p = run(
        ToolName::Grep,
        json!({"pattern": "--files"}),
        &jail,
        finders,
      );
      let e = p.args.iter().position(|a| a == "-e").unwrap();
      assert_eq!(p.args[e + 1], "--files", "{p:?}");
      let p = run(
        ToolName::Find,
        json!({"pattern": "-delete"}),
        &jail,
        finders,
      );
      let at = p.args.iter().position(|a| a == "-delete").unwrap();
      assert!(p.args[at - 1] == "--" || p.args[at - 1] == "-name", "{p:?}");
    }
    let p = run(
      ToolName::Read,
      json!({"path": "src/a.rs", "offset": 3}),
      &jail,
      rg,
    );
    let file = jail.root().join("src/a.rs").to_string_lossy().into_owned();
    assert_eq!(
      (p.binary, p.args),
      ("tail", vec!["-n".into(), "+3".into(), "--".into(), file])
    );
  }

  #[test]
  fn ascii_classes_are_written_out_for_pcre_and_rust_only_syntax_refused() {
    assert_eq!(
      perl_pattern(r"^[[:alpha:]_][[:punct:]]\[:x:]").unwrap(),
      r"^[A-Za-z_][!-/:-@\[-`{-~]\[:x:]"
    );
    assert_eq!(perl_pattern(r"(?i)a\d+").unwrap(), r"(?i)a\d+");
    for bad in [
      r"[a&&b]",
      r"[a--b]",
      r"[[a]]",
      r"[[:^digit:]]",
      r"(?u)x",
      r"(?R)x",
      r"(?<n>x)",
    ] {
      assert!(perl_pattern(bad).is_err(), "{bad}");
    }
    assert!(perl_pattern(r"(?P<n>x)").is_ok());
    assert!(matches_a_newline("a\nb") && matches_a_newline(r"a\x0ab"));
    assert!(!matches_a_newline(r"[^\n]") && !matches_a_newline(r"\s"));
  }

  #[test]
  fn paths_are_checked_before_anything_runs() {
    let (_d, jail) = fixture();
    std::os::unix::fs::symlink("/etc", jail.root().join("etc")).unwrap();
    for (tool, args) in [
      (ToolName::Read, json!({"path": "../x"})),
      (ToolName::Read, json!({"path": "/etc/passwd"})),
      (ToolName::Ls, json!({"path": "etc"})),
      (ToolName::Find, json!({"pattern": "*", "path": "etc"})),
      (ToolName::Grep, json!({"pattern": "x", "path": "src/../.."})),
    ] {
      let a = answer(tool, args.clone(), &jail);
      assert!(a.ok && a.error.is_none(), "{args}: {a:?}");
      assert!(
        a.output.starts_with("Path escapes jail") || a.output.starts_with("Symlink rejected"),
        "{args}: {}",
        a.output
      );
    }
    let missing = answer(ToolName::Read, json!({"path": "nope"}), &jail);
    assert_eq!(missing.error.unwrap().code, "NOT_FOUND");
    let bad = answer(ToolName::Grep, json!({"pattern": "a("}), &jail);
    assert!(!bad.ok);
    assert_eq!(bad.error.unwrap().code, "BAD_PATTERN");
  }
}
