//! The words exchanged with a session's bash, with no process in sight: the bootstrap it runs
//! once, the line that runs one command, the completion record it writes back, and the script
//! that restores a snapshot in a fresh shell. [`crate::shell`] moves these bytes; the tests at
//! the end check them without a shell.
//!
//! The shell reads its script from [`SCRIPT_FD`] (bash opens it as a script file, so its own
//! script descriptor is close-on-exec and out of the user's way); a command's text arrives on
//! [`DATA_FD`] as bytes that `read -N` stores in a variable and `eval` runs; records go out on
//! [`DONE_FD`]. Only this module's fixed code and decimal numbers are ever written to the script
//! descriptor.

/// The descriptor bash reads its script (the bootstrap, then one request line per command) from.
pub const SCRIPT_FD: i32 = 3;
/// The descriptor a command's text (and the fifo directory's path) arrives on, as data.
pub const DATA_FD: i32 = 4;
/// The descriptor the shell writes a [`Record`] to after each command.
pub const DONE_FD: i32 = 5;

/// Every name the session defines in the shell starts with this (variables and functions): a
/// user's own names do not collide unless they choose this prefix. The snapshot leaves them out.
pub const PREFIX: &str = "__finn_sess_";

/// How many NUL-terminated sections follow a record's header line.
const SECTIONS: usize = 6;

/// Variables bash maintains itself or that describe one process: restoring them is wrong
/// (`PPID`, `BASHPID`), refused (readonly) or meaningless (`LINENO`, `RANDOM`). `BASH_ALIASES`
/// and `BASH_CMDS` mirror aliases and the hash table, restored by other means or not at all.
const NOT_RESTORED: &[&str] = &[
  "_",
  "BASH",
  "BASHOPTS",
  "BASHPID",
  "BASH_ALIASES",
  "BASH_ARGC",
  "BASH_ARGV",
  "BASH_ARGV0",
  "BASH_CMDS",
  "BASH_COMMAND",
  "BASH_EXECUTION_STRING",
  "BASH_LINENO",
  "BASH_SOURCE",
  "BASH_SUBSHELL",
  "BASH_VERSINFO",
  "BASH_VERSION",
  "COMP_WORDBREAKS",
  "DIRSTACK",
  "EPOCHREALTIME",
  "EPOCHSECONDS",
  "EUID",
  "FUNCNAME",
  "GROUPS",
  "HISTCMD",
  "HOSTTYPE",
  "LINENO",
  "MACHTYPE",
  "OSTYPE",
  "PIPESTATUS",
  "PPID",
  "RANDOM",
  "SECONDS",
  "SHELLOPTS",
  "SHLVL",
  "SRANDOM",
  "UID",
];

/// `set -o` options never restored: `noexec` would stop the restored shell from running
/// anything, the session's own code included; `onecmd` (`set -t`) would end it after the
/// restore, so that every later command found it gone (see [`bootstrap`]).
const OPTIONS_NOT_RESTORED: &[&str] = &["noexec", "onecmd"];

/// `shopt` options bash refuses to set.
const SHOPTS_NOT_RESTORED: &[&str] = &["login_shell", "restricted_shell"];

/// The code a fresh shell runs first. It keeps the data and done descriptors at numbers bash
/// picks, and closes every other descriptor it inherited but its stdio and its script (fds 3
/// to 5 included), so that no command inherits one. Its `exec`s are plain: only the `exec`
/// word itself makes redirections permanent (`builtin exec` undoes them), and no user function
/// exists yet.
/// `dir_len` bytes of the fifo directory's path, then
/// `cwd_len` bytes of the directory to start in, follow on [`DATA_FD`].
///
/// `pre` reads a command's text and puts the user's `set` flags back; `post` runs right after
/// the command with the user's options still on (so it uses only builtins that cannot fail,
/// through `builtin`, in case the user defines functions named like them), writes the record,
/// then turns off the flags that would change the session's own code (`-a` would export its
/// variables, `-e`/`-u` could end it, `-x`/`-v` trace it, `-E`/`-T` carry traps into it), and
/// `-t` for good: with it the shell exited after the request line, and the next command, sent
/// to a shell that had just been restored with `-t` again, was reported as exit status 0 with
/// nothing run (an attack: a host's `false` came back a success).
pub fn bootstrap(dir_len: usize, cwd_len: usize) -> String {
  format!(
    r#"exec {{__finn_sess_data}}<&{DATA_FD} {{__finn_sess_done}}>&{DONE_FD}
for __finn_sess_fd in /proc/self/fd/*; do
  __finn_sess_fd=${{__finn_sess_fd##*/}}
  case $__finn_sess_fd in 0|1|2|255|"$__finn_sess_data"|"$__finn_sess_done") ;; *) exec {{__finn_sess_fd}}>&- ;; esac
