//! Drawing a [`Chart`] with plotters, as SVG text or as a PNG image: a title, the plot,
//! a legend beside it (never over the data) and, for a chart on its own, the caption
//! below. Text is laid out with the DejaVu Sans font built into the binary, so a PNG
//! renders the same on a machine without fonts.

use std::ops::Range;
use std::sync::Once;

use plotters::coord::ranged1d::{KeyPointHint, NoDefaultFormatting, Ranged, ValueFormatter};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use plotters::style::FontTransform;

use crate::axes::{short_number, Quantity, Scale};
use crate::chart::{Body, Chart, Edge, Layer, Marks, Node, Pt, Series, Shape, XAxis, YAxis};
use crate::palette::{self, Rgb, TOTAL};

/// Width and height of a chart without its caption, pixels.
pub const SIZE: (u32, u32) = (760, 420);

const FONT: &str = "sans-serif";
const CAPTION_FONT_SIZE: u32 = 13;
const LABEL_FONT_SIZE: u32 = 14;
const LEGEND_FONT_SIZE: u32 = 14;
const NOTE_FONT_SIZE: u32 = 12;
const CAPTION_LINE: u32 = 17;
const GRID: RGBColor = RGBColor(225, 225, 225);
const NO_DATA: RGBColor = RGBColor(240, 240, 240);

/// What went wrong while drawing, as plotters says it.
#[derive(Debug, thiserror::Error)]
#[error("drawing chart '{chart}': {message}")]
pub struct DrawError {
    pub chart: String,
    pub message: String,
}

/// The chart as an SVG document; with `caption`, its caption is drawn below it.
pub fn svg(chart: &Chart, caption: bool) -> Result<String, DrawError> {
    let lines = caption_lines(chart, caption);
    let size = total_size(&lines);
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, size).into_drawing_area();
        draw_on(chart, &root, &lines).map_err(|message| DrawError {
            chart: chart.id.clone(),
            message,
        })?;
    }
    Ok(out)
}

/// The chart with its caption as a PNG image.
pub fn png(chart: &Chart) -> Result<Vec<u8>, DrawError> {
    let fail = |message: String| DrawError {
        chart: chart.id.clone(),
        message,
    };
    let lines = caption_lines(chart, true);
    let (w, h) = total_size(&lines);
    let mut pixels = vec![0u8; (w * h * 3) as usize];
    {
        let root = BitMapBackend::with_buffer(&mut pixels, (w, h)).into_drawing_area();
        draw_on(chart, &root, &lines).map_err(fail)?;
    }
    let mut out = Vec::new();
    let mut encoder = png::Encoder::new(&mut out, w, h);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    encoder
        .write_header()
        .and_then(|mut writer| writer.write_image_data(&pixels))
        .map_err(|e| fail(format!("encoding PNG: {e}")))?;
    Ok(out)
}

/// Registers the embedded font under the family name plotters asks for.
fn register_font() {
    static FONT_BYTES: &[u8] = include_bytes!("../fonts/DejaVuSans.ttf");
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        if plotters::style::register_font(FONT, FontStyle::Normal, FONT_BYTES).is_err() {
            panic!("the embedded DejaVu Sans font does not load");
        }
    });
}

fn total_size(caption: &[String]) -> (u32, u32) {
    let extra = if caption.is_empty() {
        0
    } else {
        caption.len() as u32 * CAPTION_LINE + 12
    };
    (SIZE.0, SIZE.1 + extra)
}

/// The caption wrapped to the chart's width, or nothing.
fn caption_lines(chart: &Chart, caption: bool) -> Vec<String> {
    register_font();
    if !caption {
        return Vec::new();
    }
    let font = (FONT, CAPTION_FONT_SIZE).into_font();
    let width = |s: &str| font.box_size(s).map_or(s.len() as u32 * 7, |(w, _)| w);
    wrap(&chart.caption, SIZE.0 - 24, width)
}

/// Greedy word wrap to `max` pixels as `width` measures text.
fn wrap(text: &str, max: u32, width: impl Fn(&str) -> u32) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        let candidate = if line.is_empty() {
            word.to_owned()
        } else {
            format!("{line} {word}")
        };
        if width(&candidate) > max && !line.is_empty() {
            lines.push(std::mem::replace(&mut line, word.to_owned()));
        } else {
            line = candidate;
        }
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}

type Drawn = Result<(), String>;

fn draw_on<DB: DrawingBackend>(
    chart: &Chart,
    root: &DrawingArea<DB, Shift>,
    caption: &[String],
) -> Drawn {
    register_font();
    root.fill(&WHITE).map_err(text)?;
    let (top, bottom) = root.split_vertically(SIZE.1);
    for (i, line) in caption.iter().enumerate() {
        bottom
            .draw_text(
                line,
                &(FONT, CAPTION_FONT_SIZE).into_text_style(&bottom),
                (12, 4 + (i as u32 * CAPTION_LINE) as i32),
            )
            .map_err(text)?;
    }
    let area = top
        .titled(&chart.title, (FONT, 20).into_font())
        .map_err(text)?;
    let legend_width = legend_width(chart);
    let (plot, legend) = area.split_horizontally(SIZE.0 - legend_width);
    match &chart.body {
        Body::Lines { x, y, series } => lines(&plot, x, y, series)?,
        Body::Bars {
            x_label,
            categories,
            y,
            series,
        } => bars(&plot, x_label, categories, y, series)?,
        Body::Heatmap {
            x_label,
            x_values,
            y_label,
            y_values,
            z,
            cells,
        } => {
            let scale = ColorScale::of(cells.iter().map(|c| c.2));
            heatmap(
                &plot,
                (x_label, x_values),
                (y_label, y_values),
                z,
                cells,
                &scale,
            )?;
            color_bar(&legend, z, &scale)?;
        }
        Body::Stacked { x, spans, layers } => stacked(&plot, x, spans, layers)?,
        Body::Scatter { x, y, series } => scatter(&plot, x, y, series)?,
        Body::Marked {
            x,
            y,
            y_span,
            series,
            marks,
        } => marked(&plot, x, y, series, marks, Fit::Values(*y_span))?,
        Body::Graph { nodes, edges } => {
            let scale = ColorScale::of([0.0, 1.0].into_iter());
            graph(&plot, nodes, edges, &scale)?;
            let load = YAxis {
                label: "load".into(),
                quantity: Quantity::Percent,
            };
            color_bar(&legend, &load, &scale)?;
        }
    }
    match &chart.body {
        Body::Heatmap { .. } | Body::Graph { .. } => Ok(()),
        Body::Stacked { layers: series, .. } | Body::Bars { series, .. } => {
            legend_entries(&legend, series, true).map(|_| ())
        }
        Body::Lines { series, .. } | Body::Scatter { series, .. } => {
            legend_entries(&legend, series, false).map(|_| ())
        }
        Body::Marked { series, marks, .. } => {
            let below = legend_entries(&legend, series, false)?;
            legend_marks(&legend, marks, below)
        }
    }
}

