//! Byte-level BPE tokenizers: Llama-3's (from a Hugging Face `tokenizer.json` or Meta's
//! tiktoken `tokenizer.model`) and GPT-2-style ones from GGUF `tokenizer.ggml.*` metadata
//! (SmolLM2). See llm2vec.md §4 for the definition this follows.
//!
//! Encoding, as `tokenizers` does it for Llama-3 (and llama.cpp for GGUF):
//! 1. literal special-token strings are split out of the text first, leftmost-longest
//!    (`tokenizers`' `AddedVocabulary`, an Aho-Corasick `LeftmostLongest` matcher), and become
//!    their ids;
//! 2. the text between them is cut by the pre-tokenizer regex ([`pretokenize`]);
//! 3. each piece is one vocabulary hit when merges are ignored for whole pieces (tiktoken,
//!    `"ignore_merges": true`), else byte-level BPE (`bpe`);
//! 4. BOS is prepended only when asked (Llama-3's `TemplateProcessing` post-processor).
//!
//! No normaliser, no prefix space; decoding concatenates token bytes.

mod bpe;
mod error;
pub mod pretokenize;
mod sources;
pub mod strings;

use std::collections::HashMap;
use std::path::Path;

pub use error::TokenizerError;
pub use pretokenize::PreTokenizerKind;
pub use sources::{MAX_FILE_BYTES, MAX_TOKEN_BYTES, MAX_VOCAB, llama3_special_tokens};

use crate::formats::gguf::{GGUF_MAGIC, GgufFile, GgufValue, read_metadata};
use bpe::Merges;
use pretokenize::PreTokenizer;
use sources::Parts;
pub(crate) use sources::byte_to_char;

/// Longest text [`Tokenizer::encode`] accepts, in bytes. Prompts are a few hundred tokens;
/// this bounds time and memory for hostile input: time is about linear in the text (the
/// pre-tokenizer backtracks once per whitespace character), and one piece (a run of
/// letters has no length limit in the Llama-3 pattern) takes about 30 bytes per byte in the
/// merge loop, so at most ~500 MB.
pub const MAX_TEXT_BYTES: usize = 16 << 20;

/// A loaded tokenizer. Cheap to share by reference; encoding takes `&self`.
pub struct Tokenizer {
    format: &'static str,
    /// Id -> bytes of every token (ordinary and special); `None` for unused ids.
    tokens: Vec<Option<Box<[u8]>>>,
    /// Bytes -> id of the ordinary tokens (the BPE vocabulary).
    vocab: HashMap<Box<[u8]>, u32>,
    /// Id of each single-byte token; `None` for a byte the vocabulary lacks (SmolLM2 has no
    /// token for 21 bytes, 0x04 and 0xff among them).
    byte_ids: [Option<u32>; 256],
    /// Stands for a byte without a token; when `None` such bytes are dropped.
    unk: Option<u32>,
    merges: Merges,
    ignore_merges: bool,
    pre: PreTokenizer,
    specials: SpecialMatcher,
    special_ids: HashMap<String, u32>,
    bos: Option<u32>,
    eos: Option<u32>,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("format", &self.format)
            .field("vocab_size", &self.vocab_size())
            .field("merges", &self.merges.len())
            .field("specials", &self.special_ids.len())
            .field("pre_tokenizer", &self.pre.kind())
            .field("bos", &self.bos)
            .finish()
    }
}

impl Tokenizer {
    /// Load a tokenizer file, recognised by its content: a GGUF file (magic `GGUF`), a
    /// Hugging Face `tokenizer.json` (a JSON object), else a tiktoken rank file.
    pub fn open(path: impl AsRef<Path>) -> crate::Result<Tokenizer> {
        let path = path.as_ref();
        let mut head = [0u8; 4];
        let n = {
            use std::io::Read;
            let mut f = std::fs::File::open(path).map_err(|e| crate::Error::io(path, e))?;
            let mut n = 0;
            while n < 4 {
                match f.read(&mut head[n..]) {
                    Ok(0) => break,
                    Ok(k) => n += k,
                    Err(e) => return Err(crate::Error::io(path, e)),
                }
            }
            n
        };
        if n == 4 && head == GGUF_MAGIC {
            // Only the metadata: the tokenizer needs no tensor, whatever its type.
            let meta = read_metadata(path)?;
            return Ok(Tokenizer::from_gguf_metadata(&meta)?);
        }
        let len = std::fs::metadata(path)
            .map_err(|e| crate::Error::io(path, e))?
            .len();
        if len > MAX_FILE_BYTES {
            return Err(TokenizerError::Limit {
                what: format!("size of tokenizer file {}", path.display()),
                value: len,
                limit: MAX_FILE_BYTES,
            }
            .into());
        }
        let bytes = std::fs::read(path).map_err(|e| crate::Error::io(path, e))?;
        Ok(Tokenizer::from_bytes(&bytes)?)
    }

