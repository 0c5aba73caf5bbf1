//! Binary trees over a sentence's tokens, the input of the recursive
//! network of Wieting et al. (2015): a constituent tree (Link Grammar's,
//! [`crate::link_grammar`]) read, put onto the tokens paraforge's
//! tokenizer made, and binarized right-factored, as the Penn-style trees
//! the paper's network read were.
//!
//! A tree is its merges: merge `k` joins two nodes into node `n + k`,
//! where nodes `0..n` are the tokens; the last merge is the root. Every
//! sentence has one: where the parser gives none, or its words cannot be
//! put onto the tokens, the tree is right-branching, and callers count it.

/// A full binary tree over `n` tokens: `n - 1` merges.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tree {
    pub tokens: u32,
    pub merges: Vec<[u32; 2]>,
}

impl Tree {
    /// `(t0 (t1 (t2 ...)))`: what a sentence without a parse gets.
    pub fn right_branching(n: usize) -> Tree {
        let n = n as u32;
        let mut merges = Vec::with_capacity(n.saturating_sub(1) as usize);
        let mut right = n.saturating_sub(1);
        for left in (0..n.saturating_sub(1)).rev() {
            merges.push([left, right]);
            right = n + merges.len() as u32 - 1;
        }
        Tree { tokens: n, merges }
    }

    /// A full binary tree over its tokens: `tokens - 1` merges, each of two
    /// nodes made before it, every node a child once (the root excepted).
    pub fn is_valid(&self) -> bool {
        let n = self.tokens as usize;
        if n == 0 || self.merges.len() + 1 != n {
            return false;
        }
        let mut used = vec![false; n + self.merges.len()];
        for (k, &[l, r]) in self.merges.iter().enumerate() {
            for c in [l as usize, r as usize] {
                if c >= n + k || std::mem::replace(&mut used[c], true) {
                    return false;
                }
            }
        }
        true
    }

    /// The root's node id (token 0 for a one-token sentence).
    pub fn root(&self) -> u32 {
        match self.merges.len() {
            0 => 0,
            k => self.tokens + k as u32 - 1,
        }
    }

    /// Each merge's height (a merge of two tokens is 1).
    pub fn heights(&self) -> Vec<u32> {
        let mut h: Vec<u32> = Vec::with_capacity(self.merges.len());
        for &[l, r] in &self.merges {
            let of = |x: u32| {
                if x < self.tokens {
                    0
                } else {
                    h[(x - self.tokens) as usize]
                }
            };
            let v = 1 + of(l).max(of(r));
            h.push(v);
        }
        h
    }
}

/// A constituent tree as read: a label and children, or a word.
#[derive(Debug, Clone, PartialEq)]
enum Node {
    Word(String),
    Phrase(String, Vec<Node>),
}

/// Reads `(S (NP a man.n) (VP is.v ...))`; `None` if unbalanced.
fn read(s: &str) -> Option<Node> {
    let mut stack: Vec<(String, Vec<Node>)> = Vec::new();
    let mut root = None;
    let mut it = s.split_whitespace().peekable();
    while let Some(tok) = it.next() {
        // A word or a label may carry closing brackets: `man.n))`, `(NP)`.
        let closes = tok.len() - tok.trim_end_matches(')').len();
        let t = &tok[..tok.len() - closes];
        if let Some(label) = t.strip_prefix('(') {
            stack.push((label.to_string(), Vec::new()));
        } else if !t.is_empty() {
            stack.last_mut()?.1.push(Node::Word(t.to_string()));
        }
        for _ in 0..closes {
            let (label, kids) = stack.pop()?;
            let node = Node::Phrase(label, kids);
            match stack.last_mut() {
                Some(parent) => parent.1.push(node),
                None => {
                    if root.is_some() || it.peek().is_some() {
                        return None;
                    }
                    root = Some(node);
                }
            }
        }
    }
    if stack.is_empty() {
        root
    } else {
        None
    }
}