fn text(e: impl std::fmt::Display) -> String {
    e.to_string()
}

fn rgb(c: Rgb) -> RGBColor {
    RGBColor(c.0, c.1, c.2)
}

/// Wide enough for the longest series name, at most a third of the chart.
pub(crate) fn legend_width(chart: &Chart) -> u32 {
    if matches!(chart.body, Body::Heatmap { .. } | Body::Graph { .. }) {
        return 110;
    }
    let font = (FONT, LEGEND_FONT_SIZE).into_font();
    let widest = chart
        .series_names()
        .iter()
        .map(|n| font.box_size(n).map_or(n.len() as u32 * 7, |(w, _)| w))
        .max()
        .unwrap_or(0);
    (widest + 50).clamp(90, SIZE.0 / 3)
}

/// The marks' legend entries, from height `y` (below the lines' entries).
fn legend_marks<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    marks: &[Marks],
    mut y: i32,
) -> Drawn {
    for m in marks.iter().filter(|m| !m.points.is_empty()) {
        let color = rgb(m.color);
        match m.shape {
            Shape::Bar => area.draw(&PathElement::new(
                vec![(14, y - 7), (14, y + 7)],
                color.stroke_width(3),
            )),
            Shape::Cross => area.draw(&Cross::new((14, y), 5, color.stroke_width(2))),
            Shape::Ring => area.draw(&Circle::new((14, y), 5, color.stroke_width(2))),
        }
        .map_err(text)?;
        y = legend_label(area, &m.name, y)?;
    }
    Ok(())
}

/// Where the first legend entry goes, and the height of each entry's line.
const LEGEND_TOP: i32 = 40;
const LEGEND_ENTRY: i32 = 22;
const LEGEND_LINE: i32 = 16;
/// Left of a legend entry's name: its symbol.
const LEGEND_TEXT_X: i32 = 30;

/// A legend entry's name, right of its symbol at height `y`, wrapped onto more lines
/// where it is wider than the legend; the height of the next entry.
fn legend_label<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    name: &str,
    y: i32,
) -> Result<i32, String> {
    let style = (FONT, LEGEND_FONT_SIZE).into_text_style(area);
    let room = area
        .dim_in_pixel()
        .0
        .saturating_sub(LEGEND_TEXT_X as u32 + 4);
    let font = (FONT, LEGEND_FONT_SIZE).into_font();
    let width = |t: &str| font.box_size(t).map_or(t.len() as u32 * 7, |(w, _)| w);
    let mut lines = wrap(name, room, width);
    if lines.is_empty() {
        lines.push(String::new());
    }
    for (i, line) in lines.iter().enumerate() {
        area.draw(&Text::new(
            line.clone(),
            (LEGEND_TEXT_X, y + LEGEND_LINE * i as i32),
            style.pos(Pos::new(HPos::Left, VPos::Center)),
        ))
        .map_err(text)?;
    }
    Ok(y + LEGEND_ENTRY + LEGEND_LINE * (lines.len() as i32 - 1))
}

/// The lines' legend entries; the height below them.
fn legend_entries<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    series: &[Series],
    filled: bool,
) -> Result<i32, String> {
    let mut y = LEGEND_TOP;
    let named: Vec<&Series> = series.iter().filter(|s| !s.name.is_empty()).collect();
    // Room for one more entry and a last line saying how many did not fit.
    let last = area.dim_in_pixel().1 as i32 - 2 * LEGEND_ENTRY;
    for (i, s) in named.iter().enumerate() {
        if y > last && i + 1 < named.len() {
            return legend_label(area, &format!("… {} more", named.len() - i), y);
        }
        let color = rgb(s.color);
        if filled && !s.dashed {
            area.draw(&Rectangle::new([(4, y - 6), (24, y + 6)], color.filled()))
        } else if s.dashed {
            area.draw(&PathElement::new(
                vec![(4, y), (10, y)],
                color.stroke_width(2),
            ))
            .and_then(|_| {
                area.draw(&PathElement::new(
                    vec![(16, y), (24, y)],
                    color.stroke_width(2),
                ))
            })
        } else {
            area.draw(&PathElement::new(
                vec![(4, y), (24, y)],
                color.stroke_width(3),
            ))
        }
        .map_err(text)?;
        y = legend_label(area, &s.name, y)?;
    }
    Ok(y)
}

/// A numeric coordinate, linear or logarithmic, labelled at chosen ticks.
#[derive(Clone, Debug)]
struct Coord {
    lo: f64,
    hi: f64,
    log: bool,
    /// `hi` on the left (or at the bottom).
    reversed: bool,
    ticks: Vec<f64>,
    labels: Labels,
}

#[derive(Clone, Debug)]
enum Labels {
    /// The value divided by the scale's factor (the unit is in the axis label).
    Scaled(Scale),
    /// The value with its own unit ("64 KiB"): axis values of several magnitudes.
    WithUnit(Quantity),
    /// Tick `i` is named `names[i]`: categories.
    Names(Vec<String>),
}

impl Coord {
    fn pos(&self, v: f64) -> f64 {
        if self.log {
            v.max(f64::MIN_POSITIVE).ln()
        } else {
            v
        }
    }

    /// 0 at the bottom of a value axis (every quantity here is non-negative), round
    /// ticks in its display unit.
    fn values(quantity: Quantity, max: f64) -> Coord {
        let scale = quantity.scale(max);
        let top = if max > 0.0 {
            max * 1.08
        } else {
            1.0 * scale.factor
        };
        let ticks = nice_ticks(0.0, top / scale.factor, 8)
            .into_iter()
            .map(|t| t * scale.factor)
            .collect();
        Coord {
            lo: 0.0,
            hi: top,
            log: false,
            reversed: false,
            ticks,
            labels: Labels::Scaled(scale),
        }
    }

