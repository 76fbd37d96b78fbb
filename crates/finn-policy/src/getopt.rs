//! GNU `getopt_long` as glibc runs it for coreutils, so the policy reads an argument list the
//! way `ls`, `cat` and `wc` will: options anywhere before `--` (argument permutation), short
//! options clustered (`-la`), a required argument attached or in the next element, and a long
//! option named by any prefix that is unambiguous in the program's table.

/// `has_arg` of `struct option`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HasArg {
  No,
  Required,
  Optional,
}

/// One row of a program's `long_options[]`. `id` stands for getopt's `val` (the short letter
/// when there is one), so a long option and its short twin share an id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LongOpt {
  pub name: &'static str,
  pub has_arg: HasArg,
  pub id: &'static str,
}

/// A program's option grammar: the optstring passed to `getopt_long` and its long table.
#[derive(Debug, Clone, Copy)]
pub struct Grammar {
  pub program: &'static str,
  pub optstring: &'static str,
  pub long: &'static [LongOpt],
}

/// What getopt makes of `--name` (glibc `process_long_option`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolution {
  /// The name or a prefix that picks one row (rows with identical `has_arg` and `id` count as
  /// one, as in glibc).
  Found(LongOpt),
  Ambiguous,
  Unknown,
}

/// One element of the parsed argument list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
  /// An option by id, and the argument index it was read from.
  Opt { id: &'static str, index: usize },
  /// An operand (a file name for these programs) at this argument index.
  Operand(usize),
  /// The `--` that ended the options.
  EndOfOptions(usize),
}

/// Why an argument list is not one the program would accept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParseError {
  Unknown(String),
  Ambiguous(String),
  MissingArgument(String),
  UnexpectedArgument(String),
}

impl Grammar {
  /// glibc's lookup: an exact name wins; otherwise the prefix must select one row, or several
  /// rows that agree on `has_arg` and `val`.
  pub fn resolve(&self, name: &str) -> Resolution {
    if name.is_empty() {
      return Resolution::Unknown;
    }
    if let Some(exact) = self.long.iter().find(|o| o.name == name) {
      return Resolution::Found(*exact);
    }
    let mut found: Option<LongOpt> = None;
    for opt in self.long.iter().filter(|o| o.name.starts_with(name)) {
      match found {
        None => found = Some(*opt),
        Some(first) if first.has_arg == opt.has_arg && first.id == opt.id => {}
        Some(_) => return Resolution::Ambiguous,
      }
    }
    found.map_or(Resolution::Unknown, Resolution::Found)
  }

  /// Every spelling `--p` that getopt resolves to the option with `id`, shortest first. The
  /// fuzzers and the README use it to show which prefixes a denial covers.
  pub fn spellings(&self, id: &str) -> Vec<String> {
    let mut out = Vec::new();
    for opt in self.long.iter().filter(|o| o.id == id) {
      for end in 1..=opt.name.len() {
        let prefix = &opt.name[..end];
        if matches!(self.resolve(prefix), Resolution::Found(o) if o.id == id) {
          out.push(prefix.to_owned());
        }
      }
    }
    out.sort_by_key(|p| (p.len(), p.clone()));
    out.dedup();
    out
  }

  fn short(&self, c: char) -> Option<HasArg> {
    let pos = self.optstring.find(c).filter(|_| c != ':')?;
    let rest = &self.optstring[pos + c.len_utf8()..];
    Some(if rest.starts_with("::") {
      HasArg::Optional
    } else if rest.starts_with(':') {
      HasArg::Required
    } else {
      HasArg::No
    })
  }

  /// The id getopt reports for short option `c`: its long twin's id, or the letter itself.
  fn short_id(&self, c: char) -> &'static str {
    let pos = self.optstring.find(c).expect("checked by short()");
    let letter = &self.optstring[pos..pos + c.len_utf8()];
    self
      .long
      .iter()
      .find(|o| o.id == letter)
      .map_or(letter, |o| o.id)
  }

  /// Parses `args` as glibc getopt_long would with `POSIXLY_CORRECT` unset (the sandbox's
  /// environment never sets it): options and operands may interleave until `--`; a lone `-` is
  /// an operand.
  pub fn parse(&self, args: &[String]) -> Result<Vec<Parsed>, ParseError> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < args.len() {
      let arg = &args[i];
      if arg == "--" {
        out.push(Parsed::EndOfOptions(i));
        out.extend((i + 1..args.len()).map(Parsed::Operand));
        return Ok(out);
      }
      if let Some(long) = arg.strip_prefix("--") {
        let (name, value) = match long.split_once('=') {
          Some((n, v)) => (n, Some(v)),
          None => (long, None),
        };
        let opt = match self.resolve(name) {
          Resolution::Found(opt) => opt,
          Resolution::Ambiguous => return Err(ParseError::Ambiguous(arg.clone())),
          Resolution::Unknown => return Err(ParseError::Unknown(arg.clone())),
        };
        out.push(Parsed::Opt {
          id: opt.id,
          index: i,
        });
        match (opt.has_arg, value) {
          (HasArg::No, Some(_)) => return Err(ParseError::UnexpectedArgument(arg.clone())),
          (HasArg::Required, None) => {
            if i + 1 >= args.len() {
              return Err(ParseError::MissingArgument(arg.clone()));
            }
            // The next element is the option's argument, whatever it looks like.
            i += 1;
          }
          _ => {}
        }
      } else if arg.len() > 1 && arg.starts_with('-') {
        for (pos, c) in arg.char_indices().skip(1) {
          let has_arg = self
            .short(c)
            .ok_or_else(|| ParseError::Unknown(format!("-{c}")))?;
          out.push(Parsed::Opt {
            id: self.short_id(c),
            index: i,
          });
          let attached = pos + c.len_utf8() < arg.len();
          match has_arg {
            HasArg::No => continue,
            HasArg::Optional => break,
            HasArg::Required if attached => break,
            HasArg::Required => {
              if i + 1 >= args.len() {
                return Err(ParseError::MissingArgument(format!("-{c}")));
              }
              i += 1;
              break;
            }
          }
        }
      } else {
        out.push(Parsed::Operand(i));
      }
      i += 1;
    }
    Ok(out)
  }
}

