//! Pre-tokenizers: the regular expressions that cut text into the pieces BPE encodes one by
//! one.
//!
//! Both patterns end in `\s+(?!\S)|\s+`, a look-ahead the `regex` crate lacks. tiktoken runs
//! them on `fancy-regex`, whose backtracking VM has a fixed stack of 10^6 entries: a
//! whitespace run of about a million characters makes it fail (tiktoken has the same limit,
//! which is why Meta's `Tokenizer.encode` cuts its input into 25,000-character runs,
//! `llama_models/llama3/tokenizer.py#L152-158`). So the scan runs on the `regex` crate with
//! the look-ahead alternative removed, and the look-ahead is applied to each match instead
//! (`PreTokenizer::split`); the tests check the result against `fancy-regex` running the
//! original pattern, and against upstream ids.

use regex::Regex;

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

/// [`LLAMA3_PATTERN`] less its `\s+(?!\S)` alternative.
const LLAMA3_SCAN: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+";
/// [`GPT2_PATTERN`] less its `\s+(?!\S)` alternative.
const GPT2_SCAN: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+";

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
            PreTokenizerKind::Llama3 => LLAMA3_SCAN,
            PreTokenizerKind::Gpt2 | PreTokenizerKind::Gpt2IndividualDigits => GPT2_SCAN,
        };
        let regex = Regex::new(pattern).map_err(|e| TokenizerError::Regex(e.to_string()))?;
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

    /// One pattern over `text`. A piece of whitespace only is the pattern's `\s+`
    /// alternative (every other one holds a non-space, or for Llama-3 ends in a newline, and
    /// `\s*[\r\n]+` comes first); the original `\s+(?!\S)` takes such a maximal run whole at
    /// the end of the text and gives its last character back before a non-space, when the
    /// run has two or more. Each search resumes where the previous piece ended, as
    /// `find_iter` does.
    fn split_regex<'a>(&self, text: &'a str, out: &mut Vec<&'a str>) -> Result<(), TokenizerError> {
        let mut pos = 0;
        while pos < text.len() {
            let Some(m) = self.regex.find_at(text, pos) else {
                out.push(&text[pos..]);
                break;
            };
            if m.start() > pos {
                out.push(&text[pos..m.start()]);
            }
            let piece = m.as_str();
            let mut end = m.end();
            if end == m.start() {
                // No alternative matches the empty string; guard the loop all the same.
                return Err(TokenizerError::Regex(format!("empty match at byte {end}")));
            }
            let no_newline = self.kind != PreTokenizerKind::Llama3 || !piece.contains(['\r', '\n']);
            if no_newline
                && piece.chars().all(char::is_whitespace)
                && text[end..]
                    .chars()
                    .next()
                    .is_some_and(|c| !c.is_whitespace())
            {
                let mut chars = piece.chars();
                if let (Some(last), Some(_)) = (chars.next_back(), chars.next()) {
                    end -= last.len_utf8();
                }
            }
            out.push(&text[m.start()..end]);
            pos = end;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use proptest::prelude::*;

    /// The original patterns on fancy-regex (look-ahead included), as the oracle.
    fn oracle(kind: PreTokenizerKind, s: &str) -> Vec<String> {
        static LLAMA3: std::sync::OnceLock<fancy_regex::Regex> = std::sync::OnceLock::new();
        static GPT2: std::sync::OnceLock<fancy_regex::Regex> = std::sync::OnceLock::new();
        let re = match kind {
            PreTokenizerKind::Llama3 => {
                LLAMA3.get_or_init(|| fancy_regex::Regex::new(LLAMA3_PATTERN).unwrap())
            }
            _ => GPT2.get_or_init(|| fancy_regex::Regex::new(GPT2_PATTERN).unwrap()),
        };
        let mut out = Vec::new();
        let segment = |t: &str, out: &mut Vec<String>| {
            let mut last = 0;
            for m in re.find_iter(t) {
                let m = m.unwrap();
                assert_eq!(m.start(), last, "a gap in {t:?}");
                out.push(m.as_str().to_string());
                last = m.end();
            }
            assert_eq!(last, t.len());
        };
        if kind == PreTokenizerKind::Gpt2IndividualDigits {
            let mut start = 0;
            for (i, c) in s.char_indices() {
                if c.is_numeric() {
                    segment(&s[start..i], &mut out);
                    out.push(c.to_string());
                    start = i + c.len_utf8();
                }
            }
            segment(&s[start..], &mut out);
        } else {
            segment(s, &mut out);
        }
        out
    }

    fn text() -> impl Strategy<Value = String> {
        let pool: Vec<char> = " \t\n\r\u{b}\u{c}\u{a0}\u{85}\u{2028}\u{3000}\u{1c}aZé中'sStTdDlLvVmMrR09٣½.,!?-()🙂\u{200d}\u{301}"
            .chars()
            .collect();
        let piece = prop_oneof![
            4 => proptest::sample::select(pool).prop_map(|c| c.to_string()),
            1 => any::<char>().prop_map(|c| c.to_string()),
        ];
        proptest::collection::vec(piece, 0..40).prop_map(|v| v.concat())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn scan_with_lookahead_fix_equals_the_original_patterns(s in text()) {
            for kind in [
                PreTokenizerKind::Llama3,
                PreTokenizerKind::Gpt2,
                PreTokenizerKind::Gpt2IndividualDigits,
            ] {
                let got = pieces(kind, &s);
                prop_assert_eq!(got, oracle(kind, &s), "{:?} {:?}", kind, s);
            }
        }
    }

    #[test]
    fn whitespace_runs_beyond_fancy_regex_stack() {
        // fancy-regex fails here (its stack holds 10^6 entries); the scan does not.
        let s = format!("a{}b{}", " ".repeat(1_500_000), "\n".repeat(3));
        let p = pieces(PreTokenizerKind::Llama3, &s);
        assert_eq!(p.len(), 4);
        assert_eq!(p[1].len(), 1_499_999);
        assert_eq!(p[2], " b");
        assert_eq!(p[3], "\n\n\n");
        let re = fancy_regex::Regex::new(LLAMA3_PATTERN).unwrap();
        assert!(re.find_iter(&s).any(|m| m.is_err()));
    }

    fn pieces(kind: PreTokenizerKind, s: &str) -> Vec<String> {
        static CACHE: std::sync::OnceLock<[PreTokenizer; 3]> = std::sync::OnceLock::new();
        let all = CACHE.get_or_init(|| {
            [
                PreTokenizerKind::Llama3,
                PreTokenizerKind::Gpt2,
                PreTokenizerKind::Gpt2IndividualDigits,
            ]
            .map(|k| PreTokenizer::new(k).unwrap())
        });
        let p = all.iter().find(|p| p.kind() == kind).unwrap();
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
