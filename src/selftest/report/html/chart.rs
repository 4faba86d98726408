//! Inline SVG charts for the self-test page: a line chart over shared axes and a horizontal
//! bar chart. Plain SVG with a viewBox, so a chart scales to its column and the page needs no
//! script and no network to be read.

use super::esc;
use crate::selftest::report::num;
use std::fmt::Write;

/// Measured series first, references (targets, estimates) in grey and dashed.
pub const BLUE: &str = "#1f6feb";
pub const VIOLET: &str = "#8250df";
pub const TEAL: &str = "#1b7c83";
pub const GREY: &str = "#6e7781";

/// One line of a chart.
pub struct Series {
    pub label: String,
    pub colour: &'static str,
    /// A reference (a target, an estimate) rather than a measurement.
    pub dashed: bool,
    pub points: Vec<(f64, f64)>,
}

const W: f64 = 720.0;
const H: f64 = 300.0;
const LEFT: f64 = 64.0;
const RIGHT: f64 = 16.0;
const TOP: f64 = 44.0;
const BOTTOM: f64 = 40.0;

fn open(title: &str, h: f64) -> String {
    format!(
        "<svg class=\"chart\" xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {W} {h}\" \
         role=\"img\" aria-label=\"{t}\" font-family=\"system-ui,sans-serif\" font-size=\"12\">\
         <title>{t}</title>\
         <text x=\"{LEFT}\" y=\"18\" font-size=\"14\" font-weight=\"600\" fill=\"#1f2328\">{t}</text>",
        t = esc(title)
    )
}

/// A stretch of the x axis to shade behind the lines: a moment something happened (the
/// watch report marks the intervals in which advice fired). Its label is the tooltip.
pub struct Band {
    pub from: f64,
    pub to: f64,
    pub label: String,
    /// The `class` of its `<rect>`, so a reader (or a test) can find the moments.
    pub class: &'static str,
}

/// A line chart: every series over shared axes from zero, the x axis labelled at `x_ticks`.
/// None when no series has a point (the caller says "no data" in words).
pub fn line_chart(
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    x_ticks: &[(f64, String)],
) -> Option<String> {
    line_chart_with_bands(title, x_label, y_label, series, x_ticks, &[])
}

/// [`line_chart`] with `bands` shaded in red behind the lines, each clipped to the x axis.
pub fn line_chart_with_bands(
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    x_ticks: &[(f64, String)],
    bands: &[Band],
) -> Option<String> {
    let pts = || series.iter().flat_map(|s| s.points.iter());
    pts().next()?;
    let x0 = pts().map(|p| p.0).fold(f64::MAX, f64::min);
    let x1 = pts().map(|p| p.0).fold(f64::MIN, f64::max).max(x0 + 1e-9);
    let (y_step, y1) = y_scale(pts().map(|p| p.1).fold(0.0, f64::max));
    let px = |x: f64| LEFT + (x - x0) / (x1 - x0) * (W - LEFT - RIGHT);
    let py = |y: f64| TOP + (1.0 - y / y1) * (H - TOP - BOTTOM);
    let mut s = open(title, H);
    // Legend on the title's line, right-aligned from the end.
    let mut x = W - RIGHT;
    for se in series.iter().rev().filter(|s| !s.points.is_empty()) {
        let w = 26.0 + 6.5 * se.label.chars().count() as f64;
        x -= w;
        let _ = write!(
            s,
            "<line x1=\"{x:.1}\" y1=\"14\" x2=\"{:.1}\" y2=\"14\" stroke=\"{}\" stroke-width=\"2.5\"{}/>\
             <text x=\"{:.1}\" y=\"18\" fill=\"#57606a\">{}</text>",
            x + 16.0,
            se.colour,
            if se.dashed { " stroke-dasharray=\"5 4\"" } else { "" },
            x + 20.0,
            esc(&se.label)
        );
    }
    for i in 0..=(y1 / y_step).round() as usize {
        let y = y_step * i as f64;
        let _ = write!(
            s,
            "<line x1=\"{LEFT}\" x2=\"{:.1}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"#eaeef2\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" fill=\"#57606a\">{}</text>",
            W - RIGHT,
            py(y),
            py(y),
            LEFT - 6.0,
            py(y) + 4.0,
            // Whole steps read as whole numbers (2, 4, 6 ms, not 2.00, 4.00, 6.00).
            if y_step.fract() == 0.0 {
                format!("{y:.0}")
            } else {
                num(y)
            }
        );
    }
    let _ = write!(
        s,
        "<line x1=\"{LEFT}\" y1=\"{b:.1}\" x2=\"{:.1}\" y2=\"{b:.1}\" stroke=\"#8c959f\"/>\
         <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" fill=\"#57606a\">{}</text>\
         <text x=\"14\" y=\"{c:.1}\" transform=\"rotate(-90 14 {c:.1})\" text-anchor=\"middle\" fill=\"#57606a\">{}</text>",
        W - RIGHT,
        (LEFT + W - RIGHT) / 2.0,
        H - 6.0,
        esc(x_label),
        esc(y_label),
        b = H - BOTTOM,
        c = (TOP + H - BOTTOM) / 2.0,
    );
    for b in bands {
        let (from, to) = (b.from.max(x0), b.to.min(x1));
        if to < from {
            continue;
        }
        // At least two pixels wide: a moment of one short interval must still be seen.
        let w = (px(to) - px(from)).max(2.0);
        let _ = write!(
            s,
            "<rect class=\"{}\" x=\"{:.1}\" y=\"{TOP}\" width=\"{w:.1}\" height=\"{:.1}\" \
             fill=\"#cf222e\" fill-opacity=\"0.16\"><title>{}</title></rect>",
            b.class,
            px(from),
            H - TOP - BOTTOM,
            esc(&b.label)
        );
    }
    for (x, label) in x_ticks.iter().filter(|(x, _)| *x >= x0 && *x <= x1) {
        let _ = write!(
            s,
            "<line x1=\"{p:.1}\" x2=\"{p:.1}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"#8c959f\"/>\
             <text x=\"{p:.1}\" y=\"{:.1}\" text-anchor=\"middle\" fill=\"#57606a\">{}</text>",
            H - BOTTOM,
            H - BOTTOM + 4.0,
            H - BOTTOM + 16.0,
            esc(label),
            p = px(*x),
        );
    }
    for se in series.iter().filter(|s| !s.points.is_empty()) {
        let d: Vec<String> = se
            .points
            .iter()
            .map(|(x, y)| format!("{:.1},{:.1}", px(*x), py(*y)))
            .collect();
        let _ = write!(
            s,
            "<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"{}\" stroke-linejoin=\"round\"{} points=\"{}\"/>",
            se.colour,
            if se.dashed { "1.5" } else { "2.5" },
            if se.dashed { " stroke-dasharray=\"5 4\"" } else { "" },
            d.join(" ")
        );
        // A lone point is no line: mark it.
        if let [(x, y)] = se.points[..] {
            let _ = write!(
                s,
                "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3.5\" fill=\"{}\"/>",
                px(x),
                py(y),
                se.colour
            );
        }
    }
    s.push_str("</svg>");
    Some(s)
}

