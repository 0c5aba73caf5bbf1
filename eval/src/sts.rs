//! STS evaluation (docs/DEFINITIONS.md section 6): Pearson's r x 100 (and Spearman's
//! rho) between the cosine of two sentence embeddings and the gold score, per
//! dataset; SemEval years are the mean over their datasets, as the paper
//! reports. Reads the original distribution layouts:
//!
//! * SemEval files `STS.input.<set>.txt` + `STS.gs.<set>.txt` (2016:
//!   `STS2016.input.*`/`STS2016.gs.*`; any `STS<...>.input.` prefix), of any
//!   year, in the directory given, in any directory below it, or below its
//!   `semeval/`; a directory whose name holds a year (`STS2017-test`,
//!   `sts2017`) is that year's group `STS2017`, others are named after the
//!   directory. An empty gold line is an unscored pair;
//! * `stsbenchmark/sts-test.csv`: TSV, score in column 5, sentences in 6-7
//!   (`sts-dev.csv`, the same layout, is the "STSB-dev" group: the set to
//!   select models on, so that test stays unseen);
//! * `sick2014/SICK_test_annotated.txt`: TSV with a header (SICK-R).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use rayon::prelude::*;

use paraforge_core::SentenceEncoder;

use crate::EvalError;
use paraforge_core::score::cosine;

/// One scored dataset.
#[derive(Debug, Clone)]
pub struct StsSet {
    /// "STS2012" ... "STS2016", "STSB", "SICK-R".
    pub group: String,
    pub name: String,
    pub pairs: Vec<(String, String, f64)>,
}

/// Correlations on one dataset (x 100).
#[derive(Debug, Clone, serde::Serialize)]
pub struct SetResult {
    pub group: String,
    pub name: String,
    pub pairs: usize,
    pub pearson: f64,
    pub spearman: f64,
}

fn read_lines(path: &Path) -> Result<Vec<String>, EvalError> {
    use paraforge_core::text::{read_line_limited, LineRead, LineTooLong, MAX_LINE_BYTES};
    let f = std::fs::File::open(path).map_err(|e| EvalError::io(path, e))?;
    let mut r = std::io::BufReader::new(f);
    let (mut lines, mut buf) = (Vec::new(), Vec::new());
    loop {
        match read_line_limited(&mut r, &mut buf, MAX_LINE_BYTES)
            .map_err(|e| EvalError::io(path, e))?
        {
            LineRead::Eof => return Ok(lines),
            LineRead::TooLong { bytes } => {
                let e = LineTooLong {
                    line: lines.len() as u64 + 1,
                    bytes,
                    limit: MAX_LINE_BYTES,
                };
                return Err(bad(path, e.to_string()));
            }
            // Some SemEval files carry stray Latin-1 bytes; a lossy decode
            // keeps the line count, which is what aligns them with the gold
            // file.
            LineRead::Line { .. } => lines.push(
                String::from_utf8_lossy(&buf)
                    .trim_end_matches(['\n', '\r'])
                    .to_string(),
            ),
        }
    }
}

fn bad(path: &Path, reason: String) -> EvalError {
    EvalError::BadSts {
        path: path.to_path_buf(),
        reason,
    }
}

fn semeval_set(group: &str, name: &str, input: &Path, gold: &Path) -> Result<StsSet, EvalError> {
    let (inp, gs) = (read_lines(input)?, read_lines(gold)?);
    // Line i of one is line i of the other: a file a line short (or cut)
    // pairs every later score with another pair's sentences.
    if inp.len() != gs.len() {
        return Err(bad(
            gold,
            format!(
                "{} gold lines, but the input {} has {} lines: the files are not aligned",
                gs.len(),
                input.display(),
                inp.len()
            ),
        ));
    }
    let mut pairs = Vec::new();
    for (i, g) in gs.iter().enumerate() {
        let g = g.trim();
        if g.is_empty() {
            continue;
        }
        let score = gold_score(g, gold, i)?;
        let cols: Vec<&str> = inp[i].split('\t').collect();
        if cols.len() < 2 {
            return Err(bad(
                input,
                format!("line {}: expected two tab-separated sentences", i + 1),
            ));
        }
        pairs.push((cols[0].to_string(), cols[1].to_string(), score));
    }
    correlatable(gold, &pairs)?;
    Ok(StsSet {
        group: group.into(),
        name: name.into(),
        pairs,
    })
}