#[cfg(test)]
mod tests {
  use super::*;

  const T: Grammar = Grammar {
    program: "t",
    optstring: "ab:c::L",
    long: &[
      LongOpt {
        name: "dereference",
        has_arg: HasArg::No,
        id: "L",
      },
      LongOpt {
        name: "dereference-command-line",
        has_arg: HasArg::No,
        id: "H",
      },
      LongOpt {
        name: "directory",
        has_arg: HasArg::No,
        id: "d",
      },
      LongOpt {
        name: "block",
        has_arg: HasArg::Required,
        id: "b",
      },
      LongOpt {
        name: "blocks",
        has_arg: HasArg::Required,
        id: "b",
      },
    ],
  };

  fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
  }

  #[test]
  fn exact_names_win_over_longer_rows() {
    assert_eq!(T.resolve("dereference"), Resolution::Found(T.long[0]));
    assert_eq!(T.resolve("dereference-c"), Resolution::Found(T.long[1]));
  }

  #[test]
  fn prefixes_resolve_only_when_unambiguous() {
    assert_eq!(T.resolve("d"), Resolution::Ambiguous);
    assert_eq!(T.resolve("de"), Resolution::Ambiguous);
    assert_eq!(T.resolve("di"), Resolution::Found(T.long[2]));
    assert_eq!(T.resolve("x"), Resolution::Unknown);
    assert_eq!(T.resolve(""), Resolution::Unknown);
    // Two rows with the same val and has_arg are one option to glibc.
    assert_eq!(T.resolve("bl"), Resolution::Found(T.long[3]));
  }

  #[test]
  fn spellings_list_every_accepted_prefix() {
    assert_eq!(T.spellings("L"), ["dereference"]);
    assert_eq!(
      T.spellings("d"),
      [
        "di",
        "dir",
        "dire",
        "direc",
        "direct",
        "directo",
        "director",
        "directory"
      ]
    );
    assert_eq!(T.spellings("b")[0], "b");
    assert!(T.spellings("b").contains(&"blocks".to_owned()));
  }

  #[test]
  fn short_clusters_and_arguments() {
    let parsed = T
      .parse(&args(&["-aL", "x", "-bval", "-b", "v2", "-c", "-cz"]))
      .unwrap();
    assert_eq!(
      parsed,
      [
        Parsed::Opt { id: "a", index: 0 },
        Parsed::Opt { id: "L", index: 0 },
        Parsed::Operand(1),
        Parsed::Opt { id: "b", index: 2 },
        Parsed::Opt { id: "b", index: 3 },
        Parsed::Opt { id: "c", index: 5 },
        Parsed::Opt { id: "c", index: 6 },
      ]
    );
    assert_eq!(
      T.parse(&args(&["-b"])),
      Err(ParseError::MissingArgument("-b".into()))
    );
    assert_eq!(
      T.parse(&args(&["-q"])),
      Err(ParseError::Unknown("-q".into()))
    );
  }

  #[test]
  fn long_arguments_and_the_end_of_options() {
    let parsed = T
      .parse(&args(&[
        "--bl",
        "-x",
        "--blocks=1",
        "-",
        "--",
        "-L",
        "--dereference",
      ]))
      .unwrap();
    assert_eq!(
      parsed,
      [
        Parsed::Opt { id: "b", index: 0 },
        Parsed::Opt { id: "b", index: 2 },
        Parsed::Operand(3),
        Parsed::EndOfOptions(4),
        Parsed::Operand(5),
        Parsed::Operand(6),
      ]
    );
    // A required argument missing at the end (the program would refuse it).
    assert_eq!(
      T.parse(&args(&["-a", "--bl"])),
      Err(ParseError::MissingArgument("--bl".into()))
    );
    assert_eq!(
      T.parse(&args(&["--di=x"])),
      Err(ParseError::UnexpectedArgument("--di=x".into()))
    );
    assert_eq!(
      T.parse(&args(&["--d"])),
      Err(ParseError::Ambiguous("--d".into()))
    );
  }
}
