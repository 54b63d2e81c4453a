//! `litmus shell --connect ADDR` and `litmus dump`: look at the data of a running cluster.
//!
//! The shell reads one command a line from stdin (a terminal or a pipe) and prints readable
//! tables; an error is printed and the shell goes on (exit status 1 at the end if any command
//! failed). Commands: `tables`, `get`, `scan`, `put`, `insert`, `delete`, `call`, `begin
//! [isolation]` … `commit` / `rollback`, `help`, `quit`. Values: `42`, `-7`, `1.25` (decimal),
//! `null`, `0x00ff` (bytes), `"text"` or a bare word (a string, or its UTF-8 bytes in a bytes
//! column).
//!
//! The schema is the one `litmus server` runs (`litmus_bench::full_schema`), so the shell knows
//! column names and types without asking the server.
//!
//! ## Reads of any size, on every engine
//!
//! `scan` and `litmus dump` read in pages (`litmus_protocol::page`): each reply holds at most
//! `--page-rows` rows and `--page-bytes` bytes of rows, and the next page resumes after the
//! last key sent, so a table of any size streams through in constant memory and no reply
//! outgrows the server's frame limit. Where they run, and what a dump sees:
//!
//! | engines | pages read in | a dump sees |
//! | --- | --- | --- |
//! | `omid` | one interactive transaction | one snapshot (snapshot isolation) |
//! | `basic` | one interactive transaction | one snapshot (the transaction's timestamp) |
//! | `acid`, `salt`, `salt-local` | one read-committed interactive transaction | read-committed pages: each row committed, no locks held between pages, rows written meanwhile may or may not appear |
//! | `coordfree`, `base` | one interactive transaction | read-committed pages |
//! | `nocc` | one interactive transaction | whatever is stored (no concurrency control) |
//! | `granola`, `granola-locking`, `sinfonia` | one one-round read transaction per page (a read-only fragment per partition; these engines run no interactive transactions) | each page consistent in itself (one timestamp or one lock set), pages read committed |
//!
//! The choice is made by trying: an engine that refuses interactive operations
//! (`Unsupported`) is read with one-round read transactions. The shell's `get` and `scan`
//! outside `begin` fall back the same way, so a `granola` cluster's data can be looked at.

use anyhow::Context;
use litmus_client::{Client, Transaction};
use litmus_core::{Catalog, ColumnType, Decimal, Error, Isolation, Row, TableSchema, Value};
use std::io::{BufRead, IsTerminal, Write};

/// The exit status when stdout is gone (e.g. piped into `head`): a shell's for SIGPIPE.
const EXIT_STDOUT_CLOSED: i32 = 141;

/// `println!` that ends the shell quietly once stdout is gone, where `println!` would panic.
macro_rules! say {
    ($($arg:tt)*) => {
        if writeln!(std::io::stdout(), $($arg)*).is_err() {
            std::process::exit(EXIT_STDOUT_CLOSED);
        }
    };
}

