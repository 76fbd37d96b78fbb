//! The git options the sandbox passes, per subcommand, spelled exactly. git's parse-options and
//! its revision parser both take an exact long name as that option before trying prefixes, so an
//! exact spelling cannot be read as another option; every abbreviation, and every option not
//! listed, is refused. Options that read or write files (`--output`, `-O`, `--no-index`), run
//! programs (`--ext-diff`, `--textconv`, `--show-signature`), or re-split text past the redactor
//! (`--word-diff*`, `--color-words`) are not listed.

/// Options shared by the commands that print commits or diffs.
const DIFF_OUTPUT: &[&str] = &[
  "-p",
  "--patch",
  "-s",
  "--no-patch",
  "--stat",
  "--shortstat",
  "--numstat",
  "--summary",
  "--name-only",
  "--name-status",
  "-w",
  "--ignore-all-space",
  "-b",
  "--ignore-space-change",
  "--ignore-blank-lines",
  "--no-color",
  "--no-renames",
  "--raw",
  "--full-index",
  "--binary",
];

/// Options with a value, accepted as `--name=value` only (a separate value would be checked as
/// a path, and the `=` form leaves no doubt which element is the value).
const DIFF_VALUED: &[&str] = &["--unified", "--diff-filter", "--stat", "--abbrev"];

const LOG: &[&str] = &[
  "--oneline",
  "--graph",
  "--decorate",
  "--no-decorate",
  "--all",
  "--branches",
  "--tags",
  "--no-merges",
  "--merges",
  "--first-parent",
  "--reverse",
  "--abbrev-commit",
  "--no-abbrev-commit",
  "--topo-order",
  "--date-order",
  "--follow",
  "--pretty",
  "-i",
  "--regexp-ignore-case",
  "--all-match",
  "--left-right",
  "--cherry-pick",
  "--boundary",
];

const LOG_VALUED: &[&str] = &[
  "--format",
  "--pretty",
  "--max-count",
  "--skip",
  "--since",
  "--until",
  "--after",
  "--before",
  "--author",
  "--committer",
  "--grep",
  "--date",
  "--decorate",
];

const DIFF: &[&str] = &[
  "--cached",
  "--staged",
  "--exit-code",
  "--quiet",
  "-R",
  "--merge-base",
  "--no-ext-diff",
  "--no-textconv",
];

/// `status -v` renders a diff and ran a textconv driver; status gets no `-v`.
const STATUS: &[&str] = &[
  "-s",
  "--short",
  "-b",
  "--branch",
  "--long",
  "--porcelain",
  "--show-stash",
  "-z",
  "--ahead-behind",
  "--no-ahead-behind",
  "--no-renames",
  "-u",
  "-uno",
  "-unormal",
  "-uall",
  "--untracked-files",
  "--ignored",
];

const STATUS_VALUED: &[&str] = &["--porcelain", "--untracked-files", "--ignored"];

const REV_PARSE: &[&str] = &[
  "--abbrev-ref",
  "--short",
  "--verify",
  "-q",
  "--quiet",
  "--symbolic-full-name",
  "--show-toplevel",
  "--show-prefix",
  "--show-cdup",
  "--is-inside-work-tree",
  "--is-inside-git-dir",
  "--is-bare-repository",
  "--is-shallow-repository",
];

const REV_PARSE_VALUED: &[&str] = &["--short", "--abbrev-ref"];

/// `add` stages work tree files. Not listed: `-p`, `-i`, `-e` (interactive, an editor),
/// `--pathspec-from-file` (reads a file), `-f` (adds ignored files), `--chmod`.
const ADD: &[&str] = &[
  "-A",
  "--all",
  "-u",
  "--update",
  "-n",
  "--dry-run",
  "-v",
  "--verbose",
  "-N",
  "--intent-to-add",
];

/// `commit` records the index. The message comes from `-m <text>` or `--message=<text>` only:
/// not listed are `-F`/`--file`, `-t`/`--template` (read files), `-e`, `-c`, `--fixup=amend`
/// (an editor), `-S`/`--gpg-sign` (runs gpg), `--pathspec-from-file`, `--trailer`.
/// Nor `-a` and paths (`jail_args.rs` refuses those): they read work tree files, the audit log's
/// included when a planted index tracks it; `add` excludes the hidden directories instead.
const COMMIT: &[&str] = &[
  "-q",
  "--quiet",
  "--allow-empty",
  "--allow-empty-message",
  "--amend",
  "--no-edit",
  "-s",
  "--signoff",
  "--no-verify",
  "--no-gpg-sign",
];