    /// A value axis around the values from `min` to `max`, with round ticks in its
    /// display unit: where the interesting part lies far from 0 (a zoomed
    /// time-sequence graph).
    fn fitted(quantity: Quantity, min: f64, max: f64) -> Coord {
        let pad = ((max - min) * 0.04).max(max.abs() * 1e-6).max(1.0);
        Coord::linear(quantity, (min - pad).max(0.0), max + pad)
    }

    /// A linear axis from `lo` to `hi` with round ticks in the display unit of `hi`.
    fn linear(quantity: Quantity, lo: f64, hi: f64) -> Coord {
        let scale = quantity.scale(hi);
        Coord {
            lo,
            hi,
            log: false,
            reversed: false,
            ticks: nice_ticks(lo / scale.factor, hi / scale.factor, 8)
                .into_iter()
                .map(|t| t * scale.factor)
                .collect(),
            labels: Labels::Scaled(scale),
        }
    }

    /// `n` categories at 0 … n − 1.
    fn categories(names: &[String]) -> Coord {
        Coord {
            lo: -0.5,
            hi: names.len() as f64 - 0.5,
            log: false,
            reversed: false,
            ticks: (0..names.len()).map(|i| i as f64).collect(),
            labels: Labels::Names(names.to_vec()),
        }
    }

    /// An x axis spanning `xs` with a margin: labelled at the axis' values when it has
    /// them, else at round numbers.
    fn x(axis: &XAxis, xs: impl Iterator<Item = f64> + Clone) -> Coord {
        let lo = xs.clone().fold(f64::INFINITY, f64::min);
        let hi = xs.fold(f64::NEG_INFINITY, f64::max);
        let (lo, hi) = match axis.span {
            Some(span) => span,
            None if lo.is_finite() => (lo, hi),
            None => (0.0, 1.0),
        };
        let (lo, hi) = if axis.log {
            let pad = (hi / lo).powf(0.05);
            (lo / pad, hi * pad)
        } else if axis.ticks.is_some() {
            let pad = ((hi - lo) * 0.05).max(hi.abs() * 0.05).max(1e-9);
            (lo - pad, hi + pad)
        } else if axis.span.is_some() {
            (lo, if hi > lo { hi } else { lo + 1.0 })
        } else {
            (lo.min(0.0), if hi > lo { hi } else { lo + 1.0 })
        };
        match &axis.ticks {
            Some(ticks) => Coord {
                lo,
                hi,
                log: axis.log,
                reversed: false,
                ticks: ticks.clone(),
                labels: Labels::WithUnit(axis.quantity),
            },
            None => Coord::linear(axis.quantity, lo, hi),
        }
    }

    fn label(&self, v: f64) -> String {
        match &self.labels {
            Labels::Scaled(scale) => short_number(v / scale.factor),
            Labels::WithUnit(q) => q.format(v),
            Labels::Names(names) => names
                .get(v.round().max(0.0) as usize)
                .cloned()
                .unwrap_or_default(),
        }
    }
}

impl Ranged for Coord {
    type FormatOption = NoDefaultFormatting;
    type ValueType = f64;

    fn map(&self, v: &f64, limit: (i32, i32)) -> i32 {
        let t = (self.pos(*v) - self.pos(self.lo)) / (self.pos(self.hi) - self.pos(self.lo));
        let t = if self.reversed { 1.0 - t } else { t };
        limit.0 + (t * f64::from(limit.1 - limit.0)).round() as i32
    }

    /// The ticks, thinned to every k-th when more are asked than fit.
    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        let max = hint.max_num_points();
        if max == 0 {
            return Vec::new();
        }
        let step = self.ticks.len().div_ceil(max).max(1);
        self.ticks.iter().copied().step_by(step).collect()
    }

    fn range(&self) -> Range<f64> {
        self.lo..self.hi
    }
}

impl ValueFormatter<f64> for Coord {
    fn format_ext(&self, v: &f64) -> String {
        self.label(*v)
    }
}

/// Round ticks (1, 2 or 5 × 10^k apart) from `lo` to `hi`, about `n` of them.
fn nice_ticks(lo: f64, hi: f64, n: usize) -> Vec<f64> {
    let span = hi - lo;
    if span <= 0.0 || !span.is_finite() {
        return vec![lo];
    }
    let raw = span / n as f64;
    let magnitude = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * magnitude)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * magnitude);
    let first = (lo / step).ceil() as i64;
    let last = (hi / step).floor() as i64;
    (first..=last).map(|k| k as f64 * step).collect()
}

fn y_desc(y: &YAxis, coord: &Coord) -> String {
    match &coord.labels {
        Labels::Scaled(scale) if !scale.unit.is_empty() => format!("{} ({})", y.label, scale.unit),
        _ => y.label.clone(),
    }
}

fn max_of<'a>(series: impl Iterator<Item = &'a Series>) -> f64 {
    series
        .flat_map(|s| &s.points)
        .map(|p| p.interval.map_or(p.y, |(_, hi)| hi.max(p.y)))
        .fold(0.0, f64::max)
}

type Plot<'a, DB> = ChartContext<'a, DB, Cartesian2d<Coord, Coord>>;

/// Room under the plot for the axis' description, pixels.
const X_DESC_PX: u32 = 28;
/// Room under the plot for one line of tick labels, pixels.
const LABEL_LINE_PX: u32 = 17;

/// How the x axis is labelled.
#[derive(Clone, Copy, Debug, PartialEq)]
enum XLabels {
    /// At the ticks, by the coordinate.
    Ticks,
    /// Nothing at the ticks: the caller writes labels this many pixels high under the
    /// plot.
    Below(u32),
}

