//! Incremental UTF-8 validation across fragments: a text message is rejected (1007) at the
//! first fragment that makes it invalid, not when the last one arrives.

/// The bytes so far cannot be UTF-8 (the connection closes with 1007).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InvalidUtf8;

/// Carries an incomplete trailing sequence (at most 3 bytes) from one chunk to the next.
#[derive(Debug, Default, Clone)]
pub struct Utf8Validator {
    pending: [u8; 4],
    pending_len: usize,
}

impl Utf8Validator {
    /// Validate the next chunk. `Err(InvalidUtf8)` as soon as the bytes so far cannot be UTF-8.
    pub fn feed(&mut self, mut data: &[u8]) -> Result<(), InvalidUtf8> {
        if self.pending_len > 0 {
            // Complete the pending sequence byte by byte (it needs at most 3 more).
            while self.pending_len < 4 && !data.is_empty() {
                self.pending[self.pending_len] = data[0];
                self.pending_len += 1;
                data = &data[1..];
                match std::str::from_utf8(&self.pending[..self.pending_len]) {
                    Ok(_) => {
                        self.pending_len = 0;
                        break;
                    }
                    Err(e) if e.error_len().is_some() => return Err(InvalidUtf8),
                    Err(_) => {}
                }
            }
            if self.pending_len > 0 {
                return if data.is_empty() {
                    Ok(())
                } else {
                    Err(InvalidUtf8)
                };
            }
        }
        match std::str::from_utf8(data) {
            Ok(_) => Ok(()),
            Err(e) => match e.error_len() {
                Some(_) => Err(InvalidUtf8),
                None => {
                    let tail = &data[e.valid_up_to()..];
                    self.pending[..tail.len()].copy_from_slice(tail);
                    self.pending_len = tail.len();
                    Ok(())
                }
            },
        }
    }

    /// The message ended: valid only if no sequence is left incomplete.
    pub fn finish(&mut self) -> Result<(), InvalidUtf8> {
        let ok = self.pending_len == 0;
        self.pending_len = 0;
        if ok {
            Ok(())
        } else {
            Err(InvalidUtf8)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_sequences_are_accepted_at_any_boundary() {
        let text = "κόσμε €𝄞 ok".as_bytes();
        for cut in 0..=text.len() {
            for cut2 in cut..=text.len() {
                let mut v = Utf8Validator::default();
                assert!(v.feed(&text[..cut]).is_ok());
                assert!(v.feed(&text[cut..cut2]).is_ok());
                assert!(v.feed(&text[cut2..]).is_ok());
                assert!(v.finish().is_ok(), "{cut} {cut2}");
            }
        }
    }

    #[test]
    fn invalid_fails_fast_and_truncated_fails_at_the_end() {
        let mut v = Utf8Validator::default();
        assert!(v.feed(b"ok\xce").is_ok());
        assert!(
            v.feed(b"\xff").is_err(),
            "a bad continuation fails on the fragment that brings it"
        );
        let mut v = Utf8Validator::default();
        assert!(v.feed(b"\xed\xa0\x80").is_err(), "surrogates are not UTF-8");
        let mut v = Utf8Validator::default();
        assert!(v.feed(b"\xf0\x9f").is_ok());
        assert!(v.finish().is_err());
        let mut v = Utf8Validator::default();
        assert!(v.feed(b"\xf4\x90\x80\x80").is_err(), "above U+10FFFF");
    }
}
