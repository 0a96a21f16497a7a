//! Meta's `tokenizer.model`: tiktoken ranks (base64 token, rank per line).

use super::*;

// ---------------------------------------------------------------------------------------
// tiktoken rank file
// ---------------------------------------------------------------------------------------

const TIKTOKEN: &str = "tiktoken";

/// Parse a tiktoken rank file: one `base64(token bytes) rank` per line; ranks must be the ids
/// 0..n-1 (as in Llama-3's 128000 lines). It is taken to be Llama-3's: the Llama-3 pattern,
/// the 256 special tokens at ids n..n+255 ([`llama3_special_tokens`]), BOS = the first.
pub(crate) fn parse_tiktoken(bytes: &[u8]) -> Result<Parts, TokenizerError> {
    let text = std::str::from_utf8(bytes).map_err(|e| {
        TokenizerError::invalid(TIKTOKEN, format!("not UTF-8 text ({e}): not a rank file"))
    })?;
    let mut tokens: Vec<Option<Box<[u8]>>> = Vec::new();
    let mut by_bytes: HashMap<Vec<u8>, u32> = HashMap::new();
    let mut count = 0usize;
    for (lineno, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let mut fields = line.split_ascii_whitespace();
        let (Some(b64), Some(rank), None) = (fields.next(), fields.next(), fields.next()) else {
            return Err(TokenizerError::invalid(
                TIKTOKEN,
                format!(
                    "line {}: expected `base64 rank`, found {:?}",
                    lineno + 1,
                    preview(line)
                ),
            ));
        };
        let tok = base64_decode(b64).ok_or_else(|| {
            TokenizerError::invalid(TIKTOKEN, format!("line {}: bad base64 {b64:?}", lineno + 1))
        })?;
        let rank: u64 = rank.parse().map_err(|_| {
            TokenizerError::invalid(TIKTOKEN, format!("line {}: bad rank {rank:?}", lineno + 1))
        })?;
        let what = format!("the token on line {}", lineno + 1);
        let id = check_id(TIKTOKEN, rank, &what)?;
        check_token_len(TIKTOKEN, tok.len(), &what)?;
        if by_bytes.insert(tok.clone(), id).is_some() {
            return Err(TokenizerError::invalid(
                TIKTOKEN,
                format!("line {}: the same token bytes appear twice", lineno + 1),
            ));
        }
        put_token(TIKTOKEN, &mut tokens, id, tok)?;
        count += 1;
    }
    if count == 0 {
        return Err(TokenizerError::invalid(TIKTOKEN, "no ranks in the file"));
    }
    if count != tokens.len() {
        return Err(TokenizerError::invalid(
            TIKTOKEN,
            format!(
                "ranks are not 0..{}: {} lines but the largest rank is {}",
                count - 1,
                count,
                tokens.len() - 1
            ),
        ));
    }
    // Every split of a token into two tokens is a merge ranked by the token: the same rule as
    // tiktoken's `byte_pair_merge`, and how transformers' `TikTokenConverter` writes merges.
    let mut merges = Merges::with_capacity(count * 2);
    for (id, tok) in tokens.iter().enumerate() {
        let Some(tok) = tok else { continue };
        for k in 1..tok.len() {
            if let (Some(&l), Some(&r)) = (by_bytes.get(&tok[..k]), by_bytes.get(&tok[k..])) {
                merges.insert(l, r, id as u32, id as u32);
            }
        }
    }
    let first_special = u32::try_from(count)
        .ok()
        .filter(|&n| (n as usize) + 256 <= MAX_VOCAB)
        .ok_or_else(|| TokenizerError::invalid(TIKTOKEN, "too many ranks"))?;
    Ok(Parts {
        format: TIKTOKEN,
        tokens,
        specials: llama3_special_tokens(first_special),
        merges,
        ignore_merges: true,
        pre: PreTokenizerKind::Llama3,
        bos: Some(first_special),
        eos: Some(first_special + 1),
        unk: None,
        require_all_bytes: true,
    })
}

/// Standard base64 with `=` padding, strict (what tiktoken's files hold).
pub(super) fn base64_decode(s: &str) -> Option<Vec<u8>> {
    fn val(c: u8) -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    }
    let b = s.as_bytes();
    if b.is_empty() || !b.len().is_multiple_of(4) {
        return None;
    }
    let pad = b.iter().rev().take_while(|&&c| c == b'=').count();
    if pad > 2 {
        return None;
    }
    let mut out = Vec::with_capacity(b.len() / 4 * 3);
    for (ci, chunk) in b.chunks(4).enumerate() {
        let last = ci + 1 == b.len() / 4;
        let mut acc = 0u32;
        let mut n = 0;
        for (j, &c) in chunk.iter().enumerate() {
            if c == b'=' {
                if !last || j < 4 - pad {
                    return None;
                }
                continue;
            }
            acc |= val(c)? << (18 - 6 * j);
            n += 1;
        }
        let bytes = [(acc >> 16) as u8, (acc >> 8) as u8, acc as u8];
        // n characters carry n*6 bits: 2 -> 1 byte, 3 -> 2, 4 -> 3.
        let keep = n - 1;
        if keep == 0 {
            return None;
        }
        out.extend_from_slice(&bytes[..keep]);
    }
    Some(out)
}