/// The plot's frame: axes, labels and a light grid.
fn frame<'a, DB: DrawingBackend>(
    area: &'a DrawingArea<DB, Shift>,
    (x, x_desc, x_labels): (Coord, &str, XLabels),
    y: Coord,
    y_desc: &str,
) -> Result<Plot<'a, DB>, String> {
    let label_px = match x_labels {
        XLabels::Ticks => LABEL_LINE_PX + 3,
        XLabels::Below(px) => px,
    };
    let mut chart = ChartBuilder::on(area)
        .margin(12)
        .x_label_area_size(label_px + X_DESC_PX)
        .y_label_area_size(72)
        .build_cartesian_2d(x, y)
        .map_err(text)?;
    let blank = |_: &f64| String::new();
    let mut mesh = chart.configure_mesh();
    mesh.x_desc(x_desc)
        .y_desc(y_desc)
        .label_style((FONT, LABEL_FONT_SIZE))
        .axis_desc_style((FONT, LABEL_FONT_SIZE + 1))
        .bold_line_style(GRID)
        .max_light_lines(0)
        .x_labels(12)
        .y_labels(8);
    if x_labels != XLabels::Ticks {
        mesh.x_label_formatter(&blank);
    }
    mesh.draw().map_err(text)?;
    Ok(chart)
}

/// Categories' names under their bars: a name's lines (one per axis, `rtt=10ms`) across
/// when the widest fits its bar's slot, else turned upright, as many lines side by side
/// as the slot holds, the others joined to them.
#[derive(Clone, Debug, PartialEq)]
struct CategoryLabels {
    /// Per category, its lines as drawn.
    lines: Vec<Vec<String>>,
    upright: bool,
    /// Pixels the labels take under the plot.
    height: u32,
    /// The axes whose values alone the labels give, in order, where names and values
    /// would not fit.
    names: Option<String>,
}

/// Below the tick marks, pixels.
const TICK_PX: i32 = 8;

/// Upright labels longer than this are cut (with "…"): the plot keeps half the chart.
const MAX_UPRIGHT_PX: u32 = 190;

impl CategoryLabels {
    fn fit(categories: &[String], slot_px: u32) -> CategoryLabels {
        let lines: Vec<Vec<String>> = categories
            .iter()
            .map(|c| c.lines().map(str::to_owned).collect())
            .collect();
        let most_lines = lines.iter().map(Vec::len).max().unwrap_or(1).max(1) as u32;
        if widest(&lines) + 6 <= slot_px {
            return CategoryLabels {
                lines,
                upright: false,
                height: most_lines * LABEL_LINE_PX + TICK_PX as u32,
                names: None,
            };
        }
        let columns = (slot_px / LABEL_LINE_PX).clamp(1, most_lines) as usize;
        let upright = |lines: &[Vec<String>]| -> Vec<Vec<String>> {
            lines
                .iter()
                .map(|l| {
                    let per_column = l.len().div_ceil(columns).max(1);
                    l.chunks(per_column).map(|c| c.join(", ")).collect()
                })
                .collect()
        };
        let mut names = None;
        let mut turned = upright(&lines);
        if widest(&turned) > MAX_UPRIGHT_PX {
            // The values alone, the axes' names once under the labels.
            let split: Vec<Vec<(&str, &str)>> = lines
                .iter()
                .map(|l| {
                    l.iter()
                        .map(|s| s.split_once('=').unwrap_or(("", s)))
                        .collect()
                })
                .collect();
            let values: Vec<Vec<String>> = split
                .iter()
                .map(|l| l.iter().map(|(_, v)| v.to_string()).collect())
                .collect();
            names = split
                .first()
                .map(|l| l.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", "));
            turned = upright(&values);
        }
        let turned: Vec<Vec<String>> = turned
            .iter()
            .map(|l| l.iter().map(|s| cut(s, MAX_UPRIGHT_PX)).collect())
            .collect();
        CategoryLabels {
            height: widest(&turned) + TICK_PX as u32 + 4,
            lines: turned,
            upright: true,
            names,
        }
    }

    /// Under category `i`'s tick at `x` (pixels of `area`), from `top` down.
    fn draw<DB: DrawingBackend>(
        &self,
        area: &DrawingArea<DB, Shift>,
        x: i32,
        top: i32,
        i: usize,
    ) -> Drawn {
        let Some(lines) = self.lines.get(i) else {
            return Ok(());
        };
        let style = (FONT, LABEL_FONT_SIZE).into_font();
        let line = LABEL_LINE_PX as i32;
        for (k, l) in lines.iter().enumerate() {
            let k = k as i32;
            let element = if self.upright {
                // Read from the bottom up, the lines side by side centred on the tick.
                let left = x - line * lines.len() as i32 / 2 + line * k;
                Text::new(
                    l.clone(),
                    (left, top + TICK_PX),
                    style
                        .clone()
                        .transform(FontTransform::Rotate270)
                        .color(&BLACK)
                        .pos(Pos::new(HPos::Right, VPos::Top)),
                )
            } else {
                Text::new(
                    l.clone(),
                    (x, top + TICK_PX + line * k),
                    style
                        .clone()
                        .color(&BLACK)
                        .pos(Pos::new(HPos::Center, VPos::Top)),
                )
            };
            area.draw(&element).map_err(text)?;
        }
        Ok(())
    }
}

/// The widest of these lines, pixels.
fn widest(lines: &[Vec<String>]) -> u32 {
    lines
        .iter()
        .flatten()
        .map(|l| text_width(l, LABEL_FONT_SIZE))
        .max()
        .unwrap_or(0)
}

/// Pixels `s` takes in the embedded font at `size`.
fn text_width(s: &str, size: u32) -> u32 {
    let font = (FONT, size).into_font();
    font.box_size(s).map_or(s.len() as u32 * 7, |(w, _)| w)
}

/// `s`, cut with "…" to at most `max_px` pixels.
fn cut(s: &str, max_px: u32) -> String {
    if text_width(s, LABEL_FONT_SIZE) <= max_px {
        return s.to_owned();
    }
    let mut out: String = s.to_owned();
    while !out.is_empty() && text_width(&format!("{out}…"), LABEL_FONT_SIZE) > max_px {
        out.pop();
    }
    format!("{out}…")
}

fn lines<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    x: &XAxis,
    y: &YAxis,
    series: &[Series],
) -> Drawn {
    marked(area, x, y, series, &[], Fit::FromZero)
}

/// What a value axis spans.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Fit {
    /// From 0 to the largest value.
    FromZero,
    /// Around the values: all of them, or those in the span given.
    Values(Option<(f64, f64)>),
}

/// The shortest a bar mark is drawn, pixels: a segment of a few bytes on a whole run's
/// scale is still seen.
const MIN_BAR_PX: i32 = 6;

