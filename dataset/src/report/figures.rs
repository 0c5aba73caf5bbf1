//! The report's SVG figures (plotters): a histogram per score, with the
//! para_score ranges' bounds drawn on para_score's, and para_score against
//! trigram overlap with each range's mean.

use std::path::Path;

use plotters::prelude::*;

use super::{Hist, RangeRow, ReportError};
use crate::bins::PARA_RANGES;

/// Bars drawn at most: finer histograms are merged down to this.
const MAX_BARS: usize = 80;

fn plot_err(path: &Path, e: impl std::fmt::Display) -> ReportError {
    ReportError::Plot {
        path: path.to_path_buf(),
        reason: e.to_string(),
    }
}

/// The finite bounds between para_score ranges (0.2, 0.4, ...).
fn range_bounds() -> impl Iterator<Item = f64> {
    PARA_RANGES
        .iter()
        .map(|&(lo, _, _)| lo as f64)
        .filter(|lo| lo.is_finite())
}

/// (lo, hi, counts) of what `h` draws: with `trim`, the span from the first
/// to the last non-empty bin (a translation score's axis starts where the
/// data does), merged to at most [`MAX_BARS`] bars.
fn bars(h: &Hist, trim: bool) -> (f64, f64, Vec<u64>) {
    let width = (h.hi - h.lo) / h.bins.len() as f64;
    let (first, last) = match (
        h.bins.iter().position(|&c| c > 0),
        h.bins.iter().rposition(|&c| c > 0),
    ) {
        (Some(f), Some(l)) if trim => (f, l),
        _ => (0, h.bins.len() - 1),
    };
    let span = &h.bins[first..=last];
    let merge = span.len().div_ceil(MAX_BARS);
    let counts: Vec<u64> = span.chunks(merge).map(|c| c.iter().sum()).collect();
    let lo = h.lo + first as f64 * width;
    (lo, lo + (counts.len() * merge) as f64 * width, counts)
}

/// One histogram: `title` above, `x_desc` (with its unit) under the x axis,
/// pairs up the y axis; `ranges` draws the para_score ranges' bounds.
pub(super) fn histogram(
    path: &Path,
    title: &str,
    x_desc: &str,
    h: &Hist,
    trim: bool,
    ranges: bool,
) -> Result<(), ReportError> {
    let err = |e| plot_err(path, e);
    let (lo, hi, counts) = bars(h, trim);
    let width = (hi - lo) / counts.len() as f64;
    let root = SVGBackend::new(path, (640, 380)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let ymax = counts.iter().copied().max().unwrap_or(1).max(1);
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(10)
        .x_label_area_size(45)
        .y_label_area_size(65)
        .build_cartesian_2d(lo..hi, 0u64..(ymax + ymax / 10 + 1))
        .map_err(err)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_desc(x_desc)
        .y_desc("pairs")
        .axis_desc_style(("sans-serif", 15))
        .label_style(("sans-serif", 13))
        .draw()
        .map_err(err)?;
    chart
        .draw_series(counts.iter().enumerate().map(|(i, &c)| {
            let x0 = lo + i as f64 * width;
            Rectangle::new([(x0, 0), (x0 + width * 0.95, c)], BLUE.mix(0.6).filled())
        }))
        .map_err(err)?;
    if ranges {
        let top = ymax + ymax / 10;
        chart
            .draw_series(
                range_bounds().filter(|b| (lo..=hi).contains(b)).map(|b| {
                    PathElement::new(vec![(b, 0), (b, top)], RED.mix(0.7).stroke_width(1))
                }),
            )
            .map_err(err)?
            .label("para_score range bounds")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], RED.mix(0.7)));
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK.mix(0.3))
            .position(SeriesLabelPosition::UpperLeft)
            .draw()
            .map_err(err)?;
    }
    root.present().map_err(err)
}

/// A sample of (trigram overlap, para_score) points, the ranges' bounds,
/// and each range's mean (trigram overlap, para_score) as a labelled mark.
pub(super) fn scatter(
    path: &Path,
    points: &[(f32, f32)],
    ranges: &[RangeRow],
) -> Result<(), ReportError> {
    let err = |e| plot_err(path, e);
    let root = SVGBackend::new(path, (640, 520)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption("para_score against trigram overlap", ("sans-serif", 20))
        .margin(10)
        .x_label_area_size(45)
        .y_label_area_size(55)
        .build_cartesian_2d(0f32..1f32, -0.2f32..1f32)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("trigram overlap (0-1)")
        .y_desc("para_score (cosine)")
        .axis_desc_style(("sans-serif", 15))
        .label_style(("sans-serif", 13))
        .draw()
        .map_err(err)?;
    chart
        .draw_series(
            points
                .iter()
                .map(|&(x, y)| Circle::new((x, y.clamp(-0.2, 1.0)), 2, BLUE.mix(0.2).filled())),
        )
        .map_err(err)?
        .label(format!("{} pairs (a uniform sample)", points.len()))
        .legend(|(x, y)| Circle::new((x + 8, y), 3, BLUE.mix(0.5).filled()));
    chart
        .draw_series(range_bounds().map(|b| {
            let b = b as f32;
            PathElement::new(vec![(0.0, b), (1.0, b)], RED.mix(0.5).stroke_width(1))
        }))
        .map_err(err)?
        .label("para_score range bounds")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], RED.mix(0.5)));
    let means: Vec<(f32, f32, &str)> = ranges
        .iter()
        .filter(|r| r.pairs > 0 && r.para_score.n > 0)
        .map(|r| {
            (
                r.trigram_overlap.mean as f32,
                (r.para_score.mean as f32).clamp(-0.2, 1.0),
                r.label.as_str(),
            )
        })
        .collect();
    chart
        .draw_series(
            means
                .iter()
                .map(|&(x, y, _)| TriangleMarker::new((x, y), 7, RED.filled())),
        )
        .map_err(err)?
        .label("each range's mean")
        .legend(|(x, y)| TriangleMarker::new((x + 8, y), 5, RED.filled()));
    chart
        .draw_series(means.iter().map(|&(x, y, label)| {
            Text::new(
                label.to_string(),
                (x + 0.015, y),
                ("sans-serif", 13).into_font(),
            )
        }))
        .map_err(err)?;
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK.mix(0.3))
        .position(SeriesLabelPosition::LowerRight)
        .draw()
        .map_err(err)?;
    root.present().map_err(err)
}
