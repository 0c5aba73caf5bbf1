//! The report's two pages from one set of tables: `report.md` (Markdown
//! tables) and `report.html` (HTML tables, the figures, example pairs,
//! readable from a phone's width up).

use std::fmt::Write as _;

use super::{Moments, RangeTally, Report};

/// A table both pages render; the first `left` columns are text.
struct Table {
    head: Vec<&'static str>,
    left: usize,
    rows: Vec<Vec<String>>,
}

/// A section: heading, tables, and a sentence after them.
struct Section {
    id: &'static str,
    title: String,
    tables: Vec<(Option<String>, Table)>,
    note: String,
}

pub(super) fn pm(m: &Moments, digits: usize) -> String {
    // No value (a column null throughout, as translation_score is for an
    // input of pairs without scores) is not a mean of 0.
    if m.n == 0 {
        return "none".into();
    }
    format!("{:.*} ± {:.*}", digits, m.mean, digits, m.std())
}

fn opt(v: Option<f32>, digits: usize) -> String {
    v.map_or_else(|| "null".into(), |v| format!("{v:.digits$}"))
}

fn sections(r: &Report) -> Vec<Section> {
    let mut out = vec![corpus(r), ranges(r)];
    out.extend(rejects(r));
    out.push(examples(r));
    out
}

fn corpus(r: &Report) -> Section {
    Section {
        id: "corpus",
        title: "Corpus statistics (Wieting and Gimpel, 2018, Table 1)".into(),
        tables: vec![(
            None,
            Table {
                head: vec![
                    "pairs",
                    "avg. length (ref)",
                    "avg. length (translation)",
                    "avg. IDF (ref)",
                    "avg. para_score",
                    "vocab. entropy (nats)",
                    "vocabulary",
                ],
                left: 0,
                rows: vec![vec![
                    r.pairs.to_string(),
                    pm(&r.reference_len, 1),
                    pm(&r.translation_len, 1),
                    pm(&r.reference_idf, 2),
                    pm(&r.para_score, 2),
                    format!("{:.2}", r.vocab_entropy),
                    r.vocab_size.to_string(),
                ]],
            },
        )],
        note: format!(
            "Pairs without a para_score (no known word on a side): {}. Truncated sources: {}. Mean trigram overlap {}, mean translation score {}.",
            r.no_para_score,
            r.truncated,
            pm(&r.trigram_overlap, 3),
            pm(&r.translation_score, 3)
        ),
    }
}

fn ranges(r: &Report) -> Section {
    let ranked: u64 = r.ranges.iter().map(|x| x.pairs).sum();
    let rows = r
        .ranges
        .iter()
        .enumerate()
        .map(|(k, row)| {
            vec![
                RangeTally::label(k),
                row.pairs.to_string(),
                format!("{:.1}%", 100.0 * row.pairs as f64 / ranked.max(1) as f64),
                format!(
                    "{:.2} ({:.2})",
                    row.trigram_overlap.mean,
                    row.trigram_overlap.std()
                ),
                format!("{:.1}", row.reference_len.mean),
                format!("{:.1}", row.translation_len.mean),
                if row.translation_score.n == 0 {
                    "none".to_string()
                } else {
                    format!("{:.2}", row.translation_score.mean)
                },
            ]
        })
        .collect();
    Section {
        id: "ranges",
        title: "By para_score range (Wieting and Gimpel, 2018, Table 3)".into(),
        tables: vec![(
            None,
            Table {
                head: vec![
                    "para_score range",
                    "pairs",
                    "share",
                    "trigram overlap mean (std)",
                    "ref. length",
                    "translation length",
                    "translation score",
                ],
                left: 1,
                rows,
            },
        )],
        note: "ParaNMT-50M for comparison: 4.0M / 3.8M / 6.9M / 14.4M / 18.0M pairs, mean trigram overlap 0.00 / 0.02 / 0.07 / 0.17 / 0.35.".into(),
    }
}

/// The manifest's rejected lines by reason, where it has any.
fn rejects(r: &Report) -> Option<Section> {
    if r.rejects_by_reason.is_empty() {
        return None;
    }
    let mut by: Vec<_> = r.rejects_by_reason.iter().collect();
    by.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    let rows = by
        .into_iter()
        .map(|(code, n)| {
            let kind = if paraforge_core::rejects::is_filter_code(code) {
                "[filters] rule"
            } else {
                "malformed"
            };
            vec![code.clone(), kind.to_string(), n.to_string()]
        })
        .collect();
    Some(Section {
        id: "rejects",
        title: "Input lines not used (`_rejects/`)".into(),
        tables: vec![(
            None,
            Table {
                head: vec!["reason", "kind", "lines"],
                left: 2,
                rows,
            },
        )],
        note: String::new(),
    })
}

fn examples(r: &Report) -> Section {
    let tables = r
        .ranges
        .iter()
        .enumerate()
        .filter(|(_, row)| !row.examples.is_empty())
        .map(|(k, row)| {
            let rows = row
                .examples
                .iter()
                .map(|e| {
                    vec![
                        e.reference.clone(),
                        e.translation.clone(),
                        opt(e.para_score, 3),
                        format!("{:.2}", e.trigram_overlap),
                        opt(e.translation_score, 2),
                    ]
                })
                .collect();
            let caption = format!("{} ({} pairs)", RangeTally::label(k), row.pairs);
            let head = vec![
                "reference",
                "back-translation",
                "para_score",
                "trigram overlap",
                "translation score",
            ];
            (
                Some(caption),
                Table {
                    head,
                    left: 2,
                    rows,
                },
            )
        })
        .collect();
    Section {
        id: "examples",
        title: "Example pairs per para_score range (a uniform sample of each)".into(),
        tables,
        note: String::new(),
    }
}