/// Marks under the lines, the lines, then marks over them, in one frame that holds them
/// all; its value axis as `fit` says.
fn marked<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    x: &XAxis,
    y: &YAxis,
    series: &[Series],
    marks: &[Marks],
    fit: Fit,
) -> Drawn {
    let mark_points = || marks.iter().flat_map(|m| &m.points);
    let xs = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.x))
        .chain(mark_points().map(|p| p.x));
    let top = mark_points()
        .map(|p| p.interval.map_or(p.y, |(_, hi)| hi.max(p.y)))
        .fold(max_of(series.iter()), f64::max);
    let ycoord = match fit {
        Fit::FromZero => Coord::values(y.quantity, top),
        Fit::Values(Some((lo, hi))) => Coord::fitted(y.quantity, lo, hi),
        Fit::Values(None) => {
            let bottom = mark_points()
                .chain(series.iter().flat_map(|s| &s.points))
                .map(|p| p.interval.map_or(p.y, |(lo, _)| lo.min(p.y)))
                .fold(top, f64::min);
            Coord::fitted(y.quantity, bottom, top)
        }
    };
    let shown = (ycoord.lo, ycoord.hi);
    let desc = y_desc(y, &ycoord);
    let mut chart = frame(
        area,
        (Coord::x(x, xs), &x.label, XLabels::Ticks),
        ycoord,
        &desc,
    )?;
    let (under, over): (Vec<&Marks>, Vec<&Marks>) =
        marks.iter().partition(|m| m.layer == Layer::UnderLines);
    draw_marks(area, &mut chart, &under)?;
    // An experiment's points are few and each is a mean: mark them. A time series is a
    // trace.
    let markers = x.ticks.is_some();
    // Bounds first: a series running at its bound stays visible on top of it.
    let bounds_first = series
        .iter()
        .filter(|s| s.dashed)
        .chain(series.iter().filter(|s| !s.dashed));
    for s in bounds_first {
        let color = rgb(s.color);
        let style = color.stroke_width(2);
        let coords: Vec<(f64, f64)> = s.points.iter().map(|p| (p.x, p.y)).collect();
        // Cut where it leaves the values shown rather than run along the frame.
        for part in clip_y(&coords, shown) {
            if s.dashed {
                chart
                    .draw_series(DashedLineSeries::new(part, 8, 5, style))
                    .map_err(text)?;
            } else {
                chart
                    .draw_series(LineSeries::new(part, style))
                    .map_err(text)?;
            }
        }
        if markers && !s.dashed {
            chart
                .draw_series(
                    s.points
                        .iter()
                        .map(|p| Circle::new((p.x, p.y), 3, color.filled())),
                )
                .map_err(text)?;
        }
        error_bars(&mut chart, &s.points, color)?;
        notes(&mut chart, &s.points, color)?;
    }
    draw_marks(area, &mut chart, &over)
}

/// Each mark in its shape, in order.
fn draw_marks<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    chart: &mut Plot<DB>,
    marks: &[&Marks],
) -> Drawn {
    let (base_x, base_y) = area.get_base_pixel();
    for m in marks {
        let style = rgb(m.color).stroke_width(2);
        match m.shape {
            Shape::Bar => {
                for p in &m.points {
                    let (lo, hi) = p.interval.unwrap_or((p.y, p.y));
                    let (x, bottom) = chart.backend_coord(&(p.x, lo));
                    let (_, top) = chart.backend_coord(&(p.x, hi));
                    // Grown about its middle to the shortest a bar is drawn.
                    let grow = (MIN_BAR_PX - (bottom - top)).max(0);
                    let (bottom, top) = (bottom + grow - grow / 2, top - grow / 2);
                    area.draw(&PathElement::new(
                        vec![(x - base_x, bottom - base_y), (x - base_x, top - base_y)],
                        style,
                    ))
                    .map_err(text)?;
                }
            }
            Shape::Cross => {
                chart
                    .draw_series(m.points.iter().map(|p| Cross::new((p.x, p.y), 4, style)))
                    .map_err(text)?;
            }
            Shape::Ring => {
                chart
                    .draw_series(m.points.iter().map(|p| Circle::new((p.x, p.y), 4, style)))
                    .map_err(text)?;
            }
        }
    }
    Ok(())
}

/// The parts of a line inside `lo..=hi` in y, cut where it crosses either edge.
fn clip_y(points: &[(f64, f64)], (lo, hi): (f64, f64)) -> Vec<Vec<(f64, f64)>> {
    let inside = |y: f64| y >= lo && y <= hi;
    let mut parts = Vec::new();
    let mut part: Vec<(f64, f64)> = Vec::new();
    for (i, &(x, y)) in points.iter().enumerate() {
        if let Some(&(x0, y0)) = i.checked_sub(1).map(|k| &points[k]) {
            let mut cuts: Vec<(f64, (f64, f64))> = [lo, hi]
                .into_iter()
                .filter(|edge| (y0 - edge) * (y - edge) < 0.0)
                .map(|edge| {
                    let t = (edge - y0) / (y - y0);
                    (t, (x0 + t * (x - x0), edge))
                })
                .collect();
            cuts.sort_by(|a, b| a.0.total_cmp(&b.0));
            // Each crossing enters the span or leaves it.
            for (_, at) in cuts {
                part.push(at);
                if part.len() > 1 {
                    parts.push(std::mem::take(&mut part));
                }
            }
        }
        if inside(y) {
            part.push((x, y));
        } else if !part.is_empty() {
            parts.push(std::mem::take(&mut part));
        }
    }
    if !part.is_empty() {
        parts.push(part);
    }
    parts
}

/// Each point's note, just above and right of it, in its series' colour.
fn notes<DB: DrawingBackend>(chart: &mut Plot<DB>, points: &[Pt], color: RGBColor) -> Drawn {
    let style = (FONT, NOTE_FONT_SIZE).into_font().color(&color);
    for p in points {
        if let Some(note) = p.note {
            chart
                .draw_series([
                    EmptyElement::at((p.x, p.y)) + Text::new(note, (4, -16), style.clone())
                ])
                .map_err(text)?;
        }
    }
    Ok(())
}