    /// Parse a `tokenizer.json` (first non-blank byte `{`) or a tiktoken rank file held in
    /// memory.
    pub fn from_bytes(bytes: &[u8]) -> Result<Tokenizer, TokenizerError> {
        if bytes.len() as u64 > MAX_FILE_BYTES {
            return Err(TokenizerError::Limit {
                what: "size of the tokenizer file".into(),
                value: bytes.len() as u64,
                limit: MAX_FILE_BYTES,
            });
        }
        let first = bytes.iter().find(|b| !b.is_ascii_whitespace());
        if first == Some(&b'{') {
            Tokenizer::from_parts(sources::parse_tokenizer_json(bytes)?)
        } else {
            Tokenizer::from_parts(sources::parse_tiktoken(bytes)?)
        }
    }

    /// The tokenizer of a GGUF file's `tokenizer.ggml.*` metadata.
    pub fn from_gguf(g: &GgufFile) -> Result<Tokenizer, TokenizerError> {
        Tokenizer::from_parts(sources::parse_gguf(&|k| g.get(k))?)
    }

    /// The tokenizer of GGUF metadata read with [`read_metadata`].
    pub fn from_gguf_metadata(meta: &[(String, GgufValue)]) -> Result<Tokenizer, TokenizerError> {
        let map: HashMap<&str, &GgufValue> = meta.iter().map(|(k, v)| (k.as_str(), v)).collect();
        Tokenizer::from_parts(sources::parse_gguf(&|k| map.get(k).copied())?)
    }

    fn from_parts(p: Parts) -> Result<Tokenizer, TokenizerError> {
        let Parts {
            format,
            mut tokens,
            specials,
            merges,
            ignore_merges,
            pre,
            bos,
            eos,
            unk,
            require_all_bytes,
        } = p;
        let mut vocab = HashMap::with_capacity(tokens.len());
        for (id, t) in tokens.iter().enumerate() {
            if let Some(t) = t {
                vocab.insert(t.clone(), id as u32);
            }
        }
        let mut byte_ids = [None; 256];
        for (b, slot) in byte_ids.iter_mut().enumerate() {
            *slot = vocab.get(&[b as u8][..]).copied();
            if slot.is_none() && require_all_bytes {
                return Err(TokenizerError::invalid(
                    format,
                    format!("no token for the single byte 0x{b:02x}: not a byte-level BPE"),
                ));
            }
        }
        if let Some(u) = unk
            && tokens.get(u as usize).is_none_or(Option::is_none)
        {
            return Err(TokenizerError::invalid(
                format,
                format!("the unknown-token id {u} has no token"),
            ));
        }
        let mut special_ids = HashMap::with_capacity(specials.len());
        for (s, id) in &specials {
            let i = *id as usize;
            if tokens.len() <= i {
                tokens.resize(i + 1, None);
            }
            match &tokens[i] {
                // An added token may repeat an ordinary token's id with the same bytes.
                Some(b) if **b != *s.as_bytes() => {
                    return Err(TokenizerError::invalid(
                        format,
                        format!("special token {s:?} reuses id {id} of another token"),
                    ));
                }
                _ => tokens[i] = Some(s.as_bytes().into()),
            }
            special_ids.insert(s.clone(), *id);
        }
        for (what, id) in [("BOS", bos), ("EOS", eos)] {
            if let Some(id) = id
                && tokens.get(id as usize).is_none_or(Option::is_none)
            {
                return Err(TokenizerError::invalid(
                    format,
                    format!("the {what} id {id} has no token"),
                ));
            }
        }
        Ok(Tokenizer {
            format,
            tokens,
            vocab,
            byte_ids,
            unk,
            merges,
            ignore_merges,
            pre: PreTokenizer::new(pre)?,
            specials: SpecialMatcher::new(&specials),
            special_ids,
            bos,
            eos,
        })
    }

