//! The documentation against the code: the environment-variable tables of README.md
//! ("Environment variables") and docs/interfaces.md are copies of `format/src/options.rs`
//! (`ENV_OPTIONS`, the one source of truth, which `mlprof-collect --help` renders).  Every
//! variable of the table must be in both copies and nothing else, each with the same default
//! and the same reader.

use std::collections::BTreeMap;
use std::process::Command;

use mlprof_format::options::{ENV_OPTIONS, EnvOption, ReadBy};
use mlprof_tests::*;

/// One row of a markdown env table: variable -> (read by, default).
type Rows = BTreeMap<String, (String, String)>;

/// The rows of the first table after the heading `## {heading}` in `file` (relative to the
/// workspace), keyed by variable; cells lose their backticks.
fn env_table(file: &str, heading: &str) -> Rows {
    let path = workspace_root().join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let want = format!("## {heading}");
    let mut lines = text.lines().skip_while(|l| l.trim() != want);
    assert!(lines.next().is_some(), "{file}: no heading {want:?}");
    let table: Vec<&str> = lines
        .take_while(|l| !l.starts_with("## "))
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .collect();
    assert!(table.len() > 2, "{file}: no table under {want:?}");
    let header = cells(table[0]);
    let column = |name: &str| {
        header
            .iter()
            .position(|c| c == name)
            .unwrap_or_else(|| panic!("{file}: no column {name:?}: {header:?}"))
    };
    let (variable, read_by, default) = (column("variable"), column("read by"), column("default"));
    let mut rows = Rows::new();
    for line in &table[2..] {
        let c = cells(line);
        let name = c[variable].clone();
        let previous = rows.insert(name.clone(), (c[read_by].clone(), c[default].clone()));
        assert!(previous.is_none(), "{file}: {name} is in the table twice");
    }
    rows
}

fn cells(line: &str) -> Vec<String> {
    line.trim().trim_matches('|').split('|').map(|c| c.replace('`', "").trim().to_string()).collect()
}

/// A default as written in options.rs or in a table: without backticks and the parentheses
/// around a description ("(set by the launcher)").
fn normalized(default: &str) -> String {
    let d = default.replace('`', "");
    let d = d.trim();
    d.strip_prefix('(').and_then(|d| d.strip_suffix(')')).unwrap_or(d).trim().to_string()
}

fn reader(option: &EnvOption) -> &'static str {
    match option.read_by {
        ReadBy::Preload => "libmlprof.so",
        ReadBy::Collector => "mlprof-collect",
        ReadBy::TorchHook => "--torch hook",
    }
}

/// Every difference between a table and `ENV_OPTIONS`, one line each.
fn differences(file: &str, rows: &Rows) -> Vec<String> {
    let mut out = Vec::new();
    for option in ENV_OPTIONS {
        match rows.get(option.name) {
            None => out.push(format!(
                "{file}: {} is missing (read by {}, default {:?})",
                option.name,
                reader(option),
                option.default
            )),
            Some((read_by, default)) => {
                if normalized(default) != normalized(option.default) {
                    out.push(format!(
                        "{file}: {} default {default:?}, options.rs says {:?}",
                        option.name, option.default
                    ));
                }
                if !read_by.contains(reader(option)) {
                    out.push(format!(
                        "{file}: {} read by {read_by:?}, options.rs says {}",
                        option.name,
                        reader(option)
                    ));
                }
            }
        }
    }
    for name in rows.keys() {
        if !ENV_OPTIONS.iter().any(|o| o.name == name) {
            out.push(format!("{file}: {name} is not in format/src/options.rs"));
        }
    }
    out
}

fn check(file: &str, heading: &str) {
    let rows = env_table(file, heading);
    let diff = differences(file, &rows);
    assert!(
        diff.is_empty(),
        "{file} drifted from format/src/options.rs (ENV_OPTIONS) in {} place(s):\n  {}",
        diff.len(),
        diff.join("\n  ")
    );
}

#[test]
fn readme_env_table_matches_the_option_table() {
    check("README.md", "Environment variables");
}

#[test]
fn interfaces_env_table_matches_the_option_table() {
    check("docs/interfaces.md", "Environment variables");
}

/// `mlprof-collect --help` renders the table: every variable with its default.
#[test]
fn collect_help_prints_every_option() {
    let mut c = Command::new(&bins().collect);
    clean_env(&mut c).arg("--help");
    let o = output_with_timeout(c, default_timeout());
    assert!(o.status.success(), "mlprof-collect --help\n{}", describe(&o));
    let help = String::from_utf8_lossy(&o.stdout);
    for option in ENV_OPTIONS {
        let line = help.lines().find(|l| l.split_whitespace().next() == Some(option.name));
        let line = line.unwrap_or_else(|| panic!("--help does not list {}:\n{help}", option.name));
        assert!(line.contains(option.default), "--help line of {}: {line:?}", option.name);
    }
}

/// The checker itself: a table that lacks a variable, has one too many, or gives another
/// default or reader is reported.
#[test]
fn a_drifted_table_is_reported() {
    let mut rows: Rows = ENV_OPTIONS
        .iter()
        .map(|o| (o.name.to_string(), (reader(o).to_string(), format!("`{}`", o.default))))
        .collect();
    assert_eq!(differences("t", &rows), Vec::<String>::new());
    let first = ENV_OPTIONS[0].name;
    let last = ENV_OPTIONS[ENV_OPTIONS.len() - 1].name;
    rows.remove(first);
    rows.insert("MLPROF_NOT_AN_OPTION".into(), ("libmlprof.so".into(), "0".into()));
    rows.get_mut(last).unwrap().1 = "something else".into();
    rows.get_mut(ENV_OPTIONS[1].name).unwrap().0 = "nobody".into();
    let diff = differences("t", &rows);
    assert_eq!(diff.len(), 4, "{diff:#?}");
    assert!(diff.iter().any(|d| d.contains(first) && d.contains("missing")), "{diff:#?}");
    assert!(diff.iter().any(|d| d.contains("MLPROF_NOT_AN_OPTION")), "{diff:#?}");
}