/// A vertical bar over each point's interval, with caps.
/// Each series' points as filled dots, named beside them, with a cross of their spread;
/// the x axis reversed (see [`Body::Scatter`]), the y axis from 0.
fn scatter<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    x: &XAxis,
    y: &YAxis,
    series: &[Series],
) -> Drawn {
    let points = || series.iter().flat_map(|s| &s.points);
    let (lo, hi) = points()
        .flat_map(|p| {
            let (a, b) = p.x_interval.unwrap_or((p.x, p.x));
            [a.min(p.x), b.max(p.x)]
        })
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), v| {
            (l.min(v), h.max(v))
        });
    let pad = ((hi - lo) * 0.15).max(hi.abs() * 0.05).max(1.0);
    let mut xcoord = Coord::linear(x.quantity, (lo - pad).max(0.0), hi + pad);
    xcoord.reversed = true;
    let x_desc = y_desc(
        &YAxis {
            label: x.label.clone(),
            quantity: x.quantity,
        },
        &xcoord,
    );
    let top = points()
        .map(|p| p.interval.map_or(p.y, |(_, hi)| hi.max(p.y)))
        .fold(0.0, f64::max);
    let ycoord = Coord::values(y.quantity, top);
    let desc = y_desc(y, &ycoord);
    let mut chart = frame(area, (xcoord, &x_desc, XLabels::Ticks), ycoord, &desc)?;
    for s in series {
        let color = rgb(s.color);
        let style = color.stroke_width(2);
        for p in &s.points {
            let (x0, x1) = p.x_interval.unwrap_or((p.x, p.x));
            let (y0, y1) = p.interval.unwrap_or((p.y, p.y));
            chart
                .draw_series([
                    PathElement::new(vec![(x0, p.y), (x1, p.y)], style),
                    PathElement::new(vec![(p.x, y0.max(0.0)), (p.x, y1)], style),
                ])
                .map_err(text)?;
        }
        chart
            .draw_series(s.points.iter().map(|p| {
                EmptyElement::at((p.x, p.y))
                    + Circle::new((0, 0), 8, color.filled())
                    + Text::new(
                        s.name.clone(),
                        (11, -20),
                        (FONT, LABEL_FONT_SIZE).into_font().color(&color),
                    )
            }))
            .map_err(text)?;
    }
    Ok(())
}

fn error_bars<DB: DrawingBackend>(chart: &mut Plot<DB>, points: &[Pt], color: RGBColor) -> Drawn {
    let style = color.stroke_width(1);
    for p in points {
        let Some((lo, hi)) = p.interval else {
            continue;
        };
        let lo = lo.max(0.0);
        chart
            .draw_series([PathElement::new(vec![(p.x, lo), (p.x, hi)], style)])
            .map_err(text)?;
        for end in [lo, hi] {
            chart
                .draw_series([
                    EmptyElement::at((p.x, end)) + PathElement::new(vec![(-4, 0), (4, 0)], style)
                ])
                .map_err(text)?;
        }
    }
    Ok(())
}

fn bars<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    x_label: &str,
    categories: &[String],
    y: &YAxis,
    series: &[Series],
) -> Drawn {
    let ycoord = Coord::values(y.quantity, max_of(series.iter()));
    let desc = y_desc(y, &ycoord);
    // The plot's width less the y axis' labels and the margins.
    let plot_px = area.dim_in_pixel().0.saturating_sub(72 + 24);
    let slot_px = plot_px / categories.len().max(1) as u32;
    let labels = CategoryLabels::fit(categories, slot_px);
    let x_desc = match &labels.names {
        Some(names) => format!("{x_label}: {names}"),
        None => x_label.to_owned(),
    };
    let x = (
        Coord::categories(categories),
        x_desc.as_str(),
        XLabels::Below(labels.height),
    );
    let mut chart = frame(area, x, ycoord, &desc)?;
    // Solid series are bars side by side; a dashed one (a bound) is a level
    // across the bar of the series before it.
    let bars = series.iter().filter(|s| !s.dashed).count().max(1);
    let width = 0.8 / bars as f64;
    let mut slot = 0;
    for s in series {
        let color = rgb(s.color);
        // A bound follows its series: over the bar just drawn.
        let bar = if s.dashed { slot.max(1) - 1 } else { slot };
        let left = |p: &Pt| p.x - 0.4 + width * bar as f64;
        if s.dashed {
            let style = color.stroke_width(2);
            for p in &s.points {
                let (a, b) = (left(p), left(p) + width);
                chart
                    .draw_series(DashedLineSeries::new(vec![(a, p.y), (b, p.y)], 6, 4, style))
                    .map_err(text)?;
            }
            let at_left: Vec<Pt> = s.points.iter().map(|p| Pt { x: left(p), ..*p }).collect();
            notes(&mut chart, &at_left, color)?;
            continue;
        }
        chart
            .draw_series(
                s.points.iter().map(|p| {
                    Rectangle::new([(left(p), 0.0), (left(p) + width, p.y)], color.filled())
                }),
            )
            .map_err(text)?;
        let centred: Vec<Pt> = s
            .points
            .iter()
            .map(|p| Pt {
                x: left(p) + width / 2.0,
                ..*p
            })
            .collect();
        error_bars(&mut chart, &centred, rgb(TOTAL))?;
        slot += 1;
    }
    let (base_x, base_y) = area.get_base_pixel();
    for i in 0..categories.len() {
        let (x, y) = chart.backend_coord(&(i as f64, 0.0));
        labels.draw(area, x - base_x, y - base_y, i)?;
    }
    Ok(())
}

fn stacked<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    x: &XAxis,
    spans: &[(f64, f64)],
    layers: &[Series],
) -> Drawn {
    let xs = spans.iter().flat_map(|(a, b)| [*a, *b]);
    let ycoord = Coord {
        lo: 0.0,
        hi: 1.0,
        log: false,
        reversed: false,
        ticks: (0..=5).map(|i| f64::from(i) * 0.2).collect(),
        labels: Labels::Scaled(Quantity::Percent.scale(1.0)),
    };
    let mut chart = frame(
        area,
        (Coord::x(x, xs), &x.label, XLabels::Ticks),
        ycoord,
        "share of the time (%)",
    )?;
    for (j, (start, end)) in spans.iter().enumerate() {
        let mut bottom = 0.0;
        for layer in layers {
            let share = layer.points.get(j).map_or(0.0, |p| p.y);
            if share > 0.0 {
                chart
                    .draw_series([Rectangle::new(
                        [(*start, bottom), (*end, bottom + share)],
                        rgb(layer.color).filled(),
                    )])
                    .map_err(text)?;
            }
            bottom += share;
        }
    }
    Ok(())
}

