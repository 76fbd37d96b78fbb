//! Property tests for the policy pieces. CI runs PROPTEST_CASES (default 2000 per property);
//! the nightly-style run in the README uses PROPTEST_CASES=1000000.
//!
//! Two corpora are kept in the repository and replayed by every run:
//! - `tests/policy_fuzz.proptest-regressions`: proptest writes the seed of every failure it
//!   finds there, and replays those seeds first (commit the file with the fix);
//! - `tests/corpus/<target>/*`: hand-picked inputs (one file each, raw bytes, read as lossy
//!   UTF-8) that went through the same checks as the generated ones. Add a file to pin a case.

use std::os::unix::fs::symlink;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock};

use finn_sandbox::core::policy::argv::denied_flag;
use finn_sandbox::core::policy::coreutils;
use finn_sandbox::core::policy::getopt::{Grammar, Resolution};
use finn_sandbox::core::policy::host_git::{self, Watch};
use finn_sandbox::core::policy::jail_args::jail_args;
use finn_sandbox::core::policy::redact::REDACTED;
use finn_sandbox::core::policy::{
  FilesystemJail, SandboxCommand, SecretRedactor, command, default_policies, tokenize,
};
use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;

const METACHARS: [char; 16] = [
  '|', '&', ';', '$', '`', '(', ')', '{', '}', '!', '<', '>', '\\', '#', '~', '\0',
];

/// The repository: cargo's at run time (a copied test binary is pointed at its copy, see
/// scripts/ci-unprivileged.sh), else where it was built.
fn manifest_dir() -> std::path::PathBuf {
  std::env::var_os("CARGO_MANIFEST_DIR").map_or_else(
    || Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf(),
    Into::into,
  )
}

fn config() -> ProptestConfig {
  let cases = std::env::var("PROPTEST_CASES")
    .ok()
    .and_then(|c| c.parse().ok())
    .unwrap_or(2000);
  ProptestConfig {
    cases,
    // tests/policy_fuzz.proptest-regressions, next to this file.
    failure_persistence: Some(Box::new(FileFailurePersistence::WithSource(
      "proptest-regressions",
    ))),
    ..ProptestConfig::default()
  }
}

/// A secret the redactor corpus and properties use; inputs that hold it must lose it.
const KNOWN_SECRET: &str = "sk-ant-api-0123456789abcdef";

/// Tokens of an accepted command are non-empty, whitespace-free and free of metacharacters.
fn check_tokenize(input: &str) -> Result<(), TestCaseError> {
  if let Ok(cmd) = tokenize(input) {
    for token in std::iter::once(&cmd.binary).chain(&cmd.args) {
      prop_assert!(!token.is_empty());
      prop_assert!(!token.chars().any(char::is_whitespace));
      let dirty = token.contains(METACHARS);
      prop_assert!(!dirty, "{token:?}");
    }
  }
  Ok(())
}

/// An accepted path, and whatever of it exists, lies inside the jail.
fn check_jail(input: &str) -> Result<(), TestCaseError> {
  let jail = &FIXTURE.1;
  if let Ok(path) = jail.validate_path(input) {
    prop_assert!(path.starts_with(jail.root()), "{input:?} -> {path:?}");
    // Whatever exists of it resolves inside too: no symlink was followed out.
    if let Ok(real) = std::fs::canonicalize(&path) {
      prop_assert!(real.starts_with(jail.root()), "{input:?} -> {real:?}");
    }
  }
  Ok(())
}

/// Redaction never panics and never leaves the known secret in.
fn check_redact(input: &str) -> Result<(), TestCaseError> {
  let out = SecretRedactor::new([("ANTHROPIC_API_KEY", KNOWN_SECRET)]).redact(input);
  prop_assert!(!out.contains(KNOWN_SECRET), "{input:?} -> {out:?}");
  Ok(())
}

/// Every file of `tests/corpus/<target>/`, as lossy UTF-8, through `check`; at least one file.
fn replay(target: &str, check: fn(&str) -> Result<(), TestCaseError>) {
  let dir = manifest_dir().join("tests/corpus").join(target);
  let mut files: Vec<_> = std::fs::read_dir(&dir)
    .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
    .map(|e| e.unwrap().path())
    .collect();
  files.sort();
  assert!(!files.is_empty(), "{}: empty corpus", dir.display());
  for file in files {
    let input = String::from_utf8_lossy(&std::fs::read(&file).unwrap()).into_owned();
    if let Err(e) = check(&input) {
      panic!("{}: {e}", file.display());
    }
  }
}

#[test]
fn corpus_tokenize() {
  replay("tokenize", check_tokenize);
}

#[test]
fn corpus_jail() {
  replay("jail", check_jail);
}

#[test]
fn corpus_redact() {
  replay("redact", check_redact);
}