done 2>/dev/null
builtin unset -v __finn_sess_fd
LC_ALL=C IFS= builtin read -r -N {dir_len} -u "$__finn_sess_data" __finn_sess_dir
LC_ALL=C IFS= builtin read -r -N {cwd_len} -u "$__finn_sess_data" __finn_sess_cwd
builtin cd -- "$__finn_sess_cwd"
builtin unset -v __finn_sess_cwd
builtin shopt -s expand_aliases
__finn_sess_flags=
__finn_sess_pre() {{
  LC_ALL=C IFS= builtin read -r -N "$1" -u "$__finn_sess_data" __finn_sess_cmd || builtin return 1
  if [[ -n $__finn_sess_flags ]]; then builtin set -"$__finn_sess_flags"; fi
}}
__finn_sess_post() {{
  builtin unset -v __finn_sess_cmd
  {{ builtin printf '%s %s\n' "$2" "$1"; builtin set +o; builtin printf '\0'; builtin shopt -p; builtin umask -p; builtin printf '\0'; builtin declare -p; builtin printf '\0'; builtin declare -f; builtin printf '\0'; builtin declare -F; builtin printf '\0'; builtin alias -p; builtin printf '\0'; }} >&"$__finn_sess_done" || :
  __finn_sess_flags=$-
  builtin set +aeuvxETt
  builtin export -n __finn_sess_flags
  __finn_sess_flags=${{__finn_sess_flags//[!aeuvxET]/}}
}}
"#
  )
}

/// Where a command's stdin comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StdinFrom {
  /// `/dev/null`: EOF at once.
  Null,
  /// The command's stdin fifo ([`fifo_name`] `'i'`), fed by the driver.
  Fifo,
}

/// The name, inside the session's fifo directory, of command `seq`'s fifo for `stream` (`'o'`
/// stdout, `'e'` stderr, `'i'` stdin).
pub fn fifo_name(stream: char, seq: u64) -> String {
  format!("{stream}.{seq}")
}

/// The script line that runs command `seq`, whose text (`text_len` bytes) follows on
/// [`DATA_FD`]. The text is never part of this line: `eval` gets it from a variable, so an
/// unterminated quote or a syntax error is an error of that `eval` (status 2), and the shell
/// reads its next line as usual. The command's stdout and stderr are its own fifos; the
/// session's descriptors are closed for it (bash restores them afterwards, and its saved copies
/// are close-on-exec).
pub fn request(seq: u64, text_len: usize, stdin: StdinFrom) -> String {
  let input = match stdin {
    StdinFrom::Null => "/dev/null".to_string(),
    StdinFrom::Fifo => format!("\"$__finn_sess_dir/{}\"", fifo_name('i', seq)),
  };
  format!(
    "__finn_sess_pre {text_len} && builtin eval -- \"$__finn_sess_cmd\" <{input} >\"$__finn_sess_dir/{out}\" 2>\"$__finn_sess_dir/{err}\" {{__finn_sess_done}}>&- {{__finn_sess_data}}<&-; __finn_sess_post \"$?\" {seq}\n",
    out = fifo_name('o', seq),
    err = fifo_name('e', seq),
  )
}

/// The shell's state after a command, as bash prints it (each part is valid bash input).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Snapshot {
  /// `set +o`: one `set -o name` / `set +o name` line per option.
  pub options: Vec<u8>,
  /// `shopt -p`, then `umask -p`.
  pub shopts: Vec<u8>,
  /// `declare -p`: every variable with its attributes.
  pub vars: Vec<u8>,
  /// `declare -f`: every function's definition.
  pub functions: Vec<u8>,
  /// `declare -F`: `declare -f name` / `declare -fx name` lines.
  pub function_attrs: Vec<u8>,
  /// `alias -p`.
  pub aliases: Vec<u8>,
}

