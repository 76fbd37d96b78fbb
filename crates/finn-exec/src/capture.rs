//! Byte-bounded capture of stdout and stderr.
//!
//! One budget covers both streams and the truncation marker, counted in bytes of the text that
//! is returned: each stream is decoded as it is read (invalid sequences become U+FFFD, see
//! `utf8.rs`) before the budget is applied. A cut never splits a UTF-8 character, and whatever
//! was kept from the other stream stays.

use super::utf8::LossyDecoder;

pub use finn_job::TRUNCATION_MARKER;

/// Room kept for the other stream when one stream overflows (at most a quarter of the budget).
const STDERR_RESERVE: usize = 4096;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
  Stdout,
  Stderr,
}

#[derive(Debug)]
pub struct Capture {
  max_bytes: usize,
  budget: usize,
  stdout: Vec<u8>,
  stderr: Vec<u8>,
  cut: Option<Stream>,
  /// The cut stream's bytes just past the cut, at most the reserve: returned to it at
  /// `finish` as far as the other stream left the reserve unused.
  tail: Vec<u8>,
  tail_cap: usize,
  /// Per stream (stdout, stderr): a character split between two reads.
  decoders: [LossyDecoder; 2],
  scratch: Vec<u8>,
}

/// What a push did.
#[derive(Debug, PartialEq, Eq)]
pub enum Pushed {
  Kept,
  /// This push went over the cap: the stream was cut and later bytes are dropped.
  Overflowed,
  /// The cap was reached earlier; the bytes were dropped.
  Dropped,
}

impl Capture {
  pub fn new(max_bytes: usize) -> Self {
    Capture {
      max_bytes,
      budget: max_bytes.saturating_sub(TRUNCATION_MARKER.len()),
      stdout: Vec::new(),
      stderr: Vec::new(),
      cut: None,
      tail: Vec::new(),
      tail_cap: 0,
      decoders: Default::default(),
      scratch: Vec::new(),
    }
  }

  /// Decodes `bytes` as the next part of `stream`, then keeps what fits (see [`Self::push_text`]).
  pub fn push(&mut self, stream: Stream, bytes: &[u8]) -> Pushed {
    let mut scratch = std::mem::take(&mut self.scratch);
    let pushed = {
      let text = self.decoders[stream as usize].decode(bytes, &mut scratch);
      self.push_text(stream, text)
    };
    self.scratch = scratch;
    pushed
  }

  /// Keeps bytes while the total stays within the cap. The push that first exceeds it cuts
  /// its stream so that both streams plus the marker fit, on a character boundary, leaving a
  /// small reserve for the other stream: a short stderr written while stdout floods (and read
  /// after it) is kept. The other stream then fills up to the cap; the cut stream takes no more.
  fn push_text(&mut self, stream: Stream, bytes: &[u8]) -> Pushed {
    let used = self.stdout.len() + self.stderr.len();
    let budget = self.budget;
    let (this, other) = match stream {
      Stream::Stdout => (&mut self.stdout, &mut self.stderr),
      Stream::Stderr => (&mut self.stderr, &mut self.stdout),
    };
    match self.cut {
      Some(cut) if cut == stream => {
        let more = self.tail_cap - self.tail.len();
        self.tail.extend_from_slice(&bytes[..more.min(bytes.len())]);
        Pushed::Dropped
      }
      Some(_) => {
        let room = budget.saturating_sub(used);
        if bytes.len() <= room {
          this.extend_from_slice(bytes);
          Pushed::Kept
        } else {
          this.extend_from_slice(&bytes[..room]);
          let keep = utf8_floor(this);
          this.truncate(keep);
          Pushed::Dropped
        }
      }
      None if bytes.len() <= self.max_bytes - used => {
        this.extend_from_slice(bytes);
        Pushed::Kept
      }
      None => {
        if other.len() > budget {
          let keep = utf8_floor(&other[..budget]);
          other.truncate(keep);
        }
        let reserve_left = (budget / 4).min(STDERR_RESERVE).saturating_sub(other.len());
        let keep = budget - other.len() - reserve_left;
        let mut continuation = if this.len() > keep {
          let mut cut_off = this.split_off(keep);
          cut_off.extend_from_slice(&bytes[..bytes.len().min(reserve_left)]);
          cut_off
        } else {
          let take = keep - this.len();
          this.extend_from_slice(&bytes[..take]);
          bytes[take..].iter().take(reserve_left).copied().collect()
        };
        let floor = utf8_floor(this);
        let mut moved = this.split_off(floor);
        moved.append(&mut continuation);
        // Room at finish is at most the reserve plus the bytes of a character the floor moved.
        self.tail_cap = reserve_left + (keep - floor);
        moved.truncate(self.tail_cap);
        self.tail = moved;
        self.cut = Some(stream);
        Pushed::Overflowed
      }
    }
  }

