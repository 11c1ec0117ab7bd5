//! Why a process has no GPU timeline, in words a user can act on.

use std::collections::BTreeMap;

use mlprof_format::gpu::GpuTimelineState;

/// The name of a CUPTI result code (cupti_result.h), for the ones a user meets.
fn cupti_error(code: u64) -> String {
    let name = match code {
        1 => "CUPTI_ERROR_INVALID_PARAMETER",
        7 => "CUPTI_ERROR_INVALID_OPERATION",
        8 => "CUPTI_ERROR_OUT_OF_MEMORY",
        14 => "CUPTI_ERROR_NOT_COMPATIBLE",
        15 => "CUPTI_ERROR_NOT_INITIALIZED (no usable GPU driver, or a CUPTI newer than the driver)",
        27 => "CUPTI_ERROR_NOT_SUPPORTED",
        35 => "CUPTI_ERROR_INSUFFICIENT_PRIVILEGES",
        39 => "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED",
        45 => "CUPTI_ERROR_WSL_DEVICE_NOT_SUPPORTED",
        999 => "CUPTI_ERROR_UNKNOWN (no usable GPU driver?)",
        _ => "",
    };
    if name.is_empty() { format!("CUPTI error {code}") } else { format!("{name}, {code}") }
}

/// The `Off` figure that says nobody asked for the timeline.
const OFF_NOT_ASKED: u64 = 1;
/// The `Unlinked` figure that says `MLPROF_CUPTI_LINKS=off` asked for no links.
const LINKS_TURNED_OFF: u64 = 0xFFFF_FFFE;

/// What one state means for its process, or `None` for states that are not a problem.
fn explain(state: GpuTimelineState, code: u64) -> Option<String> {
    Some(match state {
        GpuTimelineState::Started => return None,
        GpuTimelineState::Calibrated => format!(
            "no timestamp callback (CUPTI refused it, MLPROF_CUPTI_CLOCK=calibrate, or CUPTI's \
             multi-subscriber API, where it would be every tool's): GPU times are CUPTI's own clock's, \
             calibrated onto the run's (residual {code} ns)"
        ),
        GpuTimelineState::MultiSubscriber => {
            "CUPTI multi-subscriber API: tools that use it too (CUPTI 13.3's \
                                              _v2 API) trace beside mlprof; one that uses the older API \
                                              still makes mlprof stand down"
                .into()
        }
        GpuTimelineState::SingleSubscriber => format!(
            "CUPTI refused its multi-subscriber API ({}; it needs driver r610 or newer): one CUPTI \
             subscriber, mlprof stands down when another tool takes CUPTI",
            cupti_error(code)
        ),
        GpuTimelineState::Off if code == OFF_NOT_ASKED => {
            "not asked for: the GPU timeline is opt-in (mlprof-collect --gpu-timeline, or MLPROF_CUPTI=on \
             in attach mode)"
                .into()
        }
        GpuTimelineState::Off => "turned off (MLPROF_CUPTI=off, or mlprof-collect --no-gpu-timeline)".into(),
        GpuTimelineState::NotFound => format!(
            "no libcupti.so.{code} beside the CUDA runtime in use, under $CUDA_HOME or $CUDA_PATH \
             (extras/CUPTI/lib64), on the loader's path or in /usr/local/cuda (install the CUDA wheel's \
             CUPTI, nvidia-cuda-cupti, or set MLPROF_CUPTI=/path/to/libcupti.so)"
        ),
        GpuTimelineState::VersionMismatch => format!(
            "the libcupti found (API version {code}) is for another CUDA version than the runtime in use \
             (set MLPROF_CUPTI to the one of the same CUDA major version)"
        ),
        GpuTimelineState::Failed => format!("CUPTI refused to collect ({})", cupti_error(code)),
        GpuTimelineState::StoodDown => "another tool holds CUPTI (torch.profiler, Nsight Systems, ncu, \
                                        compute-sanitizer): mlprof stood down from the GPU timeline"
            .into(),
        GpuTimelineState::Unlinked if code == LINKS_TURNED_OFF => {
            "GPU work is not linked to its host calls: MLPROF_CUPTI_LINKS=off asked for none".into()
        }
        GpuTimelineState::Unlinked => format!(
            "GPU work is not linked to its host calls: CUPTI's callbacks were refused ({})",
            cupti_error(code)
        ),
    })
}

/// Whether `state` means the process has no GPU timeline (the others say how it went: started,
/// calibrated, unlinked).
fn ends_the_timeline(state: GpuTimelineState) -> bool {
    use GpuTimelineState::*;
    matches!(state, Off | NotFound | VersionMismatch | Failed | StoodDown)
}

/// Why no process of the run has a GPU timeline: the first process's reason, or that none
/// initialized CUDA.
pub(super) fn why_none(states: &BTreeMap<u32, Vec<(GpuTimelineState, u64)>>, used_cuda: bool) -> String {
    for (pid, states) in states {
        let why = states
            .iter()
            .rev()
            .filter(|(state, _)| ends_the_timeline(*state))
            .find_map(|&(state, code)| explain(state, code));
        if let Some(why) = why {
            return format!("pid {pid}: {why}");
        }
    }
    if used_cuda {
        "no process initialized CUDA successfully (cuInit), or the run was recorded by an mlprof without a \
         GPU timeline"
            .into()
    } else {
        "no process used CUDA".into()
    }
}

/// One line per process whose timeline is missing or partial while others have one.
pub(super) fn notes(states: &BTreeMap<u32, Vec<(GpuTimelineState, u64)>>) -> Vec<String> {
    let started =
        |s: &Vec<(GpuTimelineState, u64)>| s.iter().any(|(state, _)| *state == GpuTimelineState::Started);
    if !states.values().any(started) {
        return Vec::new();
    }
    states
        .iter()
        .flat_map(|(pid, states)| {
            states
                .iter()
                .filter_map(move |&(state, code)| explain(state, code).map(|why| format!("pid {pid}: {why}")))
        })
        .collect()
}
