//! `COPY table [(columns)] FROM STDIN`: PostgreSQL's text format (tab-separated fields, `\N`
//! for NULL, backslash escapes), the form `psql \copy` and `pgbench -i` send. The rows go in
//! as one statement: batched inserts in the statement's transaction, all or nothing.

use crate::catalog::TableDef;
use crate::error::SqlError;
use crate::types::Datum;

/// The most bytes one `COPY` may send (its rows are held until the copy is done).
pub const COPY_BYTES_MAX: usize = 256 * 1024 * 1024;

/// A `COPY ... FROM STDIN` statement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CopySpec {
    pub table: String,
    /// The named columns; empty: every column but the hidden row id.
    pub columns: Vec<String>,
}

fn name(text: &str) -> String {
    let t = text.trim();
    match t.strip_prefix('"').and_then(|r| r.strip_suffix('"')) {
        Some(quoted) => quoted.to_string(),
        None => t.to_lowercase().trim_start_matches("public.").to_string(),
    }
}

/// `None` when `sql` is not a `COPY`; otherwise the copy, or why it is refused.
pub fn parse_copy(sql: &str) -> Option<Result<CopySpec, SqlError>> {
    let t = sql.trim().trim_end_matches(';').trim();
    let lower = t.to_lowercase();
    if !lower.starts_with("copy ") {
        return None;
    }
    let Some(from_at) = lower.find(" from stdin") else {
        return Some(Err(SqlError::unsupported("COPY other than COPY ... FROM STDIN")));
    };
    let head = t[5..from_at].trim();
    let (table, columns) = match head.find('(') {
        Some(open) => {
            let Some(inner) = head[open + 1..].strip_suffix(')') else {
                return Some(Err(SqlError::syntax(format!("syntax error in COPY column list: {head}"))));
            };
            (name(&head[..open]), inner.split(',').map(name).collect())
        }
        None => (name(head), vec![]),
    };
    if table.is_empty() || table.contains(char::is_whitespace) {
        return Some(Err(SqlError::syntax(format!("syntax error in COPY: {t}"))));
    }
    let options = lower[from_at + " from stdin".len()..].trim();
    let options = options.strip_prefix("with").unwrap_or(options).trim();
    let options = options.trim_start_matches('(').trim_end_matches(')');
    for o in options.split(',').map(str::trim).filter(|o| !o.is_empty()) {
        // FREEZE is a heap visibility hint; text is the only format read.
        if !matches!(o, "freeze" | "freeze on" | "freeze true" | "freeze 1" | "format text" | "format 'text'") {
            return Some(Err(SqlError::unsupported(format!("COPY option {o}"))));
        }
    }
    Some(Ok(CopySpec { table, columns }))
}

/// The table's columns a copy fills, in the order of the data.
pub fn targets(spec: &CopySpec, def: &TableDef) -> Result<Vec<usize>, SqlError> {
    if spec.columns.is_empty() {
        return Ok(def.visible());
    }
    spec.columns.iter().map(|c| def.column(c)).collect()
}

/// The `INSERT` of chosen values a `COPY` amounts to (for judging it on `coordfree`).
pub fn as_insert(spec: &CopySpec, def: &TableDef) -> Result<sqlparser::ast::Statement, SqlError> {
    let cols: Vec<String> = targets(spec, def)?.iter().map(|&i| format!("\"{}\"", def.columns[i].name)).collect();
    let values = vec!["0"; cols.len()].join(", ");
    let sql = format!("INSERT INTO \"{}\" ({}) VALUES ({values})", def.name, cols.join(", "));
    crate::parse(&sql)?.pop().ok_or_else(|| SqlError::internal("COPY as an INSERT"))
}

fn unescape(field: &str) -> String {
    let mut out = String::with_capacity(field.len());
    let mut chars = field.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('t') => out.push('\t'),
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some('b') => out.push('\u{8}'),
            Some('f') => out.push('\u{c}'),
            Some('v') => out.push('\u{b}'),
            Some(other) => out.push(other),
            None => out.push('\\'),
        }
    }
    out
}

/// The rows of text-format copy data with `width` fields each (`22P04` otherwise).
pub fn parse_text(data: &[u8], width: usize) -> Result<Vec<Vec<Datum>>, SqlError> {
    let text = std::str::from_utf8(data).map_err(|_| SqlError::new("22021", "COPY data is not valid UTF-8".into()))?;
    let mut rows = vec![];
    for (n, line) in text.split('\n').enumerate() {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line == "\\." {
            break;
        }
        if line.is_empty() && width > 1 {
            continue;
        }
        let fields: Vec<&str> = line.split('\t').collect();
        if fields.len() != width {
            return Err(SqlError::new(
                "22P04",
                format!("COPY line {}: expected {width} fields, found {}", n + 1, fields.len()),
            ));
        }
        rows.push(fields.iter().map(|f| if *f == "\\N" { Datum::Null } else { Datum::Text(unescape(f)) }).collect());
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pgbench_copy_statements_parse() {
        let spec = parse_copy("copy pgbench_accounts from stdin with (freeze on)").unwrap().unwrap();
        assert_eq!(spec, CopySpec { table: "pgbench_accounts".into(), columns: vec![] });
        let spec = parse_copy("COPY t (a, \"B\") FROM STDIN;").unwrap().unwrap();
        assert_eq!(spec.columns, vec!["a".to_string(), "B".to_string()]);
        assert!(parse_copy("select 1").is_none());
        assert_eq!(parse_copy("copy t to stdout").unwrap().unwrap_err().code, "0A000");
        assert_eq!(parse_copy("copy t from stdin with (format csv)").unwrap().unwrap_err().code, "0A000");
    }

    #[test]
    fn text_format_fields_nulls_and_escapes() {
        let rows = parse_text(b"1\ta\\tb\t\\N\n2\t\t0\n\\.\n", 3).unwrap();
        assert_eq!(rows[0], vec![Datum::Text("1".into()), Datum::Text("a\tb".into()), Datum::Null]);
        assert_eq!(rows[1], vec![Datum::Text("2".into()), Datum::Text(String::new()), Datum::Text("0".into())]);
        assert_eq!(parse_text(b"1\t2\n", 3).unwrap_err().code, "22P04");
    }
}