    /// Where it was read from: `"tokenizer.json"`, `"tiktoken"` or `"gguf"`.
    pub fn format(&self) -> &'static str {
        self.format
    }

    /// Number of token ids (largest id + 1), special tokens included: 128256 for Llama-3.
    pub fn vocab_size(&self) -> usize {
        self.tokens.len()
    }

    /// The pre-tokenizer in use.
    pub fn pre_tokenizer(&self) -> PreTokenizerKind {
        self.pre.kind()
    }

    /// BOS id (128000 `<|begin_of_text|>` for Llama-3), if the tokenizer has one.
    pub fn bos_id(&self) -> Option<u32> {
        self.bos
    }

    /// EOS id, if known.
    pub fn eos_id(&self) -> Option<u32> {
        self.eos
    }

    /// The id of a special (added) token by its literal text.
    pub fn special_id(&self, text: &str) -> Option<u32> {
        self.special_ids.get(text).copied()
    }

    /// Refuse a model whose embedding table has another number of rows than this tokenizer
    /// has ids (a tokenizer from a different model).
    pub fn check_vocab_size(&self, model_rows: usize) -> Result<(), TokenizerError> {
        if model_rows != self.vocab_size() {
            return Err(TokenizerError::VocabMismatch {
                tokenizer: self.vocab_size(),
                model: model_rows,
            });
        }
        Ok(())
    }

    /// Encode `text`: special-token strings become their ids, the rest is pre-tokenised and
    /// BPE-encoded; with `bos`, the BOS id is prepended (the `TemplateProcessing` step that
    /// `add_special_tokens=True` runs for Llama-3). An error if `bos` is asked for but the
    /// tokenizer has none, or the text is longer than [`MAX_TEXT_BYTES`].
    pub fn encode(&self, text: &str, bos: bool) -> Result<Vec<u32>, TokenizerError> {
        if text.len() > MAX_TEXT_BYTES {
            return Err(TokenizerError::Limit {
                what: "text length in bytes".into(),
                value: text.len() as u64,
                limit: MAX_TEXT_BYTES as u64,
            });
        }
        let mut out = Vec::with_capacity(text.len() / 3 + 2);
        if bos {
            out.push(self.bos.ok_or_else(|| {
                TokenizerError::Missing(format!(
                    "this tokenizer ({}) has no BOS token",
                    self.format
                ))
            })?);
        }
        let mut pieces = Vec::new();
        let mut start = 0;
        while let Some((s, e, id)) = self.specials.find(text, start) {
            self.encode_ordinary(&text[start..s], &mut pieces, &mut out)?;
            out.push(id);
            start = e;
        }
        self.encode_ordinary(&text[start..], &mut pieces, &mut out)?;
        Ok(out)
    }

    /// Pre-tokenise and BPE-encode text that holds no special tokens.
    fn encode_ordinary<'a>(
        &self,
        text: &'a str,
        pieces: &mut Vec<&'a str>,
        out: &mut Vec<u32>,
    ) -> Result<(), TokenizerError> {
        if text.is_empty() {
            return Ok(());
        }
        pieces.clear();
        self.pre.split(text, pieces)?;
        let mut initial = Vec::new();
        for piece in pieces.iter() {
            let b = piece.as_bytes();
            if self.ignore_merges
                && let Some(&id) = self.vocab.get(b)
            {
                out.push(id);
                continue;
            }
            initial.clear();
            // A byte without a token becomes the unknown token, or is left out when there is
            // none: `tokenizers`' `BPE::merge_word` with `unk_token: null` skips it, and the
            // bytes on either side become neighbours.
            initial.extend(
                b.iter()
                    .filter_map(|&x| self.byte_ids[x as usize].or(self.unk)),
            );
            if !initial.is_empty() {
                bpe::merge_word(&initial, &self.merges, out);
            }
        }
        Ok(())
    }

    /// The bytes of `ids` concatenated (special tokens as their literal text). Exact: for
    /// every string `s`, `decode_bytes(encode(s))` is `s`'s UTF-8.
    pub fn decode_bytes(&self, ids: &[u32]) -> Result<Vec<u8>, TokenizerError> {
        let mut out = Vec::with_capacity(ids.len() * 4);
        for &id in ids {
            let t = self
                .tokens
                .get(id as usize)
                .and_then(Option::as_deref)
                .ok_or(TokenizerError::UnknownId {
                    id,
                    vocab_size: self.vocab_size(),
                })?;
            out.extend_from_slice(t);
        }
        Ok(out)
    }

    /// [`Tokenizer::decode_bytes`] as text; byte sequences that are not UTF-8 (a prefix of a
    /// multi-byte character) become U+FFFD, as in `tokenizers`' `ByteLevel` decoder.
    pub fn decode(&self, ids: &[u32]) -> Result<String, TokenizerError> {
        Ok(String::from_utf8_lossy(&self.decode_bytes(ids)?).into_owned())
    }
}

/// Leftmost-longest literal matcher over the special-token strings: a byte trie walked from
/// each position, O(text x longest special) in the worst case.
struct SpecialMatcher {
    /// Node -> sorted (byte, child) edges.
    edges: Vec<Vec<(u8, u32)>>,
    /// Node -> id of the special token ending there.
    terminal: Vec<Option<u32>>,
    first_bytes: [bool; 256],
}

