//! Text tables for people: each column as wide as its widest cell, whatever the cells.

/// How a column's cells line up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Align {
    /// Words, read left to right.
    Left,
    /// Numbers, whose digits line up.
    Right,
}

/// `rows` as lines: column `c` as wide as its widest cell and aligned as `align(c)`,
/// two spaces between columns, none at the end of a line.
pub fn aligned(rows: &[Vec<String>], align: impl Fn(usize) -> Align) -> Vec<String> {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|cell| cell.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    rows.iter()
        .map(|row| {
            let cells: Vec<String> = row
                .iter()
                .enumerate()
                .map(|(c, cell)| {
                    let pad = " ".repeat(widths[c] - cell.chars().count());
                    match align(c) {
                        Align::Left => format!("{cell}{pad}"),
                        Align::Right => format!("{pad}{cell}"),
                    }
                })
                .collect();
            cells.join("  ").trim_end().to_string()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(cells: &[&[&str]]) -> Vec<Vec<String>> {
        cells
            .iter()
            .map(|r| r.iter().map(|c| c.to_string()).collect())
            .collect()
    }

    #[test]
    fn columns_are_as_wide_as_their_widest_cell() {
        let lines = aligned(
            &rows(&[
                &["name", "pid", "path"],
                &["a", "7", "rtt 1ms"],
                &["a-name-of-24-characters-", "21928", "rtt 20ms rate 1gbit"],
            ]),
            |c| if c == 1 { Align::Right } else { Align::Left },
        );
        assert_eq!(
            lines,
            [
                "name                        pid  path",
                "a                             7  rtt 1ms",
                "a-name-of-24-characters-  21928  rtt 20ms rate 1gbit",
            ]
        );
        // Widths count characters, not bytes.
        let lines = aligned(&rows(&[&["µs", "x"], &["abc", "y"]]), |_| Align::Left);
        assert_eq!(lines, ["µs   x", "abc  y"]);
    }
}
