//! Starting the sampler for the collector's two modes, and its line of the collector's summary.

use std::io::Write;
use std::path::Path;
use std::process::{Child, Command};

use mlprof_format::runfile::RunWriter;
use mlprof_format::sample::SamplingInfo;

use super::{Recording, STACK_BYTES, Stats, gate, open};

/// Spawns `cmd` with its child held before exec while the CPU sampler attaches to it
/// (launcher mode): the child and the sampler's recording, or, when the kernel refused, one
/// line saying why (also in the run file) and no recording.
pub(crate) fn launched(
    cmd: Command,
    hz: u32,
    writer: &mut RunWriter<impl Write>,
) -> Result<(std::io::Result<Child>, Option<Recording>), String> {
    let (child, opened) = gate::spawn_attached(cmd, |pid| open(pid, hz));
    let recording = match opened {
        Some(Ok(sampler)) => started(Recording::start(sampler, hz)),
        Some(Err(refusal)) => {
            eprintln!("mlprof-collect: no CPU samples: {refusal}");
            let note = SamplingInfo {
                hz,
                refused: refusal.to_string(),
                stack_bytes: STACK_BYTES,
                ..Default::default()
            };
            writer.write_sampling(&note).map_err(|e| e.to_string())?;
            None
        }
        None => None,
    };
    Ok((child, recording))
}

/// The sampler of an attach-mode collector, which samples each process that joins the
/// session (a refusal is said when the first one joins).
pub(crate) fn served(hz: u32) -> Option<Recording> {
    started(Recording::serve(hz))
}

fn started(recording: std::io::Result<Recording>) -> Option<Recording> {
    recording
        .map_err(|e| {
            eprintln!("mlprof-collect: cannot start the CPU sampler thread ({e}); recording no samples")
        })
        .ok()
}

/// The collector's last line about the samples of the run written to `out`.
pub(crate) fn summary(stats: &Stats, hz: u32, out: &Path) -> String {
    let python = match stats.python {
        p if p.samples == 0 => String::new(),
        p => format!(", {} with Python frames ({} of them in part)", p.samples, p.unmatched),
    };
    format!(
        "mlprof-collect: {} CPU samples at {hz} Hz ({} unwound past the leaf{python}, {} lost); mlprof hotspots {}",
        stats.samples,
        stats.unwound,
        stats.lost,
        out.display()
    )
}