/// Path-ish strings: components from a small alphabet that includes the dangerous ones.
fn path_input() -> impl Strategy<Value = String> {
  let part = prop_oneof![
    Just("..".to_owned()),
    Just(".".to_owned()),
    Just("".to_owned()),
    Just("in".to_owned()),
    Just("out".to_owned()),
    Just("file".to_owned()),
    Just("dir".to_owned()),
    Just("etc".to_owned()),
    "[a-z\\-. ]{1,6}",
  ];
  (any::<bool>(), prop::collection::vec(part, 0..8)).prop_map(|(abs, parts)| {
    let joined = parts.join("/");
    if abs { format!("/{joined}") } else { joined }
  })
}

/// One fixture for every case: the properties only read it.
static FIXTURE: LazyLock<(tempfile::TempDir, FilesystemJail)> = LazyLock::new(jail_fixture);

fn jail_fixture() -> (tempfile::TempDir, FilesystemJail) {
  let dir = tempfile::tempdir().unwrap();
  let jail = FilesystemJail::new(dir.path().to_str().unwrap()).unwrap();
  let root = jail.root().to_path_buf();
  std::fs::create_dir_all(root.join("dir/sub")).unwrap();
  std::fs::write(root.join("file"), "x").unwrap();
  std::fs::write(root.join("dir/file"), "x").unwrap();
  symlink("/etc", root.join("out")).unwrap();
  symlink(root.join("dir"), root.join("in")).unwrap();
  symlink("../../..", root.join("dir/up")).unwrap();
  (dir, jail)
}

/// Independent of `Grammar::resolve`: the set of rows a prefix selects, and glibc's rule that
/// an exact name wins and several rows are one option only when they agree on val and has_arg.
fn getopt_oracle(grammar: &Grammar, prefix: &str) -> Option<&'static str> {
  if let Some(exact) = grammar.long.iter().find(|o| o.name == prefix) {
    return Some(exact.id);
  }
  let rows: Vec<_> = grammar
    .long
    .iter()
    .filter(|o| o.name.starts_with(prefix))
    .collect();
  let first = rows.first()?;
  rows
    .iter()
    .all(|o| o.id == first.id && o.has_arg == first.has_arg)
    .then_some(first.id)
}

fn denied_by_policy(binary: &str, args: &[String]) -> Option<String> {
  let policies = default_policies("/usr/bin:/bin");
  let cmd = SandboxCommand {
    binary: binary.to_owned(),
    args: args.to_vec(),
  };
  command::check(&cmd, &policies).err().map(|d| d.message)
}

/// A denied option of ls or wc, as (program, long name).
fn denied_option() -> impl Strategy<Value = (&'static str, &'static str)> {
  prop_oneof![
    Just(("wc", "files0-from")),
    Just(("ls", "dereference")),
    Just(("ls", "dereference-command-line")),
    Just(("ls", "dereference-command-line-symlink-to-dir")),
  ]
}