const COMMIT_VALUED: &[&str] = &["--message", "--author", "--date"];

/// `fetch <remote>` (`git_remote.rs` checks the remote). Not listed: `--upload-pack` (a
/// program), `--all`/`--multiple` (other remotes), `--recurse-submodules`, `--depth`/`--filter`
/// (shallow and partial clones), `--refmap`, `-o`/`--server-option`, `--set-upstream`.
const FETCH: &[&str] = &[
  "-q",
  "--quiet",
  "-v",
  "--verbose",
  "-p",
  "--prune",
  "--tags",
  "--no-tags",
  "--dry-run",
];

/// `push <remote> <branch>…`. Not listed: `--force`/`-f`/`--force-with-lease`, `--delete`,
/// `--mirror`, `--all`, `--tags`, `--receive-pack`/`--exec` (a program), `-o`, `--signed`,
/// `-u`/`--set-upstream` (writes config).
const PUSH: &[&str] = &[
  "-q",
  "--quiet",
  "-v",
  "--verbose",
  "-n",
  "--dry-run",
  "--atomic",
];

/// `blame <file>`: who last changed each line. Not listed: `--contents` (reads any file as the
/// file's content), `-S` (reads a revisions file), `--textconv` (runs a program),
/// `--ignore-revs-file`, `--incremental` and `-L` (a range may name a function by regex,
/// `-L :<re>`, read through the attributes' diff driver).
const BLAME: &[&str] = &[
  "-s",
  "-e",
  "--show-email",
  "-w",
  "-l",
  "-t",
  "-f",
  "--show-name",
  "-n",
  "--show-number",
  "--porcelain",
  "--line-porcelain",
  "--root",
  "-c",
  "--no-textconv",
];

/// `ls-files`: the index's paths. Not listed: `-X`/`--exclude-from` and
/// `--exclude-per-directory` (read files), `--with-tree`, `--format` is harmless but kept out
/// with the rest of the rarely used ones.
const LS_FILES: &[&str] = &[
  "-c",
  "--cached",
  "-d",
  "--deleted",
  "-m",
  "--modified",
  "-o",
  "--others",
  "-i",
  "--ignored",
  "--exclude-standard",
  "-s",
  "--stage",
  "-z",
  "-t",
  "--full-name",
  "--directory",
  "--no-empty-directory",
  "--error-unmatch",
  "--deduplicate",
];

/// `grep` over the tracked files. Not listed: `-O`/`--open-files-in-pager` (runs a program),
/// `-f` (reads a pattern file), `--textconv`, `--untracked` and `--no-index` (files git does not
/// track, the host's audit directory among them), `--threads`, `-p`/`-W` (function bounds read
/// through the attributes' diff driver). `-e <pattern>` takes its pattern as text.
const GREP: &[&str] = &[
  "-i",
  "--ignore-case",
  "-w",
  "--word-regexp",
  "-v",
  "--invert-match",
  "-n",
  "--line-number",
  "--column",
  "-l",
  "--files-with-matches",
  "-L",
  "--files-without-match",
  "-c",
  "--count",
  "-h",
  "-H",
  "-o",
  "--only-matching",
  "-q",
  "--quiet",
  "-E",
  "--extended-regexp",
  "-G",
  "--basic-regexp",
  "-F",
  "--fixed-strings",
  "-P",
  "--perl-regexp",
  "-I",
  "--cached",
  "--full-name",
  "-z",
  "--null",
  "--all-match",
  "--and",
  "--or",
  "--not",
  "--break",
  "--heading",
  "--no-textconv",
];

const GREP_VALUED: &[&str] = &[
  "--max-depth",
  "--max-count",
  "--context",
  "--after-context",
  "--before-context",
];

