//! JSON lists of strings in, JSON lists of id lists out: `kinema tokenize`.
//!
//! JSON can spell lone UTF-16 surrogates (`"\ud800"`) that no Rust string can hold. They
//! become U+FFFD, one per surrogate, which is what tiktoken does to a Python string holding
//! them (`tiktoken/core.py`, `encode`: `text.encode("utf-16", "surrogatepass").decode("utf-16",
//! "replace")`). Hugging Face `tokenizers` refuses such a string instead (its Python binding
//! cannot convert it to UTF-8); `reference/capture_tokenizer.py` records both. Bytes that are
//! not UTF-8 inside the file are an error naming the string.

use std::fmt;
use std::path::Path;

use serde::de::{self, Deserializer, SeqAccess, Visitor};

use super::{Tokenizer, TokenizerError};
use crate::formats::write_atomic;

/// Largest strings file read (bytes).
pub const MAX_STRINGS_FILE_BYTES: u64 = 1 << 30;

/// Read a JSON list of strings (lone surrogates become U+FFFD, see the module docs).
pub fn parse_strings(json: &[u8]) -> Result<Vec<String>, TokenizerError> {
    struct ListVisitor;
    impl<'de> Visitor<'de> for ListVisitor {
        type Value = Vec<String>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a JSON list of strings")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<String>, A::Error> {
            let mut out = Vec::new();
            while let Some(Wtf8(b)) = seq.next_element::<Wtf8>()? {
                let s = from_wtf8(&b).map_err(|e| {
                    de::Error::custom(format_args!("string {} (0-based): {e}", out.len()))
                })?;
                out.push(s);
            }
            Ok(out)
        }
    }
    struct Wtf8(Vec<u8>);
    impl<'de> de::Deserialize<'de> for Wtf8 {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Wtf8, D::Error> {
            struct V;
            impl Visitor<'_> for V {
                type Value = Wtf8;
                fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                    f.write_str("a string")
                }
                fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Wtf8, E> {
                    Ok(Wtf8(v.to_vec()))
                }
                fn visit_str<E: de::Error>(self, v: &str) -> Result<Wtf8, E> {
                    Ok(Wtf8(v.as_bytes().to_vec()))
                }
            }
            d.deserialize_bytes(V)
        }
    }
    let mut d = serde_json::Deserializer::from_slice(json);
    let list = d
        .deserialize_seq(ListVisitor)
        .map_err(|e| TokenizerError::StringsFile(format!("not a JSON list of strings: {e}")))?;
    d.end()
        .map_err(|e| TokenizerError::StringsFile(format!("trailing data after the list: {e}")))?;
    Ok(list)
}

/// WTF-8 (UTF-8 that may encode surrogates, as serde_json writes lone `\uD8xx` escapes in
/// byte strings) to a `String`, one U+FFFD per surrogate; other invalid bytes are an error.
fn from_wtf8(mut b: &[u8]) -> Result<String, TokenizerError> {
    let mut out = String::with_capacity(b.len());
    let total = b.len();
    loop {
        match std::str::from_utf8(b) {
            Ok(s) => {
                out.push_str(s);
                return Ok(out);
            }
            Err(e) => {
                let (ok, rest) = b.split_at(e.valid_up_to());
                // `ok` is valid UTF-8 by `valid_up_to`.
                out.push_str(std::str::from_utf8(ok).unwrap_or_default());
                match rest {
                    [0xED, 0xA0..=0xBF, 0x80..=0xBF, ..] => {
                        out.push(char::REPLACEMENT_CHARACTER);
                        b = &rest[3..];
                    }
                    _ => {
                        return Err(TokenizerError::Utf8(format!(
                            "byte 0x{:02x} at offset {} of the string",
                            rest.first().copied().unwrap_or(0),
                            total - rest.len()
                        )));
                    }
                }
            }
        }
    }
}

/// What [`tokenize_file`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenizeSummary {
    /// Strings tokenized.
    pub strings: usize,
    /// Ids written, in all lists together.
    pub tokens: usize,
}

/// `kinema tokenize`: read the tokenizer and a JSON list of strings, write a JSON list with
/// one list of ids per string (BOS first with `bos`, no other special tokens are added;
/// special-token strings in the text are still matched). The output is written atomically:
/// on any error nothing is written.
pub fn tokenize_file(
    tokenizer: &Path,
    strings: &Path,
    output: &Path,
    bos: bool,
) -> crate::Result<TokenizeSummary> {
    let tok = Tokenizer::open(tokenizer)?;
    let len = std::fs::metadata(strings)
        .map_err(|e| crate::Error::io(strings, e))?
        .len();
    if len > MAX_STRINGS_FILE_BYTES {
        return Err(TokenizerError::Limit {
            what: format!("size of strings file {}", strings.display()),
            value: len,
            limit: MAX_STRINGS_FILE_BYTES,
        }
        .into());
    }
    let bytes = std::fs::read(strings).map_err(|e| crate::Error::io(strings, e))?;
    let list = parse_strings(&bytes).map_err(|e| match e {
        TokenizerError::StringsFile(m) => {
            TokenizerError::StringsFile(format!("{}: {m}", strings.display()))
        }
        e => e,
    })?;
    let mut ids = Vec::with_capacity(list.len());
    let mut tokens = 0;
    for (i, s) in list.iter().enumerate() {
        let v = tok.encode(s, bos).map_err(|e| {
            TokenizerError::StringsFile(format!("{}: string {i}: {e}", strings.display()))
        })?;
        tokens += v.len();
        ids.push(v);
    }
    write_atomic(output, |w| {
        serde_json::to_writer(&mut *w, &ids).map_err(std::io::Error::other)?;
        w.write_all(b"\n")
    })?;
    Ok(TokenizeSummary {
        strings: list.len(),
        tokens,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_files_with_surrogates_and_errors() {
        let v = parse_strings(br#"["a", "\ud83d\ude00", "x\ud800y", "\udc00\ud800", ""]"#).unwrap();
        assert_eq!(v, ["a", "\u{1F600}", "x\u{FFFD}y", "\u{FFFD}\u{FFFD}", ""]);
        for bad in [
            &br#"{"a": 1}"#[..],
            br#"["a", 1]"#,
            br#"["a", ["b"]]"#,
            br#"["a"] x"#,
            b"[\"\xff\"]",
            br#"["a""#,
            b"",
        ] {
            let e = parse_strings(bad).unwrap_err();
            assert!(matches!(e, TokenizerError::StringsFile(_)), "{bad:?}: {e}");
        }
    }
}
