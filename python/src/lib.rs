//! `paraforge_corpus._native`: the Rust side of the Python package. The public API
//! (numpy arrays, pyarrow datasets, docstrings) is `python/paraforge_corpus/`;
//! this module hands it flat buffers and plain lists, and does every piece
//! of work with the GIL released, on the same code paths as the CLI
//! (`embed`, the workers' scoring, `translate`, the readers' manifest
//! check), so that Python and the CLI give the same numbers.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use pyo3::exceptions::{PyException, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString};

use paraforge_core::bleu::Smoothing;
use paraforge_core::{ArpaModel, PairScores, Scorer, SentenceEncoder};
use paraforge_nmt::{Device, GenerateOptions, LoadOptions};

pyo3::create_exception!(
    paraforge_corpus._native,
    ParaforgeError,
    PyException,
    "A model, corpus or input that paraforge refuses; the message names what and where."
);

/// An error with its causes, as the CLI prints them (`a: b: c`).
fn chain(e: &dyn std::error::Error) -> String {
    let mut msg = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !msg.contains(&text) {
            msg.push_str(": ");
            msg.push_str(&text);
        }
        source = s.source();
    }
    msg
}

/// A [`ParaforgeError`] naming `path` unless the message already does.
fn prefixed(path: &Path, e: impl std::error::Error) -> PyErr {
    let msg = chain(&e);
    let p = path.display().to_string();
    ParaforgeError::new_err(if msg.contains(&p) {
        msg
    } else {
        format!("{p}: {msg}")
    })
}

/// The strings of a Python sequence, refusing (by index) anything that is
/// not a `str` or cannot be UTF-8: a `str` holding lone surrogates (what
/// `surrogateescape` makes of undecodable bytes) has no UTF-8 form, and a
/// `bytes` object is not text until the caller says how it is encoded.
fn texts(what: &str, seq: &Bound<'_, PyAny>) -> PyResult<Vec<String>> {
    if seq.is_instance_of::<PyString>() {
        return Err(PyTypeError::new_err(format!(
            "{what}: a list of sentences, not one string"
        )));
    }
    let mut out = Vec::new();
    for (i, item) in seq.try_iter()?.enumerate() {
        let item = item?;
        let s = item.cast::<PyString>().map_err(|_| {
            PyTypeError::new_err(format!(
                "{what}[{i}]: a str, not {}",
                item.get_type().name().map_or("?".into(), |n| n.to_string())
            ))
        })?;
        let s = s.to_cow().map_err(|_| {
            PyValueError::new_err(format!(
                "{what}[{i}]: not valid Unicode text (lone surrogates: decode the bytes \
                 with the right encoding first)"
            ))
        })?;
        out.push(s.into_owned());
    }
    Ok(out)
}

/// Any sentence encoder `paraforge train` writes, the transformer scorer, or
/// word vectors.
#[pyclass(frozen)]
struct Encoder {
    inner: Box<dyn SentenceEncoder>,
    path: PathBuf,
}

#[pymethods]
impl Encoder {
    /// `model` is a trained model (`.pfe` or a neural encoder's directory)
    /// or a transformer scorer's directory; `vectors` a GloVe-format file.
    #[staticmethod]
    #[pyo3(signature = (model=None, vectors=None))]
    fn load(py: Python<'_>, model: Option<PathBuf>, vectors: Option<PathBuf>) -> PyResult<Self> {
        let path = match (&model, &vectors) {
            (Some(p), None) | (None, Some(p)) => p.clone(),
            _ => {
                return Err(PyValueError::new_err(
                    "Encoder.load: give a model or vectors= (one of the two)",
                ))
            }
        };
        let inner = py
            .detach(|| paraforge_scorer::load_encoder(model.as_deref(), vectors.as_deref()))
            .map_err(|e| prefixed(&path, e))?
            .expect("a model or vectors is given");
        Ok(Encoder { inner, path })
    }

    #[getter]
    fn dim(&self) -> usize {
        self.inner.dim()
    }

    #[getter]
    fn path(&self) -> PathBuf {
        self.path.clone()
    }

    fn describe(&self) -> String {
        self.inner.describe()
    }

    /// Little-endian f32 rows, `dim` values per sentence; NaN rows for a
    /// sentence with no token the encoder knows (as `paraforge embed`).
    fn encode<'py>(
        &self,
        py: Python<'py>,
        sentences: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let texts = texts("sentences", sentences)?;
        let before = self.inner.failures();
        let bytes: Vec<u8> = py.detach(|| {
            let (flat, _) = paraforge_core::encoder::embed_texts(&*self.inner, &texts);
            flat.iter().flat_map(|x| x.to_le_bytes()).collect()
        });
        // A row left NaN by a failed model run must not pass for a sentence
        // without known tokens (`paraforge embed` refuses it too).
        failed(&*self.inner, before)?;
        Ok(PyBytes::new(py, &bytes))
    }
}