/// `branch`, listing: the options `topology::lists_only` reads as listing, no other.
const BRANCH: &[&str] = &[
  "--list",
  "-l",
  "-a",
  "--all",
  "-r",
  "--remotes",
  "-v",
  "-vv",
  "--verbose",
  "--show-current",
  "--no-color",
];

/// Letters that may be clustered (`-sb`); none of them takes an argument in git.
fn cluster_letters(sub: &str) -> &'static str {
  match sub {
    "log" | "show" | "diff" => "psbw",
    "status" => "sbz",
    "rev-parse" => "q",
    "blame" => "selwtfn",
    "ls-files" => "dmoistz",
    "grep" => "iwvnlLhHoqEGFPIz",
    _ => "",
  }
}

/// How an option-looking argument to `git <sub>` is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GitOption {
  /// Allowed, and the next element is its value (`-n 5`).
  TakesNext,
  /// Allowed, self-contained.
  Alone,
  /// Allowed, and the next element is free text (`commit -m <message>`), never read as a path.
  TakesText,
}

fn lists(sub: &str) -> (Vec<&'static str>, Vec<&'static str>) {
  let mut plain: Vec<&'static str> = Vec::new();
  let mut valued: Vec<&'static str> = Vec::new();
  match sub {
    "log" | "show" => {
      plain.extend(DIFF_OUTPUT.iter().chain(LOG));
      valued.extend(DIFF_VALUED.iter().chain(LOG_VALUED));
      plain.extend(["--no-ext-diff", "--no-textconv"]);
    }
    "diff" => {
      plain.extend(DIFF_OUTPUT.iter().chain(DIFF));
      valued.extend(DIFF_VALUED);
    }
    "status" => {
      plain.extend(STATUS);
      valued.extend(STATUS_VALUED);
    }
    "rev-parse" => {
      plain.extend(REV_PARSE);
      valued.extend(REV_PARSE_VALUED);
    }
    "blame" => plain.extend(BLAME),
    "branch" => plain.extend(BRANCH),
    "ls-files" => plain.extend(LS_FILES),
    "grep" => {
      plain.extend(GREP);
      valued.extend(GREP_VALUED);
    }
    "add" => plain.extend(ADD),
    "fetch" => plain.extend(FETCH),
    "push" => plain.extend(PUSH),
    "commit" => {
      plain.extend(COMMIT);
      valued.extend(COMMIT_VALUED);
    }
    _ => {}
  }
  (plain, valued)
}

/// `Some` when `arg` (which starts with `-`) is an allowed option of `git <sub>`.
pub fn allowed(sub: &str, arg: &str) -> Option<GitOption> {
  let (plain, valued) = lists(sub);
  if plain.contains(&arg) {
    return Some(GitOption::Alone);
  }
  if let Some((name, _)) = arg.split_once('=')
    && name.starts_with("--")
    && valued.contains(&name)
  {
    return Some(GitOption::Alone);
  }
  if (sub == "commit" && arg == "-m") || (sub == "grep" && arg == "-e") {
    return Some(GitOption::TakesText);
  }
  let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
  if matches!(sub, "log" | "show") {
    // `-5`, `-n5`, and `-n` followed by a count.
    if let Some(rest) = arg.strip_prefix('-')
      && digits(rest)
    {
      return Some(GitOption::Alone);
    }
    if arg == "-n" {
      return Some(GitOption::TakesNext);
    }
    if let Some(rest) = arg.strip_prefix("-n")
      && digits(rest)
    {
      return Some(GitOption::Alone);
    }
  }
  if matches!(sub, "log" | "show" | "diff")
    && let Some(rest) = arg.strip_prefix("-U")
    && digits(rest)
  {
    return Some(GitOption::Alone);
  }
  let letters = cluster_letters(sub);
  if let Some(cluster) = arg.strip_prefix('-')
    && !cluster.starts_with('-')
    && !cluster.is_empty()
    && cluster.chars().all(|c| letters.contains(c))
  {
    return Some(GitOption::Alone);
  }
  None
}

#[cfg(test)]
mod tests {
  use super::*;

