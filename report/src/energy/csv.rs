//! `mlprof energy --ops --csv`: one row per operator, to build a database across runs
//! (`--append FILE`). Columns: README "Energy attribution".

use std::fs::OpenOptions;
use std::io::Write;
use std::path::Path;

use super::attribution::EnergyReport;

pub const HEADER: &str = "run,command,op,class,shapes,calls,median_s,mean_s,energy_per_call_j,energy_per_call_uncertainty_j,energy_j,share\n";

/// The rows (no header); `run_name` fills the first column. `shapes` holds an op's input shapes
/// (`[32,3,56,56];[64,3,3,3]`) when the run was recorded with `--torch-shapes`, else nothing.
/// Rows are per (op, shapes, dtypes); the dtypes have no column (the columns are fixed for
/// files built with `--append`): they are in `energy --json` and the HTML report.
pub fn rows(report: &EnergyReport, run_name: &str) -> String {
    let mut out = String::new();
    let command = field(&report.command_line);
    for op in &report.spans {
        let calls = op.calls.max(1) as f64;
        out.push_str(&format!(
            "{},{},{},{},{},{},{:.9},{:.9},{:.9},{:.9},{:.9},{:.6}\n",
            field(run_name),
            command,
            field(&op.name),
            field(&op.class),
            field(&op.shapes.shapes),
            op.calls,
            op.median_s,
            op.mean_s,
            op.energy_j / calls,
            op.uncertainty_j / calls,
            op.energy_j,
            report.share_of(op.energy_j)
        ));
    }
    out
}

/// Appends the rows to `path`, with the header first only when the file is new or empty.
pub fn append(report: &EnergyReport, run_name: &str, path: &Path) -> Result<(), String> {
    let rows = rows(report, run_name);
    let mut file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    let empty = file.metadata().map(|m| m.len() == 0).unwrap_or(true);
    let text = if empty { format!("{HEADER}{rows}") } else { rows };
    file.write_all(text.as_bytes()).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// A CSV field, quoted when it holds a comma, a quote or a newline (RFC 4180).
fn field(text: &str) -> String {
    if text.contains([',', '"', '\n']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_string()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn fields_with_separators_are_quoted() {
        assert_eq!(super::field("python train.py"), "python train.py");
        assert_eq!(super::field("a,b"), "\"a,b\"");
        assert_eq!(super::field("say \"hi\""), "\"say \"\"hi\"\"\"");
    }
}
