//! Constituent trees from Link Grammar (Sleator and Temperley; CMU/AbiWord),
//! the one English parser with its model that installs from the package
//! registries (Debian's `link-grammar`, with its dictionary): the tree
//! encoder's input (Wieting et al., 2015) and the paraphraser's syntactic
//! templates.
//!
//! The library is opened at run time (`liblink-grammar.so.5`, or the file
//! `PARAFORGE_LINK_GRAMMAR` names), as `ort` opens ONNX Runtime: nothing
//! else in paraforge needs it, so the build does not. The C API is used
//! rather than the `link-parser` program because that program reads an
//! empty line as "show the next linkage" and a line starting with `!` as a
//! command: a corpus sentence must not be able to do either.

use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};

use libloading::Library;

use crate::tree::{self, Tree};

/// Why no parser could be made.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ParserError {
    #[error(
        "cannot open Link Grammar's library {lib}: {reason} (install Debian's `link-grammar` \
         package, or set PARAFORGE_LINK_GRAMMAR to the library's path)"
    )]
    Library { lib: String, reason: String },
    #[error(
        "Link Grammar could not load its English dictionary (is `link-grammar`'s data installed?)"
    )]
    Dictionary,
}

type Ptr = *mut c_void;

/// The C functions used, resolved once.
struct Api {
    dictionary_create_lang: unsafe extern "C" fn(*const c_char) -> Ptr,
    dictionary_delete: unsafe extern "C" fn(Ptr),
    parse_options_create: unsafe extern "C" fn() -> Ptr,
    parse_options_delete: unsafe extern "C" fn(Ptr) -> c_int,
    set_verbosity: unsafe extern "C" fn(Ptr, c_int),
    set_linkage_limit: unsafe extern "C" fn(Ptr, c_int),
    set_spell_guess: unsafe extern "C" fn(Ptr, c_int),
    set_max_parse_time: unsafe extern "C" fn(Ptr, c_int),
    set_min_null_count: unsafe extern "C" fn(Ptr, c_int),
    set_max_null_count: unsafe extern "C" fn(Ptr, c_int),
    reset_resources: unsafe extern "C" fn(Ptr),
    sentence_create: unsafe extern "C" fn(*const c_char, Ptr) -> Ptr,
    sentence_delete: unsafe extern "C" fn(Ptr),
    sentence_parse: unsafe extern "C" fn(Ptr, Ptr) -> c_int,
    linkage_create: unsafe extern "C" fn(usize, Ptr, Ptr) -> Ptr,
    linkage_delete: unsafe extern "C" fn(Ptr),
    print_constituent_tree: unsafe extern "C" fn(Ptr, c_int) -> *mut c_char,
    free_constituent_tree_str: unsafe extern "C" fn(*mut c_char),
    error_set_handler: unsafe extern "C" fn(Option<ErrorHandler>, Ptr) -> Option<ErrorHandler>,
    get_version: unsafe extern "C" fn() -> *const c_char,
    get_dict_version: unsafe extern "C" fn(Ptr) -> *const c_char,
    _lib: Library,
}

type ErrorHandler = unsafe extern "C" fn(Ptr, Ptr);

/// The library's messages (its locale and dictionary notes on stderr, a
/// timeout per sentence) would interleave with progress bars; a sentence
/// it cannot parse is counted by the caller instead.
unsafe extern "C" fn quiet(_: Ptr, _: Ptr) {}

/// SINGLE_LINE: `(S (NP a man.n) (VP is.v ...))`.
const SINGLE_LINE: c_int = 3;

/// Seconds a sentence may take in each of the two passes (without, then
/// with, words left unlinked) before the parser gives its best partial
/// result; a few corpus sentences take minutes otherwise.
pub const MAX_PARSE_SECONDS: c_int = 2;

/// Longer sentences are not parsed (they get the right-branching tree,
/// counted): a 200-word one took 4.5 s and 877 MB and found no linkage.
pub const MAX_PARSE_TOKENS: usize = 60;