/// A command's end as the shell reported it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
  pub seq: u64,
  /// `$?` after the command: its exit status, or 128 + the signal that ended it.
  pub status: i32,
  pub snapshot: Snapshot,
}

/// The longest header a shell writes: `"<u64> <i32>"`. The done descriptor's fifo can be opened
/// by a command (it runs as the session's user), so what arrives there is bounded before it is
/// trusted: bytes that are not a header by then are garbage, not a record still on its way.
const MAX_HEADER: usize = 32;

/// The largest record accepted: a snapshot holds every variable and function of the shell, so
/// this is generous, but bytes without end (a command writing to the done fifo) must not grow
/// the host's memory without bound.
pub const MAX_RECORD: usize = 256 << 20;

/// Why bytes from the done descriptor are not a record.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ProtocolError {
  #[error("parse the shell's completion record header {0:?}")]
  Header(String),
  #[error("read the shell's completion record: more than {MAX_RECORD} bytes")]
  TooLarge,
}

/// Collects bytes from [`DONE_FD`] into records: a header line `"<seq> <status>\n"`, then six
/// NUL-terminated sections (bash strings cannot hold NUL, so NUL ends a section unambiguously).
/// Each byte is scanned once (a record of many reads costs no more than one), and a header
/// that cannot be one, or a record past [`MAX_RECORD`], is an error at once.
#[derive(Debug, Default)]
pub struct RecordReader {
  buf: Vec<u8>,
  /// How far `buf` has been scanned for the current record's line end and NULs.
  scanned: usize,
  /// The current record's header, once its line end was seen: (seq, status, body start).
  header: Option<(u64, i32, usize)>,
  /// Where the current record's sections end, as found so far.
  ends: Vec<usize>,
}

impl RecordReader {
  /// Adds bytes read from the done descriptor.
  pub fn push(&mut self, bytes: &[u8]) {
    self.buf.extend_from_slice(bytes);
  }

  /// The next complete record, if the bytes so far hold one.
  pub fn next_record(&mut self) -> Result<Option<Record>, ProtocolError> {
    if self.header.is_none() {
      let limit = self.buf.len().min(MAX_HEADER + 1);
      match self.buf[..limit].iter().position(|&b| b == b'\n') {
        Some(nl) => {
          let header = &self.buf[..nl];
          let parsed = std::str::from_utf8(header).ok().and_then(parse_header);
          let (seq, status) = parsed.ok_or_else(|| garbled(header))?;
          self.header = Some((seq, status, nl + 1));
          self.scanned = nl + 1;
        }
        None if self.buf.len() > MAX_HEADER => return Err(garbled(&self.buf[..MAX_HEADER])),
        None => return Ok(None),
      }
    }
    let (seq, status, body) = self.header.expect("set above");
    while self.ends.len() < SECTIONS {
      match self.buf[self.scanned..].iter().position(|&b| b == 0) {
        Some(i) => {
          self.ends.push(self.scanned + i);
          self.scanned += i + 1;
        }
        None => {
          self.scanned = self.buf.len();
          if self.buf.len() > MAX_RECORD {
            return Err(ProtocolError::TooLarge);
          }
          return Ok(None);
        }
      }
    }
    let mut start = body;
    let mut parts = self.ends.drain(..).map(|end| {
      let part = self.buf[start..end].to_vec();
      start = end + 1;
      part
    });
    let mut next = || parts.next().unwrap_or_default();
    let snapshot = Snapshot {
      options: next(),
      shopts: next(),
      vars: next(),
      functions: next(),
      function_attrs: next(),
      aliases: next(),
    };
    drop(parts);
    self.buf.drain(..self.scanned);
    self.scanned = 0;
    self.header = None;
    Ok(Some(Record {
      seq,
      status,
      snapshot,
    }))
  }
}

/// A header that is not one, shown short (it may be any bytes a command wrote).
fn garbled(bytes: &[u8]) -> ProtocolError {
  ProtocolError::Header(String::from_utf8_lossy(&bytes[..bytes.len().min(MAX_HEADER)]).into_owned())
}

