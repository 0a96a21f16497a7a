//! LLM2Vec tokenizer files: parse arbitrary bytes as a GGUF file's `tokenizer.ggml.*`
//! metadata (input starting with the GGUF magic) or through `Tokenizer::from_bytes` (a
//! `tokenizer.json`, else a tiktoken `tokenizer.model`); when one parses, encode a short
//! string taken from the input and check that decoding gives it back.
#![no_main]

use kinema::formats::GgufFile;
use kinema::models::llm2vec::tokenizer::Tokenizer;
use libfuzzer_sys::fuzz_target;

/// Text to encode: the input's last bytes when they are UTF-8 (for a `tokenizer.json` that
/// is JSON syntax, for a rank file base64 and digits), else a fixed sentence.
fn sample(data: &[u8]) -> &str {
    let tail = &data[data.len().saturating_sub(48)..];
    std::str::from_utf8(tail).unwrap_or("Hello, world! 12345 <|x|>  \n\tfoo'll")
}

/// Whether `text` comes back byte for byte from `encode` then `decode_bytes`.
fn round_trips(t: &Tokenizer, text: &str) -> bool {
    match t.encode(text, false) {
        Ok(ids) => t.decode_bytes(&ids).ok().as_deref() == Some(text.as_bytes()),
        Err(_) => false,
    }
}

fuzz_target!(|data: &[u8]| {
    let parsed = if data.starts_with(b"GGUF") {
        match GgufFile::parse(data.to_vec()) {
            Ok(g) => Tokenizer::from_gguf(&g),
            Err(_) => return,
        }
    } else {
        Tokenizer::from_bytes(data)
    };
    let Ok(t) = parsed else {
        return;
    };
    let _ = (
        t.vocab_size(),
        t.bos_id(),
        t.eos_id(),
        t.pre_tokenizer().name(),
    );
    let text = sample(data);
    // A tokenizer may lack a token for some bytes (SmolLM2 has none for 21 of them; with no
    // unknown token those bytes are dropped), so the round trip is exact only when each
    // character of the text round-trips on its own.
    let coverable = text.char_indices().all(|(i, c)| {
        let s = &text[i..i + c.len_utf8()];
        round_trips(&t, s)
    });
    if let Ok(ids) = t.encode(text, false) {
        let back = t.decode_bytes(&ids).expect("encode gives known ids");
        if coverable {
            assert_eq!(back, text.as_bytes(), "decode(encode(s)) != s");
        }
        let _ = t.decode(&ids);
    }
    if t.bos_id().is_some() {
        let ids = t.encode(text, true).expect("BOS is present");
        assert_eq!(ids.first().copied(), t.bos_id());
    }
});
