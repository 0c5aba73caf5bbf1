//! The tokenizer every score reads (docs/DEFINITIONS.md section 3):
//! lowercased words and punctuation, each token carrying a hash. The
//! n-gram overlaps, the encoders, the n-gram models and training all read
//! these tokens; sentence BLEU alone has its own ([`crate::bleu`]).

/// One token of a lowercased sentence, with a hash for fast comparison.
#[derive(Debug, Clone, Copy)]
pub struct Token<'a> {
    pub text: &'a str,
    hash: u64,
}

impl Token<'_> {
    /// [`word_hash`] of the text, computed once by the tokenizer.
    pub fn hash(&self) -> u64 {
        self.hash
    }
}

impl PartialEq for Token<'_> {
    fn eq(&self, o: &Self) -> bool {
        // The hash rejects almost every unequal pair without touching the text.
        self.hash == o.hash && self.text == o.text
    }
}

/// A lowercased sentence and its tokens (slices of `lower`).
#[derive(Debug, Default)]
pub struct Tokens {
    lower: String,
    spans: Vec<(u32, u32, u64)>,
}

impl Tokens {
    pub fn len(&self) -> usize {
        self.spans.len()
    }

    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    pub fn get(&self, i: usize) -> Token<'_> {
        let (a, b, hash) = self.spans[i];
        Token {
            text: &self.lower[a as usize..b as usize],
            hash,
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = Token<'_>> + '_ {
        (0..self.len()).map(|i| self.get(i))
    }

    pub fn texts(&self) -> Vec<&str> {
        self.iter().map(|t| t.text).collect()
    }
}

/// Characters that continue a word: letters, digits and combining marks
/// (so that "é" in decomposed form stays one word).
#[inline]
fn is_word_char(c: char) -> bool {
    c.is_alphanumeric()
        || matches!(c as u32, 0x0300..=0x036F | 0x1AB0..=0x1AFF | 0x1DC0..=0x1DFF | 0x20D0..=0x20FF | 0xFE20..=0xFE2F)
}

/// The hash tokens carry; word vectors are indexed by it too, so a token is
/// hashed once per pair.
#[inline]
pub fn word_hash(word: &str) -> u64 {
    fx(word.as_bytes())
}

#[inline]
fn fx(bytes: &[u8]) -> u64 {
    // FxHash-style multiply-rotate: fast on short words, good enough to
    // pre-filter comparisons (equality is always confirmed on the text).
    const K: u64 = 0x51_7c_c1_b7_27_22_0a_95;
    let mut h: u64 = bytes.len() as u64;
    let mut chunks = bytes.chunks_exact(8);
    for c in &mut chunks {
        let w = u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
        h = (h.rotate_left(5) ^ w).wrapping_mul(K);
    }
    let mut tail = [0u8; 8];
    let r = chunks.remainder();
    tail[..r.len()].copy_from_slice(r);
    h = (h.rotate_left(5) ^ u64::from_le_bytes(tail)).wrapping_mul(K);
    h ^ (h >> 29)
}

/// Lowercases `text` and splits it into words (maximal runs of letters,
/// digits and combining marks) and punctuation (every other non-space
/// character on its own). "Don't stop!" gives `don ' t stop !`.
pub fn tokenize(text: &str) -> Tokens {
    let mut t = Tokens::default();
    tokenize_into(text, &mut t);
    t
}

/// [`tokenize`] into a reused buffer.
pub fn tokenize_into(text: &str, out: &mut Tokens) {
    out.lower.clear();
    out.spans.clear();
    if text.is_ascii() {
        out.lower.push_str(text);
        out.lower.make_ascii_lowercase();
    } else {
        out.lower.push_str(&text.to_lowercase());
    }
    let s = out.lower.as_bytes();
    let mut i = 0;
    let n = s.len();
    while i < n {
        let b = s[i];
        if b < 0x80 {
            if b.is_ascii_alphanumeric() {
                let start = i;
                i += 1;
                while i < n {
                    let c = s[i];
                    if c.is_ascii_alphanumeric() {
                        i += 1;
                    } else if c >= 0x80 {
                        let ch = out.lower[i..].chars().next().unwrap_or(' ');
                        if !is_word_char(ch) {
                            break;
                        }
                        i += ch.len_utf8();
                    } else {
                        break;
                    }
                }
                out.spans.push((start as u32, i as u32, fx(&s[start..i])));
            } else if b.is_ascii_whitespace() {
                i += 1;
            } else {
                out.spans.push((i as u32, i as u32 + 1, fx(&s[i..i + 1])));
                i += 1;
            }
            continue;
        }
        let ch = out.lower[i..].chars().next().unwrap_or(' ');
        let len = ch.len_utf8();
        if is_word_char(ch) {
            let start = i;
            i += len;
            while i < n {
                let ch = out.lower[i..].chars().next().unwrap_or(' ');
                if !is_word_char(ch) {
                    break;
                }
                i += ch.len_utf8();
            }
            out.spans.push((start as u32, i as u32, fx(&s[start..i])));
        } else if ch.is_whitespace() {
            i += len;
        } else {
            out.spans
                .push((i as u32, (i + len) as u32, fx(&s[i..i + len])));
            i += len;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(s: &str) -> Vec<String> {
        tokenize(s).texts().into_iter().map(String::from).collect()
    }

    #[test]
    fn tokenizer_lowercases_and_splits_words_from_punctuation() {
        assert_eq!(
            toks("Don't STOP, Příliš žluťoučký kůň!"),
            [
                "don",
                "'",
                "t",
                "stop",
                ",",
                "příliš",
                "žluťoučký",
                "kůň",
                "!"
            ]
        );
        assert_eq!(toks("  \t "), Vec::<String>::new());
        assert_eq!(toks("3.14 km/h"), ["3", ".", "14", "km", "/", "h"]);
        assert_eq!(toks("„Ahoj“ — řekl"), ["„", "ahoj", "“", "—", "řekl"]);
        // Decomposed é (e + U+0301) stays inside the word.
        assert_eq!(toks("Cafe\u{301} OK"), ["cafe\u{301}", "ok"]);
        assert_eq!(toks("ΣΊΣΥΦΟΣ"), ["σίσυφος"]);
    }
}