/// Values to colours: viridis, on a log scale when they span more than 30×.
struct ColorScale {
    lo: f64,
    hi: f64,
    log: bool,
}

impl ColorScale {
    fn of(values: impl Iterator<Item = f64>) -> ColorScale {
        let (lo, hi) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
            (lo.min(v), hi.max(v))
        });
        ColorScale {
            lo,
            hi,
            log: lo > 0.0 && hi / lo > 30.0,
        }
    }

    /// Where `v` falls between the lowest (0) and the highest (1) value.
    fn position(&self, v: f64) -> f64 {
        let t = if self.hi <= self.lo {
            0.5
        } else if self.log {
            (v / self.lo).ln() / (self.hi / self.lo).ln()
        } else {
            (v - self.lo) / (self.hi - self.lo)
        };
        t.clamp(0.0, 1.0)
    }

    fn value_at(&self, t: f64) -> f64 {
        if self.log {
            self.lo * (self.hi / self.lo).powf(t)
        } else {
            self.lo + t * (self.hi - self.lo)
        }
    }

    fn color(&self, v: f64) -> RGBColor {
        viridis(self.position(v))
    }
}

/// The viridis colour map at `t` in 0..=1, interpolated between five of its stops.
fn viridis(t: f64) -> RGBColor {
    const STOPS: [(f64, f64, f64); 5] = [
        (68.0, 1.0, 84.0),
        (59.0, 82.0, 139.0),
        (33.0, 145.0, 140.0),
        (94.0, 201.0, 98.0),
        (253.0, 231.0, 37.0),
    ];
    let x = t.clamp(0.0, 1.0) * (STOPS.len() - 1) as f64;
    let i = (x.floor() as usize).min(STOPS.len() - 2);
    let f = x - i as f64;
    let (a, b) = (STOPS[i], STOPS[i + 1]);
    let mix = |p: f64, q: f64| (p + (q - p) * f).round() as u8;
    RGBColor(mix(a.0, b.0), mix(a.1, b.1), mix(a.2, b.2))
}

fn heatmap<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    (x_label, x_values): (&str, &[String]),
    (y_label, y_values): (&str, &[String]),
    z: &YAxis,
    cells: &[(usize, usize, f64)],
    scale: &ColorScale,
) -> Drawn {
    let mut chart = frame(
        area,
        (Coord::categories(x_values), x_label, XLabels::Ticks),
        Coord::categories(y_values),
        y_label,
    )?;
    let (nx, ny) = (x_values.len() as f64, y_values.len() as f64);
    chart
        .draw_series([Rectangle::new(
            [(-0.5, -0.5), (nx - 0.5, ny - 0.5)],
            NO_DATA.filled(),
        )])
        .map_err(text)?;
    let unit = z.quantity.scale(scale.hi);
    for &(i, j, v) in cells {
        let (x, y) = (i as f64, j as f64);
        let fill = scale.color(v);
        chart
            .draw_series([Rectangle::new(
                [(x - 0.5, y - 0.5), (x + 0.5, y + 0.5)],
                fill.filled(),
            )])
            .map_err(text)?;
        // Dark text on the bright end of the map, white on the dark end.
        let ink = if scale.position(v) > 0.6 {
            BLACK
        } else {
            WHITE
        };
        let style = (FONT, LABEL_FONT_SIZE)
            .into_font()
            .color(&ink)
            .pos(Pos::new(HPos::Center, VPos::Center));
        chart
            .draw_series([Text::new(short_number(v / unit.factor), (x, y), style)])
            .map_err(text)?;
    }
    Ok(())
}

/// A link without a fixed rate, which has no load.
const UNRATED: RGBColor = RGBColor(170, 170, 170);

/// Each edge a line coloured by its load on `scale` (grey without one), labelled at
/// its middle; each node at its place, a host a disc and a router a square, named
/// under it.
fn graph<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    nodes: &[Node],
    edges: &[Edge],
    scale: &ColorScale,
) -> Drawn {
    let (w, h) = area.dim_in_pixel();
    let (mx, my) = (70.0, 40.0);
    let place = |n: &Node| -> (i32, i32) {
        (
            (mx + n.at.0 * (f64::from(w) - 2.0 * mx)) as i32,
            (my + n.at.1 * (f64::from(h) - 2.0 * my)) as i32,
        )
    };
    let note = (FONT, NOTE_FONT_SIZE)
        .into_font()
        .color(&BLACK)
        .pos(Pos::new(HPos::Center, VPos::Bottom));
    for e in edges {
        let (a, b) = (place(&nodes[e.ends[0]]), place(&nodes[e.ends[1]]));
        let color = e.load.map_or(UNRATED, |l| scale.color(l));
        area.draw(&PathElement::new(vec![a, b], color.stroke_width(3)))
            .map_err(text)?;
        let middle = ((a.0 + b.0) / 2, (a.1 + b.1) / 2 - 3);
        area.draw(&Text::new(e.label.clone(), middle, note.clone()))
            .map_err(text)?;
    }
    let name = (FONT, LABEL_FONT_SIZE)
        .into_font()
        .color(&BLACK)
        .pos(Pos::new(HPos::Center, VPos::Top));
    for n in nodes {
        let (x, y) = place(n);
        if n.host {
            area.draw(&Circle::new((x, y), 10, rgb(palette::HOST).filled()))
                .map_err(text)?;
        } else {
            area.draw(&Rectangle::new(
                [(x - 9, y - 9), (x + 9, y + 9)],
                rgb(palette::ROUTER).filled(),
            ))
            .map_err(text)?;
        }
        area.draw(&Text::new(n.name.clone(), (x, y + 13), name.clone()))
            .map_err(text)?;
    }
    Ok(())
}

