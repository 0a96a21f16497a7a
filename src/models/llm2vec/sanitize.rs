//! Kimodo's prompt sanitiser, ported byte for byte: `nv-tlabs/kimodo:kimodo/sanitize.py`
//! (`sanitize_text`, #L6-62 at 7330e7e), which Kimodo runs on every prompt before the text
//! encoder (`kimodo/model/kimodo_model.py#L147`, #L463; llm2vec.md §2.1, §8.2).
//!
//! It relies on Python's Unicode-aware `str` methods, reproduced here:
//! - `str.isspace` (for `strip` and `split`): Unicode `White_Space` plus U+001C..U+001F;
//! - `str.isalnum`: general categories L* and N* (Python 3.11: Unicode 14; the `\p{L}`/`\p{N}`
//!   tables used here are newer, so characters assigned after Unicode 14 may differ);
//! - `str.capitalize` (Python >= 3.8): the first character in *title* case, the rest
//!   lower-cased with the full mappings (final sigma included).

use std::sync::OnceLock;

use regex::Regex;

/// Python's `str.isspace` for one character.
pub fn py_isspace(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// Python's `str.isalnum` for one character (general category L* or N*).
pub fn py_isalnum(c: char) -> bool {
    if c.is_ascii() {
        return c.is_ascii_alphanumeric();
    }
    static RE: OnceLock<Option<Regex>> = OnceLock::new();
    let re = RE.get_or_init(|| Regex::new(r"^[\p{L}\p{N}]$").ok());
    let mut buf = [0u8; 4];
    re.as_ref().map_or_else(
        || c.is_alphanumeric(),
        |r| r.is_match(c.encode_utf8(&mut buf)),
    )
}

/// Python's `str.capitalize` on one character: its title case, which differs from the upper
/// case for the digraphs, ligatures, iota-subscript Greek letters and Georgian Mkhedruli
/// (UnicodeData.txt field 14, SpecialCasing.txt).
pub fn py_title(c: char) -> String {
    let cp = c as u32;
    let s = |v: &[u32]| {
        v.iter()
            .filter_map(|&x| char::from_u32(x))
            .collect::<String>()
    };
    match cp {
        0x01C4..=0x01C6 => s(&[0x01C5]),
        0x01C7..=0x01C9 => s(&[0x01C8]),
        0x01CA..=0x01CC => s(&[0x01CB]),
        0x01F1..=0x01F3 => s(&[0x01F2]),
        0x00DF => s(&[0x53, 0x73]),
        0xFB00 => s(&[0x46, 0x66]),
        0xFB01 => s(&[0x46, 0x69]),
        0xFB02 => s(&[0x46, 0x6C]),
        0xFB03 => s(&[0x46, 0x66, 0x69]),
        0xFB04 => s(&[0x46, 0x66, 0x6C]),
        0xFB05 | 0xFB06 => s(&[0x53, 0x74]),
        0x0587 => s(&[0x0535, 0x0582]),
        0xFB13 => s(&[0x0544, 0x0576]),
        0xFB14 => s(&[0x0544, 0x0565]),
        0xFB15 => s(&[0x0544, 0x056B]),
        0xFB16 => s(&[0x054E, 0x0576]),
        0xFB17 => s(&[0x0544, 0x056D]),
        // Greek with ypogegrammeni: lower and title forms map to the title form.
        0x1F80..=0x1F87 | 0x1F90..=0x1F97 | 0x1FA0..=0x1FA7 => s(&[cp + 8]),
        0x1F88..=0x1F8F | 0x1F98..=0x1F9F | 0x1FA8..=0x1FAF => s(&[cp]),
        0x1FB3 | 0x1FBC => s(&[0x1FBC]),
        0x1FC3 | 0x1FCC => s(&[0x1FCC]),
        0x1FF3 | 0x1FFC => s(&[0x1FFC]),
        0x1FB2 => s(&[0x1FBA, 0x0345]),
        0x1FB4 => s(&[0x0386, 0x0345]),
        0x1FB7 => s(&[0x0391, 0x0342, 0x0345]),
        0x1FC2 => s(&[0x1FCA, 0x0345]),
        0x1FC4 => s(&[0x0389, 0x0345]),
        0x1FC7 => s(&[0x0397, 0x0342, 0x0345]),
        0x1FF2 => s(&[0x1FFA, 0x0345]),
        0x1FF4 => s(&[0x038F, 0x0345]),
        0x1FF7 => s(&[0x03A9, 0x0342, 0x0345]),
        // Georgian Mkhedruli has Mtavruli upper case but is its own title case.
        0x10D0..=0x10FA | 0x10FD..=0x10FF => s(&[cp]),
        _ => c.to_uppercase().collect(),
    }
}

/// Python's `str.capitalize`: title-case the first character, lower-case the rest (with the
/// first character as context for final sigma, as CPython's `do_capitalize` has it).
pub fn py_capitalize(s: &str) -> String {
    let Some(first) = s.chars().next() else {
        return String::new();
    };
    let lower = s.to_lowercase();
    let first_lower: String = first.to_lowercase().collect();
    // `to_lowercase` maps character by character except for sigma's context, and a leading
    // sigma is never word-final, so the first character's mapping is a prefix.
    let rest = lower.strip_prefix(first_lower.as_str()).unwrap_or(&lower);
    let mut out = py_title(first);
    out.push_str(rest);
    out
}

/// Python's `s.strip()` (no argument).
pub fn py_strip(s: &str) -> &str {
    s.trim_matches(py_isspace)
}

/// Python's `s.split()` (no argument): runs of whitespace separate, no empty parts.
pub fn py_split(s: &str) -> impl Iterator<Item = &str> {
    s.split(py_isspace).filter(|p| !p.is_empty())
}

/// `sanitize_text(text, paragraph=True)` of `kimodo/sanitize.py#L6-62`, with its quirks: a
/// text without any letter or digit keeps only its last character (the loop index is left
/// at the end, #L27-31), trailing trimming keeps the first character when everything is
/// trimmable (#L39-43), and `capitalize` lower-cases everything after the first character.
pub fn sanitize_text(text: &str) -> String {
    // #L17, #L21: strip, then collapse whitespace runs to one space.
    let text = py_split(py_strip(text)).collect::<Vec<_>>().join(" ");
    // #L23-24
    if text.is_empty() {
        return text;
    }
    // #L27-31: drop leading non-alphanumerics; `i` stays at the last index if none is.
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let start = chars
        .iter()
        .find(|(_, c)| py_isalnum(*c))
        .or(chars.last())
        .map_or(0, |&(i, _)| i);
    // #L34
    let text = py_capitalize(&text[start..]);
    // #L36-43: drop trailing characters that are neither alphanumeric nor in
    // `final_punctuations`; `i` stays at 0 if all are dropped.
    let final_punctuations = ".!?\"])'";
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let end = chars
        .iter()
        .rev()
        .find(|(_, c)| py_isalnum(*c) || final_punctuations.contains(*c))
        .or(chars.first())
        .map_or(0, |&(i, c)| i + c.len_utf8());
    let mut text = text[..end].to_string();
    // #L46-47 (`text` is not empty here: the capitalised text has a first character).
    if !text.ends_with(['.', '!', '?']) {
        text.push('.');
    }
    // #L49-61: for each break, split, strip each part, capitalise its first character only,
    // re-join with the break and one space, strip the result.
    for sentence_break in ['.', '!', '?'] {
        let parts: Vec<String> = text
            .split(sentence_break)
            .map(|x| {
                let y = py_strip(x);
                let mut it = y.chars();
                match it.next() {
                    Some(c) => py_capitalize(&c.to_string()) + it.as_str(),
                    None => String::new(),
                }
            })
            .collect();
        let joined = parts.join(&format!("{sentence_break} "));
        text = py_strip(&joined).to_string();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_examples() {
        // The `__main__` examples of kimodo/sanitize.py#L78-86, outputs from running it.
        let cases = [
            (" A person is    walking.", "A person is walking."),
            ("someone go forward", "Someone go forward."),
            ("jump", "Jump."),
            ("jumping!", "Jumping!"),
            ("jumping)", "Jumping)."),
            ("-go", "Go."),
            ("blocasdji  -----", "Blocasdji."),
            ("", ""),
            // llm2vec.md §2.1: capitalize lower-cases the rest.
            ("a person walks to NYC", "A person walks to nyc."),
            ("!!!", "!"),
            ("---", "-."),
            (
                "first. second!third?  fourth",
                "First. Second! Third? Fourth.",
            ),
        ];
        for (input, want) in cases {
            assert_eq!(sanitize_text(input), want, "{input:?}");
        }
    }

    #[test]
    fn python_string_semantics() {
        assert!(py_isspace('\u{1f}') && py_isspace('\u{3000}') && !py_isspace('\u{200b}'));
        assert!(py_isalnum('é') && py_isalnum('٣') && py_isalnum('中') && !py_isalnum('_'));
        assert!(
            !py_isalnum('\u{0903}'),
            "a spacing mark is not alnum in Python"
        );
        assert_eq!(py_capitalize("ǆEMAL"), "ǅemal");
        assert_eq!(py_capitalize("ßA"), "Ssa");
        assert_eq!(py_capitalize("ΑΣ"), "Ας");
        assert_eq!(py_capitalize("İx"), "İx");
        assert_eq!(py_capitalize("xİ"), "Xi\u{307}");
    }
}