/// An error when `encoder` failed on sentences since its count was `before`.
/// The model run's own error went to the log (`RUST_LOG`/`PARAFORGE_LOG`
/// is not read here: a Python process has no subscriber), so the count and
/// the model are what the message can name.
fn failed(encoder: &dyn SentenceEncoder, before: u64) -> PyResult<()> {
    let n = encoder.failures().saturating_sub(before);
    if n > 0 {
        return Err(ParaforgeError::new_err(format!(
            "{}: the model run failed on {n} sentence(s); no embedding is returned for any",
            encoder.describe()
        )));
    }
    Ok(())
}

/// The corpus's score columns for (reference, translation) pairs, computed
/// as a worker computes them: `{column: list}` with None where the corpus
/// has null.
#[pyfunction]
#[pyo3(signature = (references, translations, model=None, vectors=None, lm=None, bleu="sacrebleu"))]
fn score_pairs<'py>(
    py: Python<'py>,
    references: &Bound<'py, PyAny>,
    translations: &Bound<'py, PyAny>,
    model: Option<PathBuf>,
    vectors: Option<PathBuf>,
    lm: Option<PathBuf>,
    bleu: &str,
) -> PyResult<Bound<'py, PyDict>> {
    let refs = texts("references", references)?;
    let hyps = texts("translations", translations)?;
    if refs.len() != hyps.len() {
        return Err(PyValueError::new_err(format!(
            "{} references but {} translations: give one translation per reference",
            refs.len(),
            hyps.len()
        )));
    }
    let smoothing = match bleu {
        "sacrebleu" => Smoothing::Sacrebleu,
        "nakov" => Smoothing::Nakov,
        other => {
            return Err(PyValueError::new_err(format!(
                "bleu={other:?}: use \"sacrebleu\" or \"nakov\""
            )))
        }
    };
    if model.is_some() && vectors.is_some() {
        return Err(PyValueError::new_err(
            "score_pairs: give model= or vectors= for para_score, not both",
        ));
    }
    let (model_path, vectors_path) = (model.clone(), vectors.clone());
    let encoder = py
        .detach(|| paraforge_scorer::load_encoder(model.as_deref(), vectors.as_deref()))
        .map_err(|e| {
            let p = model_path.or(vectors_path).unwrap_or_default();
            prefixed(&p, e)
        })?;
    let lm = match &lm {
        Some(p) => Some(
            py.detach(|| ArpaModel::load(p))
                .map_err(|e| prefixed(p, e))?,
        ),
        None => None,
    };
    let failed_before = encoder.as_ref().map_or(0, |e| e.failures());
    let scores: Vec<PairScores> = py.detach(|| {
        use rayon::prelude::*;
        refs.par_iter()
            .zip(hyps.par_iter())
            .map_init(
                || {
                    Scorer::new(encoder.as_deref())
                        .with_lm(lm.as_ref())
                        .with_bleu(smoothing)
                },
                |s, (r, t)| s.score(r, t),
            )
            .collect()
    });
    // A score left null by a failed model run must not pass for one.
    if let Some(e) = &encoder {
        failed(&**e, failed_before)?;
    }
    use paraforge_core::schema::col;
    let out = PyDict::new(py);
    let column = |f: &dyn Fn(&PairScores) -> Py<PyAny>| -> PyResult<Bound<'py, PyList>> {
        PyList::new(py, scores.iter().map(f))
    };
    let opt = |x: Option<f32>| -> Py<PyAny> {
        x.map_or_else(
            || py.None(),
            |v| v.into_pyobject(py).unwrap().into_any().unbind(),
        )
    };
    let num = |x: f32| -> Py<PyAny> { x.into_pyobject(py).unwrap().into_any().unbind() };
    let int = |x: u32| -> Py<PyAny> { x.into_pyobject(py).unwrap().into_any().unbind() };
    out.set_item(col::PARA_SCORE, column(&|s| opt(s.para_score))?)?;
    out.set_item(col::UNIGRAM_OVERLAP, column(&|s| num(s.unigram_overlap))?)?;
    out.set_item(col::BIGRAM_OVERLAP, column(&|s| num(s.bigram_overlap))?)?;
    out.set_item(col::TRIGRAM_OVERLAP, column(&|s| num(s.trigram_overlap))?)?;
    out.set_item(col::SENTENCE_BLEU, column(&|s| num(s.sentence_bleu))?)?;
    out.set_item(
        col::TRANSLATION_PERPLEXITY,
        column(&|s| opt(s.translation_perplexity))?,
    )?;
    out.set_item(col::REFERENCE_LEN, column(&|s| int(s.reference_len))?)?;
    out.set_item(col::TRANSLATION_LEN, column(&|s| int(s.translation_len))?)?;
    Ok(out)
}

