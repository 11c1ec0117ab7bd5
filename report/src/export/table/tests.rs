//! A table's files appear only when it is closed, and read back the same whoever encoded
//! their row groups.

use super::*;
use bytes::Bytes;

const SPECS: &[Spec] = &[
    col("name", Kind::Str),
    col("pid", Kind::I32),
    delta("start_ns"),
    dictionary("bytes"),
    opt("path", Kind::Str),
    plain("id", Kind::I64),
    col("nested", Kind::Bool),
];

/// Writes the same rows into 5 partitions, all still buffered when the table closes;
/// `encode_here`: every last job encoded by `close` itself.
fn write(dir: &Path, encode_here: bool) -> Vec<Vec<String>> {
    let _ = std::fs::remove_dir_all(dir);
    let mut symbols = Symbols::default();
    let names: Vec<u32> =
        ["read", "write", "openat"].map(|n| symbols.add(Bytes::from_static(n.as_bytes()))).into();
    let mut table = Table::new("t", SPECS, dir, Some("rank")).unwrap();
    table.encode_every_last_job = encode_here;
    let parts: Vec<usize> = (0..5).map(|r| table.partition(&r.to_string())).collect();
    for i in 0..20_000u32 {
        if i % 1000 == 0 {
            symbols.add(Bytes::from(format!("/data/file-{i}")));
        }
        let path = (i % 3 != 0).then(|| symbols.values.len() as u32 - 1);
        table
            .push(&symbols, parts[(i % 5) as usize], |row| {
                row.str(names[(i % 3) as usize])
                    .i32((i % 5) as i32 + 100)
                    .i64(i as i64 * 1000)
                    .i64((i % 7) as i64 * 4096)
                    .opt_str(path)
                    .i64(i as i64 * 7919)
                    .bool(i % 2 == 0);
            })
            .unwrap();
    }
    let table = table.finish(&symbols).unwrap();
    assert_eq!(table.rows, 20_000);
    crate::export::tests::rows(dir)
}

/// Files under `dir`, hidden ones too, relative to it.
fn files(dir: &Path) -> Vec<String> {
    let relative = |path: PathBuf| path.strip_prefix(dir).unwrap().display().to_string();
    crate::export::tests::files_under(dir).into_iter().map(relative).collect()
}

/// A table dropped before it was closed (an export that failed on the way) leaves no
/// file, not even a hidden one; one closed and then dropped puts its files in place.
#[test]
fn only_a_closed_table_puts_files_in_place() {
    let dir = std::env::temp_dir().join(format!("mlprof-table-drop-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut symbols = Symbols::default();
    let name = symbols.add(Bytes::from_static(b"read"));
    let fill = |table: &mut Table, symbols: &Symbols| {
        let parts: Vec<usize> = (0..2).map(|r| table.partition(&r.to_string())).collect();
        // More rows than a row group per partition: each one's first row group is written
        // before the end.
        for i in 0..(2 * GROUP_ROWS + 10) as u32 {
            table
                .push(symbols, parts[(i % 2) as usize], |row| {
                    row.str(name).i32(1).i64(i as i64).i64(8).opt_str(None).i64(i as i64).bool(false);
                })
                .unwrap();
        }
    };
    let mut dropped = Table::new("t", SPECS, &dir.join("dropped"), Some("rank")).unwrap();
    fill(&mut dropped, &symbols);
    // The writer thread has begun the partitions' files (hidden until complete).
    let begun = ["rank=0/.part-0.parquet.tmp", "rank=1/.part-0.parquet.tmp"];
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while files(&dir.join("dropped")) != begun && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!(files(&dir.join("dropped")), begun);
    drop(dropped);
    assert_eq!(files(&dir.join("dropped")), Vec::<String>::new());

    let mut closed = Table::new("t", SPECS, &dir.join("closed"), Some("rank")).unwrap();
    fill(&mut closed, &symbols);
    closed.close(&symbols).unwrap();
    drop(closed);
    assert_eq!(files(&dir.join("closed")), ["rank=0/part-0.parquet", "rank=1/part-0.parquet"]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Chunks encoded by `close` (while the writer thread is busy) make the same files'
/// rows as the writer thread's own.
#[test]
fn jobs_encoded_at_close_read_back_the_same() {
    let base = std::env::temp_dir().join(format!("mlprof-table-close-{}", std::process::id()));
    let by_writer = write(&base.join("writer"), false);
    let here = write(&base.join("here"), true);
    assert_eq!(by_writer.len(), 20_000);
    assert_eq!(by_writer[0][..3], ["\"read\"", "100", "0"]);
    assert_eq!(by_writer, here);
    let _ = std::fs::remove_dir_all(&base);
}