proptest! {
  #![proptest_config(config())]

  /// Every prefix getopt_long accepts for a denied option is denied, wherever it stands among
  /// other arguments, with `=value` or a separate value; a prefix getopt calls ambiguous or
  /// unknown is refused too (the program would refuse it).
  #[test]
  fn every_prefix_getopt_accepts_for_a_denied_option_is_denied(
    (program, name) in denied_option(),
    len in 1usize..45,
    value in prop::option::of("[a-z/.]{0,8}"),
    before in prop::collection::vec(prop_oneof![Just("-l"), Just("-a"), Just("x"), Just("--")], 0..3),
  ) {
    let grammar = coreutils::grammar(program).unwrap();
    let prefix = &name[..len.min(name.len())];
    let mut args: Vec<String> = before.iter().map(|s| (*s).to_owned()).collect();
    let options_ended = args.iter().any(|a| a == "--");
    args.push(match &value {
      Some(v) => format!("--{prefix}={v}"),
      None => format!("--{prefix}"),
    });
    args.push("operand".into());
    let verdict = denied_by_policy(program, &args);
    let oracle = getopt_oracle(grammar, prefix);
    prop_assert_eq!(oracle, match grammar.resolve(prefix) {
      Resolution::Found(o) => Some(o.id),
      _ => None,
    });
    let wc_unknown_short = program == "wc" && args.iter().any(|a| a == "-a");
    if options_ended || wc_unknown_short {
      // After `--` it is a file name; `wc -a` is an unknown option, refused first.
      return Ok(());
    }
    let denied_ids: Vec<&str> = default_policies("/usr/bin:/bin")[program]
      .denied_flags
      .iter()
      .filter_map(|f| f.strip_prefix("--"))
      .filter_map(|f| getopt_oracle(grammar, f))
      .collect();
    match oracle {
      Some(id) if denied_ids.contains(&id) => {
        let message = verdict.unwrap_or_default();
        prop_assert!(message.starts_with("Flag not allowed: --"), "{args:?}: {message}");
      }
      // Ambiguous or unknown to getopt: the program refuses it, and so does the policy.
      None => prop_assert!(verdict.is_some(), "{args:?}"),
      Some(_) => {}
    }
  }

  /// Whatever `cat` is given, every file name it receives, after `--` included, is a canonical
  /// path inside the jail.
  #[test]
  fn every_operand_cat_receives_is_inside_the_jail(
    args in prop::collection::vec(prop_oneof![
      Just("--".to_owned()),
      Just("-n".to_owned()),
      Just("-".to_owned()),
      Just("-/../x".to_owned()),
      path_input(),
    ], 0..6),
  ) {
    let jail = &FIXTURE.1;
    let policies = default_policies("/usr/bin:/bin");
    let cmd = SandboxCommand { binary: "cat".into(), args };
    if command::check(&cmd, &policies).is_err() {
      return Ok(());
    }
    let watch = Watch::new(host_git::REPOSITORY_CHECK_MS, None);
    if let Ok(jailed) = jail_args(&cmd, &policies["cat"], jail, &watch) {
      let mut options_ended = false;
      for arg in &jailed.args {
        if !options_ended && arg == "--" {
          options_ended = true;
          continue;
        }
        if options_ended || !arg.starts_with('-') || arg == "-" {
          prop_assert!(Path::new(arg).starts_with(jail.root()), "{arg:?} in {:?}", jailed.args);
        }
      }
    }
  }

  /// A denied git flag is refused in every prefix down to one letter, with or without a value.
  #[test]
  fn every_prefix_of_a_denied_git_flag_is_refused(
    flag in prop_oneof![Just("--exec-path"), Just("--git-dir"), Just("--work-tree"), Just("--no-index"), Just("--output"), Just("--ext-diff"), Just("--textconv")],
    len in 3usize..12,
    sub in prop_oneof![Just("log"), Just("diff"), Just("show"), Just("status"), Just("rev-parse")],
    value in prop::option::of("[a-z/]{0,6}"),
  ) {
    let prefix = &flag[..len.min(flag.len())];
    let arg = match value {
      Some(v) => format!("{prefix}={v}"),
      None => prefix.to_owned(),
    };
    let verdict = denied_by_policy("git", &[sub.to_owned(), arg.clone()]);
    prop_assert!(verdict.is_some_and(|m| m.starts_with("Flag not allowed: ")), "git {sub} {arg}");
    // The deny list alone catches it too, not only git's allowlist (the two are independent).
    let git = &default_policies("/usr/bin:/bin")["git"];
    prop_assert!(denied_flag(&arg, &git.denied_flags).is_some(), "{arg}");
  }

  #[test]
  fn tokenizer_never_panics_and_tokens_are_clean(input in any::<String>()) {
    check_tokenize(&input)?;
  }

  #[test]
  fn jail_never_returns_a_path_outside(input in path_input()) {
    check_jail(&input)?;
  }

  #[test]
  fn jail_never_panics_on_arbitrary_strings(input in any::<String>()) {
    let jail = &FIXTURE.1;
    if let Ok(path) = jail.validate_path(&input) {
      prop_assert!(path.starts_with(jail.root()));
    }
  }

  #[test]
  fn redactor_removes_every_secret_value(
    secret in "[A-Z0-9_]{8,40}",
    before in "[a-z .,:=\n\"']{0,40}",
    after in "[a-z .,:=\n\"']{0,40}",
  ) {
    // Lowercase surroundings cannot rebuild an uppercase/digit secret around the replacement.
    let r = SecretRedactor::new([("GIT_TOKEN", secret.as_str())]);
    let out = r.redact(&format!("{before}{secret}{after}"));
    prop_assert!(out.contains(REDACTED));
    prop_assert!(!out.contains(&secret), "{out:?}");
  }

  #[test]
  fn redactor_never_panics(text in any::<String>()) {
    let _ = SecretRedactor::new([("ANTHROPIC_API_KEY", KNOWN_SECRET)]).redact(&text);
  }

  #[test]
  fn redactor_removes_the_secret_wherever_it_is_embedded(
    before in any::<String>(),
    after in any::<String>(),
  ) {
    check_redact(&format!("{before}{KNOWN_SECRET}{after}"))?;
  }
}

/// A component flips between a directory and a symlink out of the jail while paths through it
/// are validated: no answer may ever lie outside.
#[test]
fn jail_holds_while_a_component_is_swapped_for_a_symlink() {
  let (_dir, jail) = jail_fixture();
  let root = jail.root().to_path_buf();
  let stop = Arc::new(AtomicBool::new(false));
  let flipper = {
    let (root, stop) = (root.clone(), Arc::clone(&stop));
    std::thread::spawn(move || {
      let target = root.join("race");
      while !stop.load(Ordering::Relaxed) {
        let _ = std::fs::create_dir(&target);
        let _ = std::fs::write(target.join("passwd"), "inside");
        let _ = std::fs::remove_dir_all(&target);
        let _ = symlink("/etc", &target);
        let _ = std::fs::remove_file(&target);
      }
    })
  };
  let mut answers = 0;
  for _ in 0..20_000 {
    if let Ok(path) = jail.validate_path("race/passwd") {
      answers += 1;
      assert!(path.starts_with(&root), "{path:?}");
      assert_ne!(path, Path::new("/etc/passwd"));
    }
  }
  stop.store(true, Ordering::Relaxed);
  flipper.join().unwrap();
  assert!(
    answers > 0,
    "the race never let a validation through, so it tested nothing"
  );
}