fn parse_header(header: &str) -> Option<(u64, i32)> {
  let (seq, status) = header.split_once(' ')?;
  Some((seq.parse().ok()?, status.parse().ok()?))
}

/// The script a fresh shell evals to take on `snapshot`'s state: variables (exported ones
/// keep `-x`), functions and their export, aliases, `shopt` options and the umask, the working
/// directory
/// (`$PWD` as restored, so a logical path through a symlink stays logical), and `set` options
/// last, so that `-e` or `-u` cannot stop the restore half-way.
pub fn restore_script(snapshot: &Snapshot) -> Vec<u8> {
  let mut out = Vec::new();
  for entry in var_entries(&snapshot.vars) {
    match var_name(entry) {
      Some(name) if SESSION_ASSIGNS.iter().any(|n| n.as_bytes() == name) => {
        out.extend_from_slice(&without_readonly(entry));
        out.push(b'\n');
      }
      Some(name) if restorable_var(name) => {
        out.extend_from_slice(entry);
        out.push(b'\n');
      }
      _ => {}
    }
  }
  out.extend_from_slice(&snapshot.functions);
  out.push(b'\n');
  for line in snapshot.function_attrs.split(|&b| b == b'\n') {
    if line.starts_with(b"declare -fx ") {
      out.extend_from_slice(line);
      out.push(b'\n');
    }
  }
  out.extend_from_slice(&snapshot.aliases);
  out.push(b'\n');
  keep_lines(&mut out, &snapshot.shopts, SHOPTS_NOT_RESTORED);
  out.extend_from_slice(b"builtin cd -- \"$PWD\"\n");
  keep_lines(&mut out, &snapshot.options, OPTIONS_NOT_RESTORED);
  out
}

/// Appends the lines of `text` whose last word is not in `skip`.
fn keep_lines(out: &mut Vec<u8>, text: &[u8], skip: &[&str]) {
  for line in text.split(|&b| b == b'\n') {
    let last = line.rsplit(|&b| b == b' ').next().unwrap_or_default();
    if line.is_empty() || skip.iter().any(|s| s.as_bytes() == last) {
      continue;
    }
    out.extend_from_slice(line);
    out.push(b'\n');
  }
}

/// Variables `pre` assigns for its own `read` (`LC_ALL=C IFS= builtin read ...`). Readonly, that
/// assignment fails, and in posix mode it abandoned the request line: no command ran again and
/// none ended but by its timeout, which restored the same readonly variable (an attack:
/// `set -o posix; readonly LC_ALL` timed out every later command of the session). The driver
/// replaces a shell whose snapshot shows one readonly ([`blocks_the_session`]), and the restore
/// brings them back writable.
const SESSION_ASSIGNS: &[&str] = &["LC_ALL", "IFS"];

/// Whether the shell that took `snapshot` can no longer run the session's code as it should (a
/// variable of [`SESSION_ASSIGNS`] is readonly): it is to be replaced before the next command.
pub fn blocks_the_session(snapshot: &Snapshot) -> bool {
  var_entries(&snapshot.vars).into_iter().any(|entry| {
    var_name(entry).is_some_and(|name| SESSION_ASSIGNS.iter().any(|n| n.as_bytes() == name))
      && entry[b"declare ".len()..]
        .split(|&b| b == b' ')
        .next()
        .is_some_and(|flags| flags.contains(&b'r'))
  })
}

/// A `declare -p` entry without its `r` attribute (`declare -rx A="1"` gives `declare -x A="1"`).
fn without_readonly(entry: &[u8]) -> Vec<u8> {
  let rest = &entry[b"declare ".len()..];
  let space = rest.iter().position(|&b| b == b' ').unwrap_or(rest.len());
  let flags: Vec<u8> = rest[..space]
    .iter()
    .copied()
    .filter(|&b| b != b'r')
    .collect();
  let mut out = b"declare ".to_vec();
  out.extend_from_slice(if flags == b"-" { b"--" } else { &flags });
  out.extend_from_slice(&rest[space..]);
  out
}

fn restorable_var(name: &[u8]) -> bool {
  !name.starts_with(PREFIX.as_bytes()) && !NOT_RESTORED.iter().any(|n| n.as_bytes() == name)
}

