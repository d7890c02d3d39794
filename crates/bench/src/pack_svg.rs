//! The packing benchmark's chart: GPU occupancy over time, one polyline per scheduler, as a standalone SVG 1.1
//! document written with plain string formatting (axes with ticks and labels, a legend, no script, no external
//! font or style sheet), so a markdown page can show it as an image.

use std::fmt::Write as _;

/// One scheduler's series: `(seconds since its scheduler started, occupancy in 0..=1)`, in time order.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    /// Legend text (the scheduler's name).
    pub label: String,
    /// The samples.
    pub points: Vec<(f64, f64)>,
}

const W: f64 = 900.0;
const H: f64 = 420.0;
const LEFT: f64 = 60.0;
const RIGHT: f64 = 220.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 50.0;
/// Line colours, one per series in order (Okabe-Ito, readable by colour-blind readers), reused past the fifth.
const COLOURS: [&str; 5] = ["#0072b2", "#e69f00", "#009e73", "#cc79a7", "#d55e00"];

/// A tick step of 1, 2 or 5 times a power of ten giving at most about 10 ticks over `0..=max`.
fn tick_step(max: f64) -> f64 {
    let raw = (max / 10.0).max(1e-9);
    let pow = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * pow)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * pow)
}

/// Escapes the five XML special characters of `s`.
fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&apos;")
}

/// The SVG document: `title` on top, x = seconds (0 to the longest series' last sample), y = occupancy 0-100 %,
/// one polyline per series in its colour, and a legend right of the plot with each label.
pub fn chart(title: &str, series: &[Series]) -> String {
    let x_max = series
        .iter()
        .filter_map(|s| s.points.last().map(|p| p.0))
        .fold(1.0_f64, f64::max);
    let (pw, ph) = (W - LEFT - RIGHT, H - TOP - BOTTOM);
    let sx = |t: f64| LEFT + t / x_max * pw;
    let sy = |o: f64| TOP + (1.0 - o.clamp(0.0, 1.0)) * ph;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{H}\" viewBox=\"0 0 {W} {H}\" \
         font-family=\"sans-serif\" font-size=\"12\">"
    );
    let _ = writeln!(s, "<rect width=\"{W}\" height=\"{H}\" fill=\"white\"/>");
    let _ = writeln!(
        s,
        "<text x=\"{}\" y=\"22\" text-anchor=\"middle\" font-size=\"14\">{}</text>",
        LEFT + pw / 2.0,
        xml_escape(title)
    );
    // Grid and y ticks every 10 %.
    for i in 0..=10 {
        let o = f64::from(i) / 10.0;
        let y = sy(o);
        let _ = writeln!(
            s,
            "<line x1=\"{LEFT}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" stroke=\"#e0e0e0\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            LEFT + pw,
            LEFT - 6.0,
            y + 4.0,
            i * 10
        );
    }
    let step = tick_step(x_max);
    let mut t = 0.0;
    while t <= x_max + step * 1e-6 {
        let x = sx(t);
        let _ = writeln!(
            s,
            "<line x1=\"{x:.1}\" y1=\"{:.1}\" x2=\"{x:.1}\" y2=\"{:.1}\" stroke=\"black\"/>\
             <text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{t}</text>",
            TOP + ph,
            TOP + ph + 5.0,
            TOP + ph + 18.0
        );
        t += step;
    }
    // Axes and their titles.
    let _ = writeln!(
        s,
        "<polyline points=\"{LEFT},{TOP} {LEFT},{:.1} {:.1},{:.1}\" fill=\"none\" stroke=\"black\"/>",
        TOP + ph,
        LEFT + pw,
        TOP + ph
    );
    let _ = writeln!(
        s,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">seconds since the scheduler started</text>",
        LEFT + pw / 2.0,
        H - 10.0
    );
    let _ = writeln!(
        s,
        "<text x=\"16\" y=\"{:.1}\" text-anchor=\"middle\" transform=\"rotate(-90 16 {:.1})\">GPU occupancy (%)</text>",
        TOP + ph / 2.0,
        TOP + ph / 2.0
    );
    for (i, ser) in series.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let pts: Vec<String> = ser
            .points
            .iter()
            .map(|&(t, o)| format!("{:.1},{:.1}", sx(t), sy(o)))
            .collect();
        let _ = writeln!(
            s,
            "<polyline points=\"{}\" fill=\"none\" stroke=\"{colour}\" stroke-width=\"1.5\"/>",
            pts.join(" ")
        );
        let ly = TOP + 10.0 + 20.0 * i as f64;
        let lx = LEFT + pw + 15.0;
        let _ = writeln!(
            s,
            "<line x1=\"{lx}\" y1=\"{ly}\" x2=\"{:.1}\" y2=\"{ly}\" stroke=\"{colour}\" stroke-width=\"3\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\">{}</text>",
            lx + 20.0,
            lx + 26.0,
            ly + 4.0,
            xml_escape(&ser.label)
        );
    }
    s.push_str("</svg>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chart_has_one_polyline_per_series_axes_and_a_legend() {
        let series = vec![
            Series {
                label: "upstream".into(),
                points: vec![(0.0, 0.0), (10.0, 0.5), (20.0, 1.0)],
            },
            Series {
                label: "a<b".into(),
                points: vec![(0.0, 0.0), (40.0, 0.25)],
            },
        ];
        let svg = chart("GPU occupancy", &series);
        assert!(
            svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""),
            "{svg}"
        );
        assert!(svg.trim_end().ends_with("</svg>"));
        // Two data polylines plus the axes' polyline.
        assert_eq!(svg.matches("<polyline").count(), 3, "{svg}");
        assert!(
            svg.contains(">upstream</text>") && svg.contains(">a&lt;b</text>"),
            "{svg}"
        );
        assert!(svg.contains(">GPU occupancy (%)</text>"));
        // x runs to the longest series (40 s): its last point is at the plot's right edge, full occupancy on top.
        assert!(
            svg.contains(&format!(
                "{:.1},{:.1}",
                W - RIGHT,
                TOP + 0.75 * (H - TOP - BOTTOM)
            )),
            "{svg}"
        );
        assert!(
            svg.contains(&format!("{:.1},{:.1}", LEFT + 0.5 * (W - LEFT - RIGHT), TOP)),
            "{svg}"
        );
        assert!(svg.contains(">40</text>") && svg.contains(">100</text>"), "{svg}");
    }

    #[test]
    fn ticks_are_round() {
        assert_eq!(tick_step(100.0), 10.0);
        assert_eq!(tick_step(180.0), 20.0);
        assert_eq!(tick_step(45.0), 5.0);
        assert_eq!(tick_step(7.0), 1.0);
    }
}
