//! The one table of `MLPROF_*` environment variables. libmlprof.so reads the `Preload` ones,
//! mlprof-collect the `Collector` ones; `mlprof-collect --help` and the README print this table.

/// Which program reads an option (and so where it must be set).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadBy {
    /// `libmlprof.so`, in every profiled process (at its start).
    Preload,
    /// `mlprof-collect`, at its start.
    Collector,
    /// The Python start-up hook that `mlprof-collect --torch` installs.
    TorchHook,
}

/// One environment variable.
pub struct EnvOption {
    /// The variable's name (`MLPROF_…`).
    pub name: &'static str,
    /// Who reads it.
    pub read_by: ReadBy,
    /// The value used when it is unset, as text for the help (may be a description).
    pub default: &'static str,
    /// What the values mean, one line for the help.
    pub meaning: &'static str,
}

/// Every `MLPROF_*` variable; adding one here puts it in `--help` and the README.
pub const ENV_OPTIONS: &[EnvOption] = &[
    EnvOption {
        name: "MLPROF_TORCH_OPS",
        read_by: ReadBy::TorchHook,
        default: "1",
        meaning: "0: under --torch, keep the phase and DataLoader spans but not PyTorch's per-op ITT ranges",
    },
    EnvOption {
        name: "MLPROF_TORCH_SHAPES",
        read_by: ReadBy::TorchHook,
        default: "0",
        meaning: "1 (set by --torch-shapes): under --torch, also record each op's input shapes and dtypes (markers in domain mlprof.shapes)",
    },
    EnvOption {
        name: "MLPROF_STEPS",
        read_by: ReadBy::TorchHook,
        default: "(unset: every step)",
        meaning: "A-B (set by --steps): under --torch, open the capture range when step A begins and close it when step B's optimizer.step() returns",
    },
    EnvOption {
        name: "MLPROF_ALL_SYSCALLS",
        read_by: ReadBy::Preload,
        default: "0",
        meaning: "1 (set by --all-syscalls): complete mode, every system call of every thread trapped (syscall user dispatch) and recorded",
    },
    EnvOption {
        name: "MLPROF_SHM",
        read_by: ReadBy::Preload,
        default: "(set by the launcher)",
        meaning: "the ring segment (a file path) to write to; when unset, the session's segment in MLPROF_SHM_DIR",
    },
    EnvOption {
        name: "MLPROF_SHM_DIR",
        read_by: ReadBy::Preload,
        default: "/dev/shm",
        meaning: "where ring segments live (a tmpfs); mlprof-collect also reads it: set the same value for both, e.g. a larger tmpfs than a container's /dev/shm",
    },
    EnvOption {
        name: "MLPROF_SESSION",
        read_by: ReadBy::Preload,
        default: "default",
        meaning: "session to join (attach mode); mlprof-collect also reads it as its --session default",
    },
    EnvOption {
        name: "MLPROF_CLOCK",
        read_by: ReadBy::Preload,
        default: "aggregate",
        meaning: "aggregate: exact per-thread count and time of clock_gettime/gettimeofday per clock id; events: one record per call",
    },
    EnvOption {
        name: "MLPROF_CLOCK_TIMING",
        read_by: ReadBy::Preload,
        default: "64",
        meaning: "aggregate mode times one clock read in N (rounded to a power of two; 1 = every call); counts are always exact",
    },
    EnvOption {
        name: "MLPROF_ITT_CHAIN",
        read_by: ReadBy::Preload,
        default: "(set by the launcher)",
        meaning: "an ITT collector (VTune's) to forward every ITT call to; the launcher moves a user's INTEL_LIBITTNOTIFY64 here",
    },
    EnvOption {
        name: "MLPROF_SITES",
        read_by: ReadBy::Preload,
        default: "0",
        meaning: "1 (--sites): each recorded call made while Python runs on its thread carries its Python line; N (--sites=N, up to 8): and the N - 1 lines that called it",
    },
    EnvOption {
        name: "MLPROF_CUPTI",
        read_by: ReadBy::Preload,
        default: "(unset: off)",
        meaning: "GPU timeline (CUPTI activity records) of processes that use CUDA: on (--gpu-timeline), off, or the libcupti to load (on: the application's own, else the one beside the CUDA runtime, else $CUDA_HOME's, $CUDA_PATH's, the loader's, /usr/local/cuda's)",
    },
    EnvOption {
        name: "MLPROF_CUPTI_KINDS",
        read_by: ReadBy::Preload,
        default: "kernel,memcpy,memset,sync,overhead",
        meaning: "the GPU timeline's activity kinds, a comma list (kernels alone cost least)",
    },
    EnvOption {
        name: "MLPROF_CUPTI_LINKS",
        read_by: ReadBy::Preload,
        default: "on",
        meaning: "off: no CUPTI callback at launches and copies; GPU work is not linked to its calls",
    },
    EnvOption {
        name: "MLPROF_CUPTI_CLOCK",
        read_by: ReadBy::Preload,
        default: "callback",
        meaning: "calibrate: no CUPTI timestamp callback; CUPTI's clock is calibrated onto the run's",
    },
    EnvOption {
        name: "MLPROF_QUIET",
        read_by: ReadBy::Preload,
        default: "0",
        meaning: "1: do not print the 'no session' line",
    },
    EnvOption {
        name: "MLPROF_DISABLE",
        read_by: ReadBy::Preload,
        default: "0",
        meaning: "1: record nothing; every call passes straight through",
    },
    EnvOption {
        name: "MLPROF_PRELOAD",
        read_by: ReadBy::Collector,
        default: "libmlprof.so next to mlprof-collect, else the wheel's",
        meaning: "the library the launcher injects and --print-preload prints (--preload overrides it)",
    },
    EnvOption {
        name: "MLPROF_NVML_LIB",
        read_by: ReadBy::Collector,
        default: "libnvidia-ml.so.1",
        meaning: "NVML library for GPU energy sampling (--nvml-lib overrides it); none found: no GPU energy",
    },
    EnvOption {
        name: "MLPROF_POWERCAP_DIR",
        read_by: ReadBy::Collector,
        default: "/sys/class/powercap",
        meaning: "where CPU energy (RAPL intel-rapl:* zones) is read from; unreadable: no CPU energy",
    },
];

/// The table as aligned text lines.
pub fn render() -> String {
    let mut out = String::new();
    for option in ENV_OPTIONS {
        let who = match option.read_by {
            ReadBy::Preload => "libmlprof.so",
            ReadBy::Collector => "mlprof-collect",
            ReadBy::TorchHook => "--torch hook",
        };
        out.push_str(&format!(
            "  {:<15} [{who}, default {}]\n      {}\n",
            option.name, option.default, option.meaning
        ));
    }
    out
}
