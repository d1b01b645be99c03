//! What a chart shows, apart from how it is drawn: its data in base units (bit/s, bytes,
//! µs, fractions), axes with their quantities, series with their colours.

use crate::axes::Quantity;
use crate::palette::Rgb;

/// One chart: `id` names it for `tcplab plot --chart`, `title` heads it, `caption` says
/// what it plots, on which path and with which tunings.
#[derive(Clone, Debug, PartialEq)]
pub struct Chart {
    pub id: String,
    pub title: String,
    pub caption: String,
    pub body: Body,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Body {
    /// Values against a numeric x, one line per series, with error bars where a point
    /// has an interval.
    Lines {
        x: XAxis,
        y: YAxis,
        series: Vec<Series>,
    },
    /// Values per category, one bar per series in each category; a series' point `x` is
    /// the category's index.
    Bars {
        x_label: String,
        categories: Vec<String>,
        y: YAxis,
        series: Vec<Series>,
    },
    /// A value per cell of a grid of two axes' values, coloured on a scale.
    Heatmap {
        x_label: String,
        x_values: Vec<String>,
        y_label: String,
        y_values: Vec<String>,
        z: YAxis,
        /// (x index, y index, value).
        cells: Vec<(usize, usize, f64)>,
    },
    /// Shares of time spans stacked to 100 %, one layer per series; layer `i`'s point
    /// `j` is its share (0..1) of span `j`.
    Stacked {
        x: XAxis,
        spans: Vec<(f64, f64)>,
        layers: Vec<Series>,
    },
    /// Each series' points as dots named beside them, with a cross of their spread (`x_interval`
    /// across, `interval` up and down), on an x axis that grows to the left: delay, as
    /// Pantheon draws throughput against delay so that better is up and to the right.
    Scatter {
        x: XAxis,
        y: YAxis,
        series: Vec<Series>,
    },
    /// Lines as in `Lines`, and marks: each point of a mark series drawn as its shape
    /// (the time-sequence graph's segments and drops). `y_span`: the values to show,
    /// lines cut where they leave it; `None` fits everything.
    Marked {
        x: XAxis,
        y: YAxis,
        y_span: Option<(f64, f64)>,
        series: Vec<Series>,
        marks: Vec<Marks>,
    },
    /// Nodes at their places, joined by edges coloured by their load: a topology.
    Graph { nodes: Vec<Node>, edges: Vec<Edge> },
}

/// A node of a graph: a host (else a router), at `at` (x, y in 0..=1, y down).
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    pub name: String,
    pub host: bool,
    pub at: (f64, f64),
}

/// An edge between two nodes (their indices), labelled, with its load: the busier
/// way's share of its rate (0..=1), `None` where neither way has a fixed rate.
#[derive(Clone, Debug, PartialEq)]
pub struct Edge {
    pub ends: [usize; 2],
    pub label: String,
    pub load: Option<f64>,
}

/// Points drawn as one shape each, named in the legend.
#[derive(Clone, Debug, PartialEq)]
pub struct Marks {
    pub name: String,
    pub color: Rgb,
    pub shape: Shape,
    pub layer: Layer,
    pub points: Vec<Pt>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// A vertical bar over the point's interval (its value alone without one), a few
    /// pixels long at least however short the interval.
    Bar,
    Cross,
    /// A circle.
    Ring,
}

/// Where marks are drawn against the lines: under them, in the order given, so that the
/// lines stay visible however many marks there are; or over them, to be seen on top.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layer {
    UnderLines,
    OverLines,
}

/// A numeric x axis. `ticks`: where to label it (an experiment's axis values); `None`
/// leaves round numbers. `span`: the range to show; `None` fits the data.
#[derive(Clone, Debug, PartialEq)]
pub struct XAxis {
    pub label: String,
    pub quantity: Quantity,
    pub log: bool,
    pub ticks: Option<Vec<f64>>,
    pub span: Option<(f64, f64)>,
}

impl XAxis {
    /// Seconds since the run's start up to `end`: the same for every chart of a run, so
    /// they line up.
    pub fn time(end: f64) -> XAxis {
        XAxis {
            label: "time since the test's start (s)".into(),
            quantity: Quantity::Number,
            log: false,
            ticks: None,
            span: Some((0.0, end)),
        }
    }
}

/// A y axis: its label (the display unit is appended when drawn) and quantity.
#[derive(Clone, Debug, PartialEq)]
pub struct YAxis {
    pub label: String,
    pub quantity: Quantity,
}

/// A series; one with an empty name is left out of the legend (a bound drawn in
/// its series' colour, which one legend entry explains for all).
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    pub name: String,
    pub color: Rgb,
    pub dashed: bool,
    pub points: Vec<Pt>,
}

/// One value; `interval` is its confidence interval (low, high), drawn as an error bar,
/// and `x_interval` its x's (a scatter's); `note` is written beside it (which bound
/// binds there).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Pt {
    pub x: f64,
    pub y: f64,
    pub interval: Option<(f64, f64)>,
    pub x_interval: Option<(f64, f64)>,
    pub note: Option<&'static str>,
}

impl Pt {
    pub fn at(x: f64, y: f64) -> Pt {
        Pt {
            x,
            y,
            interval: None,
            x_interval: None,
            note: None,
        }
    }
}

impl Chart {
    /// Whether there is nothing to draw: such a chart is left out, not drawn empty.
    pub fn is_empty(&self) -> bool {
        match &self.body {
            Body::Lines { series, .. }
            | Body::Bars { series, .. }
            | Body::Scatter { series, .. } => series.iter().all(|s| s.points.is_empty()),
            Body::Heatmap { cells, .. } => cells.is_empty(),
            Body::Stacked { spans, .. } => spans.is_empty(),
            Body::Marked { series, marks, .. } => {
                series.iter().all(|s| s.points.is_empty())
                    && marks.iter().all(|m| m.points.is_empty())
            }
            Body::Graph { nodes, .. } => nodes.is_empty(),
        }
    }

    /// The series names in drawing order (a heatmap and a graph have none).
    pub fn series_names(&self) -> Vec<&str> {
        match &self.body {
            Body::Lines { series, .. }
            | Body::Bars { series, .. }
            | Body::Scatter { series, .. }
            | Body::Stacked { layers: series, .. } => {
                series.iter().map(|s| s.name.as_str()).collect()
            }
            Body::Heatmap { .. } | Body::Graph { .. } => Vec::new(),
            Body::Marked { series, marks, .. } => series
                .iter()
                .map(|s| s.name.as_str())
                .chain(marks.iter().map(|m| m.name.as_str()))
                .collect(),
        }
    }
}