/// Splits `declare -p` output into one entry per variable. A value may hold a newline inside
/// `"..."`, `'...'` or `$'...'`, so an entry ends only at a newline outside every quote.
pub fn var_entries(text: &[u8]) -> Vec<&[u8]> {
  #[derive(PartialEq)]
  enum Q {
    None,
    Double,
    Single,
    Ansi,
  }
  let mut entries = Vec::new();
  let mut q = Q::None;
  let mut start = 0;
  let mut i = 0;
  while i < text.len() {
    let b = text[i];
    match q {
      Q::None => match b {
        b'\\' => i += 1,
        b'"' => q = Q::Double,
        b'\'' if i > 0 && text[i - 1] == b'$' => q = Q::Ansi,
        b'\'' => q = Q::Single,
        b'\n' => {
          if i > start {
            entries.push(&text[start..i]);
          }
          start = i + 1;
        }
        _ => {}
      },
      Q::Double | Q::Ansi => match b {
        b'\\' => i += 1,
        b'"' if q == Q::Double => q = Q::None,
        b'\'' if q == Q::Ansi => q = Q::None,
        _ => {}
      },
      Q::Single => {
        if b == b'\'' {
          q = Q::None;
        }
      }
    }
    i += 1;
  }
  if start < text.len() {
    entries.push(&text[start..]);
  }
  entries
}

/// The variable an entry of `declare -p` declares: `declare -x NAME="v"` gives `NAME`.
pub fn var_name(entry: &[u8]) -> Option<&[u8]> {
  let rest = entry.strip_prefix(b"declare ")?;
  let space = rest.iter().position(|&b| b == b' ')?;
  let rest = &rest[space + 1..];
  let end = rest.iter().position(|&b| b == b'=').unwrap_or(rest.len());
  Some(&rest[..end]).filter(|n| !n.is_empty())
}

#[cfg(test)]
mod tests {
  use super::*;

  /// A record's header, as `post` writes it.
  fn header(seq: u64, status: i32) -> String {
    format!("{seq} {status}\n")
  }

  fn record_bytes(seq: u64, status: i32, sections: [&str; SECTIONS]) -> Vec<u8> {
    let mut b = header(seq, status).into_bytes();
    for s in sections {
      b.extend_from_slice(s.as_bytes());
      b.push(0);
    }
    b
  }

  #[test]
  fn a_record_is_complete_only_after_its_sixth_nul() {
    let bytes = record_bytes(7, 3, ["o", "s", "v", "f", "a", "al"]);
    let mut r = RecordReader::default();
    r.push(&bytes[..bytes.len() - 1]);
    assert_eq!(r.next_record(), Ok(None));
    r.push(&bytes[bytes.len() - 1..]);
    let rec = r.next_record().unwrap().unwrap();
    assert_eq!((rec.seq, rec.status), (7, 3));
    assert_eq!(rec.snapshot.options, b"o");
    assert_eq!(rec.snapshot.shopts, b"s");
    assert_eq!(rec.snapshot.vars, b"v");
    assert_eq!(rec.snapshot.functions, b"f");
    assert_eq!(rec.snapshot.function_attrs, b"a");
    assert_eq!(rec.snapshot.aliases, b"al");
    assert_eq!(r.next_record(), Ok(None));
  }

  #[test]
  fn records_that_arrive_together_are_read_one_after_the_other() {
    let mut bytes = record_bytes(1, 0, ["", "", "", "", "", ""]);
    bytes.extend(record_bytes(2, 130, ["", "", "x\ny", "", "", ""]));
    let mut r = RecordReader::default();
    r.push(&bytes);
    assert_eq!(r.next_record().unwrap().unwrap().seq, 1);
    let second = r.next_record().unwrap().unwrap();
    assert_eq!((second.seq, second.status), (2, 130));
    assert_eq!(second.snapshot.vars, b"x\ny");
    assert_eq!(r.next_record(), Ok(None));
  }

  #[test]
  fn a_header_without_a_line_end_is_not_yet_a_record() {
    let mut r = RecordReader::default();
    r.push(b"3 0");
    assert_eq!(r.next_record(), Ok(None));
  }