/// The gold score on line `i` (0-based) of `path`: a finite number (NaN
/// would make every correlation NaN, or rank as the largest score).
fn gold_score(text: &str, path: &Path, i: usize) -> Result<f64, EvalError> {
    match text.trim().parse::<f64>() {
        Ok(x) if x.is_finite() => Ok(x),
        _ => Err(bad(
            path,
            format!("line {}: gold score {text:?} is not a finite number", i + 1),
        )),
    }
}

/// A correlation needs two scored pairs whose gold scores differ: a set
/// with fewer, or with one score for all, would report NaN (or pick a dev
/// epoch by NaN) instead of failing.
fn correlatable(path: &Path, pairs: &[(String, String, f64)]) -> Result<(), EvalError> {
    if pairs.len() < 2 {
        return Err(bad(
            path,
            format!(
                "{} scored pair(s); a correlation needs at least two",
                pairs.len()
            ),
        ));
    }
    if pairs.iter().all(|p| p.2 == pairs[0].2) {
        return Err(bad(
            path,
            format!(
                "every gold score is the same ({}); a correlation with it is undefined",
                pairs[0].2
            ),
        ));
    }
    Ok(())
}

fn tsv_set(
    group: &str,
    path: &Path,
    header: bool,
    cols: (usize, usize, usize),
) -> Result<StsSet, EvalError> {
    let mut pairs = Vec::new();
    for (i, line) in read_lines(path)?.iter().enumerate().skip(header as usize) {
        if line.trim().is_empty() {
            continue;
        }
        let c: Vec<&str> = line.split('\t').collect();
        let need = cols.0.max(cols.1).max(cols.2);
        if c.len() <= need {
            return Err(bad(
                path,
                format!(
                    "line {}: {} columns, expected at least {}",
                    i + 1,
                    c.len(),
                    need + 1
                ),
            ));
        }
        let score = gold_score(c[cols.2], path, i)?;
        pairs.push((c[cols.0].to_string(), c[cols.1].to_string(), score));
    }
    correlatable(path, &pairs)?;
    Ok(StsSet {
        group: group.into(),
        name: path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        pairs,
    })
}

/// The SemEval group a directory's files belong to: `STS<year>` when its
/// name holds a year from 2012 on, else the directory's name.
fn semeval_group(d: &Path) -> String {
    let name = d
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "STS".into());
    let digits: Vec<char> = name.chars().collect();
    for w in digits.windows(4) {
        if w.iter().all(|c| c.is_ascii_digit()) {
            let year: String = w.iter().collect();
            if year.as_str() >= "2012" && year.as_str() < "2100" {
                return format!("STS{year}");
            }
        }
    }
    name
}

