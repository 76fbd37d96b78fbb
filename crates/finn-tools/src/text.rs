//! Byte budgets over text that never split a UTF-8 character.

/// The longest prefix of `s` of at most `max` bytes that ends on a character boundary.
pub fn cut_utf8(s: &str, max: usize) -> &str {
  if s.len() <= max {
    return s;
  }
  let mut end = max;
  while !s.is_char_boundary(end) {
    end -= 1;
  }
  &s[..end]
}

/// Joins `lines` (each without its newline) as long as the total stays within `max` bytes.
/// Returns the text and how many lines it holds whole; when even the first line does not fit,
/// it is cut on a character boundary (and counts as not held whole).
pub fn bounded_lines<S: AsRef<str>>(lines: &[S], max: usize) -> (String, usize) {
  let mut out = String::new();
  for (i, line) in lines.iter().enumerate() {
    let line = line.as_ref();
    let needed = line.len() + usize::from(!out.is_empty());
    if out.len() + needed > max {
      if i == 0 {
        out.push_str(cut_utf8(line, max));
      }
      return (out, i);
    }
    if !out.is_empty() {
      out.push('\n');
    }
    out.push_str(line);
  }
  (out, lines.len())
}

#[cfg(test)]
mod tests {
  use super::*;

  #[test]
  fn a_cut_never_splits_a_character() {
    let s = "aé€😀";
    for max in 0..=s.len() {
      let cut = cut_utf8(s, max);
      assert!(cut.len() <= max && s.starts_with(cut), "{max}");
    }
    assert_eq!(cut_utf8(s, 2), "a");
    assert_eq!(cut_utf8(s, 3), "aé");
    assert_eq!(cut_utf8(s, 9), "aé€");
  }

  #[test]
  fn lines_are_kept_whole_within_the_budget() {
    let lines = ["ab", "cd", "ef"];
    assert_eq!(bounded_lines(&lines, 100), ("ab\ncd\nef".into(), 3));
    assert_eq!(bounded_lines(&lines, 5), ("ab\ncd".into(), 2));
    assert_eq!(bounded_lines(&lines, 4), ("ab".into(), 1));
    assert_eq!(bounded_lines(&["€€"], 4), ("€".into(), 0));
    assert_eq!(bounded_lines::<&str>(&[], 4), (String::new(), 0));
  }
}