/// The word as the sentence had it: Link Grammar marks an unlinked word
/// `{word}`, an unknown one `word{?}`, and adds a subscript (`man.n`).
/// paraforge's tokens never hold a `.` after their first character, so a
/// `.` there starts a subscript.
fn surface(leaf: &str) -> String {
    let mut w = match leaf.strip_prefix('{').and_then(|w| w.strip_suffix('}')) {
        Some(inner) => inner,
        None => leaf,
    };
    // `word{?}.v`, `1973{!}`, `word[?]`: the marks end the word.
    if let Some(i) = w
        .char_indices()
        .skip(1)
        .find(|&(_, c)| c == '{' || c == '[')
        .map(|(i, _)| i)
    {
        w = &w[..i];
    }
    if let Some(dot) = w
        .char_indices()
        .skip(1)
        .find(|&(_, c)| c == '.')
        .map(|(i, _)| i)
    {
        w = &w[..dot];
    }
    w.to_lowercase()
}

/// The binary tree over `tokens` that the constituent tree `parsed` gives;
/// `None` where its words are not the tokens in order.
pub fn from_constituents(parsed: &str, tokens: &[&str]) -> Option<Tree> {
    let root = read(parsed)?;
    let mut words = Vec::new();
    collect_words(&root, &mut words);
    if words.len() != tokens.len() || tokens.is_empty() {
        return None;
    }
    if words.iter().zip(tokens).any(|(w, t)| surface(w) != *t) {
        return None;
    }
    let mut b = Builder {
        n: tokens.len() as u32,
        next_word: 0,
        merges: Vec::new(),
    };
    b.node(&root)?;
    let t = Tree {
        tokens: b.n,
        merges: b.merges,
    };
    (t.merges.len() + 1 == tokens.len()).then_some(t)
}

fn collect_words<'a>(n: &'a Node, out: &mut Vec<&'a str>) {
    match n {
        Node::Word(w) => out.push(w),
        Node::Phrase(_, kids) => kids.iter().for_each(|k| collect_words(k, out)),
    }
}

struct Builder {
    n: u32,
    next_word: u32,
    merges: Vec<[u32; 2]>,
}

impl Builder {
    /// The node id that stands for `n`, merging its children right-factored.
    fn node(&mut self, n: &Node) -> Option<u32> {
        match n {
            Node::Word(_) => {
                self.next_word += 1;
                Some(self.next_word - 1)
            }
            Node::Phrase(_, kids) => {
                let ids = kids
                    .iter()
                    .map(|k| self.node(k))
                    .collect::<Option<Vec<u32>>>()?;
                let (&last, rest) = ids.split_last()?;
                Some(rest.iter().rev().fold(last, |right, &left| {
                    self.merges.push([left, right]);
                    self.n + self.merges.len() as u32 - 1
                }))
            }
        }
    }
}

/// The top `levels` of a constituent tree with its words dropped, as
/// syntactically controlled paraphrasing takes a target's shape (Iyyer et
/// al., 2018): `(S (NP) (VP) (.))` for "a man is playing .". A word
/// directly under a kept phrase stands as its own part of speech-less
/// leaf (`(.)`, `(,)`) only for punctuation; other bare words are dropped.
pub fn template(parsed: &str, levels: usize) -> Option<String> {
    fn go(n: &Node, left: usize, out: &mut String) {
        match n {
            Node::Word(w) => {
                let w = surface(w);
                if !w.is_empty() && w.chars().all(|c| c.is_ascii_punctuation()) {
                    out.push_str(&format!("({w})"));
                }
            }
            Node::Phrase(label, kids) => {
                out.push('(');
                out.push_str(label);
                if left > 1 {
                    for k in kids {
                        let before = out.len();
                        out.push(' ');
                        go(k, left - 1, out);
                        if out.len() == before + 1 {
                            out.truncate(before);
                        }
                    }
                }
                out.push(')');
            }
        }
    }
    let root = read(parsed)?;
    let mut out = String::new();
    go(&root, levels.max(1), &mut out);
    Some(out)
}

