//! The option tables of GNU coreutils 9.1 (Debian 12's `ls`, `cat`, `wc`), copied from their
//! `long_options[]` and optstrings. `tables_match_the_installed_programs` checks them against
//! the binaries on this machine: every prefix getopt would accept or call ambiguous, and every
//! option's argument rule.

use super::getopt::{Grammar, HasArg, LongOpt};

const fn opt(name: &'static str, has_arg: HasArg, id: &'static str) -> LongOpt {
  LongOpt { name, has_arg, id }
}

const LS_LONG: &[LongOpt] = &[
  opt("all", HasArg::No, "a"),
  opt("escape", HasArg::No, "b"),
  opt("directory", HasArg::No, "d"),
  opt("dired", HasArg::No, "D"),
  opt("full-time", HasArg::No, "full-time"),
  opt(
    "group-directories-first",
    HasArg::No,
    "group-directories-first",
  ),
  opt("human-readable", HasArg::No, "h"),
  opt("inode", HasArg::No, "i"),
  opt("kibibytes", HasArg::No, "k"),
  opt("numeric-uid-gid", HasArg::No, "n"),
  opt("no-group", HasArg::No, "G"),
  opt("hide-control-chars", HasArg::No, "q"),
  opt("reverse", HasArg::No, "r"),
  opt("size", HasArg::No, "s"),
  opt("width", HasArg::Required, "w"),
  opt("almost-all", HasArg::No, "A"),
  opt("ignore-backups", HasArg::No, "B"),
  opt("classify", HasArg::Optional, "F"),
  opt("file-type", HasArg::No, "file-type"),
  opt("si", HasArg::No, "si"),
  opt("dereference-command-line", HasArg::No, "H"),
  opt(
    "dereference-command-line-symlink-to-dir",
    HasArg::No,
    "dereference-command-line-symlink-to-dir",
  ),
  opt("hide", HasArg::Required, "hide"),
  opt("ignore", HasArg::Required, "I"),
  opt("indicator-style", HasArg::Required, "indicator-style"),
  opt("dereference", HasArg::No, "L"),
  opt("literal", HasArg::No, "N"),
  opt("quote-name", HasArg::No, "Q"),
  opt("quoting-style", HasArg::Required, "quoting-style"),
  opt("recursive", HasArg::No, "R"),
  opt("format", HasArg::Required, "format"),
  opt("show-control-chars", HasArg::No, "show-control-chars"),
  opt("sort", HasArg::Required, "sort"),
  opt("tabsize", HasArg::Required, "T"),
  opt("time", HasArg::Required, "time"),
  opt("time-style", HasArg::Required, "time-style"),
  opt("zero", HasArg::No, "zero"),
  opt("color", HasArg::Optional, "color"),
  opt("hyperlink", HasArg::Optional, "hyperlink"),
  opt("block-size", HasArg::Required, "block-size"),
  opt("context", HasArg::No, "Z"),
  opt("author", HasArg::No, "author"),
  opt("help", HasArg::No, "help"),
  opt("version", HasArg::No, "version"),
];
const WC_LONG: &[LongOpt] = &[
  opt("bytes", HasArg::No, "c"),
  opt("chars", HasArg::No, "m"),
  opt("lines", HasArg::No, "l"),
  opt("debug", HasArg::No, "debug"),
  opt("files0-from", HasArg::Required, "files0-from"),
  opt("max-line-length", HasArg::No, "L"),
  opt("words", HasArg::No, "w"),
  opt("help", HasArg::No, "help"),
  opt("version", HasArg::No, "version"),
];
const CAT_LONG: &[LongOpt] = &[
  opt("number-nonblank", HasArg::No, "b"),
  opt("number", HasArg::No, "n"),
  opt("squeeze-blank", HasArg::No, "s"),
  opt("show-nonprinting", HasArg::No, "v"),
  opt("show-ends", HasArg::No, "E"),
  opt("show-tabs", HasArg::No, "T"),
  opt("show-all", HasArg::No, "A"),
  opt("help", HasArg::No, "help"),
  opt("version", HasArg::No, "version"),
];

pub const LS: Grammar = Grammar {
  program: "ls",
  optstring: "abcdfghiklmnopqrstuvw:xABCDFGHI:LNQRST:UXZ1",
  long: LS_LONG,
};

