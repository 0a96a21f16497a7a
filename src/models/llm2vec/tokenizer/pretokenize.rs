//! Pre-tokenizers: the regular expressions that cut text into the pieces BPE encodes one by
//! one. Both need a look-ahead (`\s+(?!\S)`), which the `regex` crate lacks, so they run on
//! `fancy-regex` (what tiktoken uses for the same patterns).

use fancy_regex::{Regex, RegexBuilder};

use super::TokenizerError;

/// Llama-3's pattern: `pat_str` of `llama_models/llama3/tokenizer.py#L55` (llama-models
/// 0.3.0), identical to the `Split` regex of Meta-Llama-3-8B-Instruct's `tokenizer.json` and to
/// transformers' `TikTokenConverter`. Case-insensitive ASCII-apostrophe contractions, one
/// optional non-letter/digit/newline glued to a letter run, digits in groups of up to three,
/// punctuation runs swallowing trailing newlines, newline runs, then whitespace that leaves
/// its last character to the next piece (`\s+(?!\S)`).
pub const LLAMA3_PATTERN: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// GPT-2's pattern, as `tokenizers`' `ByteLevel` pre-tokenizer with `use_regex: true` applies
/// it (`huggingface/tokenizers:tokenizers/src/pre_tokenizers/byte_level.rs`, the `RE`
/// static); llama.cpp's `LLAMA_VOCAB_PRE_TYPE_GPT2` regex is the same less the final `\s+`,
/// whose pieces its splitter emits as unmatched gaps instead.
pub const GPT2_PATTERN: &str =
    r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+";

/// Steps fancy-regex may backtrack in one search before giving up (its default is 10^6). The
/// patterns above backtrack at most once per whitespace character, so this allows whitespace
/// runs of tens of millions of characters; inputs are bounded well below that.
const BACKTRACK_LIMIT: usize = 1 << 30;

/// Which splitting rule a tokenizer uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PreTokenizerKind {
    /// [`LLAMA3_PATTERN`] (Llama-3, GGUF `tokenizer.ggml.pre = "llama-bpe"`).
    Llama3,
    /// [`GPT2_PATTERN`] (GGUF `tokenizer.ggml.pre = "gpt2"`).
    Gpt2,
    /// Every `\p{N}` character on its own, then [`GPT2_PATTERN`]: SmolLM's `tokenizer.json`
    /// (`Sequence[Digits(individual_digits=true), ByteLevel]`) and llama.cpp's
    /// `LLAMA_VOCAB_PRE_TYPE_SMOLLM` (`src/llama-vocab.cpp`, regexes `\p{N}` then GPT-2's).
    Gpt2IndividualDigits,
}

impl PreTokenizerKind {
    /// A short name for messages and metadata.
    pub fn name(self) -> &'static str {
        match self {
            PreTokenizerKind::Llama3 => "llama3",
            PreTokenizerKind::Gpt2 => "gpt2",
            PreTokenizerKind::Gpt2IndividualDigits => "gpt2+digits",
        }
    }
}

/// A compiled pre-tokenizer.
#[derive(Debug)]
pub(crate) struct PreTokenizer {
    kind: PreTokenizerKind,
    regex: Regex,
}

impl PreTokenizer {
    pub(crate) fn new(kind: PreTokenizerKind) -> Result<PreTokenizer, TokenizerError> {
        let pattern = match kind {
            PreTokenizerKind::Llama3 => LLAMA3_PATTERN,
            PreTokenizerKind::Gpt2 | PreTokenizerKind::Gpt2IndividualDigits => GPT2_PATTERN,
        };
        let regex = RegexBuilder::new(pattern)
            .backtrack_limit(BACKTRACK_LIMIT)
            .build()
            .map_err(|e| TokenizerError::Regex(e.to_string()))?;
        Ok(PreTokenizer { kind, regex })
    }

    pub(crate) fn kind(&self) -> PreTokenizerKind {
        self.kind
    }

    /// Append the pieces of `text` to `out`, in order; their concatenation is `text`. Text
    /// between matches is kept as pieces of its own (the `Isolated` split behaviour of
    /// `tokenizers`), although neither pattern leaves any.
    pub(crate) fn split<'a>(
        &self,
        text: &'a str,
        out: &mut Vec<&'a str>,
    ) -> Result<(), TokenizerError> {
        match self.kind {
            PreTokenizerKind::Llama3 | PreTokenizerKind::Gpt2 => self.split_regex(text, out),
            PreTokenizerKind::Gpt2IndividualDigits => {
                let mut start = 0;
                for (i, c) in text.char_indices() {
                    if c.is_numeric() {
                        self.split_regex(&text[start..i], out)?;
                        out.push(&text[i..i + c.len_utf8()]);
                        start = i + c.len_utf8();
                    }
                }
                self.split_regex(&text[start..], out)
            }
        }
    }

    fn split_regex<'a>(&self, text: &'a str, out: &mut Vec<&'a str>) -> Result<(), TokenizerError> {
        let mut last = 0;
        for m in self.regex.find_iter(text) {
            let m = m.map_err(|e| TokenizerError::Regex(e.to_string()))?;
            if m.start() > last {
                out.push(&text[last..m.start()]);
            }
            if m.end() > m.start() {
                out.push(m.as_str());
            }
            last = m.end();
        }
        if last < text.len() {
            out.push(&text[last..]);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pieces(kind: PreTokenizerKind, s: &str) -> Vec<String> {
        let p = PreTokenizer::new(kind).unwrap();
        let mut out = Vec::new();
        p.split(s, &mut out).unwrap();
        assert_eq!(out.concat(), s);
        out.into_iter().map(str::to_string).collect()
    }

    #[test]
    fn llama3_pieces() {
        use PreTokenizerKind::Llama3;
        // The look-ahead leaves the last space of a run to the word after it.
        assert_eq!(pieces(Llama3, "a   b"), ["a", "  ", " b"]);
        assert_eq!(pieces(Llama3, "a   "), ["a", "   "]);
        // Case-insensitive contractions; digits in threes from the left.
        assert_eq!(
            pieces(Llama3, "WE'VE 12345"),
            ["WE", "'VE", " ", "123", "45"]
        );
        assert_eq!(pieces(Llama3, "x\n\n  y"), ["x", "\n\n", " ", " y"]);
        assert_eq!(pieces(Llama3, "..\n\nz"), ["..\n\n", "z"]);
    }

    #[test]
    fn gpt2_digits_pieces() {
        use PreTokenizerKind::Gpt2IndividualDigits;
        assert_eq!(
            pieces(Gpt2IndividualDigits, "ab 123 c's"),
            ["ab", " ", "1", "2", "3", " c", "'s"]
        );
    }
}
