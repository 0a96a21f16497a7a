//! The byte-level BPE merge loop: rank-ordered pair merges over a linked list of symbols,
//! driven by a min-heap, so a word of n bytes costs O(n log n) instead of the O(n^2) of
//! rescanning for the best pair after every merge.
//!
//! Semantics (the same for both upstream implementations of Llama-3):
//! - tiktoken (`openai/tiktoken:src/lib.rs`, `byte_pair_merge`): repeatedly merge the adjacent
//!   pair whose concatenation has the lowest rank, the leftmost one on ties;
//! - Hugging Face `tokenizers` (`huggingface/tokenizers:tokenizers/src/models/bpe/word.rs`,
//!   `Word::merge_all`): a heap ordered by (merge rank, position), skipping stale entries.
//!
//! With a tiktoken rank file every split of a token into two tokens is a merge whose rank is
//! the token's rank (transformers' `TikTokenConverter` derives `tokenizer.json`'s merges the
//! same way), so one (rank, position) heap reproduces both.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

/// Merge rules: the pair of token ids -> (rank, id of the merged token). Lower ranks merge
/// first.
#[derive(Debug, Default)]
pub(crate) struct Merges {
    map: HashMap<(u32, u32), (u32, u32)>,
}

impl Merges {
    pub(crate) fn with_capacity(n: usize) -> Merges {
        Merges {
            map: HashMap::with_capacity(n),
        }
    }

    /// Add a rule; the first rule for a pair wins (as in `tokenizers`, which keeps the lowest
    /// rank when a file lists a pair twice).
    pub(crate) fn insert(&mut self, left: u32, right: u32, rank: u32, merged: u32) {
        self.map.entry((left, right)).or_insert((rank, merged));
    }

    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    fn get(&self, left: u32, right: u32) -> Option<(u32, u32)> {
        self.map.get(&(left, right)).copied()
    }
}

const NONE: u32 = u32::MAX;

/// 13 bytes (16 with padding) per input byte, so a word of n bytes needs about 16n bytes
/// here and 12n in the heap.
#[derive(Clone, Copy)]
struct Symbol {
    id: u32,
    prev: u32,
    next: u32,
    /// False once merged into its left neighbour.
    alive: bool,
}

/// BPE-encode one pre-token given as the ids of its single bytes, appending the result to
/// `out`. `initial` must not be empty and must have fewer than `u32::MAX` entries (texts are
/// bounded far below that by `MAX_TEXT_BYTES`).
pub(crate) fn merge_word(initial: &[u32], merges: &Merges, out: &mut Vec<u32>) {
    let n = initial.len();
    debug_assert!(n < NONE as usize);
    if n == 1 {
        out.push(initial[0]);
        return;
    }
    let mut syms: Vec<Symbol> = initial
        .iter()
        .enumerate()
        .map(|(i, &id)| Symbol {
            id,
            prev: if i == 0 { NONE } else { i as u32 - 1 },
            next: if i + 1 == n { NONE } else { i as u32 + 1 },
            alive: true,
        })
        .collect();
    // (rank, position of the left symbol, merged id): the heap pops the lowest rank, then
    // the leftmost position, the order of `tokenizers`' `Merge` and tiktoken's scan.
    let mut heap: BinaryHeap<Reverse<(u32, u32, u32)>> = BinaryHeap::with_capacity(n);
    for (i, pair) in initial.windows(2).enumerate() {
        if let Some((rank, merged)) = merges.get(pair[0], pair[1]) {
            heap.push(Reverse((rank, i as u32, merged)));
        }
    }
    while let Some(Reverse((rank, pos, merged))) = heap.pop() {
        let pos_u = pos as usize;
        let left = syms[pos_u];
        if !left.alive || left.next == NONE {
            continue;
        }
        let right = syms[left.next as usize];
        // Stale entry: one side changed since it was pushed.
        if merges.get(left.id, right.id) != Some((rank, merged)) {
            continue;
        }
        syms[left.next as usize].alive = false;
        syms[pos_u].id = merged;
        syms[pos_u].next = right.next;
        if right.next != NONE {
            syms[right.next as usize].prev = pos;
        }
        if left.prev != NONE
            && let Some((r, m)) = merges.get(syms[left.prev as usize].id, merged)
        {
            heap.push(Reverse((r, left.prev, m)));
        }
        if right.next != NONE
            && let Some((r, m)) = merges.get(merged, syms[right.next as usize].id)
        {
            heap.push(Reverse((r, pos, m)));
        }
    }
    let mut i = 0;
    while i != NONE {
        out.push(syms[i as usize].id);
        i = syms[i as usize].next;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The quadratic textbook loop (lowest rank, leftmost on ties), as the oracle.
    fn naive(initial: &[u32], merges: &Merges) -> Vec<u32> {
        let mut w = initial.to_vec();
        loop {
            let best = (0..w.len().saturating_sub(1))
                .filter_map(|i| merges.get(w[i], w[i + 1]).map(|(r, m)| (r, i, m)))
                .min();
            match best {
                Some((_, i, m)) => {
                    w[i] = m;
                    w.remove(i + 1);
                }
                None => return w,
            }
        }
    }

    #[test]
    fn heap_loop_matches_the_quadratic_loop() {
        // Tokens: bytes 0..4 are ids 0..4; merges build 10=(0,1), 11=(1,1), 12=(10,1),
        // 13=(11,2), 14=(12,13), 15=(2,2).
        let mut m = Merges::default();
        m.insert(0, 1, 0, 10);
        m.insert(1, 1, 1, 11);
        m.insert(10, 1, 2, 12);
        m.insert(11, 2, 3, 13);
        m.insert(12, 13, 4, 14);
        m.insert(2, 2, 5, 15);
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        for len in 1..40 {
            for _ in 0..50 {
                let word: Vec<u32> = (0..len)
                    .map(|_| {
                        seed ^= seed << 13;
                        seed ^= seed >> 7;
                        seed ^= seed << 17;
                        (seed % 4) as u32
                    })
                    .collect();
                let mut got = Vec::new();
                merge_word(&word, &m, &mut got);
                assert_eq!(got, naive(&word, &m), "word {word:?}");
            }
        }
        let mut got = Vec::new();
        merge_word(&[0, 1, 1, 1, 2], &m, &mut got);
        // (0,1) -> 10, then (1,1) -> 11 beats (10,1), then (11,2) -> 13; (10,13) is no rule.
        assert_eq!(got, vec![10, 13]);
    }
}
