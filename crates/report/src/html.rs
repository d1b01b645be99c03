//! The report page: one HTML file with its style and every chart inline (SVG), so it
//! opens anywhere without a network or other files.

use std::fmt::Write;

use crate::chart::Chart;
use crate::draw::{self, DrawError};
use crate::results::ResultTable;

/// A part of the report: an experiment, a run, or the list of single runs.
pub struct Section {
    /// The element id, unique in the page.
    pub anchor: String,
    pub title: String,
    /// Plain-text paragraphs under the title.
    pub text: Vec<String>,
    /// Shown folded, preformatted (an experiment's file).
    pub source: Option<(String, String)>,
    pub tables: Vec<ResultTable>,
    /// Tables of their own shape, shown open: a heading and rows, the first the header.
    pub boards: Vec<(String, Vec<Vec<String>>)>,
    pub charts: Vec<Chart>,
    pub subsections: Vec<Section>,
}

const STYLE: &str = r#"
body { font-family: "DejaVu Sans", Verdana, sans-serif; margin: 1.5em auto; max-width: 1600px; padding: 0 1em; color: #222; }
h1 { font-size: 1.6em; } h2 { font-size: 1.35em; border-bottom: 1px solid #ccc; margin-top: 2em; } h3 { font-size: 1.1em; margin-top: 1.5em; }
nav ul { line-height: 1.5; } nav li li { font-size: 0.9em; }
.charts { display: grid; grid-template-columns: repeat(auto-fill, minmax(620px, 1fr)); gap: 1em; }
figure.chart { margin: 0; padding: 0.5em; border: 1px solid #ddd; border-radius: 4px; }
figure.chart svg { width: 100%; height: auto; display: block; }
figure.chart svg text { font-family: "DejaVu Sans", Verdana, sans-serif; }
figcaption { font-size: 0.85em; color: #444; margin-top: 0.4em; }
figcaption code { font-size: 0.95em; }
table { border-collapse: collapse; font-size: 0.85em; margin: 0.5em 0 1em; }
th, td { border: 1px solid #ddd; padding: 0.2em 0.5em; text-align: right; white-space: nowrap; }
th { background: #f4f4f4; }
pre { background: #f7f7f7; padding: 0.6em; overflow-x: auto; font-size: 0.85em; }
details { margin: 0.5em 0; }
"#;

/// After loading, each chart's place on the page and the page's height are written into
/// the DOM (`data-box="x,y,width,height"`, `data-height`), for tools that check or
/// capture the page.
const SCRIPT: &str = r#"
addEventListener("load", () => {
  for (const f of document.querySelectorAll("figure.chart")) {
    const r = f.querySelector("svg").getBoundingClientRect();
    f.dataset.box = [r.left + scrollX, r.top + scrollY, r.width, r.height].map(Math.round).join(",");
  }
  document.body.dataset.height = document.documentElement.scrollHeight;
});
"#;

/// Escapes text for HTML content and attribute values.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// The page: a title, what it covers, a table of contents, then the sections.
pub fn page(title: &str, intro: &str, sections: &[Section]) -> Result<String, DrawError> {
    let mut out = String::new();
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>{}</title>\n<style>{STYLE}</style>\n<script>{SCRIPT}</script>\n</head>\n<body>\n<h1>{}</h1>\n<p>{}</p>\n<nav><h2>Contents</h2>\n<ul>\n",
        escape(title),
        escape(title),
        escape(intro)
    );
    for s in sections {
        contents(&mut out, s);
    }
    out.push_str("</ul>\n</nav>\n");
    for s in sections {
        section(&mut out, s, 2)?;
    }
    out.push_str("</body>\n</html>\n");
    Ok(out)
}

fn chart_anchor(section: &Section, chart: &Chart) -> String {
    let id: String = chart
        .id
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    format!("{}-{id}", section.anchor)
}

fn contents(out: &mut String, s: &Section) {
    let _ = write!(
        out,
        "<li><a href=\"#{}\">{}</a>",
        escape(&s.anchor),
        escape(&s.title)
    );
    if !s.charts.is_empty() || !s.subsections.is_empty() {
        out.push_str("<ul>");
        for c in &s.charts {
            let _ = write!(
                out,
                "<li><a href=\"#{}\">{}</a></li>",
                escape(&chart_anchor(s, c)),
                escape(&c.title)
            );
        }
        for sub in &s.subsections {
            contents(out, sub);
        }
        out.push_str("</ul>");
    }
    out.push_str("</li>\n");
}

fn section(out: &mut String, s: &Section, level: u8) -> Result<(), DrawError> {
    let _ = writeln!(
        out,
        "<section id=\"{}\">\n<h{level}>{}</h{level}>",
        escape(&s.anchor),
        escape(&s.title)
    );
    for p in &s.text {
        let _ = writeln!(out, "<p>{}</p>", escape(p));
    }
    if let Some((summary, text)) = &s.source {
        let _ = writeln!(
            out,
            "<details><summary>{}</summary><pre>{}</pre></details>",
            escape(summary),
            escape(text)
        );
    }
    for (i, t) in s.tables.iter().enumerate() {
        // The first table (throughput) open, the other metrics folded.
        let _ = writeln!(
            out,
            "<details{}><summary>{}</summary>",
            if i == 0 { " open" } else { "" },
            escape(&t.heading())
        );
        rows(out, &t.cells());
        out.push_str("</details>\n");
    }
    for (heading, cells) in &s.boards {
        let _ = writeln!(out, "<details open><summary>{}</summary>", escape(heading));
        rows(out, cells);
        out.push_str("</details>\n");
    }
    if !s.charts.is_empty() {
        out.push_str("<div class=\"charts\">\n");
        for c in &s.charts {
            let _ = writeln!(
                out,
                "<figure class=\"chart\" id=\"{}\" data-chart=\"{}\">\n{}\n<figcaption>{}</figcaption>\n</figure>",
                escape(&chart_anchor(s, c)),
                escape(&c.id),
                draw::svg(c, false)?,
                escape(&c.caption)
            );
        }
        out.push_str("</div>\n");
    }
    for sub in &s.subsections {
        section(out, sub, level + 1)?;
    }
    out.push_str("</section>\n");
    Ok(())
}

/// An HTML table of `rows`, the first its header.
fn rows(out: &mut String, rows: &[Vec<String>]) {
    out.push_str("<table>\n");
    for (i, row) in rows.iter().enumerate() {
        let cell = if i == 0 { "th" } else { "td" };
        out.push_str("<tr>");
        for c in row {
            let _ = write!(out, "<{cell}>{}</{cell}>", escape(c));
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</table>\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_escaped() {
        assert_eq!(
            escape("<a href=\"x\">&'"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
    }
}