impl SpecialMatcher {
    fn new(specials: &[(String, u32)]) -> SpecialMatcher {
        let mut m = SpecialMatcher {
            edges: vec![Vec::new()],
            terminal: vec![None],
            first_bytes: [false; 256],
        };
        for (s, id) in specials {
            let Some(&b0) = s.as_bytes().first() else {
                continue;
            };
            m.first_bytes[b0 as usize] = true;
            let mut node = 0usize;
            for &b in s.as_bytes() {
                node = match m.edges[node].binary_search_by_key(&b, |e| e.0) {
                    Ok(k) => m.edges[node][k].1 as usize,
                    Err(k) => {
                        let child = m.edges.len();
                        m.edges.push(Vec::new());
                        m.terminal.push(None);
                        m.edges[node].insert(k, (b, child as u32));
                        child
                    }
                };
            }
            // The first listing of a string wins (the same string twice is one token).
            m.terminal[node].get_or_insert(*id);
        }
        m
    }

    /// The leftmost, then longest, special token in `text[from..]`: (start, end, id).
    fn find(&self, text: &str, from: usize) -> Option<(usize, usize, u32)> {
        let b = text.as_bytes();
        for start in from..b.len() {
            if !self.first_bytes[b[start] as usize] {
                continue;
            }
            let mut node = 0usize;
            let mut best = None;
            for (k, &c) in b[start..].iter().enumerate() {
                match self.edges[node].binary_search_by_key(&c, |e| e.0) {
                    Ok(j) => node = self.edges[node][j].1 as usize,
                    Err(_) => break,
                }
                if let Some(id) = self.terminal[node] {
                    best = Some((start, start + k + 1, id));
                }
            }
            // Special strings are whole UTF-8 strings, so a match never splits a character.
            if best.is_some() {
                return best;
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A toy tiktoken file: the 256 bytes, then "ab", "abc", " ab".
    fn toy() -> Tokenizer {
        let mut lines = String::new();
        let b64 = |b: &[u8]| {
            const A: &[u8; 64] =
                b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
            let mut s = String::new();
            for c in b.chunks(3) {
                let n = c.len();
                let v = (u32::from(c[0]) << 16)
                    | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
                    | u32::from(*c.get(2).unwrap_or(&0));
                for j in 0..4 {
                    if j <= n {
                        s.push(A[(v >> (18 - 6 * j) & 63) as usize] as char);
                    } else {
                        s.push('=');
                    }
                }
            }
            s
        };
        for b in 0..=255u8 {
            lines += &format!("{} {}\n", b64(&[b]), b);
        }
        for (i, t) in [&b"ab"[..], b"abc", b" ab"].iter().enumerate() {
            lines += &format!("{} {}\n", b64(t), 256 + i);
        }
        Tokenizer::from_bytes(lines.as_bytes()).unwrap()
    }

    #[test]
    fn toy_tiktoken_encodes_and_decodes() {
        let t = toy();
        assert_eq!(t.vocab_size(), 259 + 256);
        assert_eq!(t.bos_id(), Some(259));
        assert_eq!(t.encode("abc ab", false).unwrap(), vec![257, 258]);
        // (a,b) twice, then (ab,c): the lowest rank first, leftmost on ties.
        assert_eq!(t.encode("abcab", true).unwrap(), vec![259, 257, 256]);
        // Special tokens split out first, leftmost-longest.
        let ids = t.encode("ab<|eot_id|><|eot_id|", false).unwrap();
        assert_eq!(ids[..2], [256, 259 + 9]);
        assert_eq!(t.decode(&ids).unwrap(), "ab<|eot_id|><|eot_id|");
        assert!(matches!(
            t.decode(&[100_000]),
            Err(TokenizerError::UnknownId { id: 100_000, .. })
        ));
        assert!(t.check_vocab_size(515).is_ok());
        assert!(matches!(
            t.check_vocab_size(128256),
            Err(TokenizerError::VocabMismatch { .. })
        ));
    }

    #[test]
    fn malformed_files_are_errors() {
        for bad in [
            &b""[..],
            b"not base64 at all\n",
            b"IQ== 0\nIQ== 1\n",
            b"IQ== 5\n",
            b"IQ== 0 extra\n",
            b"IQ== 99999999999\n",
            b"{}",
            b"{\"model\": {\"vocab\": {\"a\": 0}, \"merges\": [\"a b\"]}}",
            b"\xff\xfe",
        ] {
            assert!(Tokenizer::from_bytes(bad).is_err(), "{bad:?}");
        }
    }
}
