//! CSV read by column name, for every table the harness reads back: the records'
//! `timeseries.csv` (the runner's and the loadgen's) and HAProxy's stats page. Columns are found
//! by their header, so a reordered or wider table still reads; a missing column is an error that
//! names it.

/// A CSV text with a header line (HAProxy's starts with `# `).
pub struct Table {
    header: csv::StringRecord,
    rows: Vec<csv::StringRecord>,
}

/// A table that cannot be read, or lacks a column.
#[derive(Debug, thiserror::Error)]
pub enum TableError {
    #[error("not CSV: {0}")]
    Csv(#[from] csv::Error),
    #[error("no column `{0}`")]
    Missing(String),
}

impl Table {
    pub fn parse(text: &str) -> Result<Table, TableError> {
        let text = text.strip_prefix("# ").unwrap_or(text);
        let mut reader = csv::ReaderBuilder::new()
            .flexible(true)
            .from_reader(text.as_bytes());
        let header = reader.headers()?.clone();
        let rows = reader.records().collect::<Result<Vec<_>, _>>()?;
        Ok(Table { header, rows })
    }

    /// The index of column `name`.
    pub fn column(&self, name: &str) -> Result<usize, TableError> {
        self.header
            .iter()
            .position(|h| h == name)
            .ok_or_else(|| TableError::Missing(name.into()))
    }

    /// The rows after the header, blank lines skipped.
    pub fn rows(&self) -> impl Iterator<Item = Row<'_>> {
        self.rows.iter().map(Row)
    }
}

/// One row of a [`Table`].
#[derive(Clone, Copy)]
pub struct Row<'a>(&'a csv::StringRecord);

impl<'a> Row<'a> {
    /// The text in column `i` (empty when the row is short).
    pub fn text(self, i: usize) -> &'a str {
        self.0.get(i).unwrap_or("")
    }

    /// The number in column `i`, if it holds one.
    pub fn number(self, i: usize) -> Option<f64> {
        self.text(i).trim().parse().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_by_name_numbers_and_haproxy_headers() {
        let t = Table::parse("# pxname,svname,stot,\nclients,FRONTEND,,\npods,pod1,7,\n").unwrap();
        let (sv, stot) = (t.column("svname").unwrap(), t.column("stot").unwrap());
        let rows: Vec<(&str, Option<f64>)> =
            t.rows().map(|r| (r.text(sv), r.number(stot))).collect();
        assert_eq!(rows, [("FRONTEND", None), ("pod1", Some(7.0))]);
        let e = t.column("req_tot").unwrap_err().to_string();
        assert_eq!(e, "no column `req_tot`");
        let short = Table::parse("a,b\n1\n").unwrap();
        assert_eq!(short.rows().next().unwrap().number(1), None);
    }
}