/// Longer texts (in bytes) are never handed to the library: Link Grammar
/// 5.x corrupts its heap on a sentence of about 32,700 characters (one
/// long word is enough), which aborts the whole process. 60 tokens of
/// ordinary text are a few hundred bytes.
pub const MAX_PARSE_BYTES: usize = 2_000;

/// Why `text` is not handed to the library, naming the bound it breaks;
/// `None` where it may be parsed. Every call into the library goes through
/// this check first.
pub fn refusal(text: &str) -> Option<String> {
    if text.trim().is_empty() {
        // An empty sentence trips an assertion in the library (SIGILL in
        // 5.12's sentence_split).
        return Some("empty".into());
    }
    if text.len() > MAX_PARSE_BYTES {
        return Some(format!(
            "{} bytes, over the parser's limit of {MAX_PARSE_BYTES}",
            text.len()
        ));
    }
    let tokens = text.split_whitespace().count();
    if tokens > MAX_PARSE_TOKENS {
        return Some(format!(
            "{tokens} tokens, over the parser's limit of {MAX_PARSE_TOKENS}"
        ));
    }
    if let Some(c) = text.chars().find(|c| c.is_control()) {
        return Some(format!("holds the control character {c:?}"));
    }
    None
}

impl Api {
    fn open() -> Result<Api, ParserError> {
        let lib = std::env::var_os("PARAFORGE_LINK_GRAMMAR")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("liblink-grammar.so.5"));
        let fail = |reason: String| ParserError::Library {
            lib: lib.display().to_string(),
            reason,
        };
        // SAFETY: loading a C library runs its initialisers; Link Grammar's
        // only set up its own state.
        let l = unsafe { Library::new(&lib) }.map_err(|e| fail(e.to_string()))?;
        macro_rules! sym {
            ($name:literal) => {
                // SAFETY: the signatures above are link-includes.h's (5.x).
                *unsafe { l.get($name) }.map_err(|e| fail(e.to_string()))?
            };
        }
        Ok(Api {
            dictionary_create_lang: sym!(b"dictionary_create_lang"),
            dictionary_delete: sym!(b"dictionary_delete"),
            parse_options_create: sym!(b"parse_options_create"),
            parse_options_delete: sym!(b"parse_options_delete"),
            set_verbosity: sym!(b"parse_options_set_verbosity"),
            set_linkage_limit: sym!(b"parse_options_set_linkage_limit"),
            set_spell_guess: sym!(b"parse_options_set_spell_guess"),
            set_max_parse_time: sym!(b"parse_options_set_max_parse_time"),
            set_min_null_count: sym!(b"parse_options_set_min_null_count"),
            set_max_null_count: sym!(b"parse_options_set_max_null_count"),
            reset_resources: sym!(b"parse_options_reset_resources"),
            sentence_create: sym!(b"sentence_create"),
            sentence_delete: sym!(b"sentence_delete"),
            sentence_parse: sym!(b"sentence_parse"),
            linkage_create: sym!(b"linkage_create"),
            linkage_delete: sym!(b"linkage_delete"),
            print_constituent_tree: sym!(b"linkage_print_constituent_tree"),
            free_constituent_tree_str: sym!(b"linkage_free_constituent_tree_str"),
            error_set_handler: sym!(b"lg_error_set_handler"),
            get_version: sym!(b"linkgrammar_get_version"),
            get_dict_version: sym!(b"linkgrammar_get_dict_version"),
            _lib: l,
        })
    }
}

/// One dictionary and its options: used by one thread at a time.
struct Instance {
    api: Arc<Api>,
    dict: Ptr,
    opts: Ptr,
}

// SAFETY: an instance is only ever used by the thread holding it (the pool
// hands it out by value); Link Grammar keeps no thread-local state in a
// dictionary or its options.
unsafe impl Send for Instance {}

