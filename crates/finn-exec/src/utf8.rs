//! Streaming lossy UTF-8 decoding, so that the output cap counts the bytes that are returned.
//!
//! A command's output reaches JS as a string: each invalid byte sequence becomes U+FFFD, three
//! bytes. Capping the raw bytes and converting afterwards let 100 kB of invalid bytes under a
//! 4096-byte `maxBuffer` come back as 12,238 bytes. So the capture decodes as it reads, exactly
//! as `String::from_utf8_lossy` would decode the whole stream, and caps the decoded text.

const REPLACEMENT: &[u8] = "\u{FFFD}".as_bytes();

/// Decodes one stream chunk by chunk. A character split between two chunks is held back (at
/// most 3 bytes) until the next chunk completes it.
#[derive(Debug, Default)]
pub struct LossyDecoder {
  pending: Vec<u8>,
}

impl LossyDecoder {
  /// The decoded text of `input`, borrowed when `input` is valid UTF-8 on its own (the usual
  /// case: no copy), else written to `scratch`.
  pub fn decode<'a>(&mut self, input: &'a [u8], scratch: &'a mut Vec<u8>) -> &'a [u8] {
    scratch.clear();
    if self.pending.is_empty() {
      if std::str::from_utf8(input).is_ok() {
        return input;
      }
      decode_into(input, scratch, &mut self.pending);
    } else {
      let mut joined = std::mem::take(&mut self.pending);
      joined.extend_from_slice(input);
      decode_into(&joined, scratch, &mut self.pending);
    }
    scratch
  }

  /// The end of the stream: a character left incomplete becomes U+FFFD.
  pub fn finish(&mut self) -> &'static [u8] {
    if std::mem::take(&mut self.pending).is_empty() {
      b""
    } else {
      REPLACEMENT
    }
  }
}

/// Appends the decoded text of `bytes` to `out`; an incomplete sequence at the end goes to
/// `pending` instead.
fn decode_into(mut bytes: &[u8], out: &mut Vec<u8>, pending: &mut Vec<u8>) {
  loop {
    match std::str::from_utf8(bytes) {
      Ok(_) => {
        out.extend_from_slice(bytes);
        return;
      }
      Err(e) => {
        let valid = e.valid_up_to();
        out.extend_from_slice(&bytes[..valid]);
        match e.error_len() {
          // One replacement per maximal invalid subpart, as `from_utf8_lossy` does.
          Some(invalid) => {
            out.extend_from_slice(REPLACEMENT);
            bytes = &bytes[valid + invalid..];
          }
          None => {
            pending.extend_from_slice(&bytes[valid..]);
            return;
          }
        }
      }
    }
  }
}

#[cfg(test)]
mod tests {
  use super::*;

  fn decode_in_chunks(bytes: &[u8], chunk: usize) -> Vec<u8> {
    let mut decoder = LossyDecoder::default();
    let mut scratch = Vec::new();
    let mut out = Vec::new();
    for part in bytes.chunks(chunk.max(1)) {
      out.extend_from_slice(decoder.decode(part, &mut scratch));
    }
    out.extend_from_slice(decoder.finish());
    out
  }

  #[test]
  fn matches_from_utf8_lossy_whatever_the_chunking() {
    let samples: [&[u8]; 6] = [
      "plain ascii".as_bytes(),
      "aé€😀z".as_bytes(),
      b"\xff\xfe\xfd",
      b"ok\xe2\x82",                   // a character cut off at the end
      b"\xf0\x9f\x98\x80\xf0\x9f\x98", // a whole then an incomplete emoji
      b"\xe2\x28\xa1 \xc3\x28 \xed\xa0\x80 \xf4\x90\x80\x80",
    ];
    for sample in samples {
      let expected = String::from_utf8_lossy(sample).into_owned().into_bytes();
      for chunk in 1..=sample.len() + 1 {
        assert_eq!(
          decode_in_chunks(sample, chunk),
          expected,
          "{sample:?} in chunks of {chunk}"
        );
      }
    }
  }

  #[test]
  fn valid_input_is_borrowed_without_a_copy() {
    let mut decoder = LossyDecoder::default();
    let mut scratch = Vec::new();
    let input = "héllo".as_bytes();
    let out = decoder.decode(input, &mut scratch);
    assert_eq!(out.as_ptr(), input.as_ptr());
  }

  #[test]
  fn a_split_character_is_held_back_until_completed() {
    let mut decoder = LossyDecoder::default();
    let mut scratch = Vec::new();
    assert_eq!(decoder.decode(b"a\xe2\x82", &mut scratch), b"a");
    assert_eq!(decoder.decode(b"\xac!", &mut scratch), "€!".as_bytes());
    assert_eq!(decoder.finish(), b"");
  }
}
