//! SVG plots of the sampled governance loads (workload 14), written by hand: a few polylines,
//! bars and labels need no plotting library, and the bench's dependency tree stays as it is.
//!
//! Each file shows tablekit and the raw SDK side by side. Per side, the upper chart is entities
//! per second over time — admitted (goodput), the model's capacity, and tablekit's account
//! budget (the governor's rate) — and the lower one the throttled responses per second.

use std::fmt::Write as _;

use crate::adaptive::{Sample, Timed};

const PANEL_W: f64 = 470.0;
const TOP_H: f64 = 220.0;
const BOTTOM_H: f64 = 90.0;
const LEFT: f64 = 56.0;
const RIGHT: f64 = 14.0;
const TOP: f64 = 48.0;
const GAP: f64 = 34.0;

const GOODPUT: &str = "#1f77b4";
const CAPACITY: &str = "#555555";
const BUDGET: &str = "#ff7f0e";
const THROTTLED: &str = "#d62728";

/// Per-interval rates from cumulative samples: (t at the interval's end, admitted/s,
/// throttled/s, budget, capacity).
fn rates(samples: &[Sample]) -> Vec<(f64, f64, f64, Option<f64>, f64)> {
    samples
        .windows(2)
        .filter(|w| w[1].t > w[0].t)
        .map(|w| {
            let dt = w[1].t - w[0].t;
            (
                w[1].t,
                (w[1].admitted - w[0].admitted) as f64 / dt,
                (w[1].throttled - w[0].throttled) as f64 / dt,
                w[1].budget,
                w[0].capacity,
            )
        })
        .collect()
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// A "nice" axis maximum at or above `v`.
fn nice(v: f64) -> f64 {
    if v <= 0.0 {
        return 1.0;
    }
    let magnitude = 10f64.powf(v.log10().floor());
    for step in [1.0, 2.0, 2.5, 5.0, 10.0] {
        if step * magnitude >= v {
            return step * magnitude;
        }
    }
    10.0 * magnitude
}

struct Scales {
    seconds: f64,
    rate_max: f64,
    throttled_max: f64,
    warm_up: f64,
}

fn panel(out: &mut String, x0: f64, title: &str, run: &Timed, s: &Scales) {
    let w = PANEL_W - LEFT - RIGHT;
    let x = |t: f64| x0 + LEFT + w * (t / s.seconds).clamp(0.0, 1.0);
    let y_top = |v: f64| TOP + TOP_H * (1.0 - (v / s.rate_max).clamp(0.0, 1.0));
    let bottom0 = TOP + TOP_H + GAP;
    let y_bottom = |v: f64| bottom0 + BOTTOM_H * (1.0 - (v / s.throttled_max).clamp(0.0, 1.0));
    let _ = writeln!(
        out,
        r#"<text x="{:.1}" y="{:.1}" font-size="14" font-weight="bold">{}</text>"#,
        x0 + LEFT,
        TOP - 26.0,
        escape(title)
    );
    // The warm-up, shaded.
    let _ = writeln!(
        out,
        r##"<rect x="{:.1}" y="{TOP}" width="{:.1}" height="{TOP_H}" fill="#eeeeee"/>"##,
        x(0.0),
        x(s.warm_up) - x(0.0)
    );
    // Frames and axes.
    for (y0, h) in [(TOP, TOP_H), (bottom0, BOTTOM_H)] {
        let _ = writeln!(
            out,
            r##"<rect x="{:.1}" y="{y0:.1}" width="{w:.1}" height="{h:.1}" fill="none" stroke="#999999"/>"##,
            x0 + LEFT
        );
    }
    for i in 0..=4 {
        let v = s.rate_max * f64::from(i) / 4.0;
        let _ = writeln!(
            out,
            r##"<text x="{:.1}" y="{:.1}" font-size="10" text-anchor="end">{v:.0}</text><line x1="{:.1}" x2="{:.1}" y1="{:.1}" y2="{:.1}" stroke="#dddddd"/>"##,
            x0 + LEFT - 4.0,
            y_top(v) + 3.0,
            x0 + LEFT,
            x0 + LEFT + w,
            y_top(v),
            y_top(v)
        );
    }
    for v in [0.0, s.throttled_max] {
        let _ = writeln!(
            out,
            r#"<text x="{:.1}" y="{:.1}" font-size="10" text-anchor="end">{v:.0}</text>"#,
            x0 + LEFT - 4.0,
            y_bottom(v) + 3.0
        );
    }
    let mut t = 0.0;
    while t <= s.seconds + 1e-9 {
        let _ = writeln!(
            out,
            r#"<text x="{:.1}" y="{:.1}" font-size="10" text-anchor="middle">{t:.0}</text>"#,
            x(t),
            bottom0 + BOTTOM_H + 14.0
        );
        t += 5.0;
    }
    let _ = writeln!(
        out,
        r#"<text x="{:.1}" y="{:.1}" font-size="11" text-anchor="middle">seconds</text>"#,
        x0 + LEFT + w / 2.0,
        bottom0 + BOTTOM_H + 28.0
    );
    let _ = writeln!(
        out,
        r#"<text x="{:.1}" y="{:.1}" font-size="11">entities/s</text><text x="{:.1}" y="{:.1}" font-size="11">throttled responses/s</text>"#,
        x0 + LEFT + 4.0,
        TOP + 12.0,
        x0 + LEFT + 4.0,
        bottom0 + 12.0
    );
    let points = rates(&run.samples);
    let line = |out: &mut String, color: &str, dash: &str, pts: Vec<(f64, f64)>| {
        if pts.is_empty() {
            return;
        }
        let path: Vec<String> = pts
            .iter()
            .map(|(t, v)| format!("{:.1},{:.1}", x(*t), y_top(*v)))
            .collect();
        let _ = writeln!(
            out,
            r#"<polyline fill="none" stroke="{color}" stroke-width="1.6" {dash} points="{}"/>"#,
            path.join(" ")
        );
    };
    // The capacity as steps.
    let mut capacity = Vec::new();
    for w in run.samples.windows(2) {
        capacity.push((w[0].t, w[0].capacity));
        capacity.push((w[1].t, w[0].capacity));
    }
    line(out, CAPACITY, r#"stroke-dasharray="5,3""#, capacity);
    line(
        out,
        BUDGET,
        "",
        points
            .iter()
            .filter_map(|p| p.3.filter(|b| b.is_finite()).map(|b| (p.0, b)))
            .collect(),
    );
    line(
        out,
        GOODPUT,
        "",
        points.iter().map(|p| (p.0, p.1)).collect(),
    );
    let bar = w / (s.seconds / 0.5).max(1.0);
    for p in &points {
        if p.2 > 0.0 {
            let _ = writeln!(
                out,
                r#"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="{THROTTLED}"/>"#,
                x(p.0) - bar,
                y_bottom(p.2),
                bar.max(1.0),
                bottom0 + BOTTOM_H - y_bottom(p.2)
            );
        }
    }
    let summary = format!(
        "after the warm-up: goodput {:.2} of capacity, {} of {} requests throttled ({:.1} %)",
        run.goodput,
        run.throttled,
        run.requests,
        100.0 * run.throttled_fraction()
    );
    let _ = writeln!(
        out,
        r#"<text x="{:.1}" y="{:.1}" font-size="11">{}</text>"#,
        x0 + LEFT,
        TOP - 10.0,
        escape(&summary)
    );
}

/// Both sides of one load, `title` above them.
pub(crate) fn side_by_side(
    title: &str,
    tablekit: (&str, &Timed),
    raw: (&str, &Timed),
    warm_up: f64,
) -> String {
    let all = || tablekit.1.samples.iter().chain(&raw.1.samples);
    let seconds = all().map(|s| s.t).fold(0.0, f64::max).ceil();
    let rate_max = rates(&tablekit.1.samples)
        .iter()
        .chain(&rates(&raw.1.samples))
        .map(|p| {
            p.1.max(p.4)
                .max(p.3.filter(|b| b.is_finite()).unwrap_or(0.0))
        })
        .fold(0.0, f64::max);
    // A budget far above the capacity (Azure's targets before the first refusal) is cut off at
    // twice the highest capacity.
    let capacity_max = all().map(|s| s.capacity).fold(0.0, f64::max);
    let throttled_max = rates(&tablekit.1.samples)
        .iter()
        .chain(&rates(&raw.1.samples))
        .map(|p| p.2)
        .fold(0.0, f64::max);
    let scales = Scales {
        seconds,
        rate_max: nice(rate_max.min(2.0 * capacity_max)),
        throttled_max: nice(throttled_max),
        warm_up,
    };
    let width = 2.0 * PANEL_W;
    let height = TOP + TOP_H + GAP + BOTTOM_H + 70.0;
    let mut out = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{height:.0}" viewBox="0 0 {width:.0} {height:.0}" font-family="sans-serif">
<rect width="100%" height="100%" fill="white"/>
<text x="{:.1}" y="16" font-size="13">{}</text>
"#,
        LEFT,
        escape(title)
    );
    panel(&mut out, 0.0, tablekit.0, tablekit.1, &scales);
    panel(&mut out, PANEL_W, raw.0, raw.1, &scales);
    // The legend.
    let y = height - 12.0;
    let mut x = LEFT;
    for (color, label, dash) in [
        (GOODPUT, "admitted (goodput)", ""),
        (
            CAPACITY,
            "the model's capacity",
            r#"stroke-dasharray="5,3""#,
        ),
        (BUDGET, "tablekit's account budget", ""),
        (THROTTLED, "throttled responses", ""),
    ] {
        let _ = writeln!(
            out,
            r#"<line x1="{x:.1}" x2="{:.1}" y1="{:.1}" y2="{:.1}" stroke="{color}" stroke-width="3" {dash}/><text x="{:.1}" y="{y:.1}" font-size="11">{label}</text>"#,
            x + 18.0,
            y - 4.0,
            y - 4.0,
            x + 22.0
        );
        x += 190.0;
    }
    let _ = writeln!(
        out,
        r##"<text x="{:.1}" y="{:.1}" font-size="10" fill="#666666">grey: the {warm_up:.0} s warm-up</text>"##,
        width - 160.0,
        y
    );
    out.push_str("</svg>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(t: f64, admitted: u64, throttled: u64) -> Sample {
        Sample {
            t,
            admitted,
            throttled,
            throttled_by_partition: 0,
            requests: 0,
            capacity: 2_000.0,
            budget: Some(1_900.0),
            hot: 0,
        }
    }

    #[test]
    fn a_plot_draws_each_series_and_escapes_its_labels() {
        let run = Timed {
            samples: vec![
                sample(0.0, 0, 0),
                sample(0.5, 1_000, 2),
                sample(1.0, 1_900, 2),
            ],
            goodput: 0.95,
            throttled: 2,
            requests: 40,
            error: None,
        };
        let svg = side_by_side("a <b> & c", ("tablekit", &run), ("raw SDK", &run), 0.5);
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"));
        assert!(svg.contains("a &lt;b&gt; &amp; c"));
        // Goodput, capacity and budget per panel; one throttled bar per panel.
        assert_eq!(svg.matches("<polyline").count(), 6);
        assert_eq!(svg.matches(&format!(r#"fill="{THROTTLED}""#)).count(), 2);
        assert_eq!(nice(1_900.0), 2_000.0);
        assert_eq!(nice(3.0), 5.0);
    }
}
