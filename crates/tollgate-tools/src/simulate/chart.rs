//! The simulator's chart (and `tollgate-tools regions`'): one row per algorithm or region,
//! admitted and rejected requests per time slice, as a self-contained SVG.

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

fn slice_counts(times: &[Micros], start: Micros, end: Micros) -> Vec<u64> {
    let mut counts = vec![0u64; SLICES];
    let span = end.saturating_sub(start).max(1) as u128;
    for &time in times {
        let offset = time.saturating_sub(start) as u128;
        let slice = (offset * SLICES as u128 / span) as usize;
        counts[slice.min(SLICES - 1)] += 1;
    }
    counts
}

/// Where a chart's rows are drawn: the time span, where periods end, and the scale.
struct Frame {
    start: Micros,
    end: Micros,
    period: Micros,
    /// The plot's width in pixels.
    plot: f64,
    /// The requests the tallest slice holds.
    tallest: f64,
}

impl Frame {
    fn x_of(&self, time: Micros) -> f64 {
        LEFT + self.plot * (time - self.start) as f64 / (self.end - self.start) as f64
    }
}

/// Draws `outcomes` from `start` to `end` (microseconds); dashed lines mark the ends of
/// periods, where fixed windows roll over.
pub(crate) fn svg(
    title: &str,
    outcomes: &[Outcome],
    (start, end): (Micros, Micros),
    period: Micros,
) -> String {
    let end = end.max(start + 1);
    let height = TOP + outcomes.len() as f64 * (ROW + GAP) + 30.0;
    let plot = WIDTH - LEFT - RIGHT;
    let slices: Vec<(Vec<u64>, Vec<u64>)> = outcomes
        .iter()
        .map(|o| {
            (
                slice_counts(&o.admitted, start, end),
                slice_counts(&o.rejected, start, end),
            )
        })
        .collect();
    let tallest = slices
        .iter()
        .flat_map(|(a, r)| a.iter().zip(r).map(|(a, r)| a + r))
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let frame = Frame {
        start,
        end,
        period,
        plot,
        tallest,
    };
    let mut out = String::new();
    write_heading(&mut out, title, height);
    for (row, (outcome, (admitted, rejected))) in outcomes.iter().zip(&slices).enumerate() {
        let top = TOP + row as f64 * (ROW + GAP);
        write_row(&mut out, &frame, top, outcome, admitted, rejected);
    }
    let axis = TOP + outcomes.len() as f64 * (ROW + GAP) + 5.0;
    let _ = write!(
        out,
        r##"<text x="{LEFT}" y="{axis}">{:.2} s</text><text x="{}" y="{axis}" text-anchor="end">{:.2} s</text><text x="{}" y="{axis}" text-anchor="middle" fill="#1565c0">dashed: period boundaries</text>"##,
        start as f64 / 1e6,
        LEFT + plot,
        end as f64 / 1e6,
        LEFT + plot / 2.0
    );
    out.push_str("</svg>\n");
    out
}

/// The SVG's opening, its title and the legend.
fn write_heading(out: &mut String, title: &str, height: f64) {
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
}

/// One row (an algorithm, a region): its name and totals, a bar per slice, and the period boundaries.
fn write_row(
    out: &mut String,
    frame: &Frame,
    top: f64,
    outcome: &Outcome,
    admitted: &[u64],
    rejected: &[u64],
) {
    let base = top + ROW;
    let bar = frame.plot / SLICES as f64;
    let _ = write!(
        out,
        r#"<text x="10" y="{}" font-weight="bold">{}</text><text x="10" y="{}">{} admitted</text><text x="10" y="{}">{} rejected</text>"#,
        top + 30.0,
        escape(&outcome.name),
        top + 48.0,
        outcome.admitted.len(),
        top + 64.0,
        outcome.rejected.len()
    );
    let _ = write!(
        out,
        r##"<line x1="{LEFT}" y1="{base}" x2="{}" y2="{base}" stroke="#444"/>"##,
        LEFT + frame.plot
    );
    for (slice, (a, r)) in admitted.iter().zip(rejected).enumerate() {
        let x = LEFT + slice as f64 * bar;
        let a_height = ROW * *a as f64 / frame.tallest;
        let r_height = ROW * *r as f64 / frame.tallest;
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
    // Period boundaries, where fixed windows roll over, drawn over the bars.
    let period = frame.period;
    let mut boundary = (frame.start / period.max(1) + 1) * period.max(1);
    while boundary < frame.end && period > 0 {
        let x = frame.x_of(boundary);
        let _ = write!(
            out,
            r##"<line x1="{x:.1}" y1="{}" x2="{x:.1}" y2="{base}" stroke="#1565c0" stroke-width="1.5" stroke-dasharray="4,3"/>"##,
            top - 4.0
        );
        boundary += period;
    }
}
