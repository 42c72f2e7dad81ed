//! The simulator's chart: one row per algorithm, admitted and rejected requests per time slice,
//! as a self-contained SVG.

use std::fmt::Write as _;

use tollgate::Micros;

use super::Outcome;

const WIDTH: f64 = 900.0;
const LEFT: f64 = 150.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 50.0;
const ROW: f64 = 90.0;
const GAP: f64 = 18.0;
/// Time slices across the chart.
const SLICES: usize = 80;

const ADMITTED: &str = "#2e7d32";
const REJECTED: &str = "#c62828";

/// Escapes text for SVG.
fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn slice_counts(times: &[Micros], end: Micros) -> Vec<u64> {
    let mut counts = vec![0u64; SLICES];
    for &time in times {
        let slice = ((time as u128 * SLICES as u128) / end.max(1) as u128) as usize;
        counts[slice.min(SLICES - 1)] += 1;
    }
    counts
}

/// Draws `outcomes` over `end` microseconds; `period` marks window boundaries and `per_slice`
/// is the quota's share of one slice, drawn as a dashed line.
pub(super) fn svg(title: &str, outcomes: &[Outcome], end: Micros, period: Micros) -> String {
    let height = TOP + outcomes.len() as f64 * (ROW + GAP) + 30.0;
    let plot = WIDTH - LEFT - RIGHT;
    let slices: Vec<(Vec<u64>, Vec<u64>)> = outcomes
        .iter()
        .map(|o| {
            (
                slice_counts(&o.admitted, end),
                slice_counts(&o.rejected, end),
            )
        })
        .collect();
    let tallest = slices
        .iter()
        .flat_map(|(a, r)| a.iter().zip(r).map(|(a, r)| a + r))
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let bar = plot / SLICES as f64;
    let mut out = String::new();
    let _ = write!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = write!(out, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = write!(
        out,
        r#"<text x="{LEFT}" y="22" font-size="15" font-weight="bold">{}</text>"#,
        escape(title)
    );
    let _ = write!(
        out,
        r#"<rect x="{}" y="10" width="10" height="10" fill="{ADMITTED}"/><text x="{}" y="20">admitted</text><rect x="{}" y="10" width="10" height="10" fill="{REJECTED}"/><text x="{}" y="20">rejected</text>"#,
        WIDTH - 190.0,
        WIDTH - 175.0,
        WIDTH - 100.0,
        WIDTH - 85.0
    );
    for (row, (outcome, (admitted, rejected))) in outcomes.iter().zip(&slices).enumerate() {
        let top = TOP + row as f64 * (ROW + GAP);
        let base = top + ROW;
        let _ = write!(
            out,
            r#"<text x="10" y="{}" font-weight="bold">{}</text><text x="10" y="{}">{} admitted</text><text x="10" y="{}">{} rejected</text>"#,
            top + 30.0,
            escape(&outcome.algorithm),
            top + 48.0,
            outcome.admitted.len(),
            top + 64.0,
            outcome.rejected.len()
        );
        let _ = write!(
            out,
            r##"<line x1="{LEFT}" y1="{base}" x2="{}" y2="{base}" stroke="#444"/>"##,
            LEFT + plot
        );
        // Period boundaries, where fixed windows roll over.
        let mut boundary = period;
        while boundary < end && period > 0 {
            let x = LEFT + plot * boundary as f64 / end as f64;
            let _ = write!(
                out,
                r##"<line x1="{x:.1}" y1="{top}" x2="{x:.1}" y2="{base}" stroke="#999" stroke-dasharray="2,3"/>"##
            );
            boundary += period;
        }
        for (slice, (a, r)) in admitted.iter().zip(rejected).enumerate() {
            let x = LEFT + slice as f64 * bar;
            let a_height = ROW * *a as f64 / tallest;
            let r_height = ROW * *r as f64 / tallest;
            if *a > 0 {
                let _ = write!(
                    out,
                    r#"<rect x="{x:.1}" y="{:.1}" width="{:.1}" height="{a_height:.1}" fill="{ADMITTED}"/>"#,
                    base - a_height,
                    (bar - 1.0).max(0.5)
                );
            }
            if *r > 0 {
                let _ = write!(
                    out,
                    r#"<rect x="{x:.1}" y="{:.1}" width="{:.1}" height="{r_height:.1}" fill="{REJECTED}" fill-opacity="0.75"/>"#,
                    base - a_height - r_height,
                    (bar - 1.0).max(0.5)
                );
            }
        }
    }
    let axis = TOP + outcomes.len() as f64 * (ROW + GAP) + 5.0;
    let _ = write!(
        out,
        r#"<text x="{LEFT}" y="{axis}">0 s</text><text x="{}" y="{axis}" text-anchor="end">{:.1} s</text>"#,
        LEFT + plot,
        end as f64 / 1e6
    );
    out.push_str("</svg>\n");
    out
}