impl Instance {
    fn new(api: Arc<Api>) -> Result<Instance, ParserError> {
        let lang = CString::new("en").expect("no NUL");
        // SAFETY: plain constructor calls; null results are checked.
        unsafe {
            // The handler is per thread in Link Grammar: set it here, on
            // the thread that will parse.
            (api.error_set_handler)(Some(quiet), std::ptr::null_mut());
            let dict = (api.dictionary_create_lang)(lang.as_ptr());
            if dict.is_null() {
                return Err(ParserError::Dictionary);
            }
            let opts = (api.parse_options_create)();
            (api.set_verbosity)(opts, 0);
            (api.set_linkage_limit)(opts, 100);
            // Guessing a spelling changes the words ("xyzzy" parsed as
            // "tizzy"), and the tree must stay over the sentence's own.
            (api.set_spell_guess)(opts, 0);
            (api.set_max_parse_time)(opts, MAX_PARSE_SECONDS);
            Ok(Instance { api, dict, opts })
        }
    }

    /// The best linkage's constituent tree in one line, `None` when the
    /// parser found none.
    fn parse(&mut self, text: &CStr) -> Option<String> {
        let a = &self.api;
        // SAFETY: every pointer is created and freed here, in order.
        unsafe {
            (a.error_set_handler)(Some(quiet), std::ptr::null_mut());
            (a.reset_resources)(self.opts);
            let s = (a.sentence_create)(text.as_ptr(), self.dict);
            if s.is_null() {
                return None;
            }
            // Without null links first; words left unlinked only if needed.
            (a.set_min_null_count)(self.opts, 0);
            (a.set_max_null_count)(self.opts, 0);
            let mut n = (a.sentence_parse)(s, self.opts);
            if n <= 0 {
                (a.set_max_null_count)(self.opts, 250);
                (a.set_min_null_count)(self.opts, 1);
                n = (a.sentence_parse)(s, self.opts);
            }
            let mut out = None;
            if n > 0 {
                let l = (a.linkage_create)(0, s, self.opts);
                if !l.is_null() {
                    let c = (a.print_constituent_tree)(l, SINGLE_LINE);
                    if !c.is_null() {
                        out = Some(CStr::from_ptr(c).to_string_lossy().trim_end().to_string());
                        (a.free_constituent_tree_str)(c);
                    }
                    (a.linkage_delete)(l);
                }
            }
            (a.sentence_delete)(s);
            out
        }
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        // SAFETY: made in `new`, freed once.
        unsafe {
            (self.api.parse_options_delete)(self.opts);
            (self.api.dictionary_delete)(self.dict);
        }
    }
}

/// Sentences whose trees are kept: training reads its pairs every epoch
/// and scores the same dev sets after each. About 200 bytes a sentence.
pub const MAX_CACHED: usize = 1 << 20;

/// Parses sentences on several threads, each with its own dictionary
/// (about 30 MB, kept for the next call; at most one per core, so that
/// many callers at once wait rather than load more), and keeps the trees
/// it made.
pub struct Parser {
    api: Arc<Api>,
    idle: Mutex<Pool>,
    returned: Condvar,
    /// Dictionaries at most: the cores (read once: on Linux it reads the
    /// cgroup's files).
    cap: usize,
    cache: Mutex<HashMap<String, Tree>>,
    parsed: AtomicU64,
    fallbacks: AtomicU64,
    version: String,
}

/// The tokens as the parser sees them: a bracket word would read as one of
/// the tree's own brackets, so it is shown as a dash.
fn shown<'a>(tokens: &[&'a str]) -> Vec<&'a str> {
    tokens
        .iter()
        .map(|&t| if t == "(" || t == ")" { "-" } else { t })
        .collect()
}

/// The dictionaries made and those not in use.
struct Pool {
    made: usize,
    idle: Vec<Instance>,
}

/// The process's one parser, made on first use. Loading the dictionary
/// sets the C locale's character type to UTF-8 where it is not (Link
/// Grammar's own doing, process-wide): paraforge reads no locale.
pub fn shared() -> Result<&'static Parser, ParserError> {
    static SHARED: OnceLock<Result<Parser, ParserError>> = OnceLock::new();
    SHARED
        .get_or_init(Parser::new)
        .as_ref()
        .map_err(Clone::clone)
}

