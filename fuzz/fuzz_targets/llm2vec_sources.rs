//! The JSON files `kinema convert llm2vec` reads, chosen by the first input byte (mod 4):
//! 0 `model.safetensors.index.json` (`parse_index`), 1 a Llama `config.json`
//! (`LlamaConfig::parse`, then the RoPE divisors), 2 a PEFT `adapter_config.json`
//! (`LoraConfig::parse`, then its scale and target modules over a few layers), 3
//! `tokenizer.json` NUL `tokenizer_config.json` (`gguf_tokenizer`, and the tokenizer read back
//! from that metadata encodes a sentence).
#![no_main]

use kinema::formats::safetensors_index::parse_index;
use kinema::models::llm2vec::hf_config::{LlamaConfig, LoraConfig, gguf_tokenizer};
use kinema::models::llm2vec::tokenizer::Tokenizer;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    match which % 4 {
        0 => {
            if let Ok(idx) = parse_index(rest) {
                assert!(idx.weight_map.iter().all(|(_, f)| idx.shards.contains(f)));
            }
        }
        1 => {
            if let Ok(c) = LlamaConfig::parse(rest) {
                assert_eq!(c.head_dim * c.heads, c.hidden);
                if let Some(d) = c.rope_freq_divisors() {
                    assert_eq!(d.len(), c.head_dim / 2);
                }
            }
        }
        2 => {
            if let Ok(c) = LoraConfig::parse(rest) {
                let _ = c.scale();
                if let Ok(t) = c.targets(3) {
                    assert_eq!(t.len(), 3);
                }
            }
        }
        _ => {
            let (json, cfg) = match rest.iter().position(|&b| b == 0) {
                Some(i) => (&rest[..i], &rest[i + 1..]),
                None => (rest, &b"{}"[..]),
            };
            if let Ok(meta) = gguf_tokenizer(json, cfg)
                && let Ok(t) = Tokenizer::from_gguf_metadata(&meta)
            {
                let _ = t.encode("A person walks forward. <|eot_id|> 123", true);
            }
        }
    }
});
