//! The encoder's chunks written into Parquet files in memory and read back with the Parquet
//! crate's reader.

use super::*;
use parquet::file::reader::{FileReader, SerializedFileReader};
use parquet::file::writer::SerializedFileWriter;
use parquet::record::Field;

/// A Parquet file written to memory with the default properties, of the schema `message`.
fn file_in_memory(message: &str) -> SerializedFileWriter<Vec<u8>> {
    use parquet::file::properties::WriterProperties;
    use std::sync::Arc;
    let schema = parquet::schema::parser::parse_message_type(message).unwrap();
    SerializedFileWriter::new(Vec::new(), Arc::new(schema), Arc::new(WriterProperties::builder().build()))
        .unwrap()
}

/// Writes row groups of a required and an optional string column with `DictionaryEncoder`
/// and reads them back with the Parquet crate's reader.
#[test]
fn string_chunks_read_back() {
    let mut file =
        file_in_memory("message t { required binary name (STRING); optional binary path (STRING); }");
    let symbols: Vec<Bytes> =
        (0..3000).map(|i| Bytes::from(format!("/data/file-{i:05}{}", "x".repeat(i % 90)))).collect();
    let mut encoder = DictionaryEncoder::new(1);
    encoder.extend(symbols.iter().cloned());
    let mut expected = Vec::new();
    // Many pages with runs and nulls; one row; all null; one distinct value.
    type Paths = fn(usize) -> Option<u32>;
    let groups: [(usize, Paths); 4] = [
        (100_000, |i| (i % 7 != 3).then_some(((i / 5) % 3000) as u32)),
        (1, |_| Some(2999)),
        (20, |_| None),
        (70_000, |_| Some(42)),
    ];
    for (rows, path) in groups {
        let names: Vec<u32> = (0..rows).map(|i| (i % 11) as u32).collect();
        let paths: Vec<Option<u32>> = (0..rows).map(path).collect();
        let def: Vec<i16> = paths.iter().map(|p| p.is_some() as i16).collect();
        let values: Vec<u32> = paths.iter().flatten().copied().collect();
        let descr = file.schema_descr().clone();
        let mut group = file.next_row_group().unwrap();
        let (bytes, close) = encoder.chunk(descr.column(0), &names, None).unwrap();
        group.append_column(&bytes, close).unwrap();
        let (bytes, close) = encoder.chunk(descr.column(1), &values, Some(&def)).unwrap();
        group.append_column(&bytes, close).unwrap();
        group.close().unwrap();
        expected.extend(names.iter().zip(&paths).map(|(&n, &p)| (n, p)));
    }
    let bytes = Bytes::from(file.into_inner().unwrap());
    let reader = SerializedFileReader::new(bytes).unwrap();
    let text = |i: u32| String::from_utf8(symbols[i as usize].to_vec()).unwrap();
    let mut rows = 0;
    for (row, &(name, path)) in reader.get_row_iter(None).unwrap().zip(&expected) {
        let row = row.unwrap();
        let fields: Vec<&Field> = row.get_column_iter().map(|(_, f)| f).collect();
        assert_eq!(fields[0], &Field::Str(text(name)), "row {rows}");
        assert_eq!(fields[1], &path.map_or(Field::Null, |p| Field::Str(text(p))), "row {rows}");
        rows += 1;
    }
    assert_eq!(rows, expected.len());
    let metadata = reader.metadata();
    let stats = metadata.row_group(2).column(1).statistics().unwrap();
    assert_eq!(stats.null_count_opt(), Some(20));
    let stats = metadata.row_group(3).column(1).statistics().unwrap();
    assert_eq!(stats.min_bytes_opt(), Some(&symbols[42][..]));
}