/// The beam-search engine of `paraforge translate`.
#[pyclass(frozen)]
struct Translator {
    model_dir: PathBuf,
    inner: Mutex<paraforge_nmt::Translator>,
    options: GenerateOptions,
}

#[pymethods]
impl Translator {
    #[new]
    #[pyo3(signature = (model_dir, device="cpu", beam=12, batch_size=None, threads=0, quantized=false, max_new_tokens=None, streams=None, no_repeat_ngram_size=None, repetition_penalty=None, length_penalty=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        model_dir: PathBuf,
        device: &str,
        beam: usize,
        batch_size: Option<usize>,
        threads: usize,
        quantized: bool,
        max_new_tokens: Option<usize>,
        streams: Option<usize>,
        no_repeat_ngram_size: Option<usize>,
        repetition_penalty: Option<f32>,
        length_penalty: Option<f32>,
    ) -> PyResult<Self> {
        let device: Device = device.parse().map_err(PyValueError::new_err)?;
        // The CLI's defaults for the device (16 and 1 on the CPU, 64 and 4
        // on CUDA).
        let batch_size = batch_size.unwrap_or_else(|| paraforge_nmt::default_batch_size(&device));
        let streams = streams.unwrap_or_else(|| paraforge_nmt::default_streams(&device));
        // `translate`'s bounds: an unbounded beam, batch or thread count
        // runs out of memory, which in Python aborts the interpreter.
        use paraforge_job::config::{max_threads, MAX_BATCH_SIZE, MAX_BEAM};
        for (name, value, max) in [
            ("beam", beam, MAX_BEAM),
            ("batch_size", batch_size, MAX_BATCH_SIZE),
        ] {
            if value == 0 || value > max {
                return Err(PyValueError::new_err(format!(
                    "{name}={value}: must be between 1 and {max}"
                )));
            }
        }
        if threads > max_threads() {
            return Err(PyValueError::new_err(format!(
                "threads={threads}: more than the limit of {}",
                max_threads()
            )));
        }
        paraforge_job::config::check_streams(threads, streams).map_err(|reason| {
            PyValueError::new_err(format!("threads={threads} x streams={streams}: {reason}"))
        })?;
        if max_new_tokens == Some(0) {
            return Err(PyValueError::new_err(
                "max_new_tokens=0: must be at least 1",
            ));
        }
        if let Some(p) = repetition_penalty.filter(|p| !(p.is_finite() && *p > 0.0)) {
            return Err(PyValueError::new_err(format!(
                "repetition_penalty={p}: must be a positive number (1.0: off)"
            )));
        }
        let load = LoadOptions {
            device,
            threads,
            streams,
            quantized,
            ..Default::default()
        };
        let inner = py
            .detach(|| paraforge_nmt::Translator::load(&model_dir, &load))
            .map_err(|e| prefixed(&model_dir, e))?;
        Ok(Translator {
            model_dir,
            inner: Mutex::new(inner),
            options: GenerateOptions {
                num_beams: beam,
                max_new_tokens,
                nbest: 1,
                batch_size,
                no_repeat_ngram_size,
                repetition_penalty,
                length_penalty,
                ..Default::default()
            },
        })
    }

    /// (translation, score) per sentence, in input order; "" and NaN for
    /// an empty sentence.
    fn translate(
        &self,
        py: Python<'_>,
        sentences: &Bound<'_, PyAny>,
    ) -> PyResult<Vec<(String, f32)>> {
        let texts = texts("sentences", sentences)?;
        let out = py.detach(|| {
            let mut t = self.inner.lock().unwrap_or_else(|p| p.into_inner());
            t.translate(&texts, &self.options)
        });
        let out = out.map_err(|e| prefixed(&self.model_dir, e))?;
        Ok(out.into_iter().map(|t| (t.text, t.score)).collect())
    }
}

/// The files of a finished output after the readers' check (manifest,
/// `_SUCCESS`, every file's SHA-256 and row count), in manifest order.
#[pyfunction]
fn verified_files(py: Python<'_>, path: PathBuf) -> PyResult<(Vec<PathBuf>, u64)> {
    let ds = py
        .detach(|| paraforge_core::dataset::open(&path))
        .map_err(|e| prefixed(&path, e))?;
    Ok((ds.paths(), ds.rows()))
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("ParaforgeError", m.py().get_type::<ParaforgeError>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<Encoder>()?;
    m.add_class::<Translator>()?;
    m.add_function(wrap_pyfunction!(score_pairs, m)?)?;
    m.add_function(wrap_pyfunction!(verified_files, m)?)?;
    Ok(())
}