/// The SemEval datasets of one directory: every `STS*.input.<set>.txt`
/// with its `.gs.` file, sorted by set name.
fn semeval_dir(d: &Path) -> Result<Vec<StsSet>, EvalError> {
    let mut names: Vec<(String, PathBuf)> = std::fs::read_dir(d)
        .map_err(|e| EvalError::io(d, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter_map(|p| {
            let f = p.file_name()?.to_str()?.to_string();
            let (prefix, rest) = f.split_once(".input.")?;
            if !prefix.starts_with("STS") || prefix.contains('.') {
                return None;
            }
            Some((rest.strip_suffix(".txt")?.to_string(), p))
        })
        .collect();
    names.sort();
    let group = semeval_group(d);
    let mut sets = Vec::new();
    for (name, input) in names {
        let gold_name = input
            .file_name()
            .and_then(|f| f.to_str())
            .unwrap_or_default()
            .replacen(".input.", ".gs.", 1);
        let gold = input.with_file_name(&gold_name);
        // Some releases (STS 2017's) put the gold files in a directory of
        // their own beside the inputs' (`STS2017.gs/`).
        let beside = || {
            d.parent().into_iter().flat_map(subdirs).find_map(|s| {
                let name = s.file_name()?.to_string_lossy().to_lowercase();
                let g = s.join(&gold_name);
                (s != d && name.contains("gs") && g.is_file()).then_some(g)
            })
        };
        let gold = match gold.is_file() {
            true => gold,
            false => beside().ok_or_else(|| {
                bad(
                    &input,
                    format!(
                        "no gold file {} (nor {gold_name} in a gold directory beside {})",
                        gold.display(),
                        d.display()
                    ),
                )
            })?,
        };
        sets.push(semeval_set(&group, &name, &input, &gold)?);
    }
    Ok(sets)
}

fn subdirs(d: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(d)
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir())
        .collect();
    v.sort();
    v
}

/// The sets a dev score is the mean Pearson of: a file in the STS Benchmark
/// layout (`sts-dev.csv`), or a directory: its STS Benchmark dev set if it
/// has one, else every set found there.
pub fn load_dev(path: &Path) -> Result<Vec<StsSet>, EvalError> {
    if path.is_file() {
        let mut set = tsv_set("dev", path, false, (5, 6, 4))?;
        set.group = "dev".into();
        return Ok(vec![set]);
    }
    let sets = load(path)?;
    let dev: Vec<StsSet> = sets
        .iter()
        .filter(|s| s.group == "STSB-dev")
        .cloned()
        .collect();
    Ok(if dev.is_empty() { sets } else { dev })
}

/// Every sentence of `sets` once, sorted.
pub fn sentences(sets: &[StsSet]) -> Vec<&str> {
    let mut texts: Vec<&str> = sets
        .iter()
        .flat_map(|s| s.pairs.iter().flat_map(|p| [p.0.as_str(), p.1.as_str()]))
        .collect();
    texts.sort_unstable();
    texts.dedup();
    texts
}

/// Every sentence of `sets` and its embedding by `embed_many` (the
/// sentences in one call, in order: batched, much faster than one at a
/// time for a neural encoder), which [`evaluate`] then looks up.
pub fn embed_sets(
    sets: &[StsSet],
    embed_many: &dyn Fn(&[&str]) -> Vec<Vec<f32>>,
) -> HashMap<String, Vec<f32>> {
    let texts = sentences(sets);
    let e = embed_many(&texts);
    texts.into_iter().map(String::from).zip(e).collect()
}

/// Every sentence of `sets` and its embedding by `encoder` (all of them
/// through [`SentenceEncoder::embed_batch`], as para_score embeds them:
/// the scorer's tokens), which [`evaluate`] then looks up. A sentence the
/// encoder failed on (its [`SentenceEncoder::failures`] grew) is an error:
/// its zeros would pass for an embedding.
pub fn embed_with(
    sets: &[StsSet],
    encoder: &dyn SentenceEncoder,
) -> Result<HashMap<String, Vec<f32>>, EvalError> {
    let before = encoder.failures();
    let texts = sentences(sets);
    let tokens: Vec<paraforge_core::Tokens> = texts
        .par_iter()
        .map(|t| paraforge_core::tokenize(t))
        .collect();
    let d = encoder.dim();
    let mut flat = vec![0f32; texts.len() * d];
    encoder.embed_batch(&tokens, &mut flat);
    let failed = encoder.failures().saturating_sub(before);
    if failed > 0 {
        return Err(EvalError::Invalid(format!(
            "the encoder failed on {failed} sentences (see the log)"
        )));
    }
    Ok(texts
        .into_iter()
        .enumerate()
        .map(|(i, t)| (t.to_string(), flat[i * d..(i + 1) * d].to_vec()))
        .collect())
}

/// Correlations of `encoder`'s cosines with the gold scores on each set
/// ([`evaluate`] over [`embed_with`]).
pub fn evaluate_encoder(
    sets: &[StsSet],
    encoder: &dyn SentenceEncoder,
) -> Result<Vec<SetResult>, EvalError> {
    let table = embed_with(sets, encoder)?;
    evaluate(sets, &|s| table[s].clone())
}

/// Mean Pearson x 100 over `sets`; NaN when an embedding is not a finite
/// number (the caller refuses a NaN dev score, saying so).
pub fn dev_score(sets: &[StsSet], embed: &(dyn Fn(&str) -> Vec<f32> + Sync)) -> f64 {
    match evaluate(sets, embed) {
        Ok(r) => r.iter().map(|r| r.pearson).sum::<f64>() / r.len().max(1) as f64,
        Err(_) => f64::NAN,
    }
}

/// Every dataset found under `dir` (see the module docs for the layout).
pub fn load(dir: &Path) -> Result<Vec<StsSet>, EvalError> {
    let mut sets = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    for d in subdirs(dir) {
        if d.file_name().is_some_and(|n| n == "semeval") {
            dirs.extend(subdirs(&d));
        } else {
            dirs.push(d);
        }
    }
    for d in &dirs {
        sets.extend(semeval_dir(d)?);
    }
    let stsb = dir.join("stsbenchmark/sts-test.csv");
    if stsb.is_file() {
        sets.push(tsv_set("STSB", &stsb, false, (5, 6, 4))?);
    }
    let dev = dir.join("stsbenchmark/sts-dev.csv");
    if dev.is_file() {
        sets.push(tsv_set("STSB-dev", &dev, false, (5, 6, 4))?);
    }
    let sick = dir.join("sick2014/SICK_test_annotated.txt");
    if sick.is_file() {
        sets.push(tsv_set("SICK-R", &sick, true, (1, 2, 3))?);
    }
    if sets.is_empty() {
        return Err(bad(
            dir,
            "no STS datasets found (expected STS.input.<set>.txt + STS.gs.<set>.txt files, \
             semeval/, stsbenchmark/ or sick2014/)"
                .into(),
        ));
    }
    Ok(sets)
}

pub fn pearson(x: &[f64], y: &[f64]) -> f64 {
    let n = x.len() as f64;
    if x.len() < 2 {
        return f64::NAN;
    }
    let (mx, my) = (x.iter().sum::<f64>() / n, y.iter().sum::<f64>() / n);
    let (mut sxy, mut sxx, mut syy) = (0.0, 0.0, 0.0);
    for (a, b) in x.iter().zip(y) {
        sxy += (a - mx) * (b - my);
        sxx += (a - mx) * (a - mx);
        syy += (b - my) * (b - my);
    }
    sxy / (sxx.sqrt() * syy.sqrt())
}

/// Ranks with ties averaged (1-based).
fn ranks(x: &[f64]) -> Vec<f64> {
    let mut idx: Vec<usize> = (0..x.len()).collect();
    idx.sort_by(|&a, &b| x[a].total_cmp(&x[b]));
    let mut r = vec![0.0; x.len()];
    let mut i = 0;
    while i < idx.len() {
        let mut j = i;
        while j + 1 < idx.len() && x[idx[j + 1]] == x[idx[i]] {
            j += 1;
        }
        let avg = (i + j) as f64 / 2.0 + 1.0;
        for &k in &idx[i..=j] {
            r[k] = avg;
        }
        i = j + 1;
    }
    r
}

pub fn spearman(x: &[f64], y: &[f64]) -> f64 {
    pearson(&ranks(x), &ranks(y))
}

/// Correlations of `embed`'s cosines with the gold scores on each set. An
/// embedding or cosine that is not a finite number is an error naming the
/// set and the sentence: NaN similarities give a NaN Pearson but a finite
/// Spearman (NaN ranks as the largest), a score that only looks like one.
pub fn evaluate(
    sets: &[StsSet],
    embed: &(dyn Fn(&str) -> Vec<f32> + Sync),
) -> Result<Vec<SetResult>, EvalError> {
    sets.iter()
        .map(|s| {
            let sims: Vec<f64> = s
                .pairs
                .par_iter()
                .map(|(a, b, _)| {
                    let (ea, eb) = (embed(a), embed(b));
                    for (text, e) in [(a, &ea), (b, &eb)] {
                        if let Some(x) = e.iter().find(|x| !x.is_finite()) {
                            return Err(not_finite(
                                s,
                                format!("the embedding of {text:?} holds {x}"),
                            ));
                        }
                    }
                    let c = cosine(&ea, &eb);
                    if !c.is_finite() {
                        return Err(not_finite(
                            s,
                            format!("the cosine of {a:?} and {b:?} is {c} (their norms overflow)"),
                        ));
                    }
                    Ok(c as f64)
                })
                .collect::<Result<_, _>>()?;
            let gold: Vec<f64> = s.pairs.iter().map(|p| p.2).collect();
            Ok(SetResult {
                group: s.group.clone(),
                name: s.name.clone(),
                pairs: s.pairs.len(),
                pearson: 100.0 * pearson(&sims, &gold),
                spearman: 100.0 * spearman(&sims, &gold),
            })
        })
        .collect()
}

fn not_finite(set: &StsSet, what: String) -> EvalError {
    EvalError::Invalid(format!(
        "{} {}: {what}; a model whose embeddings are not finite numbers has no correlation",
        set.group, set.name
    ))
}

/// (group, mean Pearson, mean Spearman) in the order the groups appear:
/// each SemEval year is the mean over its datasets.
pub fn by_group(results: &[SetResult]) -> Vec<(String, f64, f64)> {
    let mut out: Vec<(String, f64, f64, usize)> = Vec::new();
    for r in results {
        match out.iter_mut().find(|g| g.0 == r.group) {
            Some(g) => {
                g.1 += r.pearson;
                g.2 += r.spearman;
                g.3 += 1;
            }
            None => out.push((r.group.clone(), r.pearson, r.spearman, 1)),
        }
    }
    out.into_iter()
        .map(|(g, p, s, n)| (g, p / n as f64, s / n as f64))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn correlations_match_hand_computed_values() {
        let x = [1.0, 2.0, 3.0, 4.0];
        assert!((pearson(&x, &[2.0, 4.0, 6.0, 8.0]) - 1.0).abs() < 1e-12);
        assert!((pearson(&x, &[4.0, 3.0, 2.0, 1.0]) + 1.0).abs() < 1e-12);
        // x = 1..5, y = 2,1,4,3,5: r = 0.8 (sxy 8, sxx = syy = 10).
        let y = [2.0, 1.0, 4.0, 3.0, 5.0];
        assert!((pearson(&[1.0, 2.0, 3.0, 4.0, 5.0], &y) - 0.8).abs() < 1e-12);
        // Monotone but not linear: Spearman 1, Pearson below 1.
        let z = [1.0, 8.0, 27.0, 64.0];
        assert!((spearman(&x, &z) - 1.0).abs() < 1e-12);
        assert!(pearson(&x, &z) < 0.99);
        assert_eq!(ranks(&[3.0, 1.0, 3.0, 2.0]), [3.5, 1.0, 3.5, 2.0]);
    }

    #[test]
    fn layouts_load_and_bad_lines_name_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let y = dir.path().join("semeval/STS2016-test");
        std::fs::create_dir_all(&y).unwrap();
        std::fs::write(
            y.join("STS2016.input.news.txt"),
            "a b\tc d\tnote\te f\tg\nx\ty\np q\tr s\n",
        )
        .unwrap();
        std::fs::write(y.join("STS2016.gs.news.txt"), "4.5\n\n1.0\n").unwrap();
        let b = dir.path().join("stsbenchmark");
        std::fs::create_dir_all(&b).unwrap();
        std::fs::write(
            b.join("sts-test.csv"),
            "g\tf\t2017\t1\t2.5\tA man\tA dog\textra\ng\tf\t2017\t2\t0.5\tx\ty\n",
        )
        .unwrap();
        let sets = load(dir.path()).unwrap();
        assert_eq!(sets.len(), 2);
        assert_eq!(sets[0].group, "STS2016");
        assert_eq!(
            sets[0].pairs,
            [
                ("a b".into(), "c d".into(), 4.5),
                ("p q".into(), "r s".into(), 1.0)
            ]
        );
        assert_eq!(sets[1].pairs[0], ("A man".into(), "A dog".into(), 2.5));

        std::fs::write(b.join("sts-test.csv"), "g\tf\t2017\t1\tfive\tA\tB\n").unwrap();
        let e = load(dir.path()).unwrap_err().to_string();
        assert!(e.contains("sts-test.csv") && e.contains("line 1"), "{e}");
        std::fs::remove_file(y.join("STS2016.gs.news.txt")).unwrap();
        assert!(load(dir.path()).unwrap_err().to_string().contains("gold"));
        assert!(load(&dir.path().join("nothing")).is_err());
    }

    /// STS 2017's test directory as distributed, given by itself or as a
    /// directory below the one given (file names of the 2017 track 5,
    /// English-English).
    #[test]
    fn any_semeval_year_loads_from_its_own_directory() {
        let dir = tempfile::tempdir().unwrap();
        let y = dir.path().join("STS2017-test");
        std::fs::create_dir_all(&y).unwrap();
        std::fs::write(
            y.join("STS.input.track5.en-en.txt"),
            "A person is on a baseball team.\tA person is playing basketball on a team.\n\
             Our current vehicles will be in museums.\tThe car is in a museum.\n",
        )
        .unwrap();
        std::fs::write(y.join("STS.gs.track5.en-en.txt"), "2.4\n1.2\n").unwrap();
        for given in [y.clone(), dir.path().to_path_buf()] {
            let sets = load(&given).unwrap();
            assert_eq!(sets.len(), 1, "{}", given.display());
            assert_eq!(
                (sets[0].group.as_str(), sets[0].name.as_str()),
                ("STS2017", "track5.en-en")
            );
            assert_eq!(sets[0].pairs[1].2, 1.2);
        }
        let other = dir.path().join("my-sts");
        std::fs::create_dir_all(&other).unwrap();
        std::fs::copy(
            y.join("STS.input.track5.en-en.txt"),
            other.join("STS.input.a.txt"),
        )
        .unwrap();
        let e = load(dir.path()).unwrap_err().to_string();
        assert!(
            e.contains("STS.input.a.txt") && e.contains("no gold file"),
            "{e}"
        );
        std::fs::write(other.join("STS.gs.a.txt"), "1\n2\n").unwrap();
        let groups: Vec<String> = load(dir.path())
            .unwrap()
            .into_iter()
            .map(|s| s.group)
            .collect();
        assert_eq!(groups, ["STS2017", "my-sts"]);
    }

    /// STS 2017's release: inputs in `STS2017.eval.v1.1/`, gold files in
    /// `STS2017.gs/` beside it.
    #[test]
    fn gold_files_in_their_own_directory_are_found() {
        let dir = tempfile::tempdir().unwrap();
        let (eval, gs) = (
            dir.path().join("STS2017.eval.v1.1"),
            dir.path().join("STS2017.gs"),
        );
        std::fs::create_dir_all(&eval).unwrap();
        std::fs::create_dir_all(&gs).unwrap();
        std::fs::write(
            eval.join("STS.input.track5.en-en.txt"),
            "a b\tc d\ne f\tg h\n",
        )
        .unwrap();
        std::fs::write(gs.join("STS.gs.track5.en-en.txt"), "4.0\n1.5\n").unwrap();
        let sets = load(dir.path()).unwrap();
        assert_eq!(sets.len(), 1);
        assert_eq!(
            (sets[0].group.as_str(), sets[0].pairs[1].2),
            ("STS2017", 1.5)
        );
    }

    /// An input and a gold file of other lengths are not aligned: an error
    /// naming both files and both counts, whichever is longer.
    #[test]
    fn input_and_gold_files_of_other_lengths_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let y = dir.path().join("STS2015");
        std::fs::create_dir_all(&y).unwrap();
        let input: String = (0..750).map(|i| format!("a{i} b\tc d{i}\n")).collect();
        std::fs::write(y.join("STS.input.x.txt"), input).unwrap();
        for gold_lines in [749, 300] {
            let gold: String = (0..gold_lines).map(|i| format!("{}\n", i % 6)).collect();
            std::fs::write(y.join("STS.gs.x.txt"), gold).unwrap();
            let e = load(dir.path()).map(|_| ()).unwrap_err().to_string();
            assert!(
                e.contains("STS.input.x.txt")
                    && e.contains("STS.gs.x.txt")
                    && e.contains("750")
                    && e.contains(&gold_lines.to_string()),
                "{e}"
            );
        }
    }

    /// A gold score that is not a finite number names its file and line; a
    /// gold column of one value has no correlation (its variance is 0).
    #[test]
    fn non_finite_and_constant_gold_scores_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let y = dir.path().join("STS2015");
        std::fs::create_dir_all(&y).unwrap();
        std::fs::write(y.join("STS.input.x.txt"), "a\tb\nc\td\ne\tf\n").unwrap();
        for bad in ["NaN", "inf", "-infinity"] {
            std::fs::write(y.join("STS.gs.x.txt"), format!("1.0\n{bad}\n2.0\n")).unwrap();
            let e = load(dir.path()).map(|_| ()).unwrap_err().to_string();
            assert!(
                e.contains("STS.gs.x.txt") && e.contains("line 2"),
                "{bad}: {e}"
            );
        }
        std::fs::write(y.join("STS.gs.x.txt"), "3.0\n3.0\n3.0\n").unwrap();
        let e = load(dir.path()).map(|_| ()).unwrap_err().to_string();
        assert!(e.contains("STS.gs.x.txt") && e.contains("same"), "{e}");
        // The TSV layouts alike.
        let b = dir.path().join("stsbenchmark");
        std::fs::create_dir_all(&b).unwrap();
        std::fs::write(y.join("STS.gs.x.txt"), "3.0\n2.0\n1.0\n").unwrap();
        std::fs::write(
            b.join("sts-test.csv"),
            "g\tf\t2017\t1\t2.5\tA\tB\ng\tf\t2017\t2\tnan\tC\tD\n",
        )
        .unwrap();
        let e = load(dir.path()).map(|_| ()).unwrap_err().to_string();
        assert!(e.contains("sts-test.csv") && e.contains("line 2"), "{e}");
        std::fs::write(
            b.join("sts-test.csv"),
            "g\tf\t2017\t1\t2.5\tA\tB\ng\tf\t2017\t2\t2.5\tC\tD\n",
        )
        .unwrap();
        let e = load(dir.path()).map(|_| ()).unwrap_err().to_string();
        assert!(e.contains("sts-test.csv") && e.contains("same"), "{e}");
    }

    /// A set with fewer than two scored pairs has no correlation: an error
    /// naming the file, not a NaN in the results (or a dev epoch kept by it).
    #[test]
    fn a_set_with_fewer_than_two_scored_pairs_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let y = dir.path().join("STS2015");
        std::fs::create_dir_all(&y).unwrap();
        std::fs::write(y.join("STS.input.x.txt"), "a\tb\nc\td\n").unwrap();
        std::fs::write(y.join("STS.gs.x.txt"), "3.0\n\n").unwrap();
        let e = load(dir.path()).unwrap_err().to_string();
        assert!(
            e.contains("STS.gs.x.txt") && e.contains("1 scored pair"),
            "{e}"
        );
        let e = load_dev(dir.path()).unwrap_err().to_string();
        assert!(e.contains("at least two"), "{e}");
    }
}