impl Parser {
    /// Opens the library and loads the English dictionary once, so that a
    /// missing install is an error here, not in the middle of a run.
    pub fn new() -> Result<Parser, ParserError> {
        let api = Arc::new(Api::open()?);
        let first = Instance::new(api.clone())?;
        let text = |p: *const c_char| {
            // SAFETY: both return a static NUL-terminated string (or null).
            (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
        };
        // SAFETY: plain calls on the library and a live dictionary.
        let (lib, dict) = unsafe {
            (
                text((api.get_version)()),
                text((api.get_dict_version)(first.dict)),
            )
        };
        let version = format!(
            "{} (English dictionary {})",
            lib.as_deref().unwrap_or("link-grammar, version unknown"),
            dict.as_deref().unwrap_or("of unknown version")
        );
        Ok(Parser {
            version,
            api,
            idle: Mutex::new(Pool {
                made: 1,
                idle: vec![first],
            }),
            returned: Condvar::new(),
            cap: std::thread::available_parallelism().map_or(1, |n| n.get()),
            cache: Mutex::new(HashMap::new()),
            parsed: AtomicU64::new(0),
            fallbacks: AtomicU64::new(0),
        })
    }

    /// The library's and its English dictionary's versions, e.g.
    /// `link-grammar-5.12.0 (English dictionary 5.11.0)`: trees (and so a
    /// tree network's embeddings) may change with either, so a tree-rnn
    /// scorer's stamp names them.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// Sentences of two tokens or more parsed so far, and how many of them
    /// got the right-branching tree for want of a parse that fits.
    pub fn counts(&self) -> (u64, u64) {
        (
            self.parsed.load(Ordering::Relaxed),
            self.fallbacks.load(Ordering::Relaxed),
        )
    }

    fn take(&self) -> Result<Instance, ParserError> {
        let mut pool = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(i) = pool.idle.pop() {
                return Ok(i);
            }
            if pool.made < self.cap {
                pool.made += 1;
                drop(pool);
                let made = Instance::new(self.api.clone());
                if made.is_err() {
                    self.idle.lock().unwrap_or_else(|e| e.into_inner()).made -= 1;
                }
                return made;
            }
            pool = self.returned.wait(pool).unwrap_or_else(|e| e.into_inner());
        }
    }

    fn give(&self, i: Instance) {
        self.idle
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .idle
            .push(i);
        self.returned.notify_one();
    }

    /// Each sentence's constituent tree in Link Grammar's one-line form,
    /// in order; `None` where it found no linkage or [`refusal`] keeps the
    /// text from the library.
    pub fn parse_all(&self, sentences: &[String]) -> Result<Vec<Option<String>>, ParserError> {
        if sentences.is_empty() {
            return Ok(Vec::new());
        }
        let threads = rayon::current_num_threads().clamp(1, sentences.len());
        let chunk = sentences.len().div_ceil(threads).max(1);
        let mut out: Vec<Option<String>> = vec![None; sentences.len()];
        // One dictionary first, the rest only if free: two callers at once
        // each get one rather than wait for each other's.
        let mut instances = vec![self.take()?];
        while instances.len() < sentences.chunks(chunk).len() {
            let mut pool = self.idle.lock().unwrap_or_else(|e| e.into_inner());
            match pool.idle.pop() {
                Some(i) => instances.push(i),
                None => break,
            }
        }
        let chunk = sentences.len().div_ceil(instances.len()).max(1);
        std::thread::scope(|scope| {
            let handles: Vec<_> = sentences
                .chunks(chunk)
                .zip(out.chunks_mut(chunk))
                .zip(instances.drain(..))
                .map(|((ins, outs), mut inst)| {
                    scope.spawn(move || {
                        for (s, o) in ins.iter().zip(outs.iter_mut()) {
                            if refusal(s).is_some() {
                                continue;
                            }
                            *o = CString::new(s.as_str()).ok().and_then(|c| inst.parse(&c));
                        }
                        inst
                    })
                })
                .collect();
            for h in handles {
                match h.join() {
                    Ok(inst) => self.give(inst),
                    // The instance went with the thread: one more may be made.
                    Err(_) => {
                        self.idle.lock().unwrap_or_else(|e| e.into_inner()).made -= 1;
                        self.returned.notify_one();
                    }
                }
            }
        });
        Ok(out)
    }
}