/// One bar: label, value, colour.
pub struct Bar {
    pub label: String,
    pub value: f64,
    pub colour: &'static str,
}

/// Horizontal bars from zero, each labelled with `fmt(value)`.
pub fn bar_chart(title: &str, bars: &[Bar], fmt: fn(f64) -> String) -> Option<String> {
    if bars.is_empty() {
        return None;
    }
    let row = 30.0;
    let h = TOP + row * bars.len() as f64 + 12.0;
    let label_w = 330.0;
    let max = bars.iter().map(|b| b.value).fold(0.0, f64::max).max(1e-9);
    let span = W - label_w - RIGHT - 80.0;
    let mut s = open(title, h);
    for (i, b) in bars.iter().enumerate() {
        let y = TOP + row * i as f64;
        let w = (b.value / max * span).max(1.0);
        let _ = write!(
            s,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" fill=\"#1f2328\">{}</text>\
             <rect x=\"{label_w}\" y=\"{:.1}\" width=\"{w:.1}\" height=\"18\" rx=\"2\" fill=\"{}\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\" fill=\"#1f2328\">{}</text>",
            label_w - 8.0,
            y + 13.0,
            esc(&b.label),
            y,
            b.colour,
            label_w + w + 6.0,
            y + 13.0,
            esc(&fmt(b.value))
        );
    }
    s.push_str("</svg>");
    Some(s)
}

/// The y axis's grid step and top: a step of 1, 2, 2.5 or 5 times a power of ten, and at
/// most five steps to reach above the largest value, so every label is a round number.
fn y_scale(v: f64) -> (f64, f64) {
    if v <= 0.0 || !v.is_finite() {
        return (0.25, 1.0);
    }
    let want = v * 1.05;
    let p = 10f64.powf((want / 5.0).log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * p)
        .find(|st| (want / st).ceil() <= 5.0)
        .unwrap_or(10.0 * p);
    (step, step * (want / step).ceil())
}

/// Percentile positions on a "nines" axis: 50 -> 1, 90 -> 2, 99 -> 3, 99.9 -> 4 ...
pub fn nines(p: f64) -> f64 {
    if p >= 100.0 {
        5.0
    } else {
        (-(1.0 - p / 100.0).log10()).min(5.0) + 0.7
    }
}

/// The nines axis's labels.
pub fn percentile_ticks() -> Vec<(f64, String)> {
    [50.0, 90.0, 99.0, 99.9, 99.99, 100.0]
        .iter()
        .map(|&p| {
            (
                nines(p),
                if p >= 100.0 {
                    "max".into()
                } else {
                    format!("p{p}")
                },
            )
        })
        .collect()
}

/// Seconds along a timeline: about eight labels.
pub fn second_ticks(last: f64) -> Vec<(f64, String)> {
    let step = ((last / 8.0).ceil() as usize).max(1);
    (0..=last.ceil() as usize)
        .step_by(step)
        .map(|t| (t as f64, format!("{t} s")))
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_y_axis_steps_are_round_numbers() {
        assert_eq!(super::y_scale(200.0), (50.0, 250.0));
        assert_eq!(super::y_scale(7.46), (2.0, 8.0));
        assert_eq!(super::y_scale(9.0), (2.0, 10.0));
        assert_eq!(super::y_scale(0.0), (0.25, 1.0));
        assert_eq!(super::y_scale(41.3), (10.0, 50.0));
    }
}
