//! Character trigrams as Wieting et al.'s charagram models define them,
//! each packed into one 64-bit key.

use crate::tokenize::Tokens;

/// Packs three characters into one key (21 bits each: every Unicode scalar fits).
#[inline]
fn pack(a: char, b: char, c: char) -> u64 {
    (a as u64) << 42 | (b as u64) << 21 | c as u64
}

/// The key of a trigram written as text; `None` unless it has exactly three characters.
pub fn trigram_key(text: &str) -> Option<u64> {
    let mut it = text.chars();
    let k = pack(it.next()?, it.next()?, it.next()?);
    it.next().is_none().then_some(k)
}

/// The text of a trigram key.
pub fn trigram_text(key: u64) -> String {
    let ch = |v: u64| char::from_u32((v & 0x1F_FFFF) as u32).unwrap_or('\u{FFFD}');
    [ch(key >> 42), ch(key >> 21), ch(key)].iter().collect()
}

/// Calls `f` with the key of every character trigram of the sentence, as
/// Wieting et al.'s charagram models define them: the sentence (here its
/// tokens joined by single spaces) padded with one space on each side, so
/// trigrams cross word boundaries ("the cat" gives " th", "the", "he ",
/// "e c", " ca", "cat", "at ").
pub fn for_each_trigram(tokens: &Tokens, mut f: impl FnMut(u64)) {
    if tokens.is_empty() {
        return;
    }
    const MASK: u64 = (1 << 63) - 1;
    let (mut key, mut n) = (' ' as u64, 1usize);
    let mut push = |c: char| {
        key = (key << 21 | c as u64) & MASK;
        n += 1;
        if n >= 3 {
            f(key);
        }
    };
    for (i, t) in tokens.iter().enumerate() {
        if i > 0 {
            push(' ');
        }
        t.text.chars().for_each(&mut push);
    }
    push(' ');
}