/// Int32 chunks with nulls, runs and a negative value read back; a chunk of too many
/// distinct values is declined.
#[test]
fn int32_chunks_read_back() {
    let mut file = file_in_memory("message t { optional int32 v; }");
    let mut encoder = DictionaryEncoder::new(1);
    let expected: Vec<Option<i32>> =
        (0..50_000).map(|i| (i % 5 != 0).then_some((i / 100) % 40 - 3)).collect();
    let def: Vec<i16> = expected.iter().map(|v| v.is_some() as i16).collect();
    let values: Vec<i32> = expected.iter().flatten().copied().collect();
    let descr = file.schema_descr().clone();
    let mut group = file.next_row_group().unwrap();
    let (bytes, close) = encoder.int_chunk(descr.column(0), &values, Some(&def)).unwrap().unwrap();
    group.append_column(&bytes, close).unwrap();
    group.close().unwrap();
    let many: Vec<i32> = (0..(INT_DICTIONARY_MAX as i32 + 1)).collect();
    assert!(encoder.int_chunk(descr.column(0), &many, None).unwrap().is_none());

    let reader = SerializedFileReader::new(Bytes::from(file.into_inner().unwrap())).unwrap();
    let read: Vec<Option<i32>> = reader
        .get_row_iter(None)
        .unwrap()
        .map(|row| match row.unwrap().get_column_iter().next().unwrap().1 {
            Field::Int(v) => Some(*v),
            Field::Null => None,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(read, expected);
    let stats = reader.metadata().row_group(0).column(0).statistics().unwrap();
    assert_eq!(
        (stats.min_bytes_opt(), stats.max_bytes_opt()),
        (Some(&(-3i32).to_le_bytes()[..]), Some(&36i32.to_le_bytes()[..]))
    );
}

/// Int64 chunks of required and optional columns, DELTA_BINARY_PACKED (times, wide
/// jumps, extremes, partial blocks, pages of one value and of none) and dictionary-encoded,
/// read back with the Parquet crate's reader, with their statistics.
#[test]
fn int64_chunks_read_back() {
    let mut file = file_in_memory("message t { required int64 a; optional int64 b; required int64 c; }");
    let mut encoder = DictionaryEncoder::new(1);
    let mut seed = 11u64;
    let mut expected = Vec::new();
    for rows in [100_000usize, 1, 0, 129, 40_000] {
        let a: Vec<i64> = (0..rows)
            .map(|i| {
                seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                match i % 1000 {
                    7 => i64::MIN,
                    8 => i64::MAX,
                    9 => 0,
                    _ if i % 3 == 0 => 1_000_000_000_000 + i as i64 * 1000,
                    _ => (seed >> 40) as i64 - (1 << 23),
                }
            })
            .collect();
        let b: Vec<Option<i64>> =
            (0..rows).map(|i| (i % 5 != 1 && rows != 40_000).then_some(i as i64 * 7 - 50)).collect();
        let c: Vec<i64> = (0..rows).map(|i| [0, 65536, -1, 5, 1 << 47][(i / 3) % 5]).collect();
        let def: Vec<i16> = b.iter().map(|v| v.is_some() as i16).collect();
        let present: Vec<i64> = b.iter().flatten().copied().collect();
        let descr = file.schema_descr().clone();
        let mut group = file.next_row_group().unwrap();
        let (bytes, close) = encoder.delta_chunk(descr.column(0), &a, None).unwrap();
        if let (Some(lo), Some(hi)) = (a.iter().min(), a.iter().max()) {
            let stats = close.metadata.statistics().unwrap();
            assert_eq!(stats.min_bytes_opt(), Some(&lo.to_le_bytes()[..]));
            assert_eq!(stats.max_bytes_opt(), Some(&hi.to_le_bytes()[..]));
        }
        group.append_column(&bytes, close).unwrap();
        let (bytes, close) = encoder.delta_chunk(descr.column(1), &present, Some(&def)).unwrap();
        group.append_column(&bytes, close).unwrap();
        let (bytes, close) = encoder.int_chunk(descr.column(2), &c, None).unwrap().unwrap();
        group.append_column(&bytes, close).unwrap();
        group.close().unwrap();
        expected.extend((0..rows).map(|i| (a[i], b[i], c[i])));
    }
    let reader = SerializedFileReader::new(Bytes::from(file.into_inner().unwrap())).unwrap();
    let int = |f: &Field| match f {
        Field::Long(v) => Some(*v),
        Field::Null => None,
        other => panic!("{other:?}"),
    };
    let read: Vec<(i64, Option<i64>, i64)> = reader
        .get_row_iter(None)
        .unwrap()
        .map(|row| {
            let row = row.unwrap();
            let f: Vec<&Field> = row.get_column_iter().map(|(_, f)| f).collect();
            (int(f[0]).unwrap(), int(f[1]), int(f[2]).unwrap())
        })
        .collect();
    assert_eq!(read.len(), expected.len());
    assert!(read == expected);
    let many: Vec<i64> = (0..(INT_DICTIONARY_MAX as i64 + 1)).collect();
    let descr = file_descr();
    assert!(encoder.int_chunk(descr, &many, None).unwrap().is_none());
}

fn file_descr() -> ColumnDescPtr {
    let schema = parquet::schema::parser::parse_message_type("message t { required int64 v; }").unwrap();
    parquet::schema::types::SchemaDescriptor::new(std::sync::Arc::new(schema)).column(0)
}