pub(super) fn markdown(r: &Report, provenance: &str, figures: &[(String, String)]) -> String {
    let cell = |t: &str| t.replace('|', "\\|").replace('\n', " ");
    let mut s = format!("# paraforge report: {}\n\n", r.input);
    let _ = writeln!(s, "## Where the pairs come from\n\n{provenance}");
    for sec in sections(r) {
        let _ = writeln!(s, "## {}\n", sec.title);
        for (caption, t) in &sec.tables {
            if let Some(c) = caption {
                let _ = writeln!(s, "### {c}\n");
            }
            let _ = writeln!(s, "| {} |", t.head.join(" | "));
            let align: Vec<&str> = (0..t.head.len())
                .map(|i| if i < t.left { "---" } else { "---:" })
                .collect();
            let _ = writeln!(s, "|{}|", align.join("|"));
            for row in &t.rows {
                let cells: Vec<String> = row.iter().map(|c| cell(c)).collect();
                let _ = writeln!(s, "| {} |", cells.join(" | "));
            }
            s.push('\n');
        }
        if !sec.note.is_empty() {
            let _ = writeln!(s, "{}\n", sec.note);
        }
        // The figures right after the tables they picture.
        if sec.id == "ranges" {
            s.push_str("## Figures\n\n");
            for (title, file) in figures {
                let _ = writeln!(s, "![{title}]({file})\n");
            }
        }
    }
    s
}

fn esc(t: &str) -> String {
    t.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Escaped text with `code` spans as <code>.
fn inline(t: &str) -> String {
    let mut out = String::new();
    for (i, part) in esc(t).split('`').enumerate() {
        if i % 2 == 1 {
            let _ = write!(out, "<code>{part}</code>");
        } else {
            out.push_str(part);
        }
    }
    out
}

/// The provenance's Markdown list (`- ` items, nested by two spaces) as
/// nested HTML lists.
fn list(md: &str) -> String {
    let mut s = String::new();
    let mut depth = 0;
    for line in md.lines() {
        let text = line.trim_start();
        let Some(item) = text.strip_prefix("- ") else {
            continue;
        };
        let d = (line.len() - text.len()) / 2 + 1;
        while depth < d {
            s.push_str("<ul>");
            depth += 1;
        }
        while depth > d {
            s.push_str("</ul>");
            depth -= 1;
        }
        let _ = write!(s, "<li>{}</li>", inline(item));
    }
    s.push_str(&"</ul>".repeat(depth));
    s
}

const STYLE: &str = "body{font-family:system-ui,sans-serif;line-height:1.4;max-width:1100px;margin:0 auto;padding:0 12px;color:#222}\
h1{font-size:1.4em;overflow-wrap:anywhere}h2{font-size:1.15em;margin-top:1.6em}h3{font-size:1em}\
.scroll{overflow-x:auto}table{border-collapse:collapse;margin:6px 0;font-size:.92em}\
th,td{border-bottom:1px solid #ddd;padding:4px 8px;text-align:right;vertical-align:top}\
th{background:#f3f3f3}th.l,td.l{text-align:left}td.t{min-width:14em;max-width:32em}\
code{overflow-wrap:anywhere}ul{padding-left:1.2em}\
.figs{display:grid;grid-template-columns:repeat(auto-fit,minmax(min(100%,420px),1fr));gap:12px}\
figure{margin:0}img{max-width:100%;height:auto;display:block}figcaption{font-size:.9em;color:#555}";

pub(super) fn html(r: &Report, provenance: &str, figures: &[(String, String)]) -> String {
    let mut s = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>paraforge report: {0}</title><style>{STYLE}</style></head><body>\
         <h1>paraforge report: {0}</h1>\
         <section id=\"provenance\"><h2>Where the pairs come from</h2>{1}</section>",
        esc(&r.input),
        list(provenance)
    );
    for sec in sections(r) {
        let _ = write!(
            s,
            "<section id=\"{}\"><h2>{}</h2>",
            sec.id,
            inline(&sec.title)
        );
        for (caption, t) in &sec.tables {
            if let Some(c) = caption {
                let _ = write!(s, "<h3>{}</h3>", esc(c));
            }
            s.push_str("<div class=\"scroll\"><table><thead><tr>");
            for (i, h) in t.head.iter().enumerate() {
                let class = if i < t.left { " class=\"l\"" } else { "" };
                let _ = write!(s, "<th{class}>{}</th>", esc(h));
            }
            s.push_str("</tr></thead><tbody>");
            for row in &t.rows {
                s.push_str("<tr>");
                for (i, c) in row.iter().enumerate() {
                    let class = match (i < t.left, sec.id == "examples") {
                        (true, true) => " class=\"l t\"",
                        (true, false) => " class=\"l\"",
                        _ => "",
                    };
                    let _ = write!(s, "<td{class}>{}</td>", esc(c));
                }
                s.push_str("</tr>");
            }
            s.push_str("</tbody></table></div>");
        }
        if !sec.note.is_empty() {
            let _ = write!(s, "<p>{}</p>", inline(&sec.note));
        }
        s.push_str("</section>");
        if sec.id == "ranges" {
            s.push_str(&html_figures(figures));
        }
    }
    s.push_str("</body></html>\n");
    s
}

fn html_figures(figures: &[(String, String)]) -> String {
    let mut s = String::from("<section id=\"figures\"><h2>Figures</h2><div class=\"figs\">");
    for (title, file) in figures {
        let _ = write!(
            s,
            "<figure><img src=\"{}\" alt=\"{1}\" width=\"640\"><figcaption>{1}</figcaption></figure>",
            esc(file),
            esc(title)
        );
    }
    s.push_str("</div></section>");
    s
}