/// The text the parser is given for a line of English: its tokens as the
/// encoders read them.
pub fn shown_line(line: &str) -> String {
    shown(&paraforge_core::tokenize(line).texts()).join(" ")
}

impl Parser {
    /// Lines of English as `paraforge parse` prints them: each tokenized
    /// as the encoders read it, then parsed (`None`: no linkage).
    pub fn parse_lines(&self, lines: &[String]) -> Result<Vec<Option<String>>, ParserError> {
        let texts: Vec<String> = lines.iter().map(|l| shown_line(l)).collect();
        self.parse_all(&texts)
    }

    /// A binary tree over each sentence's tokens (paraforge's tokenizer's),
    /// and how many of the sentences parsed by this call (not found among
    /// the trees kept) got the right-branching tree instead: no linkage, or
    /// words the parser split or joined otherwise.
    pub fn trees(&self, sentences: &[Vec<&str>]) -> Result<(Vec<Tree>, usize), ParserError> {
        let shown: Vec<Vec<&str>> = sentences.iter().map(|s| shown(s)).collect();
        let texts: Vec<String> = shown.iter().map(|s| s.join(" ")).collect();
        let mut out: Vec<Option<Tree>> = {
            let cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
            texts.iter().map(|t| cache.get(t).cloned()).collect()
        };
        let todo: Vec<usize> = (0..texts.len())
            .filter(|&i| out[i].is_none() && shown[i].len() > 1)
            .collect();
        let (todo, too_long): (Vec<usize>, Vec<usize>) = todo
            .into_iter()
            .partition(|&i| refusal(&texts[i]).is_none());
        let parsed = self.parse_all(&todo.iter().map(|&i| texts[i].clone()).collect::<Vec<_>>())?;
        let mut fallbacks = too_long.len();
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        // Kept too, so that each is counted once, not once an epoch.
        for &i in &too_long {
            let t = Tree::right_branching(shown[i].len());
            if cache.len() < MAX_CACHED {
                cache.insert(texts[i].clone(), t.clone());
            }
            out[i] = Some(t);
        }
        for (&i, p) in todo.iter().zip(parsed) {
            let t = p
                .and_then(|p| tree::from_constituents(&p, &shown[i]))
                .unwrap_or_else(|| {
                    fallbacks += 1;
                    Tree::right_branching(shown[i].len())
                });
            if cache.len() < MAX_CACHED {
                cache.insert(texts[i].clone(), t.clone());
            }
            out[i] = Some(t);
        }
        self.parsed
            .fetch_add((todo.len() + too_long.len()) as u64, Ordering::Relaxed);
        self.fallbacks
            .fetch_add(fallbacks as u64, Ordering::Relaxed);
        let trees = out
            .into_iter()
            .zip(&shown)
            .map(|(t, s)| t.unwrap_or_else(|| Tree::right_branching(s.len())))
            .collect();
        Ok((trees, fallbacks))
    }

    /// Every tree kept, by the text the parser saw (its tokens joined by
    /// single spaces), in no particular order.
    pub fn kept(&self) -> Vec<(String, Tree)> {
        let cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        cache.iter().map(|(k, t)| (k.clone(), t.clone())).collect()
    }