#[derive(clap::Args)]
pub struct ShellArgs {
    /// A server's client address (host:port).
    #[arg(long)]
    connect: String,
    /// The cluster's shared token (the servers' `token`).
    #[arg(long, env = "LITMUS_TOKEN", hide_env_values = true)]
    token: Option<String>,
    #[command(flatten)]
    tls: litmus_bench::ClientTlsArgs,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum DumpFormat {
    Csv,
    Jsonl,
}

#[derive(clap::Args)]
pub struct DumpArgs {
    /// A server's client address (host:port).
    #[arg(long)]
    connect: String,
    /// The cluster's shared token (the servers' `token`).
    #[arg(long, env = "LITMUS_TOKEN", hide_env_values = true)]
    token: Option<String>,
    #[command(flatten)]
    tls: litmus_bench::ClientTlsArgs,
    /// Table to dump (`litmus shell` lists them with `tables`).
    #[arg(long)]
    table: String,
    /// csv (a header line, then one row a line) or jsonl (one JSON object a row).
    #[arg(long, value_enum, default_value = "csv")]
    format: DumpFormat,
    /// Most rows to write (default: the whole table).
    #[arg(long)]
    limit: Option<u64>,
    /// Most rows in one page (one reply of the server).
    #[arg(long, default_value_t = litmus_client::PAGE_ROWS_DEFAULT)]
    page_rows: u32,
    /// Most bytes of rows in one page (kept under the server's max_frame_bytes; a reply over it
    /// is refused and the page asked again at half the size).
    #[arg(long, default_value_t = litmus_client::PAGE_BYTES_DEFAULT)]
    page_bytes: u32,
}

const HELP: &str = "commands:
  tables                          list tables, their columns (key columns marked *)
  get TABLE KEY...                one row by primary key
  scan TABLE [LIMIT]              rows in key order (default limit 20)
  put TABLE VALUE...              write a whole row (insert or overwrite)
  insert TABLE VALUE...           insert a row (error if the key exists)
  delete TABLE KEY...             delete a row
  call PROCEDURE ARG...           run a stored procedure as one transaction
  begin [serializable|repeatable-read|read-committed|read-uncommitted]
                                  start an interactive transaction; then get/scan/put/insert/
                                  delete run inside it until commit or rollback
  commit | rollback
  help | quit
values: 42  1.25  null  0x00ff  \"text\"  word";

pub fn run_shell(args: ShellArgs) -> anyhow::Result<()> {
    let (catalog, _) = litmus_bench::full_schema();
    let mut client =
        Client::connect_any_with(std::slice::from_ref(&args.connect), &args.tls.credentials(args.token.as_deref())?)
            .with_context(|| format!("connecting to {}", args.connect))?;
    let interactive = std::io::stdin().is_terminal();
    if interactive {
        say!("connected to {} ({} engine); type help", args.connect, client.server_engine().unwrap_or("?"));
    }
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    let mut failed = 0usize;
    loop {
        prompt(interactive, "litmus> ");
        let Some(line) = lines.next() else { break };
        let words = split_words(&line?);
        let Some(cmd) = words.first().map(String::as_str) else { continue };
        if cmd == "quit" || cmd == "exit" {
            break;
        }
        if cmd == "begin" {
            let isolation = match words.get(1) {
                Some(w) => match w.replace('-', "_").parse::<Isolation>().or_else(|_| w.parse::<Isolation>()) {
                    Ok(i) => i,
                    Err(e) => {
                        failed += 1;
                        say!("error: {e}");
                        continue;
                    }
                },
                None => Isolation::Serializable,
            };
            let mut txn = match client.begin_with(isolation) {
                Ok(t) => t,
                Err(e) => {
                    failed += 1;
                    say!("error: {e}");
                    continue;
                }
            };
            say!("begun {:?} at {isolation:?}", txn.id());
            loop {
                prompt(interactive, "litmus(txn)> ");
                let Some(line) = lines.next() else {
                    let _ = txn.rollback();
                    say!("end of input: rolled back");
                    return finish(failed + 1);
                };
                let words = split_words(&line?);
                match words.first().map(String::as_str) {
                    None => continue,
                    Some("commit") => {
                        match txn.commit() {
                            Ok(()) => say!("committed"),
                            Err(e) => {
                                failed += 1;
                                say!("error: {e}");
                            }
                        }
                        break;
                    }
                    Some("rollback") => {
                        match txn.rollback() {
                            Ok(()) => say!("rolled back"),
                            Err(e) => {
                                failed += 1;
                                say!("error: {e}");
                            }
                        }
                        break;
                    }
                    Some(_) => {
                        if let Err(e) = txn_command(&catalog, &mut txn, &words) {
                            failed += 1;
                            say!("error: {e:#}");
                        }
                    }
                }
            }
            continue;
        }
        if let Err(e) = command(&catalog, &mut client, &words) {
            failed += 1;
            say!("error: {e:#}");
        }
    }
    finish(failed)
}

fn finish(failed: usize) -> anyhow::Result<()> {
    if failed > 0 {
        anyhow::bail!("{failed} command(s) failed");
    }
    Ok(())
}

fn prompt(interactive: bool, p: &str) {
    if interactive {
        if write!(std::io::stdout(), "{p}").is_err() {
            std::process::exit(EXIT_STDOUT_CLOSED);
        }
        let _ = std::io::stdout().flush();
    }
}

/// Words, with `"quoted strings"` kept whole (quotes kept, so they parse as strings).
fn split_words(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    for c in line.trim().chars() {
        match c {
            '"' => {
                quoted = !quoted;
                cur.push(c);
            }
            c if c.is_whitespace() && !quoted => {
                if !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
            }
            c => cur.push(c),
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// A literal, read as `ty` when the column's type is known.
fn parse_value(word: &str, ty: Option<&ColumnType>) -> anyhow::Result<Value> {
    if word.eq_ignore_ascii_case("null") {
        return Ok(Value::Null);
    }
    let unquoted = word.strip_prefix('"').and_then(|w| w.strip_suffix('"'));
    if let Some(hex) = word.strip_prefix("0x") {
        if unquoted.is_none() && hex.len() % 2 == 0 && hex.chars().all(|c| c.is_ascii_hexdigit()) {
            let bytes = (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex"));
            return Ok(Value::Bytes(bytes.collect()));
        }
    }
    let text = unquoted.unwrap_or(word);
    match ty {
        Some(ColumnType::Int) => Ok(Value::Int(text.parse().with_context(|| format!("{word} is not an int"))?)),
        Some(ColumnType::Decimal) => parse_decimal(text).map(Value::Decimal),
        Some(ColumnType::String) => Ok(Value::String(text.into())),
        Some(ColumnType::Bytes) => Ok(Value::Bytes(text.as_bytes().into())),
        Some(ColumnType::Set(_)) => anyhow::bail!("set values cannot be typed in the shell"),
        None if unquoted.is_some() => Ok(Value::String(text.into())),
        None => {
            if let Ok(i) = text.parse::<i64>() {
                Ok(Value::Int(i))
            } else if text.contains('.') && parse_decimal(text).is_ok() {
                parse_decimal(text).map(Value::Decimal)
            } else {
                Ok(Value::String(text.into()))
            }
        }
    }
}

fn parse_decimal(text: &str) -> anyhow::Result<Decimal> {
    let bad = || anyhow::anyhow!("{text} is not a decimal");
    let (neg, t) = match text.strip_prefix('-') {
        Some(t) => (true, t),
        None => (false, text),
    };
    let (whole, frac) = t.split_once('.').unwrap_or((t, ""));
    if frac.len() > Decimal::SCALE as usize {
        return Err(bad());
    }
    let whole: i64 = if whole.is_empty() { 0 } else { whole.parse().map_err(|_| bad())? };
    let frac_units: i64 = if frac.is_empty() {
        0
    } else {
        format!("{frac:0<width$}", width = Decimal::SCALE as usize).parse().map_err(|_| bad())?
    };
    let units = whole.checked_mul(10i64.pow(Decimal::SCALE)).and_then(|w| w.checked_add(frac_units)).ok_or_else(bad)?;
    Ok(Decimal(if neg { -units } else { units }))
}

fn table<'c>(catalog: &'c Catalog, words: &[String]) -> anyhow::Result<&'c TableSchema> {
    let name = words.get(1).context("which table? (tables lists them)")?;
    Ok(catalog.table_by_name(name)?)
}

fn key_of(t: &TableSchema, words: &[String]) -> anyhow::Result<Vec<Value>> {
    if words.len() != t.primary_key.len() {
        anyhow::bail!(
            "{} has a key of {} column(s) ({}), got {}",
            t.name,
            t.primary_key.len(),
            t.primary_key.iter().map(|&i| t.columns[i].name.as_str()).collect::<Vec<_>>().join(", "),
            words.len()
        );
    }
    t.primary_key.iter().zip(words).map(|(&i, w)| parse_value(w, Some(&t.columns[i].ty))).collect()
}

fn row_of(t: &TableSchema, words: &[String]) -> anyhow::Result<Row> {
    if words.len() != t.columns.len() {
        anyhow::bail!(
            "{} has {} columns ({}), got {} values",
            t.name,
            t.columns.len(),
            t.columns.iter().map(|c| c.name.as_str()).collect::<Vec<_>>().join(", "),
            words.len()
        );
    }
    t.columns.iter().zip(words).map(|(c, w)| parse_value(w, Some(&c.ty))).collect()
}

fn command(catalog: &Catalog, client: &mut Client, words: &[String]) -> anyhow::Result<()> {
    match words[0].as_str() {
        "help" => say!("{HELP}"),
        "tables" => {
            let rows: Vec<Vec<String>> = catalog
                .tables()
                .map(|t| {
                    let cols = t
                        .columns
                        .iter()
                        .enumerate()
                        .map(|(i, c)| {
                            let star = if t.primary_key.contains(&i) { "*" } else { "" };
                            format!("{}{star} {}", c.name, c.ty)
                        })
                        .collect::<Vec<_>>()
                        .join(", ");
                    vec![t.name.clone(), cols]
                })
                .collect();
            print_table(&["table".into(), "columns (* = key)".into()], &rows);
        }
        "call" => {
            let proc = words.get(1).context("call PROCEDURE ARG...")?;
            let args = words[2..].iter().map(|w| parse_value(w, None)).collect::<anyhow::Result<Vec<_>>>()?;
            let out = client.call(proc, args)?;
            print_table(
                &(0..out.len()).map(|i| format!("${i}")).collect::<Vec<_>>(),
                &[out.iter().map(|v| v.to_string()).collect()],
            );
        }
        _ => {
            // A single-statement transaction.
            let begun = client.begin().map(Transaction::detach);
            let mut txn = match begun {
                Ok(id) => client.resume(id),
                // An engine without interactive transactions: a one-round read.
                Err(Error::Invalid(litmus_core::InvalidInput::Unsupported { .. }))
                    if matches!(words[0].as_str(), "get" | "scan") =>
                {
                    return one_round_command(catalog, client, words);
                }
                Err(e) => return Err(e.into()),
            };
            if let Err(e) = txn_command(catalog, &mut txn, words) {
                let _ = txn.rollback();
                return Err(e);
            }
            txn.commit()?;
        }
    }
    Ok(())
}

/// `get` or `scan` as one-round read transactions (`Client::read_page`), for the engines that
/// run nothing else.
fn one_round_command(catalog: &Catalog, client: &mut Client, words: &[String]) -> anyhow::Result<()> {
    let t = table(catalog, words)?;
    if words[0] == "get" {
        // The range of keys starting with a whole key holds that key's row alone.
        let key = key_of(t, &words[2..])?;
        let one = litmus_client::Paging { rows_max: 1, ..client.paging() };
        match client.read_page(&t.name, &key, None, None, one)?.rows.into_iter().next() {
            Some(row) => print_rows(t, &[row]),
            None => say!("(no row)"),
        }
        return Ok(());
    }
    let limit = scan_limit(words)? as usize;
    let mut rows = Vec::new();
    let mut after = None;
    let mut sizer = litmus_client::PageSizer::new(client.paging());
    while rows.len() < limit {
        let page = client.read_page(&t.name, &[], None, after.as_ref(), sizer.next())?;
        sizer.saw(&page);
        rows.extend(page.rows);
        match page.resume {
            Some(k) => after = Some(k),
            None => break,
        }
    }
    rows.truncate(limit);
    print_rows(t, &rows);
    Ok(())
}

fn scan_limit(words: &[String]) -> anyhow::Result<u32> {
    match words.get(2) {
        Some(l) => l.parse().context("scan TABLE [LIMIT]"),
        None => Ok(20),
    }
}

fn txn_command(catalog: &Catalog, txn: &mut Transaction<'_>, words: &[String]) -> anyhow::Result<()> {
    match words[0].as_str() {
        "get" => {
            let t = table(catalog, words)?;
            let key = key_of(t, &words[2..])?;
            match txn.read(&t.name, &key)? {
                Some(row) => print_rows(t, &[row]),
                None => say!("(no row)"),
            }
        }
        "scan" => {
            let t = table(catalog, words)?;
            let limit = scan_limit(words)?;
            let rows = txn.scan(&t.name, &[], None, limit)?;
            print_rows(t, &rows);
        }
        "put" | "insert" => {
            let t = table(catalog, words)?;
            let row = row_of(t, &words[2..])?;
            if words[0] == "put" {
                txn.write(&t.name, row)?;
            } else {
                txn.insert(&t.name, row)?;
            }
            say!("ok");
        }
        "delete" => {
            let t = table(catalog, words)?;
            let key = key_of(t, &words[2..])?;
            txn.delete(&t.name, &key)?;
            say!("ok");
        }
        "tables" | "call" | "help" => anyhow::bail!("{} is not available inside a transaction", words[0]),
        other => anyhow::bail!("unknown command {other:?} (help lists them)"),
    }
    Ok(())
}

fn print_rows(t: &TableSchema, rows: &[Row]) {
    let head: Vec<String> = t.columns.iter().map(|c| c.name.clone()).collect();
    let body: Vec<Vec<String>> = rows.iter().map(|r| r.iter().map(|v| v.to_string()).collect()).collect();
    print_table(&head, &body);
    say!("({} row{})", rows.len(), if rows.len() == 1 { "" } else { "s" });
}

fn print_table(head: &[String], rows: &[Vec<String>]) {
    let mut width: Vec<usize> = head.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            if i < width.len() {
                width[i] = width[i].max(c.chars().count());
            }
        }
    }
    let last = width.len().saturating_sub(1);
    let line = |cells: &[String]| {
        let padded =
            cells.iter().enumerate().map(|(i, c)| if i == last { c.clone() } else { format!("{c:<w$}", w = width[i]) });
        padded.collect::<Vec<_>>().join(" | ")
    };
    say!("{}", line(head));
    let dashes = width.iter().enumerate().map(|(i, w)| "-".repeat(if i == last { (*w).min(40) } else { *w }));
    say!("{}", dashes.collect::<Vec<_>>().join("-+-"));
    for r in rows {
        say!("{}", line(r));
    }
}

/// `litmus dump`: the table (up to `--limit` rows) page by page, each page written before the
/// next is read (see the module doc for what each engine's dump sees).
pub fn run_dump(args: DumpArgs) -> anyhow::Result<()> {
    let (catalog, _) = litmus_bench::full_schema();
    let t = catalog.table_by_name(&args.table)?.clone();
    let mut client =
        Client::connect_any_with(std::slice::from_ref(&args.connect), &args.tls.credentials(args.token.as_deref())?)
            .with_context(|| format!("connecting to {}", args.connect))?;
    client.set_paging(litmus_client::Paging { rows_max: args.page_rows, bytes_max: args.page_bytes });
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    if args.format == DumpFormat::Csv {
        writeln!(out, "{}", t.columns.iter().map(|c| csv_field(&c.name)).collect::<Vec<_>>().join(","))?;
    }
    let limit = args.limit.unwrap_or(u64::MAX);
    let written = for_each_page(&mut client, &t.name, limit, |rows| {
        for row in rows {
            match args.format {
                DumpFormat::Csv => {
                    writeln!(out, "{}", row.iter().map(|v| csv_field(&plain(v))).collect::<Vec<_>>().join(","))?
                }
                DumpFormat::Jsonl => {
                    let obj: serde_json::Map<String, serde_json::Value> =
                        t.columns.iter().zip(row.iter()).map(|(c, v)| (c.name.clone(), json(v))).collect();
                    writeln!(out, "{}", serde_json::Value::Object(obj))?
                }
            }
        }
        Ok(())
    })
    .with_context(|| format!("scanning {}", t.name))?;
    if args.limit.is_some_and(|l| written >= l) {
        eprintln!("litmus dump: stopped at --limit {limit} rows");
    }
    out.flush()?;
    Ok(())
}

/// Retryable failures in a row after which a dump gives up (each restarts its transaction).
const DUMP_RESTARTS_MAX: u32 = 10;

/// Hands `emit` the rows of `table` in key order, a page at a time, up to `limit` rows; the
/// rows handed out. Pages come from one read-committed interactive transaction, or, on an
/// engine that refuses interactive operations, from one-round read transactions (one a page).
pub fn for_each_page(
    client: &mut Client,
    table: &str,
    limit: u64,
    mut emit: impl FnMut(Vec<Row>) -> anyhow::Result<()>,
) -> anyhow::Result<u64> {
    let mut written = 0u64;
    let mut take = |mut rows: Vec<Row>, written: &mut u64| -> anyhow::Result<bool> {
        let room = limit - *written;
        if rows.len() as u64 > room {
            rows.truncate(room as usize);
        }
        *written += rows.len() as u64;
        emit(rows)?;
        Ok(*written < limit)
    };
    if limit == 0 {
        return Ok(0);
    }
    let mut sizer = litmus_client::PageSizer::new(client.paging());
    let mut after = None;
    let mut restarts = 0;
    'transactions: loop {
        let mut txn = match client.begin_with(Isolation::ReadCommitted) {
            Ok(txn) => txn,
            // An engine that runs one-round transactions only: read below.
            Err(Error::Invalid(litmus_core::InvalidInput::Unsupported { .. })) => break,
            Err(e) => return Err(e.into()),
        };
        loop {
            match txn.scan_page(table, &[], None, after.as_ref(), sizer.next()) {
                Err(Error::Invalid(litmus_core::InvalidInput::Unsupported { .. })) if after.is_none() => break,
                // A dump that outlives what one transaction may last (coordfree's metadata
                // window) goes on in a new transaction from the last key written: pages are
                // read committed on those engines anyway.
                Err(e) if e.is_retryable() && restarts < DUMP_RESTARTS_MAX => {
                    let _ = txn.rollback();
                    restarts += 1;
                    continue 'transactions;
                }
                Err(e) => return Err(e.into()),
                Ok(page) => {
                    restarts = 0;
                    sizer.saw(&page);
                    if !take(page.rows, &mut written)? || page.resume.is_none() {
                        txn.commit()?;
                        return Ok(written);
                    }
                    after = page.resume;
                }
            }
        }
        let _ = txn.rollback();
        break;
    }
    // An engine that runs one-round transactions only.
    let mut after = None;
    loop {
        let page = client.read_page(table, &[], None, after.as_ref(), sizer.next())?;
        sizer.saw(&page);
        if !take(page.rows, &mut written)? || page.resume.is_none() {
            return Ok(written);
        }
        after = page.resume;
    }
}

fn plain(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::String(s) => s.to_string(),
        other => other.to_string(),
    }
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

fn json(v: &Value) -> serde_json::Value {
    match v {
        Value::Null => serde_json::Value::Null,
        Value::Int(i) => (*i).into(),
        Value::String(s) => s.as_ref().into(),
        Value::Set(s) => serde_json::Value::Array(s.iter().map(json).collect()),
        other => other.to_string().into(),
    }
}