  #[test]
  fn exact_spellings_and_their_values() {
    assert_eq!(allowed("log", "--oneline"), Some(GitOption::Alone));
    assert_eq!(allowed("log", "--format=%H %s"), Some(GitOption::Alone));
    assert_eq!(allowed("log", "-n"), Some(GitOption::TakesNext));
    assert_eq!(allowed("log", "-n5"), Some(GitOption::Alone));
    assert_eq!(allowed("log", "-20"), Some(GitOption::Alone));
    assert_eq!(allowed("status", "-sb"), Some(GitOption::Alone));
    assert_eq!(allowed("status", "--porcelain=v2"), Some(GitOption::Alone));
    assert_eq!(allowed("diff", "-U3"), Some(GitOption::Alone));
    assert_eq!(allowed("rev-parse", "--abbrev-ref"), Some(GitOption::Alone));
    assert_eq!(allowed("add", "-A"), Some(GitOption::Alone));
    assert_eq!(allowed("commit", "-m"), Some(GitOption::TakesText));
    assert_eq!(allowed("commit", "--message=x"), Some(GitOption::Alone));
    assert_eq!(allowed("grep", "-e"), Some(GitOption::TakesText));
    assert_eq!(allowed("grep", "-inw"), Some(GitOption::Alone));
    assert_eq!(allowed("grep", "--max-count=3"), Some(GitOption::Alone));
    assert_eq!(allowed("blame", "--porcelain"), Some(GitOption::Alone));
    assert_eq!(allowed("ls-files", "-z"), Some(GitOption::Alone));
  }

  #[test]
  fn add_and_commit_refuse_editors_files_and_programs() {
    for (sub, arg) in [
      ("add", "-p"),
      ("add", "--patch"),
      ("add", "-i"),
      ("add", "-e"),
      ("add", "--pathspec-from-file=/etc/passwd"),
      ("add", "-f"),
      ("commit", "-F"),
      ("commit", "--file=/etc/passwd"),
      ("commit", "-t"),
      ("commit", "--template=/etc/passwd"),
      ("commit", "-e"),
      ("commit", "-S"),
      ("commit", "--gpg-sign"),
      ("commit", "-am"),
      ("commit", "-a"),
      ("commit", "--all"),
      ("commit", "-v"),
      ("commit", "--mess=x"),
      ("add", "-m"),
      ("fetch", "--upload-pack=sh"),
      ("fetch", "--all"),
      ("fetch", "--depth=1"),
      ("fetch", "--filter=blob:none"),
      ("fetch", "--recurse-submodules"),
      ("push", "--force"),
      ("push", "-f"),
      ("push", "--receive-pack=sh"),
      ("push", "--exec=sh"),
      ("push", "--delete"),
      ("push", "--mirror"),
      ("push", "-u"),
    ] {
      assert_eq!(allowed(sub, arg), None, "git {sub} {arg}");
    }
  }

  #[test]
  fn abbreviations_unlisted_and_dangerous_options_are_refused() {
    for (sub, arg) in [
      ("log", "--onelin"),
      ("log", "--outp=/tmp/x"),
      ("log", "--output=/tmp/x"),
      ("log", "--show-signature"),
      ("diff", "--no-index"),
      ("diff", "--word-diff=porcelain"),
      ("diff", "--word-diff-regex=."),
      ("diff", "--color-words"),
      ("diff", "-O/etc/passwd"),
      ("diff", "--ext-diff"),
      ("log", "--textconv"),
      ("status", "-v"),
      ("status", "--verbose"),
      ("status", "-sv"),
      ("rev-parse", "--git-dir"),
      ("rev-parse", "--local-env-vars"),
      ("log", "-n5x"),
      ("log", "--format"),
      ("grep", "-O"),
      ("grep", "-Otouch /tmp/x"),
      ("grep", "--open-files-in-pager=sh"),
      ("grep", "-iO"),
      ("grep", "-f"),
      ("grep", "--untracked"),
      ("grep", "--no-index"),
      ("grep", "--textconv"),
      ("grep", "-p"),
      ("blame", "--contents"),
      ("blame", "--contents=/etc/passwd"),
      ("blame", "--textconv"),
      ("blame", "-S"),
      ("blame", "-L"),
      ("ls-files", "--exclude-from=/etc/passwd"),
      ("ls-files", "-X"),
      ("status", "--"),
      ("log", "-"),
    ] {
      assert_eq!(allowed(sub, arg), None, "git {sub} {arg}");
    }
  }
}