/// Is `s` a template as [`template`] writes them: bracketed labels (capital
/// letters, or one punctuation mark other than a bracket or `|`), no words?
pub fn is_template(s: &str) -> bool {
    fn ok(n: &Node) -> bool {
        match n {
            Node::Word(_) => false,
            Node::Phrase(label, kids) => {
                let upper = !label.is_empty() && label.chars().all(|c| c.is_ascii_uppercase());
                let mut chars = label.chars();
                let punct = matches!((chars.next(), chars.next()), (Some(c), None)
                    if c.is_ascii_punctuation() && !matches!(c, '(' | ')' | '|'));
                (upper || (punct && kids.is_empty())) && kids.iter().all(ok)
            }
        }
    }
    read(s).is_some_and(|n| ok(&n))
}

#[cfg(test)]
mod tests {
    use super::*;

    const PARSED: &str = "(S (NP a man.n) (VP is.v (VP playing.v (NP (PP (NP a guitar.s) (PP on (NP the stage.n)))))) .)";

    fn toks(s: &str) -> Vec<&str> {
        s.split(' ').collect()
    }

    #[test]
    fn constituents_become_a_right_factored_binary_tree() {
        let t =
            from_constituents(PARSED, &toks("a man is playing a guitar on the stage .")).unwrap();
        assert_eq!(t.merges.len(), 9);
        // (a man) first; the sentence node joins NP with (VP .).
        assert_eq!(t.merges[0], [0, 1]);
        let root = *t.merges.last().unwrap();
        assert_eq!(root[0], 10, "the subject NP");
        assert_eq!(t.root(), 18);
        // on (the stage) 2, a guitar + that 3, playing 4, is 5, with . 6, S 7.
        assert_eq!(*t.heights().last().unwrap(), 7);
    }

    #[test]
    fn words_that_are_not_the_tokens_give_no_tree() {
        assert!(
            from_constituents(PARSED, &toks("a man is playing a guitar on the stage")).is_none()
        );
        assert!(
            from_constituents(PARSED, &toks("a boy is playing a guitar on the stage .")).is_none()
        );
        assert!(from_constituents("(S (NP a man.n)", &toks("a man")).is_none());
        assert!(from_constituents("(S a) (S b)", &toks("a b")).is_none());
    }

    #[test]
    fn link_grammar_markings_are_read_off_the_words() {
        let t = from_constituents(
            "(S (S (VP xyzzy{?}.v (NP plugh[?].a frob.n 1973{!}))) {the} {.})",
            &toks("xyzzy plugh frob 1973 the ."),
        );
        assert_eq!(t.map(|t| t.merges.len()), Some(5));
    }

    #[test]
    fn only_full_binary_trees_are_valid() {
        assert!(Tree::right_branching(5).is_valid());
        assert!(Tree::right_branching(1).is_valid());
        let bad = |merges: Vec<[u32; 2]>| !Tree { tokens: 3, merges }.is_valid();
        assert!(bad(vec![[0, 1]]), "too few merges");
        assert!(bad(vec![[0, 1], [3, 4]]), "a merge of itself");
        assert!(bad(vec![[0, 4], [1, 2]]), "a later merge");
        assert!(bad(vec![[0, 1], [0, 3]]), "a token twice");
        assert!(bad(vec![[0, 1], [2, 9]]), "no such node");
    }

    #[test]
    fn right_branching_covers_every_token() {
        let t = Tree::right_branching(4);
        assert_eq!(t.merges, vec![[2, 3], [1, 4], [0, 5]]);
        assert_eq!(t.root(), 6);
        assert_eq!(Tree::right_branching(1).root(), 0);
    }

    #[test]
    fn templates_keep_the_top_levels_and_punctuation() {
        assert_eq!(template(PARSED, 2).unwrap(), "(S (NP) (VP) (.))");
        assert_eq!(template(PARSED, 1).unwrap(), "(S)");
        // A template reads back as itself, and is one.
        let t = "(S (PP) (,) (NP) (VP) (.))";
        assert_eq!(template(t, 8).unwrap(), t);
        assert!(is_template(t) && is_template(&template(PARSED, 3).unwrap()));
        for bad in [
            "(S (N(P))",
            "()",
            "(||)",
            "(S (NP a))",
            "(S (NP)",
            "S",
            "(s)",
        ] {
            assert!(!is_template(bad), "{bad}");
        }
        assert!(template("(S (NP a", 2).is_none());
    }
}
