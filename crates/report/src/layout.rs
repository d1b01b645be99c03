//! Which charts fit an experiment's axes: the x axis, the axes drawn as series, the axes
//! that split the charts (facets), and whether a heatmap fits.
//!
//! - No axis varies: no chart of the metrics (the table says it all).
//! - The points are not a full grid (`combine = "zip"`): one bar per point.
//! - Some axis is numeric: lines against the numeric axis with the most values (the
//!   first of equals), the other axes as series — at most [`MAX_SERIES`] per chart, the
//!   rest as facets; log x when its values grow geometrically.
//! - Only categories: bars per value of the first axis, the others as series (at most
//!   [`MAX_BAR_SERIES`]) or facets.
//! - A heatmap of the metric over two numeric axes of three or more values each.

use tcplab_model::experiment::Axis;

use crate::axes::{numeric, NumericAxis};

/// More lines than this in one chart cannot be told apart.
pub const MAX_SERIES: usize = 8;
/// More bars than this per category get too thin to read.
pub const MAX_BAR_SERIES: usize = 4;

#[derive(Clone, Debug, PartialEq)]
pub enum Main {
    /// Nothing varies.
    None,
    /// Lines against numeric axis `x`.
    Lines { x: usize, log: bool },
    /// Bars per value of categorical axis `x`.
    Bars { x: usize },
    /// One bar per point (the points are not a grid).
    PerPoint,
}