  /// The captured text, marker appended to the cut stream (or, with a cap smaller than the
  /// marker, as much of the marker as fits).
  pub fn finish(mut self) -> (String, String, bool) {
    for stream in [Stream::Stdout, Stream::Stderr] {
      let rest = self.decoders[stream as usize].finish();
      // After a cut the command was stopped, maybe between two bytes of one character on the
      // other stream: that part-character is dropped, not reported as invalid (U+FFFD).
      if self.cut.is_none() {
        self.push_text(stream, rest);
      }
    }
    if let Some(stream) = self.cut {
      let room = self
        .budget
        .saturating_sub(self.stdout.len() + self.stderr.len());
      let this = match stream {
        Stream::Stdout => &mut self.stdout,
        Stream::Stderr => &mut self.stderr,
      };
      this.extend_from_slice(&self.tail[..room.min(self.tail.len())]);
      let keep = utf8_floor(this);
      this.truncate(keep);
      let marker = &TRUNCATION_MARKER.as_bytes()[..TRUNCATION_MARKER.len().min(self.max_bytes)];
      match stream {
        Stream::Stdout => self.stdout.extend_from_slice(marker),
        Stream::Stderr => self.stderr.extend_from_slice(marker),
      }
    }
    (
      into_string(self.stdout),
      into_string(self.stderr),
      self.cut.is_some(),
    )
  }
}