    /// How many trees are kept.
    pub fn kept_len(&self) -> usize {
        self.cache.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Keeps trees made earlier (by this parser's version: the caller
    /// checks), so that their sentences are not parsed again; returns how
    /// many were taken (none once [`MAX_CACHED`] are kept).
    pub fn keep(&self, trees: impl IntoIterator<Item = (String, Tree)>) -> usize {
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        let mut taken = 0;
        for (text, tree) in trees {
            if cache.len() >= MAX_CACHED {
                break;
            }
            cache.insert(text, tree);
            taken += 1;
        }
        taken
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_sentence_into_constituents() {
        let p = Parser::new().expect("Link Grammar (apt-get install link-grammar)");
        let v = p.version();
        assert!(
            v.starts_with("link-grammar-5.") && v.contains("English dictionary 5."),
            "{v}"
        );
        let got = p
            .parse_all(&[
                "a man is playing a guitar .".to_string(),
                String::new(),
                "!verbosity=4".to_string(),
            ])
            .unwrap();
        let first = got[0].as_deref().expect("a parse");
        assert!(first.starts_with("(S (NP a man.n) (VP is.v"), "{first}");
        // A line the command-line program would take as a command is a
        // sentence here.
        assert!(got[2].is_some(), "{got:?}");
        assert_eq!(got[1], None);
    }

    #[test]
    fn trees_are_parsed_once_and_kept() {
        let p = Parser::new().expect("Link Grammar (apt-get install link-grammar)");
        let s = |t: &'static str| t.split(' ').collect::<Vec<&str>>();
        let sents = [
            s("a man is playing a guitar ."),
            s("( a man ) smiles"),
            s("hi"),
        ];
        let (trees, fallbacks) = p.trees(&sents).unwrap();
        assert_eq!(trees[0].merges[0], [0, 1], "(a man) first");
        // Brackets parse as dashes, and the tree is over the five tokens.
        assert_eq!(trees[1].merges.len(), 4);
        assert_eq!(trees[2], Tree::right_branching(1));
        // A one-token sentence needs no parse.
        assert_eq!((fallbacks, p.counts()), (0, (2, 0)));
        // Found among the trees kept, again and again: nothing parsed, and
        // no dictionary held (before, each such call kept one, and the
        // third waited for ever).
        for _ in 0..4 {
            let (again, _) = p.trees(&sents).unwrap();
            assert_eq!(again, trees);
        }
        assert_eq!(p.counts(), (2, 0), "kept, not parsed again");
        assert!(p.parse_all(&[]).unwrap().is_empty());
        // A sentence too long to parse gets the right-branching tree, and
        // is kept too: counted once, not once an epoch (before, each call
        // counted it again).
        let long: Vec<String> = (0..=MAX_PARSE_TOKENS).map(|i| format!("w{i}")).collect();
        let long: Vec<&str> = long.iter().map(String::as_str).collect();
        for _ in 0..3 {
            let (t, _) = p.trees(std::slice::from_ref(&long)).unwrap();
            assert_eq!(t[0], Tree::right_branching(long.len()));
        }
        assert_eq!(p.counts(), (3, 1));
        assert!(p.parse_all(&["a man sleeps".to_string()]).unwrap()[0].is_some());
    }

    /// Random and adversarial lines reach the library only within its
    /// bounds: none may abort the process (a 40,000-character word did,
    /// with "malloc(): corrupted top size").
    #[test]
    fn adversarial_lines_never_reach_the_library_unbounded() {
        use rand::{Rng, SeedableRng};
        let p = Parser::new().expect("Link Grammar (apt-get install link-grammar)");
        let mut lines = vec![
            format!("{} .", "a".repeat(40_000)),
            "a ".repeat(5_000),
            "word\u{0}with NUL".to_string(),
            "ctrl \u{7}\u{1b}[31m red \r\n".to_string(),
            "((((( ]]]] (S (NP) ))) [[".to_string(),
            "\u{202e}\u{fe0f}\u{200b} ok".to_string(),
            "!!!!verbosity=9 !limit=100000".to_string(),
            format!("{} end", "é".repeat(1_500)),
        ];
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        for _ in 0..40 {
            let n = rng.random_range(1..3_000);
            lines.push(
                (0..n)
                    .map(|_| char::from_u32(rng.random_range(1..0x3000)).unwrap_or('x'))
                    .collect(),
            );
        }
        for l in &lines {
            if let Some(why) = refusal(l) {
                assert!(
                    why.contains("limit") || why.contains("control") || why == "empty",
                    "{why}"
                );
            }
        }
        let parsed = p.parse_lines(&lines).unwrap();
        assert_eq!(parsed.len(), lines.len());
        assert_eq!(
            p.parse_all(&lines).unwrap()[0],
            None,
            "the long word was parsed"
        );
        let toks: Vec<Vec<&str>> = lines.iter().map(|l| l.split(' ').collect()).collect();
        let (trees, _) = p.trees(&toks).unwrap();
        assert_eq!(trees.len(), lines.len());
        assert!(refusal(&"a".repeat(MAX_PARSE_BYTES + 1))
            .unwrap()
            .contains("2000"));
    }
}
