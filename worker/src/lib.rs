//! The worker: processes leased shards (`shard`) and counts the model's
//! work for the coordinator's metrics (`metrics`).

pub mod metrics;
pub mod node;
pub mod shard;

pub use metrics::Throughput;
pub use shard::{process, Progress, Scorers, ShardError, ShardInput, ShardOutput, Stages};

#[cfg(test)]
mod tests {
    use std::path::Path;

    use arrow_array::{Array, StringArray};
    use paraforge_core::Vectors;
    use paraforge_job::bitext::Format;
    use paraforge_job::filters::{Filters, PreFilter};
    use paraforge_nmt::{GenerateOptions, LoadOptions, Translator};
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

    use super::*;

    fn root() -> &'static Path {
        Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
    }

    /// A CzEng 1.6 file read whole as one shard.
    fn whole_file(input: &Path) -> ShardInput {
        ShardInput {
            path: input.display().to_string(),
            format: Format::Czeng16,
            range: None,
            max_chars: 1000,
            drop_lines: Vec::new(),
        }
    }

    #[test]
    fn a_shard_becomes_one_parquet_row_per_pair_in_input_order() {
        let dir = tempfile::tempdir().unwrap();
        let sample = root().join("data/sample/czeng16-heldout.cs-en.tsv");
        // 300 real lines plus three dirty ones in the middle.
        let text = std::fs::read_to_string(&sample).unwrap();
        let mut lines: Vec<String> = text.lines().take(300).map(String::from).collect();
        lines.insert(100, "only\ttwo".into());
        lines.insert(200, "x-1\t1.0\t\tempty source".into());
        lines.insert(250, "x-2\t1.0\tdlouhá\t".to_string() + &"a".repeat(2000));
        let input = dir.path().join("in.tsv");
        std::fs::write(&input, lines.join("\n") + "\n").unwrap();

        let mut t =
            Translator::load(&root().join("models/tiny-cs-en"), &LoadOptions::default()).unwrap();
        let (v, _) =
            Vectors::load(&root().join("data/vectors/glove.6B.50d.top25k.txt.gz")).unwrap();
        let shard = whole_file(&input);
        let o = GenerateOptions {
            num_beams: 2,
            max_new_tokens: Some(24),
            ..GenerateOptions::default()
        };
        // A 3-gram model of other references of the sample, for the
        // perplexity column.
        let refs = dir.path().join("refs.txt");
        let other: Vec<&str> = text
            .lines()
            .skip(300)
            .take(1000)
            .map(|l| l.split('\t').nth(3).unwrap())
            .collect();
        std::fs::write(&refs, other.join("\n")).unwrap();
        let arpa = dir.path().join("refs.arpa");
        paraforge_core::lm::train_files(&[refs], None, 3, &arpa).unwrap();
        let lm = paraforge_core::ArpaModel::load(&arpa).unwrap();
        let progress = Progress::default();
        let throughput = Throughput::default();
        let out = process(
            &shard,
            Some(&mut t),
            &o,
            Stages {
                filters: &PreFilter::new(&Filters::default()).unwrap(),
                scorers: Scorers {
                    encoder: Some(&v),
                    lm: Some(&lm),
                    bleu: Default::default(),
                },
                throughput: &throughput,
            },
            &[("paraforge.model", "tiny".into())],
            &progress,
            &|| false,
        )
        .unwrap();
        assert_eq!(out.pairs, 300);
        assert_eq!(out.rejects, 3);
        assert_eq!(
            progress.records.load(std::sync::atomic::Ordering::Relaxed),
            303
        );
        // Every translated sentence counted once, in batches of at most
        // the default size, each batch in exactly one bucket.
        let m = throughput.report();
        assert_eq!(m.sentences, 300);
        assert!(m.batches >= 300 / o.batch_size as u64, "{m:?}");
        assert_eq!(m.batch_buckets.iter().sum::<u64>(), m.batches);
        assert!(m.source_tokens >= 300 && m.output_tokens > 0, "{m:?}");
        assert!(m.batch_seconds > 0.0);
        let rejects: Vec<serde_json::Value> = String::from_utf8(out.rejects_jsonl.clone())
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(
            rejects
                .iter()
                .map(|r| r["line"].as_u64().unwrap())
                .collect::<Vec<_>>(),
            [101, 201, 251]
        );
        assert!(rejects[2]["reason"]
            .as_str()
            .unwrap()
            .contains("more than the limit"));

        let r = ParquetRecordBatchReaderBuilder::try_new(bytes::Bytes::from(out.parquet.clone()))
            .unwrap();
        let md = r
            .metadata()
            .file_metadata()
            .key_value_metadata()
            .unwrap()
            .clone();
        assert!(md.iter().any(|kv| kv.key == "paraforge.model"));
        let mut ids = Vec::new();
        for b in r.build().unwrap() {
            let b = b.unwrap();
            let c = b
                .column_by_name("id")
                .unwrap()
                .as_any()
                .downcast_ref::<StringArray>()
                .unwrap();
            ids.extend((0..c.len()).map(|i| c.value(i).to_string()));
            // The post-translation scores, as their definitions compute them.
            let text = |n: &str| {
                b.column_by_name(n)
                    .unwrap()
                    .as_any()
                    .downcast_ref::<StringArray>()
                    .unwrap()
                    .clone()
            };
            let num = |n: &str| {
                b.column_by_name(n)
                    .unwrap()
                    .as_any()
                    .downcast_ref::<arrow_array::Float32Array>()
                    .unwrap()
                    .clone()
            };
            let (refs, trans) = (text("reference"), text("translation"));
            let (bleu, ppl) = (num("sentence_bleu"), num("translation_perplexity"));
            for i in 0..b.num_rows() {
                let (r, t) = (refs.value(i), trans.value(i));
                let want = paraforge_core::bleu::sentence_bleu(t, r) as f32;
                assert_eq!(bleu.value(i), want, "{t:?} / {r:?}");
                assert!(!ppl.is_null(i));
                assert_eq!(ppl.value(i), lm.perplexity(t) as f32, "{t:?}");
            }
        }
        let want: Vec<String> = text
            .lines()
            .take(300)
            .map(|l| l.split('\t').next().unwrap().to_string())
            .collect();
        assert_eq!(ids, want);
        assert_eq!(out.parquet_sha256.len(), 64);
    }

    /// `[filters]` in the worker on real lines of the sample with the junk
    /// crawled bitexts hold: each rule drops its lines with its code, the
    /// rest are translated in input order.
    #[test]
    fn filters_drop_junk_before_translation_with_a_code_per_reason() {
        let dir = tempfile::tempdir().unwrap();
        let text =
            std::fs::read_to_string(root().join("data/sample/czeng16-heldout.cs-en.tsv")).unwrap();
        let real: Vec<&str> = text.lines().skip(1000).take(40).collect();
        let en = |i: usize| real[i].split('\t').nth(3).unwrap().to_string();
        let mut lines: Vec<String> = real.iter().map(|l| l.to_string()).collect();
        let junk = [
            (5, format!("j-1\t1.0\t{}\t{}", en(0), en(0)), "copy"),
            (10, format!("j-2\t1.0\t{}\t{}", en(1), en(2)), "language"),
            (
                15,
                "j-3\t1.0\t2014 - 2015 | 12,5 %\t2014 - 2015 | 12.5 %".into(),
                "few_letters",
            ),
            (20, "j-4\t1.0\tAno.\tYes.".into(), "too_few_tokens"),
            (
                25,
                format!("j-5\t1.0\tAno, to je ono.\t{}", en(3) + " " + &en(4)),
                "length_ratio",
            ),
        ];
        for (at, line, _) in &junk {
            lines.insert(*at, line.clone());
        }
        let input = dir.path().join("in.tsv");
        std::fs::write(&input, lines.join("\n") + "\n").unwrap();
        let cfg: Filters = toml::from_str(
            "min_tokens = 3\nmax_length_ratio = 3.0\ndrop_copies = true\n\
             min_letter_ratio = 0.5\nsource_lang = \"ces\"\nreference_lang = \"eng\"",
        )
        .unwrap();
        let mut t =
            Translator::load(&root().join("models/tiny-cs-en"), &LoadOptions::default()).unwrap();
        let shard = ShardInput {
            // As the coordinator's dedup pass would mark a repeated source.
            drop_lines: vec![3],
            ..whole_file(&input)
        };
        let o = GenerateOptions {
            num_beams: 1,
            max_new_tokens: Some(8),
            ..GenerateOptions::default()
        };
        let out = process(
            &shard,
            Some(&mut t),
            &o,
            Stages {
                filters: &PreFilter::new(&cfg).unwrap(),
                scorers: Scorers::default(),
                throughput: &Throughput::default(),
            },
            &[],
            &Progress::default(),
            &|| false,
        )
        .unwrap();
        let rejects: Vec<serde_json::Value> = String::from_utf8(out.rejects_jsonl)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let got: Vec<(u64, &str)> = rejects
            .iter()
            .map(|r| (r["line"].as_u64().unwrap(), r["code"].as_str().unwrap()))
            .collect();
        let want: Vec<(u64, &str)> = [(3, "duplicate")]
            .into_iter()
            .chain(junk.iter().map(|(at, _, code)| (*at as u64 + 1, *code)))
            .collect();
        assert_eq!(got, want, "{rejects:#?}");
        assert_eq!((out.pairs, out.rejects), (39, 6));
        let ids: Vec<String> =
            ParquetRecordBatchReaderBuilder::try_new(bytes::Bytes::from(out.parquet))
                .unwrap()
                .build()
                .unwrap()
                .flat_map(|b| {
                    let b = b.unwrap();
                    let c = b
                        .column_by_name("id")
                        .unwrap()
                        .as_any()
                        .downcast_ref::<StringArray>()
                        .unwrap()
                        .clone();
                    (0..c.len())
                        .map(|i| c.value(i).to_string())
                        .collect::<Vec<_>>()
                })
                .collect();
        let kept: Vec<String> = real
            .iter()
            .enumerate()
            .filter(|&(i, _)| i != 2)
            .map(|(_, l)| l)
            .map(|l| l.split('\t').next().unwrap().to_string())
            .collect();
        assert_eq!(ids, kept);
    }
}