/// The colour scale as a vertical bar with its values, in the legend's place.
fn color_bar<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    z: &YAxis,
    scale: &ColorScale,
) -> Drawn {
    let unit = z.quantity.scale(scale.hi);
    let (top, height) = (60, 240);
    const STEPS: i32 = 48;
    for k in 0..STEPS {
        let t = 1.0 - f64::from(k) / f64::from(STEPS - 1);
        let y0 = top + height * k / STEPS;
        let y1 = top + height * (k + 1) / STEPS;
        area.draw(&Rectangle::new([(8, y0), (28, y1)], viridis(t).filled()))
            .map_err(text)?;
    }
    let style = (FONT, LABEL_FONT_SIZE).into_text_style(area);
    area.draw(&Text::new(
        if unit.unit.is_empty() {
            z.label.clone()
        } else {
            unit.unit.to_owned()
        },
        (8, top - 22),
        style.clone(),
    ))
    .map_err(text)?;
    for k in 0..=4 {
        let t = 1.0 - f64::from(k) / 4.0;
        let y = top + height * k / 4;
        area.draw(&Text::new(
            short_number(scale.value_at(t) / unit.factor),
            (34, y),
            style.pos(Pos::new(HPos::Left, VPos::Center)),
        ))
        .map_err(text)?;
    }
    if scale.log {
        area.draw(&Text::new("log scale", (8, top + height + 16), style))
            .map_err(text)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Zipped points named by their settings, one line per axis: across under 5 bars;
    /// upright under 14, two lines side by side; under 30 the values alone, the axes
    /// named once. Every label keeps every value, and the chart draws.
    #[test]
    fn bars_are_named_by_their_settings_across_or_upright() {
        use crate::axes::Quantity;
        use crate::chart::{Chart, Series};
        let named = |n: usize| -> Vec<String> {
            (0..n)
                .map(|i| format!("rtt={}ms\nloss={i}%\nwhere=up.\nwscale=1", 10 * i))
                .collect()
        };
        let plot_px = SIZE.0 - 100 - 72 - 24;
        let fit = |n: usize| CategoryLabels::fit(&named(n), plot_px / n as u32);
        let five = fit(5);
        assert!(!five.upright && five.names.is_none());
        assert_eq!(
            five.lines[4],
            ["rtt=40ms", "loss=4%", "where=up.", "wscale=1"]
        );
        let fourteen = fit(14);
        assert!(fourteen.upright && fourteen.names.is_none());
        assert_eq!(
            fourteen.lines[13],
            ["rtt=130ms, loss=13%", "where=up., wscale=1"]
        );
        let thirty = fit(30);
        assert!(thirty.upright);
        assert_eq!(thirty.names.as_deref(), Some("rtt, loss, where, wscale"));
        assert_eq!(thirty.lines[29], ["290ms, 29%, up., 1"]);
        for labels in [five, fourteen, thirty] {
            assert!(labels.height <= MAX_UPRIGHT_PX + 16, "{labels:?}");
        }
        for n in [5, 14, 30] {
            let chart = Chart {
                id: "throughput".into(),
                title: "Throughput per point".into(),
                caption: "One bar per point.".into(),
                body: Body::Bars {
                    x_label: "point".into(),
                    categories: named(n),
                    y: YAxis {
                        label: "throughput".into(),
                        quantity: Quantity::Rate,
                    },
                    series: vec![Series {
                        name: "mean per point".into(),
                        color: crate::palette::COLORS[0],
                        dashed: false,
                        points: (0..n).map(|i| Pt::at(i as f64, 1e6 * i as f64)).collect(),
                    }],
                },
            };
            let text = svg(&chart, false).unwrap();
            assert!(
                text.contains(&format!("rtt={}ms", 10 * (n - 1)))
                    || text.contains(&format!("{}ms, {}%", 10 * (n - 1), n - 1)),
                "{n} bars"
            );
        }
    }

    #[test]
    fn ticks_are_round_and_cover_the_span() {
        assert_eq!(
            nice_ticks(0.0, 10.0, 5),
            vec![0.0, 2.0, 4.0, 6.0, 8.0, 10.0]
        );
        assert_eq!(nice_ticks(0.0, 0.9, 4), vec![0.0, 0.5]);
        assert_eq!(nice_ticks(0.0, 970.0, 6).last(), Some(&800.0));
    }

    #[test]
    fn a_log_coordinate_spaces_factors_evenly() {
        let mut c = Coord {
            lo: 1.0,
            hi: 100.0,
            log: true,
            reversed: false,
            ticks: vec![1.0, 10.0, 100.0],
            labels: Labels::WithUnit(Quantity::Size),
        };
        assert_eq!(c.map(&10.0, (0, 200)), 100);
        assert_eq!(c.map(&100.0, (0, 200)), 200);
        c.reversed = true;
        assert_eq!(
            (c.map(&1.0, (0, 200)), c.map(&100.0, (0, 200))),
            (200, 0),
            "reversed: the high end first"
        );
        c.reversed = false;
        assert_eq!(c.key_points(2usize), vec![1.0, 100.0]);
        assert_eq!(c.format_ext(&10.0), "10 B");
    }

    /// A line leaving the values shown is cut at the edge and picks up where it comes
    /// back, rather than running along the frame.
    #[test]
    fn a_line_is_cut_where_it_leaves_the_span() {
        let line = [
            (0.0, 5.0),
            (1.0, 15.0),
            (2.0, 15.0),
            (3.0, 5.0),
            (4.0, -5.0),
        ];
        assert_eq!(
            clip_y(&line, (0.0, 10.0)),
            [
                vec![(0.0, 5.0), (0.5, 10.0)],
                vec![(2.5, 10.0), (3.0, 5.0), (3.5, 0.0)],
            ]
        );
        // Across the whole span in one step, and touching an edge.
        assert_eq!(
            clip_y(&[(0.0, -10.0), (2.0, 30.0)], (0.0, 20.0)),
            [vec![(0.5, 0.0), (1.5, 20.0)]]
        );
        assert_eq!(
            clip_y(&[(0.0, 10.0), (1.0, 20.0), (2.0, 10.0)], (0.0, 10.0)),
            [vec![(0.0, 10.0)], vec![(2.0, 10.0)]]
        );
        assert!(clip_y(&[(0.0, 50.0), (1.0, 60.0)], (0.0, 10.0)).is_empty());
    }

    #[test]
    fn captions_wrap_at_words() {
        let lines = wrap("aaa bbb ccc ddd", 7, |s| s.len() as u32);
        assert_eq!(lines, ["aaa bbb", "ccc ddd"]);
    }

    #[test]
    fn the_colour_scale_runs_dark_to_bright() {
        let s = ColorScale::of([1.0, 1000.0].into_iter());
        assert!(s.log);
        assert!((s.position(31.62) - 0.5).abs() < 1e-3);
        assert_eq!(viridis(0.0), RGBColor(68, 1, 84));
        assert_eq!(viridis(1.0), RGBColor(253, 231, 37));
    }
}