pub const WC: Grammar = Grammar {
  program: "wc",
  optstring: "clLmw",
  long: WC_LONG,
};

pub const CAT: Grammar = Grammar {
  program: "cat",
  optstring: "benstuvAET",
  long: CAT_LONG,
};

/// The grammar of a program the default policies know, by the name the command uses.
pub fn grammar(binary: &str) -> Option<&'static Grammar> {
  match binary {
    "ls" => Some(&LS),
    "wc" => Some(&WC),
    "cat" => Some(&CAT),
    _ => None,
  }
}

#[cfg(test)]
mod tests {
  use super::*;
  use crate::getopt::Resolution;
  use std::process::Command;

  /// The program's own verdict on `--<prefix>`: its candidates when ambiguous, `None` when
  /// unrecognized, `Some(empty)` when accepted.
  fn verdict(program: &str, arg: &str) -> Option<Vec<String>> {
    // In `/` with stdin closed: an accepted option lists `/` or reads nothing.
    let out = Command::new(program)
      .arg(arg)
      .env_clear()
      .env("LC_ALL", "C")
      .stdin(std::process::Stdio::null())
      .current_dir("/")
      .output()
      .expect("program runs");
    let err = String::from_utf8_lossy(&out.stderr);
    let first = err.lines().next().unwrap_or("");
    if first.contains("unrecognized option") {
      return None;
    }
    if first.contains("is ambiguous") {
      let mut names: Vec<String> = first
        .split('\'')
        .filter(|s| s.starts_with("--"))
        .skip(1)
        .map(|s| s.trim_start_matches("--").to_owned())
        .collect();
      names.sort();
      return Some(names);
    }
    Some(Vec::new())
  }

  #[test]
  fn tables_match_the_installed_programs() {
    for grammar in [&LS, &WC, &CAT] {
      let program = grammar.program;
      let mut prefixes: Vec<String> = grammar
        .long
        .iter()
        .flat_map(|o| (1..=o.name.len()).map(|n| o.name[..n].to_owned()))
        .collect();
      prefixes.extend(('a'..='z').map(String::from));
      prefixes.sort();
      prefixes.dedup();
      for prefix in &prefixes {
        let ours = match grammar.resolve(prefix) {
          Resolution::Found(_) => Some(Vec::new()),
          Resolution::Unknown => None,
          Resolution::Ambiguous => {
            let mut names: Vec<String> = grammar
              .long
              .iter()
              .filter(|o| o.name.starts_with(prefix.as_str()))
              .map(|o| o.name.to_owned())
              .collect();
            names.sort();
            Some(names)
          }
        };
        let arg = format!("--{prefix}");
        // `--help`/`--version` prefixes print and exit 0, which reads as accepted.
        assert_eq!(verdict(program, &arg), ours, "{program} {arg}");
      }
      for o in grammar.long {
        let bare = verdict_text(program, &format!("--{}", o.name));
        let with = verdict_text(program, &format!("--{}=x", o.name));
        match o.has_arg {
          HasArg::Required => assert!(
            bare.contains("requires an argument"),
            "{program} --{}",
            o.name
          ),
          HasArg::No => assert!(
            with.contains("doesn't allow an argument"),
            "{program} --{}",
            o.name
          ),
          HasArg::Optional => {
            assert!(
              !bare.contains("requires an argument"),
              "{program} --{}",
              o.name
            );
            assert!(
              !with.contains("doesn't allow an argument"),
              "{program} --{}",
              o.name
            );
          }
        }
      }
    }
  }

  fn verdict_text(program: &str, arg: &str) -> String {
    let out = Command::new(program)
      .arg(arg)
      .current_dir("/")
      .env_clear()
      .env("LC_ALL", "C")
      .stdin(std::process::Stdio::null())
      .output()
      .expect("program runs");
    String::from_utf8_lossy(&out.stderr)
      .lines()
      .next()
      .unwrap_or("")
      .to_owned()
  }

  #[test]
  fn every_short_option_the_programs_list_is_in_the_optstring() {
    for (grammar, letters) in [
      (&LS, "aAbBcCdDfFgGhHiIklLmnNopqQrRsStTuUvwxXZ1"),
      (&WC, "clLmw"),
      (&CAT, "AbeEnstTuv"),
    ] {
      for c in letters.chars() {
        assert!(grammar.optstring.contains(c), "{} -{c}", grammar.program);
      }
    }
  }
}