/// Axes by index into the experiment's axes.
#[derive(Clone, Debug, PartialEq)]
pub struct Layout {
    pub main: Main,
    /// Each combination of these axes' values is one series.
    pub series: Vec<usize>,
    /// Each combination of these axes' values gets its own chart.
    pub facets: Vec<usize>,
    pub heatmap: Option<HeatmapAxes>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct HeatmapAxes {
    pub x: usize,
    pub y: usize,
    pub facets: Vec<usize>,
}

/// The distinct values of axis `a` over `points`, in the axis' order.
pub fn distinct_values(axis: &Axis, a: usize, points: &[Vec<String>]) -> Vec<String> {
    let mut values: Vec<String> = Vec::new();
    for v in &axis.values {
        if !values.contains(v) && points.iter().any(|p| p.get(a) == Some(v)) {
            values.push(v.clone());
        }
    }
    values
}

/// The layout of the axes `axes` for points with these values (one per axis each).
pub fn layout(axes: &[Axis], points: &[Vec<String>]) -> Layout {
    let counts: Vec<usize> = axes
        .iter()
        .enumerate()
        .map(|(a, axis)| distinct_values(axis, a, points).len())
        .collect();
    let varying: Vec<usize> = (0..axes.len()).filter(|&a| counts[a] >= 2).collect();
    let numbers: Vec<(usize, NumericAxis)> = varying
        .iter()
        .filter_map(|&a| numeric(&axes[a]).map(|n| (a, n)))
        .collect();
    let combos = {
        let mut seen: Vec<Vec<&String>> = points
            .iter()
            .map(|p| varying.iter().map(|&a| &p[a]).collect())
            .collect();
        seen.sort();
        seen.dedup();
        seen.len()
    };
    let grid = combos == varying.iter().map(|&a| counts[a]).product::<usize>();
    let none = Layout {
        main: Main::None,
        series: Vec::new(),
        facets: Vec::new(),
        heatmap: None,
    };
    if varying.is_empty() {
        return none;
    }
    if !grid {
        return Layout {
            main: Main::PerPoint,
            ..none
        };
    }
    // The numeric axis with the most values; max_by_key keeps the last of equals, so
    // walk backwards to keep the first.
    let widest = numbers
        .iter()
        .rev()
        .max_by_key(|(a, _)| counts[*a])
        .map(|(a, n)| (*a, n.geometric()));
    let (main, x, max_series) = match widest {
        Some((x, log)) => (Main::Lines { x, log }, x, MAX_SERIES),
        None => (Main::Bars { x: varying[0] }, varying[0], MAX_BAR_SERIES),
    };
    let (mut series, mut facets) = (Vec::new(), Vec::new());
    let mut lines = 1;
    for &a in varying.iter().filter(|&&a| a != x) {
        if lines * counts[a] <= max_series {
            lines *= counts[a];
            series.push(a);
        } else {
            facets.push(a);
        }
    }
    let heatmap = if counts[x] >= 3 && matches!(main, Main::Lines { .. }) {
        numbers
            .iter()
            .filter(|(a, _)| *a != x && counts[*a] >= 3)
            .rev()
            .max_by_key(|(a, _)| counts[*a])
            .map(|&(y, _)| HeatmapAxes {
                x,
                y,
                facets: varying
                    .iter()
                    .copied()
                    .filter(|&a| a != x && a != y)
                    .collect(),
            })
    } else {
        None
    };
    Layout {
        main,
        series,
        facets,
        heatmap,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn axis(name: &str, values: &[&str]) -> Axis {
        Axis {
            name: name.into(),
            key: None,
            values: values.iter().map(|v| v.to_string()).collect(),
        }
    }

    /// Every combination, first axis slowest (as `combine = "cross"` plans them).
    fn cross(axes: &[Axis]) -> Vec<Vec<String>> {
        axes.iter().fold(vec![Vec::new()], |acc, axis| {
            acc.iter()
                .flat_map(|p| {
                    axis.values.iter().map(move |v| {
                        let mut p = p.clone();
                        p.push(v.clone());
                        p
                    })
                })
                .collect()
        })
    }

    #[test]
    fn buffer_sizes_go_on_a_log_x_with_one_line_per_rtt() {
        let axes = [
            axis("rtt", &["0.2ms", "20ms"]),
            axis("buffer", &["2K", "4K", "8K", "16K", "64K", "1M", "8M"]),
        ];
        let l = layout(&axes, &cross(&axes));
        assert_eq!(l.main, Main::Lines { x: 1, log: true });
        assert_eq!((l.series, l.facets), (vec![0], vec![]));
        assert_eq!(l.heatmap, None, "two rtts make lines, not a heatmap");
    }

    #[test]
    fn a_single_category_axis_makes_bars() {
        let axes = [axis("pacing", &["none", "kernel", "app", "gap"])];
        let l = layout(&axes, &cross(&axes));
        assert_eq!(l.main, Main::Bars { x: 0 });
        assert!(l.series.is_empty() && l.facets.is_empty());
    }

    #[test]
    fn too_many_series_become_facets_and_two_wide_numeric_axes_a_heatmap() {
        let axes = [
            axis("rtt", &["0.3ms", "10ms", "100ms"]),
            axis("loss", &["0%", "0.1%", "1%", "5%", "20%"]),
            axis("where", &["", "up."]),
            axis("rate", &["1gbit", "10mbit"]),
            axis("wscale", &["1", "0"]),
        ];
        let l = layout(&axes, &cross(&axes));
        assert_eq!(l.main, Main::Lines { x: 1, log: false });
        // rtt × where = 6 lines; × rate would be 12.
        assert_eq!((l.series, l.facets), (vec![0, 2], vec![3, 4]));
        assert_eq!(
            l.heatmap,
            Some(HeatmapAxes {
                x: 1,
                y: 0,
                facets: vec![2, 3, 4]
            })
        );
    }

    #[test]
    fn pacing_study_lines_over_rtt() {
        let axes = [
            axis("pacing", &["none", "kernel", "app", "gap"]),
            axis("cc", &["reno", "cubic", "bbr"]),
            axis("rtt", &["5ms", "10ms", "15ms", "20ms"]),
            axis("flows", &["1", "2"]),
        ];
        let l = layout(&axes, &cross(&axes));
        assert_eq!(l.main, Main::Lines { x: 2, log: false });
        assert_eq!((l.series, l.facets), (vec![0, 3], vec![1]));
        assert_eq!(l.heatmap, None, "flows has two values");
    }

    #[test]
    fn zipped_axes_and_constant_axes() {
        let axes = [
            axis("rtt", &["10ms", "10ms", "100ms"]),
            axis("loss", &["0%", "5%", "0%"]),
        ];
        let zipped: Vec<Vec<String>> = (0..3)
            .map(|i| axes.iter().map(|a| a.values[i].clone()).collect())
            .collect();
        assert_eq!(layout(&axes, &zipped).main, Main::PerPoint);
        let one = [axis("rtt", &["10ms"])];
        assert_eq!(layout(&one, &cross(&one)).main, Main::None);
        assert_eq!(layout(&[], &[vec![]]).main, Main::None);
    }

    #[test]
    fn equal_numeric_axes_take_the_first_as_x() {
        let axes = [axis("a", &["1ms", "2ms"]), axis("b", &["1K", "2K"])];
        let l = layout(&axes, &cross(&axes));
        assert_eq!(l.main, Main::Lines { x: 0, log: false });
        assert_eq!(l.series, vec![1]);
    }
}