  #[test]
  fn a_garbled_header_is_an_error() {
    let mut r = RecordReader::default();
    r.push(&record_bytes(1, 0, ["", "", "", "", "", ""])[1..]);
    r.buf.insert(0, b'x');
    assert!(matches!(r.next_record(), Err(ProtocolError::Header(_))));
    let mut r = RecordReader::default();
    r.push(b"12\n\0\0\0\0\0\0");
    assert!(matches!(r.next_record(), Err(ProtocolError::Header(_))));
  }

  #[test]
  fn a_header_that_cannot_be_one_is_an_error_at_once() {
    // A command can write to the done fifo: bytes without a line end must not pile up.
    let mut r = RecordReader::default();
    r.push(&[b'a'; MAX_HEADER]);
    assert_eq!(r.next_record(), Ok(None));
    r.push(b"a");
    assert!(matches!(r.next_record(), Err(ProtocolError::Header(h)) if h.len() <= MAX_HEADER));
  }

  #[test]
  fn a_record_read_a_byte_at_a_time_is_the_same_record() {
    let mut bytes = record_bytes(9, 1, ["o", "", "v\nw", "f", "", "al"]);
    bytes.extend(record_bytes(10, 0, ["", "", "", "", "", ""]));
    let mut r = RecordReader::default();
    let mut got = Vec::new();
    for b in bytes {
      r.push(&[b]);
      while let Some(rec) = r.next_record().unwrap() {
        got.push(rec);
      }
    }
    assert_eq!(got.len(), 2);
    assert_eq!((got[0].seq, got[0].status), (9, 1));
    assert_eq!(got[0].snapshot.vars, b"v\nw");
    assert_eq!(got[0].snapshot.aliases, b"al");
    assert_eq!(got[1].seq, 10);
  }

  #[test]
  fn var_entries_end_only_at_newlines_outside_quotes() {
    let text = b"declare -- a=\"x\ny\"\ndeclare -- b='p\nq'\ndeclare -- c=$'m\\'\nn'\ndeclare -x d=\"\\\"\nz\"\ndeclare -a e=([0]=\"1\" [1]=\"2\")\ndeclare -- f\\\ng\ndeclare -- h";
    let entries = var_entries(text);
    let names: Vec<&[u8]> = entries.iter().filter_map(|e| var_name(e)).collect();
    assert_eq!(
      names,
      vec![b"a".as_slice(), b"b", b"c", b"d", b"e", b"f\\\ng", b"h"]
    );
    assert_eq!(entries[0], b"declare -- a=\"x\ny\"");
    assert_eq!(entries[2], b"declare -- c=$'m\\'\nn'");
  }

  #[test]
  fn a_backslash_ends_nothing_inside_single_quotes() {
    let entries = var_entries(b"declare -- s='a\\'\ndeclare -- t=$'b\\'\nc'\ndeclare -- u=1");
    let names: Vec<&[u8]> = entries.iter().filter_map(|e| var_name(e)).collect();
    assert_eq!(names, vec![b"s".as_slice(), b"t", b"u"]);
  }

  #[test]
  fn empty_lines_are_no_entries_and_a_leading_quote_is_a_plain_one() {
    assert_eq!(var_entries(b"a\n\nb\n"), vec![b"a".as_slice(), b"b"]);
    assert_eq!(
      var_entries(b"'x\\\ny'\nz"),
      vec![b"'x\\\ny'".as_slice(), b"z"]
    );
  }

  #[test]
  fn each_quote_ends_only_its_own_kind() {
    let entries =
      var_entries(b"declare -- a=\"it's\nok\"\ndeclare -- b=$'say \"x\nz'\ndeclare -- c=1");
    let names: Vec<&[u8]> = entries.iter().filter_map(|e| var_name(e)).collect();
    assert_eq!(names, vec![b"a".as_slice(), b"b", b"c"]);
  }

  #[test]
  fn var_name_needs_a_declare_and_a_name() {
    assert_eq!(
      var_name(b"declare -x PATH=\"/bin\""),
      Some(b"PATH".as_slice())
    );
    assert_eq!(var_name(b"declare -- x"), Some(b"x".as_slice()));
    assert_eq!(var_name(b"typeset -- x=1"), None);
    assert_eq!(var_name(b"declare --"), None);
    assert_eq!(var_name(b"declare -- =1"), None);
  }

