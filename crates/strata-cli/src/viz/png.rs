//! `strata viz --png`: the timeline (live memory stacked by category, reserved memory as a
//! line) drawn with plotters' bitmap backend and an embedded DejaVu Sans, so it needs no
//! fontconfig, no system fonts and no display.

use std::path::Path;
use std::sync::Once;

use plotters::prelude::*;
use plotters::style::{register_font, FontStyle};

use super::VizData;

/// DejaVu Sans (its license is `assets/DejaVuSans-LICENSE.txt`).
const FONT: &[u8] = include_bytes!("../../assets/DejaVuSans.ttf");

const COLOURS: [RGBColor; 8] = [
    RGBColor(0x4e, 0x79, 0xa7),
    RGBColor(0xf2, 0x8e, 0x2b),
    RGBColor(0xe1, 0x57, 0x59),
    RGBColor(0x76, 0xb7, 0xb2),
    RGBColor(0x59, 0xa1, 0x4f),
    RGBColor(0xed, 0xc9, 0x48),
    RGBColor(0xb0, 0x7a, 0xa1),
    RGBColor(0x88, 0x88, 0x88),
];

fn register() -> Result<(), String> {
    static ONCE: Once = Once::new();
    let mut outcome = Ok(());
    ONCE.call_once(|| {
        outcome = register_font("sans-serif", FontStyle::Normal, FONT)
            .map_err(|_| "the embedded font does not load".to_owned());
    });
    outcome
}

/// Bytes of each category live at `cols` evenly spaced moments, and reserved bytes there.
fn columns(data: &VizData, cols: usize) -> (Vec<Vec<f64>>, Vec<f64>) {
    if !data.complete {
        return summary_columns(data, cols);
    }
    let n = data.entries.max(1);
    let k = data.names[0].len();
    let mut diff = vec![vec![0f64; cols + 1]; k];
    for l in &data.lives {
        let (a, b) = (l.s * cols / n, (l.e * cols / n).min(cols));
        if b > a {
            diff[l.g[0]][a] += l.b as f64;
            diff[l.g[0]][b] -= l.b as f64;
        }
    }
    let stacks = diff
        .iter()
        .map(|d| {
            let mut run = 0.0;
            d[..cols]
                .iter()
                .map(|v| {
                    run += v;
                    run
                })
                .collect()
        })
        .collect();
    let mut reserved = Vec::with_capacity(cols);
    let (mut level, mut next) = (0u64, 0usize);
    for x in 0..cols {
        let t = x * n / cols;
        while next < data.reserved.len() && data.reserved[next].0 <= t {
            level = data.reserved[next].1;
            next += 1;
        }
        reserved.push(level as f64);
    }
    (stacks, reserved)
}

/// [`columns`] from the summary, when the data does not hold every allocation: each pixel
/// column shows the summary column under it whose bytes peak highest. Categories beyond the
/// summary's colours are drawn as the first of them not coloured.
fn summary_columns(data: &VizData, cols: usize) -> (Vec<Vec<f64>>, Vec<f64>) {
    let s = &data.summary;
    let (m, k) = (s.at.len().max(1), data.names[0].len());
    let shown = &s.shown[0];
    let other = (0..k).find(|g| !shown.contains(g));
    let mut stacks = vec![vec![0f64; cols]; k];
    let mut reserved = vec![0f64; cols];
    let stacks_of = &s.stacks[0];
    for x in 0..cols {
        let c0 = x * m / cols;
        let c1 = ((x + 1) * m / cols).max(c0 + 1).min(s.at.len());
        let total = |c: usize| stacks_of.iter().map(|col| col[c]).sum::<u64>();
        let Some(best) = (c0..c1).max_by_key(|&c| (total(c), std::cmp::Reverse(c))) else {
            continue;
        };
        reserved[x] = (c0..c1).map(|c| s.reserved[c]).max().unwrap_or(0) as f64;
        for (slot, col) in stacks_of.iter().enumerate() {
            let g = shown.get(slot).copied().or(other);
            if let Some(g) = g {
                stacks[g][x] += col[best] as f64;
            }
        }
    }
    (stacks, reserved)
}

/// Draws the timeline of `data` into a `width` × `height` PNG at `path`.
pub fn timeline_png(data: &VizData, path: &Path, width: u32, height: u32) -> Result<(), String> {
    register()?;
    let cols = 400usize;
    let (stacks, reserved) = columns(data, cols);
    let mib = |b: f64| b / (1024.0 * 1024.0);
    let top = (0..cols)
        .map(|x| stacks.iter().map(|s| s[x]).sum::<f64>().max(reserved[x]))
        .fold(0.0f64, f64::max)
        .max(1.0);
    let draw = || -> Result<(), Box<dyn std::error::Error>> {
        let root = BitMapBackend::new(path, (width, height)).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(format!("memory of {}", data.title), ("sans-serif", 18))
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(60)
            .build_cartesian_2d(0usize..cols, 0f64..mib(top) * 1.05)?;
        chart
            .configure_mesh()
            .x_desc("time (trace entries, scaled)")
            .y_desc("MiB")
            .label_style(("sans-serif", 12))
            .draw()?;
        let mut base = vec![0f64; cols];
        for (i, stack) in stacks.iter().enumerate() {
            let colour = COLOURS[i.min(COLOURS.len() - 1)];
            let upper: Vec<f64> = base.iter().zip(stack).map(|(b, s)| b + s).collect();
            let lower = base.clone();
            chart
                .draw_series(std::iter::once(Polygon::new(
                    (0..cols)
                        .map(|x| (x, mib(upper[x])))
                        .chain((0..cols).rev().map(|x| (x, mib(lower[x]))))
                        .collect::<Vec<_>>(),
                    colour.filled(),
                )))?
                .label(data.names[0][i].clone())
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 10, y + 5)], colour.filled())
                });
            base = upper;
        }
        chart
            .draw_series(LineSeries::new(
                (0..cols).map(|x| (x, mib(reserved[x]))),
                BLACK.stroke_width(2),
            ))?
            .label("reserved")
            .legend(|(x, y)| PathElement::new([(x, y), (x + 10, y)], BLACK.stroke_width(2)));
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .label_font(("sans-serif", 12))
            .draw()?;
        root.present()?;
        Ok(())
    };
    draw().map_err(|e| format!("cannot draw {}: {e}", path.display()))
}