fn into_string(bytes: Vec<u8>) -> String {
  String::from_utf8(bytes).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// Length of `buf` without a trailing incomplete UTF-8 sequence.
pub fn utf8_floor(buf: &[u8]) -> usize {
  let len = buf.len();
  // A sequence is at most 4 bytes: look back at most 3 for its lead byte.
  for back in 1..=len.min(4) {
    let byte = buf[len - back];
    if byte & 0b1100_0000 != 0b1000_0000 {
      let needed = match byte {
        0x00..=0x7f => 1,
        0xc0..=0xdf => 2,
        0xe0..=0xef => 3,
        0xf0..=0xf7 => 4,
        _ => return len, // not a lead byte: invalid data, leave it as it is
      };
      return if needed > back { len - back } else { len };
    }
  }
  len
}

#[cfg(test)]
mod tests {
  use super::*;

  /// One stream overflows and the command is stopped between two bytes of a character on the
  /// other: that stream ends without the part-character, not with U+FFFD (an attack fuzzing both
  /// streams saw 15 of 300 such ends). A stream that simply ends mid-character still gets one.
  #[test]
  fn a_cut_drops_the_other_streams_part_character() {
    let mut c = Capture::new(100);
    c.push(Stream::Stderr, b"a\xc3");
    c.push(Stream::Stdout, &[b'x'; 200]);
    let (stdout, stderr, truncated) = c.finish();
    assert!(truncated);
    assert_eq!(stderr, "a");
    assert!(stdout.ends_with(TRUNCATION_MARKER));
    let mut c = Capture::new(100);
    c.push(Stream::Stderr, b"a\xc3");
    assert_eq!(c.finish(), (String::new(), "a\u{FFFD}".to_owned(), false));
  }

  #[test]
  fn floor_never_splits_a_character() {
    let text = "aé€😀";
    let bytes = text.as_bytes();
    for cut in 0..=bytes.len() {
      let kept = utf8_floor(&bytes[..cut]);
      assert!(
        std::str::from_utf8(&bytes[..kept]).is_ok(),
        "cut {cut} kept {kept}"
      );
      assert!(cut - kept < 4);
    }
  }

  #[test]
  fn budget_counts_both_streams_and_the_marker() {
    let mut c = Capture::new(40);
    assert_eq!(c.push(Stream::Stderr, b"oops\n"), Pushed::Kept);
    assert_eq!(c.push(Stream::Stdout, &[b'y'; 100]), Pushed::Overflowed);
    assert_eq!(c.push(Stream::Stderr, b"late"), Pushed::Dropped);
    let (out, err, truncated) = c.finish();
    assert!(truncated);
    assert_eq!(err, "oops\n");
    assert!(out.ends_with(TRUNCATION_MARKER));
    assert_eq!(out.len() + err.len(), 40);
  }

  #[test]
  fn multibyte_cut_lands_on_a_boundary() {
    let mut c = Capture::new(TRUNCATION_MARKER.len() + 5);
    c.push(Stream::Stdout, "é".repeat(20).as_bytes()); // 40 bytes, 5 kept before the marker
    let (out, _, truncated) = c.finish();
    assert!(truncated);
    assert_eq!(out, format!("éé{TRUNCATION_MARKER}"));
  }

  #[test]
  fn exact_fit_is_not_truncated() {
    let mut c = Capture::new(3);
    assert_eq!(c.push(Stream::Stdout, b"abc"), Pushed::Kept);
    assert_eq!(c.finish(), ("abc".into(), String::new(), false));
  }

  #[test]
  fn a_large_earlier_stream_is_trimmed_too() {
    let mut c = Capture::new(TRUNCATION_MARKER.len() + 10);
    c.push(Stream::Stderr, &[b'e'; 30]);
    c.push(Stream::Stdout, &[b'o'; 30]);
    let (out, err, truncated) = c.finish();
    assert!(truncated);
    assert_eq!(err.len(), 10);
    assert_eq!(out, TRUNCATION_MARKER);
  }

  #[test]
  fn stderr_read_after_the_flood_still_fits_in_the_reserve() {
    let marker = TRUNCATION_MARKER.len();
    let mut c = Capture::new(marker + 100);
    assert_eq!(c.push(Stream::Stdout, &[b'y'; 200]), Pushed::Overflowed);
    assert_eq!(c.push(Stream::Stderr, b"oops\n"), Pushed::Kept);
    assert_eq!(c.push(Stream::Stdout, b"more"), Pushed::Dropped);
    assert_eq!(c.push(Stream::Stderr, &[b'e'; 100]), Pushed::Dropped);
    let (out, err, truncated) = c.finish();
    assert!(truncated);
    assert_eq!(out.len(), 75 + marker);
    assert_eq!(err.len(), 25, "oops plus what fit of the rest");
    assert!(err.starts_with("oops\n"));
  }

  #[test]
  fn an_unused_reserve_goes_back_to_the_cut_stream() {
    let marker = TRUNCATION_MARKER.len();
    let mut c = Capture::new(marker + 100);
    c.push(Stream::Stdout, &[b'y'; 90]);
    assert_eq!(c.push(Stream::Stdout, &[b'z'; 90]), Pushed::Overflowed);
    c.push(Stream::Stderr, b"ab");
    let (out, err, _) = c.finish();
    assert_eq!(err, "ab");
    assert_eq!(out.len(), 98 + marker, "the cap is used in full");
    assert_eq!(
      &out[..100 - 2],
      format!("{}{}", "y".repeat(90), "z".repeat(8))
    );
  }

  #[test]
  fn the_reserve_never_splits_a_character_either() {
    for cap in 26..60 {
      let mut c = Capture::new(cap);
      c.push(Stream::Stdout, "€".repeat(40).as_bytes());
      c.push(Stream::Stdout, "€".repeat(40).as_bytes());
      let (out, _, truncated) = c.finish();
      assert!(truncated);
      assert!(out.len() <= cap, "cap {cap}: {}", out.len());
      assert!(out.len() + 3 > cap, "cap {cap}: {} wastes room", out.len());
      assert!(!out.contains('\u{FFFD}'));
    }
  }

  #[test]
  fn tiny_cap_keeps_a_prefix_of_the_marker() {
    let mut c = Capture::new(4);
    c.push(Stream::Stdout, b"hello");
    let (out, _, truncated) = c.finish();
    assert!(truncated);
    assert_eq!(out, &TRUNCATION_MARKER[..4]);
  }

  #[test]
  fn the_cap_counts_the_bytes_returned_after_lossy_decoding() {
    // Each invalid byte becomes a 3-byte U+FFFD: 100 kB of them must still fit in 4096.
    let mut c = Capture::new(4096);
    for chunk in vec![0xffu8; 100_000].chunks(32 * 1024) {
      c.push(Stream::Stdout, chunk);
    }
    c.push(Stream::Stderr, b"\xfe\xfe");
    let (out, err, truncated) = c.finish();
    assert!(truncated);
    assert!(out.len() + err.len() <= 4096, "{}", out.len() + err.len());
    assert!(out.len() + err.len() > 4096 - 3, "the cap is used in full");
    assert_eq!(err, "\u{FFFD}\u{FFFD}");
  }

  #[test]
  fn raw_bytes_within_the_cap_can_still_overflow_it_once_decoded() {
    let mut c = Capture::new(100);
    assert_eq!(c.push(Stream::Stdout, &[0x80; 50]), Pushed::Overflowed);
    let (out, _, truncated) = c.finish();
    assert!(truncated);
    assert!(out.len() <= 100);
  }

  #[test]
  fn a_character_split_between_reads_is_kept_whole() {
    let mut c = Capture::new(100);
    c.push(Stream::Stdout, b"a\xe2\x82");
    c.push(Stream::Stdout, b"\xacb");
    assert_eq!(c.finish(), ("a€b".into(), String::new(), false));
  }

  #[test]
  fn an_incomplete_character_at_the_end_becomes_one_replacement() {
    let mut c = Capture::new(100);
    c.push(Stream::Stderr, b"x\xf0\x9f");
    assert_eq!(c.finish(), (String::new(), "x\u{FFFD}".into(), false));
  }
}