  #[test]
  fn the_restore_leaves_out_bash_s_own_and_the_session_s_variables() {
    let snap = Snapshot {
      vars: b"declare -x HOME=\"/h\"\ndeclare -ir PPID=\"1\"\ndeclare -- __finn_sess_cmd=\"x\"\ndeclare -- RANDOM=\"5\"\ndeclare -- mine=\"1\"\n".to_vec(),
      ..Snapshot::default()
    };
    let script = String::from_utf8(restore_script(&snap)).unwrap();
    assert!(script.contains("declare -x HOME=\"/h\"\n"));
    assert!(script.contains("declare -- mine=\"1\"\n"));
    assert!(!script.contains("PPID"));
    assert!(!script.contains("RANDOM"));
    assert!(!script.contains("__finn_sess_cmd"));
  }

  #[test]
  fn the_restore_brings_back_lc_all_and_ifs_writable() {
    let snap = Snapshot {
      vars: b"declare -r LC_ALL=\"C\"\ndeclare -rx IFS=\" \"\ndeclare -r mine=\"1\"\n".to_vec(),
      ..Snapshot::default()
    };
    let script = String::from_utf8(restore_script(&snap)).unwrap();
    assert!(script.contains("declare -- LC_ALL=\"C\"\n"), "{script}");
    assert!(script.contains("declare -x IFS=\" \"\n"), "{script}");
    assert!(script.contains("declare -r mine=\"1\"\n"), "{script}");
    assert!(blocks_the_session(&snap));
    let plain = Snapshot {
      vars: b"declare -x LC_ALL=\"C\"\ndeclare -r mine=\"1\"\n".to_vec(),
      ..Snapshot::default()
    };
    assert!(!blocks_the_session(&plain));
  }

  #[test]
  fn the_restore_sets_options_last_and_never_noexec() {
    let snap = Snapshot {
      options: b"set -o errexit\nset +o noexec\nset -o nounset\nset -o onecmd\n".to_vec(),
      shopts: b"shopt -s extglob\nshopt -u login_shell\n".to_vec(),
      function_attrs: b"declare -f f\ndeclare -fx g\n".to_vec(),
      functions: b"f () \n{ \n    :\n}\n".to_vec(),
      aliases: b"alias ll='ls -l'\n".to_vec(),
      vars: b"declare -- x=\"1\"\n".to_vec(),
    };
    let script = String::from_utf8(restore_script(&snap)).unwrap();
    let at = |s: &str| {
      script
        .find(s)
        .unwrap_or_else(|| panic!("{s} missing from {script}"))
    };
    assert!(at("declare -- x") < at("f () "));
    assert!(at("f () ") < at("declare -fx g"));
    assert!(at("declare -fx g") < at("alias ll"));
    assert!(at("alias ll") < at("shopt -s extglob"));
    assert!(at("shopt -s extglob") < at("builtin cd"));
    assert!(at("builtin cd") < at("set -o errexit"));
    assert!(at("set -o errexit") < at("set -o nounset"));
    assert!(!script.contains("noexec"));
    assert!(!script.contains("onecmd"));
    assert!(!script.contains("login_shell"));
    assert!(!script.contains("declare -f f\n"));
  }

  #[test]
  fn a_request_names_the_command_s_fifos_and_no_command_text() {
    let line = request(42, 9, StdinFrom::Null);
    assert!(
      line.starts_with("__finn_sess_pre 9 && builtin eval -- \"$__finn_sess_cmd\" </dev/null ")
    );
    assert!(line.contains(">\"$__finn_sess_dir/o.42\" 2>\"$__finn_sess_dir/e.42\""));
    assert!(line.ends_with("; __finn_sess_post \"$?\" 42\n"));
    let piped = request(3, 1, StdinFrom::Fifo);
    assert!(piped.contains(" <\"$__finn_sess_dir/i.3\" "));
    assert_eq!(line.matches('\n').count(), 1);
  }

  #[test]
  fn the_bootstrap_reads_exactly_the_directory_s_length() {
    let b = bootstrap(17, 4);
    assert!(b.contains("read -r -N 17 -u \"$__finn_sess_data\" __finn_sess_dir"));
    assert!(b.contains("read -r -N 4 -u \"$__finn_sess_data\" __finn_sess_cwd"));
    assert!(b.contains("shopt -s expand_aliases"));
  }
}
