//! kubectl-style tables: upper-case headers, columns separated by three spaces, color applied after padding so
//! alignment never depends on escape codes.

/// How a cell is emphasised when color is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Style {
    /// No emphasis.
    #[default]
    Plain,
    /// Healthy / done.
    Good,
    /// Needs attention.
    Warn,
    /// Broken.
    Bad,
    /// Less important.
    Dim,
    /// Headings.
    Bold,
}

impl Style {
    fn code(self) -> Option<&'static str> {
        match self {
            Style::Plain => None,
            Style::Good => Some("32"),
            Style::Warn => Some("33"),
            Style::Bad => Some("31"),
            Style::Dim => Some("2"),
            Style::Bold => Some("1"),
        }
    }
    /// Wraps `text` in this style's escape codes when `color` is on.
    pub fn paint(self, text: &str, color: bool) -> String {
        match (color, self.code()) {
            (true, Some(code)) => format!("\x1b[{code}m{text}\x1b[0m"),
            _ => text.to_string(),
        }
    }
}

/// One table cell.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Cell {
    /// Text.
    pub text: String,
    /// Emphasis.
    pub style: Style,
}

impl Cell {
    /// A plain cell.
    pub fn plain(text: impl Into<String>) -> Cell {
        Cell { text: text.into(), style: Style::Plain }
    }
    /// A styled cell.
    pub fn styled(text: impl Into<String>, style: Style) -> Cell {
        Cell { text: text.into(), style }
    }
}

impl From<&str> for Cell {
    fn from(s: &str) -> Cell {
        Cell::plain(s)
    }
}

impl From<String> for Cell {
    fn from(s: String) -> Cell {
        Cell::plain(s)
    }
}

/// A table.
#[derive(Debug, Clone, Default)]
pub struct Table {
    /// Column headers (rendered upper case).
    pub headers: Vec<String>,
    /// Rows of cells.
    pub rows: Vec<Vec<Cell>>,
}

impl Table {
    /// A table with these headers.
    pub fn new(headers: &[&str]) -> Table {
        Table { headers: headers.iter().map(|h| h.to_string()).collect(), rows: Vec::new() }
    }
    /// Appends a row.
    pub fn row(&mut self, cells: Vec<Cell>) {
        self.rows.push(cells);
    }
    /// Shortens the last column's cells (ending them with `…`) so that no line is wider than `max` characters,
    /// as long as at least 8 characters of that column remain. The full text is for `-o wide` or `-o json`.
    pub fn fit_last_column(&mut self, max: usize) {
        let cols = self.headers.len();
        if cols == 0 {
            return;
        }
        let mut widths: Vec<usize> = self.headers.iter().map(|h| h.chars().count()).collect();
        for r in &self.rows {
            for (i, c) in r.iter().enumerate().take(cols) {
                widths[i] = widths[i].max(c.text.chars().count());
            }
        }
        let before: usize = widths[..cols - 1].iter().map(|w| w + 3).sum();
        let room = max.saturating_sub(before).max(8);
        for r in &mut self.rows {
            if let Some(c) = r.get_mut(cols - 1)
                && c.text.chars().count() > room
            {
                c.text = c.text.chars().take(room - 1).chain(std::iter::once('…')).collect();
            }
        }
    }
    /// Renders the table; an empty table renders nothing.
    pub fn render(&self, color: bool) -> String {
        if self.rows.is_empty() {
            return String::new();
        }
        let cols = self.headers.len();
        let mut widths: Vec<usize> = self.headers.iter().map(|h| h.chars().count()).collect();
        for r in &self.rows {
            for (i, c) in r.iter().enumerate().take(cols) {
                widths[i] = widths[i].max(c.text.chars().count());
            }
        }
        let mut out = String::new();
        let header_cells: Vec<Cell> = self.headers.iter().map(|h| Cell::plain(h.to_uppercase())).collect();
        for r in std::iter::once(&header_cells).chain(self.rows.iter()) {
            let mut line = String::new();
            for (i, width) in widths.iter().enumerate() {
                let cell = r.get(i).cloned().unwrap_or_default();
                let last = i + 1 == cols;
                let pad = if last { 0 } else { width - cell.text.chars().count() + 3 };
                line.push_str(&cell.style.paint(&cell.text, color));
                line.push_str(&" ".repeat(pad));
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align_regardless_of_color() {
        let mut t = Table::new(&["name", "state"]);
        t.row(vec![Cell::styled("a", Style::Good), "Succeeded".into()]);
        t.row(vec!["longer-name".into(), Cell::styled("Failed", Style::Bad)]);
        assert_eq!(t.render(false), "NAME          STATE\na             Succeeded\nlonger-name   Failed\n");
        let colored = t.render(true);
        // 23 columns hold the widest line; at 20 the last column keeps 8 characters, the last one an ellipsis.
        t.fit_last_column(23);
        assert_eq!(t.render(false), "NAME          STATE\na             Succeeded\nlonger-name   Failed\n");
        t.fit_last_column(20);
        assert_eq!(t.render(false), "NAME          STATE\na             Succeed…\nlonger-name   Failed\n");
        assert!(colored.contains("\x1b[32ma\x1b[0m             Succeeded"));
    }
}
