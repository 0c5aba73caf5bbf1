//! Writes a large dataset of real scored pairs for the binning benchmark
//! (`make bench-bins`): the pairs of a TSV (`id, source, reference,
//! translation, translation_score`) are scored once with real vectors, then
//! written over and over, each copy with its own id (`<id>#<copy>`), until
//! ROWS rows fill FILES Parquet files, then sealed as a job's output (a
//! manifest listing every file with its rows and digest, and `_SUCCESS`),
//! since every reader refuses a directory without one.
//!
//! usage: make_rows PAIRS.tsv VECTORS OUT_DIR ROWS FILES

use paraforge_core::schema::{schema, PairFileWriter};
use paraforge_core::{PairRow, RowsBuilder, Scorer, Vectors};

fn main() {
    let a: Vec<String> = std::env::args().collect();
    if a.len() != 6 {
        eprintln!("usage: make_rows PAIRS.tsv VECTORS OUT_DIR ROWS FILES");
        std::process::exit(2);
    }
    let text = std::fs::read_to_string(&a[1]).expect("pairs file");
    let (vectors, _) = Vectors::load(a[2].as_ref()).expect("vectors");
    let out = std::path::Path::new(&a[3]);
    let rows: usize = a[4].parse().expect("ROWS");
    let files: usize = a[5].parse().expect("FILES");
    let mut scorer = Scorer::new(Some(&vectors));
    let base: Vec<PairRow> = text
        .lines()
        .filter_map(|l| {
            let c: Vec<&str> = l.split('\t').collect();
            (c.len() == 5).then(|| PairRow {
                id: c[0].into(),
                source: c[1].into(),
                reference: c[2].into(),
                translation: c[3].into(),
                candidate_rank: 1,
                translation_score: Some(c[4].parse().unwrap_or(f32::NAN)),
                source_len: Some(c[1].split_whitespace().count() as i32),
                truncated: false,
                scores: scorer.score(c[2], c[3]),
            })
        })
        .collect();
    let per_file = rows.div_ceil(files);
    let mut written = 0usize;
    for f in 0..files {
        let mut w =
            PairFileWriter::create(&out.join(format!("part-{f:05}.parquet")), schema(), &[])
                .expect("writer");
        let mut b = RowsBuilder::default();
        let end = (written + per_file).min(rows);
        while written < end {
            let mut r = base[written % base.len()].clone();
            r.id = format!("{}#{}", r.id, written / base.len());
            b.push(&r);
            written += 1;
            if b.len() == 65_536 {
                w.write(&b.finish()).expect("write");
            }
        }
        if !b.is_empty() {
            w.write(&b.finish()).expect("write");
        }
        w.close().expect("close");
    }
    paraforge_core::dataset::testing::seal(out, paraforge_core::layout::ManifestKind::Job);
    println!("{written} rows in {files} files under {}", out.display());
}
